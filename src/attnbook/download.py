"""The book's bounded data excerpts, downloaded where no local copy exists (e.g. on Colab).

The real-text chapter reads the first ``max_tokens`` tokens of a split. Where no local folder
holds the data, :func:`attnbook.data.load_text` calls :func:`excerpt_text`, which downloads
the excerpt that holds exactly that prefix (a few MB, never the full data set), checks its
SHA-256, and keeps it in a cache folder, so later runs read it from disk.

- Where from: ``$ATTNBOOK_DATA_URL`` (a base URL: a mirror, or the loopback server of
  ``make test-colab``), else the release assets of this package's release,
  ``<repository>/releases/download/v<version>/``.
- Where to: ``$ATTNBOOK_CACHE_DIR``, else ``$XDG_CACHE_HOME/attnbook/data``, else
  ``~/.cache/attnbook/data``.
- The excerpt files are built from a local data folder by :func:`build_excerpts`
  (``make data-excerpt``) for a publisher to upload as release assets; their checksums are
  :data:`EXCERPTS`.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .data import DataNotFound
from .results import file_sha256

__all__ = [
    "DATA_URL_ENV",
    "CACHE_ENV",
    "Excerpt",
    "EXCERPTS",
    "DownloadError",
    "base_url",
    "cache_dir",
    "fetch",
    "excerpt_text",
    "make_excerpt",
    "build_excerpts",
]

DATA_URL_ENV = "ATTNBOOK_DATA_URL"
CACHE_ENV = "ATTNBOOK_CACHE_DIR"
REPOSITORY = "https://github.com/attnbook/attnbook"
MAX_BYTES = 50_000_000


@dataclass(frozen=True)
class Excerpt:
    """The first ``max_tokens`` tokens of a split (whole lines), as one UTF-8 text file."""

    name: str
    split: str
    max_tokens: int
    sha256: str
    size: int

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.split}-{self.max_tokens}.txt"


#: the excerpts the book uses (the real-text chapter passes the same ``max_tokens``)
EXCERPTS = {
    ("wikitext-2", "validation"): Excerpt(
        "wikitext-2",
        "validation",
        250_000,
        "4cd0f6876d07a413aa911261ff6d363c72d757d47f0fdd6015702014c89cb9c7",
        1_146_846,
    ),
    ("tinystories", "train"): Excerpt(
        "tinystories",
        "train",
        450_000,
        "f567982321d65a4261702d3641ff2aa08ff279167fedc115bb911ec19862d308",
        1_977_869,
    ),
}


class DownloadError(DataNotFound):
    """A file could not be downloaded or failed its checksum.

    The message is one paragraph for a reader: what failed, then what they can do, then (last)
    what the book's publisher must do; in a notebook it shows alone, as every
    :class:`~attnbook.data.DataNotFound` does.
    """


def base_url() -> str:
    """Where the excerpts are downloaded from (ends with ``/``)."""
    env = os.environ.get(DATA_URL_ENV, "").strip()
    if env:
        return env.rstrip("/") + "/"
    from . import __version__

    return f"{REPOSITORY}/releases/download/v{__version__}/"


def cache_dir() -> Path:
    """The folder downloaded excerpts are kept in."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "attnbook" / "data"


def _advice() -> str:
    from . import __version__

    return (
        "What you can do: check the network and run the cell again; or put the data in a "
        "folder and set ATTNBOOK_DATA_DIR to it; or set "
        f"{DATA_URL_ENV} to a mirror holding the same files. (For the book's publisher: "
        f"the release v{__version__} must hold the excerpts that `make release-dry` builds; "
        "the release workflow uploads them.)"
    )


