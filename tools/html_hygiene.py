"""Clean outputs in the built HTML book: no warning or traceback in a cell's output, no
Markdown table left unrendered in one, and no absolute path of the build machine anywhere in
a page.

``check_pages(build_dir, root)`` returns a list of problems; the built-HTML checker calls it.
Run alone as ``python -m tools.html_hygiene _build/html``.
"""

from __future__ import annotations

import re
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

__all__ = ["machine_paths", "output_texts", "check_page", "check_pages"]

ROOT = Path(__file__).resolve().parents[1]

# how Python shows a warning: "…/x.py:12: SinkhornWarning: …", or "Warning: …" on a line
_WARNING = re.compile(r"\b[A-Z]\w*Warning: |^Warning: ", re.M)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\w*Error: ", re.M)
# home folders and temporary folders of any machine
_GENERIC_PATH = re.compile(
    r"(?<![\w:/.])/(?:home|Users|root|tmp|private/var|var/folders)/[\w.-]+"
)
_ERROR_CLASSES = ("traceback", "output_error")
# a Markdown table's rule row as text: myst-nb renders a cell's Markdown output as CommonMark,
# which has no tables, so "| --- |" (or its typographer dashes "| — |") shows up raw
_RAW_TABLE = re.compile(r"\|\s*(?:-{3,}|[—–])\s*\|")


def machine_paths(root: Path | None = None) -> list[str]:
    """Absolute paths of this machine that must not appear in a published page."""
    root = ROOT if root is None else Path(root)
    paths = {str(root.resolve()), str(Path.home()), sys.prefix, sys.base_prefix}
    paths.add(tempfile.gettempdir())
    return sorted((p for p in paths if len(p) > 4), key=len, reverse=True)


class _Outputs(HTMLParser):
    """Text of every cell output (``div.cell_output``) and whether it is marked as an error."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth = 0  # > 0 inside a cell output
        self.outputs: list[list[str]] = []
        self.flagged: list[str] = []

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        if self.depth:
            self.depth += tag == "div"
            if any(c in cls.split() for c in _ERROR_CLASSES):
                self.flagged.append(cls)
        elif tag == "div" and "cell_output" in cls.split():
            self.depth = 1
            self.outputs.append([])

    def handle_endtag(self, tag):
        if self.depth and tag == "div":
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.outputs[-1].append(data)


def output_texts(html: str) -> tuple[list[str], list[str]]:
    """The texts of a page's cell outputs, and the error classes found inside them."""
    parser = _Outputs()
    parser.feed(html)
    return ["".join(parts) for parts in parser.outputs], parser.flagged


def check_page(html: str, name: str, paths: list[str]) -> list[str]:
    """Problems of one page: warnings/tracebacks in outputs, absolute paths anywhere."""
    problems = []
    texts, flagged = output_texts(html)
    for cls in sorted(set(flagged)):
        problems.append(f"{name}: an output is marked {cls!r} (an error)")
    for text in texts:
        for pattern, what in (
            (_WARNING, "warning"),
            (_TRACEBACK, "traceback"),
            (_RAW_TABLE, "an unrendered Markdown table"),
        ):
            m = pattern.search(text)
            if m:
                line = text[max(0, m.start() - 60) : m.end() + 60].strip()
                problems.append(f"{name}: {what} in an output: …{line}…")
    for p in paths:
        if p in html:
            problems.append(f"{name}: absolute path of the build machine {p!r}")
    m = _GENERIC_PATH.search(html)
    if m:
        problems.append(f"{name}: absolute path {m.group(0)!r}")
    return problems


def check_pages(build_dir, root: Path | None = None) -> list[str]:
    """Problems of every HTML page under ``build_dir`` (theme files left out)."""
    build_dir = Path(build_dir)
    paths = machine_paths(root)
    problems = []
    for page in sorted(build_dir.rglob("*.html")):
        rel = page.relative_to(build_dir)
        if rel.parts[0] in ("_static", "_sources", "_mathjax"):
            continue
        problems += check_page(page.read_text(encoding="utf-8"), str(rel), paths)
    return problems


if __name__ == "__main__":
    found = check_pages(sys.argv[1] if len(sys.argv) > 1 else "_build/html")
    print("\n".join(found) or "no warnings, tracebacks or local paths in the pages")
    sys.exit(1 if found else 0)
