"""The archived sweeps of ``results/``, found locally or downloaded (e.g. on Colab).

A chapter that shows an archived sweep calls :func:`load_archive`. It looks for
``results/<name>`` in ``$ATTNBOOK_RESULTS_DIR``, in the working directory and its parents (a
chapter runs from ``book/<part>``), and in the checkout the package was installed from. Where
none holds it (a Colab runtime has only the installed package) it downloads the archive's files
from ``$ATTNBOOK_RESULTS_URL`` (a mirror, or the loopback server of ``make test-colab``), else
from this release's tag of the repository, checks each file's SHA-256 against
:data:`ARCHIVE_INDEX` (shipped with the package, so a damaged or different file is refused) and
keeps them in the cache folder of :mod:`attnbook.download`.

``python -m attnbook.experiments.archive results`` rewrites the index after an archive changes;
a test fails when it is stale.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..results import file_sha256

__all__ = [
    "RESULTS_DIR_ENV",
    "RESULTS_URL_ENV",
    "ARCHIVE_INDEX",
    "archive_index",
    "results_url",
    "load_archive",
    "write_index",
]

RESULTS_DIR_ENV = "ATTNBOOK_RESULTS_DIR"
RESULTS_URL_ENV = "ATTNBOOK_RESULTS_URL"
_INDEX = Path(__file__).with_name("archives.json")
_MAX_BYTES = 20_000_000  # one archive file; the largest is well under 1 MB
# not part of an archive: its README (edited freely) and a run's lock file (left by a killed run)
_NOT_INDEXED = ("README.md", ".run.lock")


def archive_index() -> dict[str, dict[str, str]]:
    """``{archive name: {path inside the archive: SHA-256}}`` of the archives in ``results/``."""
    return json.loads(_INDEX.read_text(encoding="utf-8")) if _INDEX.is_file() else {}


ARCHIVE_INDEX = archive_index()


def write_index(results_dir) -> dict[str, dict[str, str]]:
    """Rewrite the packaged index from a ``results/`` folder (every archive with a manifest)."""
    root = Path(results_dir)
    if not root.is_dir():
        raise ValueError(f"results_dir {root} is not a folder")
    index = {}
    for manifest in sorted(root.glob("*/manifest.json")):
        folder = manifest.parent
        index[folder.name] = {
            p.relative_to(folder).as_posix(): file_sha256(p)
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in _NOT_INDEXED
        }
    text = json.dumps(index, indent=1, sort_keys=True) + "\n"
    tmp = _INDEX.with_name(_INDEX.name + f".part-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, _INDEX)
    return index


def results_url() -> str:
    """Where archives are downloaded from (ends with ``/``)."""
    env = os.environ.get(RESULTS_URL_ENV, "").strip()
    if env:
        return env.rstrip("/") + "/"
    from .. import __version__
    from ..download import REPOSITORY

    raw = REPOSITORY.replace(
        "https://github.com/", "https://raw.githubusercontent.com/"
    )
    return f"{raw}/v{__version__}/results/"


def _local(name: str, start) -> Path | None:
    places = []
    if os.environ.get(RESULTS_DIR_ENV, "").strip():
        places.append(Path(os.environ[RESULTS_DIR_ENV]))
    here = Path(start or Path.cwd()).resolve()
    places += [p / "results" for p in (here, *here.parents)]
    places.append(
        Path(__file__).resolve().parents[3] / "results"
    )  # an editable checkout
    for place in places:
        if (place / name / "manifest.json").is_file():
            return place / name
    return None


def _download(name: str, files: dict[str, str], *, progress: bool) -> Path:
    from tqdm.auto import tqdm

    from ..download import cache_dir, download_file

    target = cache_dir().parent / "results" / name
    base = results_url() + name + "/"
    from .. import __version__

    advice = (
        "What you can do: check the network and run the cell again; or set "
        f"{RESULTS_URL_ENV} to a mirror of results/; or, in a checkout, make the archive "
        f"with `attnbook run {name} --scale book --out results/{name}`. (For the book's "
        f"publisher: the repository's tag v{__version__} must hold results/{name}.)"
    )
    for rel, digest in tqdm(
        sorted(files.items()), desc=f"archive {name}", disable=not progress
    ):
        path = target / rel
        if not (path.is_file() and file_sha256(path) == digest):
            download_file(
                base + rel, path, sha256=digest, max_bytes=_MAX_BYTES, advice=advice
            )
    return target


def load_archive(name: str, *, start=None, progress: bool = True):
    """The archived sweep ``results/<name>`` as an ``xarray.Dataset`` (:func:`~attnbook.experiments.load`).

    Found locally (see the module's docstring) or downloaded and checked against
    :data:`ARCHIVE_INDEX`. Raises ``FileNotFoundError`` naming the command that makes an
    archive the package does not know.
    """
    from . import load

    if not isinstance(name, str) or not name:
        raise TypeError("name must be the name of an experiment, e.g. 'focus-zipf'")
    folder = _local(name, start)
    if folder is None:
        files = ARCHIVE_INDEX.get(name)
        if not files:
            raise FileNotFoundError(
                f"no archive results/{name} found from {Path(start or Path.cwd())} and none "
                f"is published with this release; make it with "
                f"`attnbook run {name} --scale book --out results/{name}`"
            )
        folder = _download(name, files, progress=progress)
    return load(folder)


if __name__ == "__main__":
    index = write_index(sys.argv[1] if len(sys.argv) > 1 else "results")
    print(f"indexed {len(index)} archives, {sum(map(len, index.values()))} files")
