"""Fold the verification on a chapter's page: its check cells are tagged ``hide-input``.

A reader meets the explanation and its figures; the code that checks a claim, the chapter's
set-up and its import blocks sit behind a "Show code cell source" fold (their outputs, a
claim's one-line chip or a printed number, stay). The notebooks on Colab keep every cell:
a tag only changes the page.

A code cell is folded when it

- calls the ledger or an exercise checker (``ledger.check(``, ``ledger.record(``,
  ``exercises.check(``, ``exercises.hint(``) or sets the chapter up (``setup_chapter(``);
- holds only imports, asserts, comments and docstring-free constants (the verification
  glue), as read by :mod:`ast`.

``python tools/fold_checks.py FILE.md ...`` tags the cells in place (a cell already tagged
``hide-input`` or ``remove-input`` is left alone); ``--check`` only lists the cells that
should be folded and exits 1 if there are any (a test runs it over the book).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CALLS = (
    "ledger.check(",
    "ledger.record(",
    "exercises.check(",
    "exercises.hint(",
    "setup_chapter(",
)
FOLDED = ("hide-input", "remove-input", "remove-cell")
FENCE = re.compile(r"^```\{code-cell\}[^\n]*\n", re.M)


def is_check(code: str) -> bool:
    """Whether a cell's code is verification rather than the explanation's computation."""
    if any(call in code for call in CALLS):
        return True
    try:
        tree = ast.parse(code)
    except SyntaxError:  # IPython magics: not ours to judge
        return False
    if not tree.body:
        return False
    glue = (ast.Import, ast.ImportFrom, ast.Assert)
    return all(isinstance(node, glue) for node in tree.body)


def _solutions(text: str) -> list[tuple[int, int]]:
    """Spans of the exercise solutions: their code is the answer a reader opens them for."""
    starts = [m.start() for m in re.finditer(r"^```\{solution-start\}", text, re.M)]
    ends = [m.start() for m in re.finditer(r"^```\{solution-end\}", text, re.M)]
    return list(zip(starts, ends, strict=True))


def _cells(text: str):
    """``(start, options_end, body_end, options, body)`` for each code cell of a MyST file
    outside the exercise solutions (already folded in their dropdown)."""
    solutions = _solutions(text)
    for m in FENCE.finditer(text):
        if any(a < m.start() < b for a, b in solutions):
            continue
        pos = m.end()
        end = text.index("\n```", pos - 1)
        block = text[pos:end]
        options = ""
        if block.startswith("---\n"):
            close = block.index("\n---\n", 3)
            options = block[: close + 5]
        else:
            lines = block.split("\n")
            k = 0
            while k < len(lines) and lines[k].startswith(":"):
                k += 1
            options = "\n".join(lines[:k]) + ("\n" if k else "")
        yield m.end(), m.end() + len(options), end, options, block[len(options) :]


def _tags(options: str) -> list[str]:
    m = re.search(r"^:?tags:\s*\[([^\]]*)\]", options, re.M)
    return [t.strip() for t in m.group(1).split(",") if t.strip()] if m else []


def _with_tag(options: str, tag: str) -> str:
    m = re.search(r"^(:?tags:\s*\[)([^\]]*)\]", options, re.M)
    if m:
        inner = m.group(2).strip()
        new = f"{m.group(1)}{inner + ', ' if inner else ''}{tag}]"
        return options[: m.start()] + new + options[m.end() :]
    if options.startswith("---\n"):
        return f"---\ntags: [{tag}]\n" + options[4:]
    # jupytext's MyST: the option lines, then one blank line, then the code
    return f":tags: [{tag}]\n" + (options if options else "\n")


def unfolded(text: str) -> list[int]:
    """The 0-based indices (among code cells outside solutions) of check cells not folded."""
    return [
        i
        for i, (_, _, _, opts, body) in enumerate(_cells(text))
        if is_check(body) and not set(_tags(opts)) & set(FOLDED)
    ]


def fold(text: str) -> str:
    out, last = [], 0
    for start, opt_end, _, opts, body in _cells(text):
        if is_check(body) and not set(_tags(opts)) & set(FOLDED):
            out.append(text[last:start])
            out.append(_with_tag(opts, "hide-input"))
            last = opt_end
    out.append(text[last:])
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    bad = 0
    for path in args.chapters:
        text = path.read_text(encoding="utf-8")
        missing = unfolded(text)
        if args.check:
            for i in missing:
                print(f"{path}: code cell {i} checks but is not folded (hide-input)")
            bad += len(missing)
        elif missing:
            path.write_text(fold(text), encoding="utf-8")
            print(f"{path}: folded {len(missing)} cells")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
