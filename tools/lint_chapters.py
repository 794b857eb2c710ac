"""Lint the chapters' code with ruff, through jupytext, without touching the chapters.

``python tools/lint_chapters.py FILE.md ...`` writes each chapter's code as a ``py:percent``
script into a temporary folder (mirroring ``book/`` so that ruff's per-file settings for
``book/**`` apply), runs ``ruff check`` and ``ruff format --check`` on them, and maps every
finding back to its chapter. ``--fix`` instead applies ruff's fixes and formatting and writes
the code back into the chapters. Exit status 1 when ruff finds anything (without ``--fix``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    here = Path(sys.executable).parent / "ruff"
    return str(here) if here.exists() else (shutil.which("ruff") or "ruff")


def _scripts(chapters: list[Path], folder: Path) -> dict[Path, Path]:
    out = {}
    for md in chapters:
        rel = md.resolve().relative_to(ROOT)
        py = folder / rel.with_suffix(".py")
        py.parent.mkdir(parents=True, exist_ok=True)
        jupytext.write(jupytext.read(md), py, fmt="py:percent")
        out[py] = md
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="+", type=Path)
    parser.add_argument("--fix", action="store_true")
    args = parser.parse_args(argv)
    ruff = _ruff()
    with tempfile.TemporaryDirectory(prefix="attnbook-lint-") as tmp:
        folder = Path(tmp)
        shutil.copy(ROOT / "pyproject.toml", folder / "pyproject.toml")
        scripts = _scripts(args.chapters, folder)
        files = [str(p) for p in scripts]
        if args.fix:
            subprocess.run([ruff, "check", "--fix", "--quiet", *files], cwd=folder)
            subprocess.run([ruff, "format", "--quiet", *files], cwd=folder, check=True)
            for py, md in scripts.items():
                nb = jupytext.read(md)
                fixed = jupytext.read(py, fmt="py:percent")
                code = [c for c in nb.cells if c.cell_type == "code"]
                new = [c for c in fixed.cells if c.cell_type == "code"]
                if len(code) != len(new):
                    raise SystemExit(
                        f"{md}: cell count changed while fixing; not written"
                    )
                changed = False
                for cell, fixed_cell in zip(code, new):
                    if cell.source != fixed_cell.source:
                        cell.source, changed = fixed_cell.source, True
                if changed:
                    jupytext.write(nb, md, fmt="md:myst")
                    print("fixed", md)
            return 0
        check = subprocess.run(
            [ruff, "check", "--quiet", *files],
            cwd=folder,
            capture_output=True,
            text=True,
        )
        fmt = subprocess.run(
            [ruff, "format", "--check", "--quiet", *files],
            cwd=folder,
            capture_output=True,
            text=True,
        )
    report = (check.stdout + check.stderr + fmt.stdout + fmt.stderr).replace(
        tmp + "/", ""
    )
    if check.returncode or fmt.returncode:
        print(re.sub(r"\.py(?=[:\s])", ".md", report))
        print("chapter code needs ruff fixes: run `make format`")
        return 1
    print(f"ruff: {len(files)} chapters clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
