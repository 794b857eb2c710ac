"""The chapters' code as Python files, line for line, to read it as code (duplicates, grep).

``python tools/chapter_code.py DIR [CHAPTER.md ...]`` writes each chapter's code cells to
``DIR/<part>/<name>.py`` (default: every chapter under ``book/``). Each code line stays on the
line number it has in the chapter and every other line is left blank, so a finding at
``focus/condensation.py:120-131`` is ``book/focus/condensation.md:120-131``.

``python tools/chapter_code.py --duplicates [--most N]`` exports into a temporary folder
outside the checkout, runs ``duplicates --repo`` on it and prints its report with the
chapters' paths (``make duplicates`` prints it after the report on ``src``).
Standard library only.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
FENCE = re.compile(r"^(`{3,}|~{3,})\{code-cell\}")


def chapters(book: Path = BOOK) -> list[Path]:
    """Every executable chapter: a MyST file under ``book/`` whose header has a kernelspec."""
    found = []
    for md in sorted(book.rglob("*.md")):
        rel = md.relative_to(book)
        if any(part.startswith(("_", ".")) for part in rel.parts):
            continue
        head = md.read_text(encoding="utf-8").split("\n---", 1)[0]
        if "kernelspec:" in head:
            found.append(md)
    return found


def code_lines(text: str) -> list[str]:
    """The chapter with every line that is not code of a ``{code-cell}`` blanked.

    A cell's option lines (``:tags: ...`` or a ``---`` block right after the fence) and its
    IPython magics (``%``, ``!``) are blanked too."""
    lines = text.split("\n")
    out = [""] * len(lines)
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, i = m.group(1), i + 1
        if i < len(lines) and lines[i].strip() == "---":  # YAML options block
            i += 1
            while i < len(lines) and lines[i].strip() != "---":
                i += 1
            i += 1
        while i < len(lines) and lines[i].startswith(":"):  # short options
            i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            if not lines[i].lstrip().startswith(("%", "!")):
                out[i] = lines[i]
            i += 1
        i += 1
    return out


def export(folder: Path, mds: list[Path] | None = None) -> list[Path]:
    """Write the code of ``mds`` (default: every chapter) under ``folder``; returns the files."""
    written = []
    for md in mds or chapters():
        md = md.resolve()
        py = folder / md.relative_to(BOOK).with_suffix(".py")
        py.parent.mkdir(parents=True, exist_ok=True)
        py.write_text("\n".join(code_lines(md.read_text(encoding="utf-8"))))
        written.append(py)
    return written


def duplicates(most: int = 40) -> int:
    """Run ``duplicates`` on the exported chapters' code and print its report."""
    tool = shutil.which("duplicates")
    if tool is None:
        print("chapters' code: the `duplicates` command is not installed; skipped")
        return 0
    with tempfile.TemporaryDirectory(prefix="attnbook-chapter-code-") as tmp:
        export(Path(tmp))
        rep = subprocess.run(
            [tool, "--repo", tmp, "--most", str(most)],
            capture_output=True,
            text=True,
            check=False,
        )
    text = re.sub(r"(\S+)\.py:(\d+)", r"book/\1.md:\2", rep.stdout + rep.stderr)
    print("chapters' code:", text.replace(tmp, "book"), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path)
    parser.add_argument("chapters", nargs="*", type=Path)
    parser.add_argument("--duplicates", action="store_true")
    parser.add_argument("--most", type=int, default=40)
    args = parser.parse_args(argv)
    if args.duplicates:
        return duplicates(args.most)
    if args.folder is None:
        parser.error("give a folder to write to, or --duplicates")
    for py in export(args.folder, args.chapters or None):
        print(py)
    return 0


if __name__ == "__main__":
    sys.exit(main())
