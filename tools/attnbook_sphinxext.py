"""A small Sphinx extension for the book (loaded by ``sphinx: local_extensions`` in ``_config.yml``).

It reads (and so executes) the claims-ledger page after every other page, so the ledger
shows the claims of the chapters executed in the same build, and it tells the chapters'
kernels that they run under the book build (recorded with each claim).
"""

from __future__ import annotations

import os

LEDGER_DOCNAME = "book/reference/claims-ledger"


def _ledger_last(app, env, docnames):
    if LEDGER_DOCNAME in docnames:
        docnames.remove(LEDGER_DOCNAME)
        docnames.append(LEDGER_DOCNAME)


def setup(app):
    os.environ.setdefault("ATTNBOOK_EXECUTOR", "jupyter-book")
    app.connect("env-before-read-docs", _ledger_last)
    return {"version": "0.1", "parallel_read_safe": False, "parallel_write_safe": True}
