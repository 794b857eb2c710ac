"""The release's assets, built and checked: ``make release-dry`` (and the release workflow).

``python -m tools.release dry-run [--out _build/release]`` writes into ``--out`` exactly what
``.github/workflows/release.yml`` attaches to the GitHub release of the tag ``v<version>``:

- ``attnbook-<version>-py3-none-any.whl``: the wheel the notebooks' install cell installs,
  built from the committed tree (``git archive HEAD``), never from uncommitted edits;
- the data excerpts of :data:`attnbook.download.EXCERPTS`, built from a local data folder
  (``$ATTNBOOK_DATA_DIR`` or ``../shared/data``) or, where there is none (the workflow's
  runner), downloaded from ``$ATTNBOOK_DATA_URL``;
- ``attnbook-<version>-results.zip``: the archived sweeps of ``results/``;
- ``SHA256SUMS`` (``sha256sum -c`` reads it) and ``NOTES.md`` (the release's text).

Every asset is then checked against the package's own indexes: the wheel's name, version and
packaged archive index; each excerpt's SHA-256 against ``EXCERPTS``; the zip's files against
``attnbook.experiments.archive.ARCHIVE_INDEX`` (no file missing, none extra, none different).

``python -m tools.release check-tag v<version>`` fails unless the tag is the package's version
and ``_config.yml``'s release (the workflow's first step).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from attnbook.results import file_sha256

ROOT = Path(__file__).resolve().parents[1]

__all__ = [
    "wheel_name",
    "results_zip_name",
    "uncommitted_src",
    "build_wheel",
    "collect_excerpts",
    "zip_results",
    "check_assets",
    "dry_run",
    "check_tag",
]


def wheel_name(version: str) -> str:
    """The file name of the package's wheel (pure Python, any platform)."""
    return f"attnbook-{version}-py3-none-any.whl"


def results_zip_name(version: str) -> str:
    return f"attnbook-{version}-results.zip"


