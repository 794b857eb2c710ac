"""A small Sphinx extension for the book (loaded by ``sphinx: local_extensions`` in ``_config.yml``).

It reads (and so executes) the pages that read the ledger (each part's findings page, then the
claims-ledger page) after every other page, so they show the claims of the chapters executed in
the same build, and it tells the chapters'
kernels that they run under the book build (recorded with each claim). On a chapter page whose
chapter has a student notebook (``notebooks/student/``, no solutions) it adds "Student notebook
(Colab)" to the rocket's launch menu, beside the instructor's notebook.
"""

from __future__ import annotations

import os
from pathlib import Path

PREFIX = "book/"
STUDENT_DIR = "notebooks/student/"


def _ledger_last(app, env, docnames):
    from attnbook.claims import LEDGER_CHAPTER, reads_ledger

    readers = [
        d for d in docnames if d.startswith(PREFIX) and reads_ledger(d[len(PREFIX) :])
    ]
    # the findings pages in book order, the ledger page last of all
    readers.sort(key=lambda d: d == PREFIX + LEDGER_CHAPTER)
    for d in readers:
        docnames.remove(d)
        docnames.append(d)


def student_launch_button(srcdir, context) -> dict | None:
    """Add the student notebook to the page's launch menu (after sphinx-book-theme built it);
    the entry added, or None where the chapter has no student notebook."""
    group = next(
        (
            b
            for b in context.get("header_buttons", [])
            if isinstance(b, dict) and b.get("label") == "launch-buttons"
        ),
        None,
    )
    if group is None:
        return None
    colab = next((b for b in group["buttons"] if b.get("text") == "Colab"), None)
    marker = "/" + PREFIX
    if colab is None or marker not in colab["url"]:
        return None
    head, rel = colab["url"].split(marker, 1)  # .../blob/<tag>, <part>/<chapter>.ipynb
    if not (Path(srcdir) / STUDENT_DIR / rel).is_file():
        return None
    entry = {
        "type": "link",
        "text": "Student notebook (Colab)",
        "tooltip": "Launch the student notebook on Colab: exercises as stubs, no solutions",
        "icon": colab.get("icon", ""),
        "url": f"{head}/{STUDENT_DIR}{rel}",
    }
    group["buttons"].append(entry)
    return entry


def _student_button(app, pagename, templatename, context, doctree):
    student_launch_button(app.srcdir, context)


def setup(app):
    os.environ.setdefault("ATTNBOOK_EXECUTOR", "jupyter-book")
    app.connect("env-before-read-docs", _ledger_last)
    # after sphinx-book-theme's launch buttons (priority 501)
    app.connect("html-page-context", _student_button, priority=600)
    return {"version": "0.1", "parallel_read_safe": False, "parallel_write_safe": True}
