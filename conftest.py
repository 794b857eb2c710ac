"""Let nbval execute the book's MyST markdown notebooks (``.md``) as tests.

nbval only collects ``.ipynb`` files. The chapters' source of truth is the ``.md`` file (the
``.ipynb`` beside it is a generated twin for Colab, checked to be in sync by
``tests/test_book_structure.py``), so here every notebook chapter listed in ``_toc.yml`` is read
with jupytext and handed to nbval's collector. Run with ``pytest --nbval-lax``: ``.md`` notebooks
hold no stored outputs, so the chapters' own assertions (the claims ledger) are what is tested.
The pages that read the ledger (the claims-ledger page and each part's findings page) are
marked ``ledger``: they must run after every other chapter.

Each chapter that ran every cell without an error leaves its execution for the book build
(``tools/executions.py``): the kernel's messages, turned into an executed notebook by nbclient,
beside the chapter's ledger record. ``make book`` reuses it where the chapter's sources are
unchanged, so each chapter is executed once per configuration.
"""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest
from nbval.plugin import IPyNbFile

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
    if getattr(config.option, "nbval_cell_timeout", None) == 2000:  # nbval's default
        # a cell gets the time the book build gives it (_config.yml's execute.timeout)
        import yaml

        cfg = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
        config.option.nbval_cell_timeout = int((cfg.get("execute") or {})["timeout"])
    if hasattr(config.option, "loadscopereorder"):
        # xdist would order the files by their number of items; the chapters are ordered by
        # their expected time instead (pytest_collection_modifyitems)
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    """The chapters first, the longest first (then the unit tests, in their order): with two
    xdist workers the run ends on a short chapter instead of one worker waiting out a long one
    alone. xdist's own reordering (by the number of items in a file) is turned off in
    :func:`pytest_configure`; the order is the same on every worker (names break ties)."""
    chapters: dict[str, list] = {}
    others = []
    for item in items:
        parent = item.parent
        if isinstance(parent, MystNotebook):
            chapters.setdefault(parent.nodeid, []).append(item)
        else:
            others.append(item)
    if not chapters:
        return
    _toc_notebooks()  # puts tools/ on sys.path
    from executions import expected_seconds

    expected = expected_seconds(ROOT)

    def weight(nodeid: str) -> tuple[float, str]:
        chapter = nodeid.removeprefix("book/").removesuffix(".md")
        return (-expected.get(chapter, 0.0), nodeid)

    items[:] = [
        it for nodeid in sorted(chapters, key=weight) for it in chapters[nodeid]
    ] + others


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A chapter any of whose cells failed (in any phase) keeps no execution for the book."""
    report = yield
    if report.failed and isinstance(item.parent, MystNotebook):
        item.parent._failed = True
    return report


def pytest_collect_file(file_path, parent):
    opt = parent.config.option
    if not (getattr(opt, "nbval", False) or getattr(opt, "nbval_lax", False)):
        return None
    if file_path.suffix != ".md" or file_path.resolve() not in _toc_notebooks():
        return None
    return MystNotebook.from_parent(parent, path=file_path)


class MystNotebook(IPyNbFile):
    """A chapter read with jupytext as nbval's test file. It also keeps the chapter's
    execution (the kernel's messages, cell by cell) for the book build: see
    :func:`_keep_execution`."""

    def setup(self):
        self._failed = False
        self._key = None
        kept = _kept_path(self)
        if kept is not None:
            # an earlier run's execution never stands for this one, which may fail
            kept.unlink(missing_ok=True)
            from executions import execution_key

            self._key = execution_key(self.path)  # before the kernel imports anything
        super().setup()
        self._messages: list[dict] = []
        self._msg_ids: list[str] = []
        self._language_info = _language_info(self.kernel)
        execute = self.kernel.execute_cell_input

        def execute_and_note(*args, **kwargs):
            msg_id = execute(*args, **kwargs)
            self._msg_ids.append(msg_id)
            return msg_id

        self.kernel.execute_cell_input = execute_and_note

    def get_kernel_message(self, timeout=None, stream="iopub"):
        msg = super().get_kernel_message(timeout=timeout, stream=stream)
        if stream == "iopub":
            self._messages.append(msg)
        return msg

    def teardown(self):
        try:
            _keep_execution(self)
        finally:
            super().teardown()

    def collect(self):
        import jupytext
        import nbval.plugin

        # the text the cells come from: a chapter edited between collection and its run
        # executes the old cells, which must not be kept under the new text's key
        self._collected_text = self.path.read_text(encoding="utf-8")
        nb = jupytext.reads(self._collected_text, fmt="md:myst")
        with mock.patch.object(nbval.plugin.nbformat, "read", lambda *a, **k: nb):
            items = list(super().collect())
        from attnbook.claims import reads_ledger

        rel = self.path.resolve().relative_to(ROOT / "book").with_suffix("")
        for item in items:
            if reads_ledger(rel.as_posix()):
                item.add_marker(pytest.mark.ledger)
            yield item


_cache: dict[str, set[Path]] = {}


def _toc_notebooks() -> set[Path]:
    if "nb" not in _cache:
        import sys

        sys.path.insert(0, str(ROOT / "tools"))  # build tooling is not in the package
        from build_tools import notebook_chapters

        _cache["nb"] = {p.resolve() for p in notebook_chapters(ROOT)}
    return _cache["nb"]


def _chapter(nbfile) -> str:
    return nbfile.path.resolve().relative_to(ROOT / "book").with_suffix("").as_posix()


def _kept_path(nbfile) -> Path | None:
    """Where this chapter's execution is kept for the book (None for a page that reads the
    ledger: the book executes those last, over this tree's records)."""
    from attnbook.claims import ledger_dir, reads_ledger

    chapter = _chapter(nbfile)
    if reads_ledger(chapter):
        return None
    _toc_notebooks()  # puts tools/ on sys.path
    from executions import executed_path

    return executed_path(ledger_dir(create=False), chapter)


def _language_info(kernel) -> dict | None:
    """The kernel's ``language_info`` (what nbclient records in an executed notebook)."""
    try:
        msg_id = kernel.kc.kernel_info()
        for _ in range(20):
            reply = kernel.kc.get_shell_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"].get("language_info")
    except Exception:  # noqa: BLE001 - cosmetic: the page then highlights as plain python
        return None
    return None


def _ran_clean(nbfile) -> bool:
    """Every code cell ran to the end, no cell failed in pytest and the kernel reported no
    error (a cell skipped, a timeout or a stop leaves fewer cells run)."""
    msg_ids = getattr(nbfile, "_msg_ids", None)
    if not msg_ids or nbfile.timed_out or getattr(nbfile, "_failed", True):
        return False
    if len(msg_ids) != sum(c.cell_type == "code" for c in nbfile.nb.cells):
        return False
    messages = nbfile._messages
    if any(m["msg_type"] == "error" for m in messages):
        return False
    idle = {
        m["parent_header"].get("msg_id")
        for m in messages
        if m["msg_type"] == "status" and m["content"].get("execution_state") == "idle"
    }
    return idle.issuperset(msg_ids)


def _keep_execution(nbfile) -> None:
    """Keep a chapter's execution for the book build (``tools/executions.py``) when it ran
    clean and nothing it depends on changed while it ran (its key at the start and at the
    end agree). Keeping is bookkeeping: when it fails the chapter's test does not, it warns,
    and the book executes the chapter itself."""
    import warnings

    kept = _kept_path(nbfile)
    key = getattr(nbfile, "_key", None)
    if kept is None or key is None or not _ran_clean(nbfile):
        return
    from executions import executed_notebook, execution_key, save_executed

    from attnbook.claims import ledger_dir

    try:
        if execution_key(nbfile.path) != key:
            return  # a source changed while the chapter ran: not this tree's execution
        if nbfile.path.read_text(encoding="utf-8") != getattr(
            nbfile, "_collected_text", None
        ):
            return  # edited after collection: the cells that ran are not the chapter's
        nb = executed_notebook(nbfile.nb, nbfile._messages, nbfile._msg_ids)
        if nbfile._language_info:
            nb.metadata["language_info"] = nbfile._language_info
        save_executed(nb, ledger_dir(), _chapter(nbfile), key)
    except Exception as exc:  # noqa: BLE001
        kept.unlink(missing_ok=True)
        warnings.warn(
            f"{_chapter(nbfile)}: its execution was not kept for the book: {exc!r}",
            stacklevel=2,
        )
