"""Let nbval execute the book's MyST markdown notebooks (``.md``) as tests.

nbval only collects ``.ipynb`` files. The chapters' source of truth is the ``.md`` file (the
``.ipynb`` beside it is a generated twin for Colab, checked to be in sync by
``tests/test_book_structure.py``), so here every notebook chapter listed in ``_toc.yml`` is read
with jupytext and handed to nbval's collector. Run with ``pytest --nbval-lax``: ``.md`` notebooks
hold no stored outputs, so the chapters' own assertions (the claims ledger) are what is tested.
The pages that read the ledger (the claims-ledger page and each part's findings page) are
marked ``ledger``: they must run after every other chapter.
"""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parent

# chapters record that nbval ran them
os.environ.setdefault("ATTNBOOK_EXECUTOR", "nbval")


def pytest_ignore_collect(collection_path, config):
    """Never collect the ``.ipynb`` twins: nbval would run each chapter a second time (and two
    runs of one chapter on two xdist workers would race on its ledger record). The twins are
    generated from the ``.md`` sources, and a test checks that they are in sync."""
    if collection_path.suffix == ".ipynb":
        return True
    return None


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "ledger: the pages that read the claims ledger, run after all chapters",
    )
    config.addinivalue_line(
        "markers",
        "slow: a test of several seconds or more (sweeps through Dask, re-checks of archived "
        "points, the GPU check on the CPU); `make test-fast` leaves them out, `make test` "
        "runs them",
    )


def pytest_collect_file(file_path, parent):
    opt = parent.config.option
    if not (getattr(opt, "nbval", False) or getattr(opt, "nbval_lax", False)):
        return None
    if file_path.suffix != ".md" or file_path.resolve() not in _toc_notebooks():
        return None
    from nbval.plugin import IPyNbFile

    class MystNotebook(IPyNbFile):
        def collect(self):
            import jupytext
            import nbval.plugin

            nb = jupytext.read(str(self.path))
            with mock.patch.object(nbval.plugin.nbformat, "read", lambda *a, **k: nb):
                items = list(super().collect())
            from attnbook.claims import reads_ledger

            rel = self.path.resolve().relative_to(ROOT / "book").with_suffix("")
            for item in items:
                if reads_ledger(rel.as_posix()):
                    item.add_marker(pytest.mark.ledger)
                yield item

    return MystNotebook.from_parent(parent, path=file_path)


_cache: dict[str, set[Path]] = {}


def _toc_notebooks() -> set[Path]:
    if "nb" not in _cache:
        import sys

        sys.path.insert(0, str(ROOT / "tools"))  # build tooling is not in the package
        from build_tools import notebook_chapters

        _cache["nb"] = {p.resolve() for p in notebook_chapters(ROOT)}
    return _cache["nb"]