def download_file(
    url: str,
    target: Path,
    *,
    sha256: str,
    max_bytes: int,
    advice: str,
    timeout: float = 60.0,
    progress: bool = False,
    size_hint: int = 0,
) -> Path:
    """Download ``url`` to ``target``: streamed to a temporary file beside it, refused past
    ``max_bytes``, checked against ``sha256``, then renamed (a reader never sees half a file).
    Every failure raises :class:`DownloadError`: what failed and its URL, then ``advice`` (what
    a reader can do first, a publisher's part last)."""
    from tqdm.auto import tqdm

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".part-{os.getpid()}")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            total = int(resp.headers.get("Content-Length") or size_hint or 0)
            if total > max_bytes:
                raise DownloadError(
                    f"Could not download {target.name}: {url} is {total} bytes, more than "
                    f"the {max_bytes} allowed. {advice}"
                )
            with (
                open(tmp, "wb") as out,
                tqdm(
                    total=total or None,
                    unit="B",
                    unit_scale=True,
                    desc=target.name,
                    disable=not progress,
                ) as bar,
            ):
                n = 0
                for block in iter(lambda: resp.read(1 << 16), b""):
                    n += len(block)
                    if n > max_bytes:
                        raise DownloadError(
                            f"Could not download {target.name}: {url} sent more than "
                            f"{max_bytes} bytes. {advice}"
                        )
                    out.write(block)
                    bar.update(len(block))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, DownloadError):
            raise
        raise DownloadError(
            f"Could not download {target.name} from {url} ({_reason(exc)}). {advice}"
        ) from None  # the reason is in the message; urllib's frames help no reader
    digest = file_sha256(tmp)
    if digest != sha256:
        tmp.unlink(missing_ok=True)
        raise DownloadError(
            f"Could not use {target.name} from {url}: its SHA-256 {digest} is not the "
            f"expected {sha256} (a different or damaged file). {advice}"
        )
    os.replace(tmp, target)
    return target


def _reason(exc: BaseException) -> str:
    """urllib's error in a reader's words: the HTTP status, or the network's reason."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return f"no connection: {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def fetch(excerpt: Excerpt, *, progress: bool = True, timeout: float = 60.0) -> Path:
    """The cached file of ``excerpt``, downloaded (with a progress bar) and checked first."""
    if not isinstance(excerpt, Excerpt):
        raise TypeError(f"excerpt must be an Excerpt, got {type(excerpt).__name__}")
    target = cache_dir() / excerpt.filename
    if target.is_file() and file_sha256(target) == excerpt.sha256:
        return target
    url = base_url() + excerpt.filename
    return download_file(
        url,
        target,
        sha256=excerpt.sha256,
        max_bytes=MAX_BYTES,
        advice=_advice(),
        timeout=timeout,
        progress=progress,
        size_hint=excerpt.size,
    )


def excerpt_text(name: str, split: str, *, progress: bool = True) -> str:
    """The text of the book's excerpt of ``name``/``split`` (downloaded once, then cached)."""
    key = (name, split)
    if key not in EXCERPTS:
        raise ValueError(
            f"no excerpt of {name}/{split}; there are: {', '.join(map('/'.join, EXCERPTS))}"
        )
    return fetch(EXCERPTS[key], progress=progress).read_text(encoding="utf-8")


def make_excerpt(text: str, max_tokens: int) -> str:
    """The shortest run of whole lines of ``text`` that holds its first ``max_tokens`` tokens.

    Tokens never span a line break, so the tokens of the excerpt begin with exactly the first
    ``max_tokens`` tokens of ``text``.
    """
    from .data import tokenize_words
    from .validation import check_positive_int

    max_tokens = check_positive_int(max_tokens, "max_tokens")
    lines = text.splitlines(keepends=True)
    n, out = 0, []
    for line in lines:
        if n >= max_tokens:
            break
        out.append(line)
        n += len(tokenize_words(line))
    return "".join(out)


def build_excerpts(out_dir, *, data_dir=None) -> dict[tuple[str, str], Path]:
    """Write every excerpt of :data:`EXCERPTS` into ``out_dir`` from a local data folder.

    Raises ``ValueError`` when a file does not match its checksum (the local data differ from
    the book's, or :data:`EXCERPTS` must be updated).
    """
    from .data import load_text

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for key, ex in EXCERPTS.items():
        text = load_text(ex.name, ex.split, data_dir=data_dir, download=False)
        path = out_dir / ex.filename
        path.write_bytes(make_excerpt(text, ex.max_tokens).encode("utf-8"))
        digest = file_sha256(path)
        if digest != ex.sha256:
            raise ValueError(
                f"{path}: SHA-256 {digest} ({path.stat().st_size} bytes) differs from "
                f"EXCERPTS[{key}] ({ex.sha256}, {ex.size} bytes)"
            )
        written[key] = path
    return written
