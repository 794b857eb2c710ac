"""A small Sphinx extension for the book (loaded by ``sphinx: local_extensions`` in ``_config.yml``).

It reads (and so executes) the pages that read the ledger (each part's findings page, then the
claims-ledger page) after every other page, so they show the claims of the chapters executed in
the same build, and it tells the chapters'
kernels that they run under the book build (recorded with each claim).
"""

from __future__ import annotations

import os

PREFIX = "book/"


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


def setup(app):
    os.environ.setdefault("ATTNBOOK_EXECUTOR", "jupyter-book")
    app.connect("env-before-read-docs", _ledger_last)
    return {"version": "0.1", "parallel_read_safe": False, "parallel_write_safe": True}