def _git(*args: str, root: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()


def uncommitted_src(root: Path = ROOT) -> bool:
    """Whether ``src/`` or ``pyproject.toml`` has uncommitted changes (a wheel of HEAD leaves
    them out)."""
    return bool(
        _git(
            "status",
            "--porcelain",
            "--untracked-files=no",
            "src",
            "pyproject.toml",
            root=root,
        )
    )


def build_wheel(out_dir: Path, *, root: Path = ROOT, rev: str = "HEAD") -> Path:
    """Build the wheel of commit ``rev`` (exported with ``git archive``) into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="attnbook-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        archive = subprocess.run(
            ["git", "archive", "--format=tar", rev],
            cwd=root,
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        built = Path(tmp) / "dist"
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
            + ["--wheel-dir", str(built), str(src)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}")
        wheels = sorted(built.glob("attnbook-*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"expected one attnbook wheel, pip wrote {wheels}")
        target = out_dir / wheels[0].name
        shutil.copyfile(wheels[0], target)
    return target


def collect_excerpts(out_dir: Path) -> list[Path]:
    """The data excerpts, from a local data folder when there is one, else downloaded from
    ``$ATTNBOOK_DATA_URL``; either way checked against ``EXCERPTS``."""
    from attnbook.data import find_data_dir
    from attnbook.download import DATA_URL_ENV, EXCERPTS, build_excerpts, fetch

    out_dir = Path(out_dir)
    data_dirs = [d for d in find_data_dir() if d.is_dir()]
    if data_dirs:
        return list(build_excerpts(out_dir, data_dir=data_dirs[0]).values())
    if not os.environ.get(DATA_URL_ENV, "").strip():
        raise RuntimeError(
            "no local data folder (ATTNBOOK_DATA_DIR) and no ATTNBOOK_DATA_URL: the release "
            "needs the data excerpts from one of them (see README, Publishing)"
        )
    out = []
    for ex in EXCERPTS.values():  # fetch checks each file's SHA-256
        out.append(
            Path(shutil.copyfile(fetch(ex, progress=False), out_dir / ex.filename))
        )
    return out


def zip_results(results_dir: Path, target: Path) -> Path:
    """Every indexed file of every archive of ``results_dir``, as ``<archive>/<path>``."""
    from attnbook.experiments.archive import ARCHIVE_INDEX

    tmp = target.with_name(target.name + f".part-{os.getpid()}")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, files in sorted(ARCHIVE_INDEX.items()):
            for rel in sorted(files):
                src = Path(results_dir) / name / rel
                # a fixed date: the same archives give the same zip
                info = zipfile.ZipInfo(f"{name}/{rel}", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, src.read_bytes())
    os.replace(tmp, target)
    return target


def check_assets(out_dir: Path, version: str) -> list[str]:
    """What is wrong with the assets of ``out_dir`` (empty when they are the release's)."""
    from attnbook.download import EXCERPTS
    from attnbook.experiments.archive import ARCHIVE_INDEX

    out_dir = Path(out_dir)
    problems = []
    wheel = out_dir / wheel_name(version)
    if not wheel.is_file():
        problems.append(f"no wheel {wheel.name}")
    else:
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            meta = f"attnbook-{version}.dist-info/METADATA"
            if meta not in names:
                problems.append(f"{wheel.name}: no {meta}")
            elif f"Version: {version}\n" not in zf.read(meta).decode():
                problems.append(f"{wheel.name}: METADATA is not version {version}")
            index = "attnbook/experiments/archives.json"
            if index not in names:
                problems.append(f"{wheel.name}: no {index}")
            elif json.loads(zf.read(index)) != ARCHIVE_INDEX:
                problems.append(
                    f"{wheel.name}: its {index} differs from the checkout's"
                )
    for ex in EXCERPTS.values():
        path = out_dir / ex.filename
        if not path.is_file():
            problems.append(f"no excerpt {ex.filename}")
        elif file_sha256(path) != ex.sha256:
            problems.append(f"{ex.filename}: SHA-256 differs from EXCERPTS")
    zpath = out_dir / results_zip_name(version)
    if not zpath.is_file():
        problems.append(f"no {zpath.name}")
    else:
        with zipfile.ZipFile(zpath) as zf:
            got = {
                i.filename: hashlib.sha256(zf.read(i)).hexdigest()
                for i in zf.infolist()
            }
        want = {
            f"{a}/{p}": h
            for a, files in ARCHIVE_INDEX.items()
            for p, h in files.items()
        }
        for name in sorted(want.keys() - got.keys()):
            problems.append(f"{zpath.name}: {name} missing")
        for name in sorted(got.keys() - want.keys()):
            problems.append(f"{zpath.name}: {name} is not in the archive index")
        for name in sorted(want.keys() & got.keys()):
            if want[name] != got[name]:
                problems.append(f"{zpath.name}: {name} differs from the archive index")
    sums = out_dir / "SHA256SUMS"
    listed = {}
    if sums.is_file():
        for line in sums.read_text(encoding="utf-8").splitlines():
            digest, _, name = line.partition("  ")
            listed[name] = digest
    assets = sorted(
        p for p in out_dir.iterdir() if p.name not in ("SHA256SUMS", "NOTES.md")
    )
    for p in assets:
        if listed.get(p.name) != file_sha256(p):
            problems.append(f"SHA256SUMS does not list {p.name} with its SHA-256")
    return problems


def _notes(version: str, assets: list[Path]) -> str:
    from tools.colab import release

    rel = release(ROOT)
    lines = [
        f"attnbook {version}: the book is at {rel.baseurl}",
        "",
        (
            "The notebooks' install cell installs the wheel below and the chapters download "
            "the data excerpts below, each checked against the SHA-256 the package carries; "
            "the archived sweeps come from the repository at this tag (the zip holds the same "
            "files, checked against the same index)."
        ),
        "",
        "| asset | bytes | SHA-256 |",
        "|---|---:|---|",
    ]
    lines += [
        f"| `{p.name}` | {p.stat().st_size} | `{file_sha256(p)}` |" for p in assets
    ]
    lines += ["", f"Built from commit {_git('rev-parse', 'HEAD')}."]
    return "\n".join(lines) + "\n"


def dry_run(out_dir: Path) -> list[Path]:
    """Build every asset of the release into ``out_dir`` (replaced) and check them."""
    from attnbook import __version__

    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    build_wheel(out_dir)
    collect_excerpts(out_dir)
    zip_results(ROOT / "results", out_dir / results_zip_name(__version__))
    assets = sorted(out_dir.iterdir())
    (out_dir / "SHA256SUMS").write_text(
        "".join(f"{file_sha256(p)}  {p.name}\n" for p in assets), encoding="utf-8"
    )
    (out_dir / "NOTES.md").write_text(_notes(__version__, assets), encoding="utf-8")
    problems = check_assets(out_dir, __version__)
    if problems:
        raise RuntimeError("release assets:\n  " + "\n  ".join(problems))
    return assets


def check_tag(tag: str) -> None:
    """Fail unless ``tag`` is ``v<version>`` of the package and ``_config.yml``'s branch."""
    from tools.colab import release

    rel = release(ROOT)
    if tag != rel.tag:
        raise SystemExit(f"tag {tag!r} is not v<version> of the package ({rel.tag})")
    if rel.branch != rel.tag:
        raise SystemExit(
            f"_config.yml repository.branch is {rel.branch!r}, not the tag {rel.tag}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.release")
    sub = parser.add_subparsers(dest="cmd", required=True)
    dry = sub.add_parser("dry-run", help="build and check the release's assets")
    dry.add_argument("--out", type=Path, default=ROOT / "_build" / "release")
    tag = sub.add_parser("check-tag", help="the tag is the package's version")
    tag.add_argument("tag")
    args = parser.parse_args(argv)
    if args.cmd == "check-tag":
        check_tag(args.tag)
        print(f"{args.tag}: the package's version and _config.yml's release")
        return 0
    if uncommitted_src():
        print("note: uncommitted changes in src/ are not in the wheel (HEAD is)")
    assets = dry_run(args.out)
    for p in assets:
        print(f"{p.stat().st_size:>10}  {p.name}")
    print(f"{len(assets)} assets in {args.out}, checked against the package's indexes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
