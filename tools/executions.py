"""Execute each chapter once per configuration: ``make test``'s executions handed to the book.

``make test`` executes every chapter with nbval; ``make book`` used to execute every chapter a
second time (``execute_notebooks: force``) only to put the same outputs on the page. Now the
root ``conftest.py`` keeps what nbval's kernel sent for each chapter that ran every cell without
an error, as an executed notebook beside the chapter's ledger record
(``<ledger dir>/executed/<part>__<chapter>.ipynb``), its outputs built from the kernel's messages
by nbclient, exactly as the book build's own executor builds them. The book build runs with
``execute_notebooks: cache`` (jupyter-cache), and before it ::

    python -m tools.executions handover [--ledger _build/ledger] [--cache _build/.jupyter_cache]

empties the cache and puts into it the executed notebook of every chapter whose execution is
*current*: made from the same sources and configuration as the tree now holds (the
:func:`execution_key` recorded with it: the chapter's MyST source, every file of the package,
the archives under ``results/``, the data excerpts, the lock file and the environment variables
a chapter reads), whose ledger record is still the one that execution wrote (its SHA-256), and
whose code cells are the book's reading of the same source cell for cell. Every other chapter's
ledger record is removed, and the book build executes that chapter itself (a cache miss),
writing a fresh record. The pages that read the ledger (findings, claims ledger) are never
handed over: the book executes them last, over the records of this tree.

So a stale execution is detected by its sources' hash, never assumed: a chapter edited, a
package file changed, another seed or numeric path, and the chapter runs again in the book.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tools") not in sys.path:
    sys.path.insert(0, str(ROOT / "tools"))

#: The folder of a ledger directory that holds the executed notebooks of the same executions.
EXECUTED = "executed"
#: The metadata key of an executed notebook that records where it came from.
META = "attnbook_execution"
#: Environment variables that select what a chapter computes (seed, device, data, archives,
#: the numeric path of MKL, OpenBLAS and torch, threads, GPUs): an execution made under other
#: values is another configuration (the numeric ones are provenance's ``NUMERIC_ENV`` and
#: ``THREAD_ENV``).
CONFIG_VARS = (
    "ATTNBOOK_SEED",
    "ATTNBOOK_DEVICE",
    "ATTNBOOK_DATA_DIR",
    "ATTNBOOK_DATA_URL",
    "ATTNBOOK_RESULTS_DIR",
    "ATTNBOOK_RESULTS_URL",
    "ATTNBOOK_OFFLINE",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_DEBUG_CPU_TYPE",
    "OPENBLAS_CORETYPE",
    "ATEN_CPU_CAPABILITY",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
)
#: Trees whose every file feeds every chapter (the package and the archives it reads).
SOURCE_TREES = ("src/attnbook", "results")
SOURCE_FILES = ("requirements-lock.txt", "pyproject.toml")


def _tree_digest(h, folder: Path, root: Path) -> None:
    if not folder.is_dir():
        return
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())


def _data_dir(root: Path) -> Path:
    env = os.environ.get("ATTNBOOK_DATA_DIR")
    return Path(env) if env else root.parent / "shared" / "data"


def _cpu_text() -> str:
    """The first processor's model name and flags (``/proc/cpuinfo``), or the platform's."""
    import platform

    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() + platform.machine()
    keep = [
        ln
        for ln in text.split("\n\n")[0].splitlines()
        if ln.startswith(("model name", "flags"))
    ]
    return "\n".join(keep) + platform.machine()


def shared_key(root: Path = ROOT) -> str:
    """The part of :func:`execution_key` that every chapter shares (computed once a run)."""
    h = hashlib.sha256()
    for tree in SOURCE_TREES:
        _tree_digest(h, root / tree, root)
    for name in SOURCE_FILES:
        path = root / name
        h.update(name.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest() if path.is_file() else b"-")
    data = _data_dir(root)
    h.update(b"data\0")
    _tree_digest(h, data, data)
    h.update(sys.version.encode() + sys.executable.encode())
    # every installed distribution and its version (torch is not in the lock), and the CPU
    # (its model and flags decide the kernels MKL, OpenBLAS and torch dispatch to)
    from importlib.metadata import distributions

    installed = sorted(f"{d.metadata['Name']}=={d.version}" for d in distributions())
    h.update("\n".join(installed).encode())
    h.update(_cpu_text().encode())
    for var in CONFIG_VARS:
        h.update(f"{var}={os.environ.get(var, '')}\0".encode())
    return h.hexdigest()


def execution_key(
    chapter_md: Path, root: Path = ROOT, shared: str | None = None
) -> str:
    """SHA-256 of everything an execution of ``chapter_md`` depends on in this tree and this
    environment: equal keys, the same computation."""
    h = hashlib.sha256((shared or shared_key(root)).encode())
    h.update(Path(chapter_md).read_bytes())
    return h.hexdigest()


def executed_path(ledger: Path, chapter: str) -> Path:
    """Where the executed notebook of ``chapter`` (``focus/focus``) is kept in ``ledger``."""
    return Path(ledger) / EXECUTED / (chapter.replace("/", "__") + ".ipynb")


def record_path(ledger: Path, chapter: str) -> Path:
    """The ledger record of ``chapter`` (as :class:`attnbook.claims.Ledger` names it)."""
    return Path(ledger) / (chapter.replace("/", "__") + ".json")


def _sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def expected_seconds(root: Path = ROOT) -> dict[str, float]:
    """Each chapter's expected wall time: the median over the archived ``ledger-seeds`` sweep
    (``results/ledger-seeds``, committed, so every xdist worker orders the chapters alike).
    The runners start the longest chapters first (``conftest.py``, ``tools/colab_test.py``),
    so that two workers end together instead of one waiting out a long chapter alone."""
    import statistics

    walls: dict[str, list[float]] = {}
    for path in (root / "results" / "ledger-seeds" / "points").glob("*.json"):
        point = json.loads(path.read_text(encoding="utf-8"))
        chapter = point.get("config", {}).get("chapter")
        if chapter and isinstance(point.get("wall_s"), (int, float)):
            walls.setdefault(chapter, []).append(float(point["wall_s"]))
    return {c: statistics.median(w) for c, w in walls.items()}


# ---- building an executed notebook from the kernel's messages (conftest.py) ----------------


def executed_notebook(nb, messages: list[dict], msg_ids: list[str]):
    """``nb`` (the jupytext reading of a chapter) with the outputs of its code cells built from
    the kernel's iopub ``messages``, the i-th code cell from the messages whose parent is
    ``msg_ids[i]``. nbclient turns the messages into outputs, so streams, ``clear_output``,
    display updates and widget state come out as the book build's own executor makes them."""
    import copy

    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionComplete

    nb = copy.deepcopy(nb)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    if len(code) != len(msg_ids):
        raise ValueError(f"{len(msg_ids)} cells executed, the notebook has {len(code)}")
    client = NotebookClient(nb, record_timing=False)
    client.reset_execution_trackers()  # the state nbclient keeps while it executes
    client.kc = _FinishedKernel()
    by_parent: dict[str, list[dict]] = {}
    for msg in messages:
        by_parent.setdefault(msg.get("parent_header", {}).get("msg_id"), []).append(msg)
    for index, msg_id in zip(code, msg_ids):
        cell = nb.cells[index]
        cell.outputs = []
        cell.execution_count = None
        client.clear_before_next_output = False  # as nbclient starts each cell
        for msg in by_parent.get(msg_id, []):
            try:
                client.process_message(msg, cell, index)
            except CellExecutionComplete:
                break
        # nbval executes without storing history (no prompt numbers): number the cells as a
        # fresh run of the notebook does, 1, 2, ... (jupyter-cache checks this)
        count = code.index(index) + 1
        cell.execution_count = count
        for out in cell.outputs:
            if out.output_type == "execute_result":
                out.execution_count = count
    client.set_widgets_metadata()
    return nb


class _FinishedKernel:
    """Stands for the kernel client where nbclient's Output-widget mimic syncs the widget's
    state back to the kernel: that kernel has finished, and the sync changes no output."""

    class _Channel:
        def send(self, msg) -> None:
            pass

    def __init__(self):
        from jupyter_client.session import Session

        self.session = Session()
        self.shell_channel = self._Channel()


def save_executed(nb, ledger: Path, chapter: str, key: str) -> Path:
    """Write the executed notebook of ``chapter`` beside its ledger record, atomically, with
    ``key`` (:func:`execution_key` when its kernel started, and again when it ended: the
    caller checks that nothing changed meanwhile) and the SHA-256 of the record its execution
    wrote."""
    import nbformat

    nb.metadata[META] = {
        "chapter": chapter,
        "key": key,
        "record_sha256": _sha(record_path(ledger, chapter)),
        "executor": os.environ.get("ATTNBOOK_EXECUTOR", "notebook"),
    }
    out = executed_path(ledger, chapter)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".ipynb.{os.getpid()}.tmp")
    tmp.write_text(nbformat.writes(nb), encoding="utf-8")
    os.replace(tmp, out)
    return out


# ---- the hand-over to the book build -------------------------------------------------------


def _book_reading(chapter_md: Path):
    """The chapter as the book build reads it (myst-nb's MyST reader with the book's Markdown
    extensions): jupyter-cache matches on this notebook's code cells and their metadata."""
    import yaml
    from myst_nb.core.read import read_myst_markdown_notebook
    from myst_parser.config.main import MdParserConfig

    cfg = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8")) or {}
    ext = (cfg.get("parse") or {}).get("myst_enable_extensions") or []
    config = MdParserConfig(enable_extensions=set(ext))
    text = chapter_md.read_text(encoding="utf-8")
    return read_myst_markdown_notebook(
        text, config=config, add_source_map=True, path=str(chapter_md)
    )


def why_not_current(
    chapter: str, chapter_md: Path, ledger: Path, shared: str
) -> str | None:
    """None when the chapter's kept execution can stand for one in this tree, else why not."""
    import nbformat

    path = executed_path(ledger, chapter)
    if not path.is_file():
        return "no kept execution"
    nb = nbformat.read(str(path), as_version=4)
    meta = nb.metadata.get(META) or {}
    if meta.get("key") != execution_key(chapter_md, shared=shared):
        return "sources or configuration changed since it ran"
    if meta.get("record_sha256") is None or meta["record_sha256"] != _sha(
        record_path(ledger, chapter)
    ):
        return "its ledger record was replaced or removed"
    return None


def _merged(chapter_md: Path, executed):
    """The book's reading of the chapter with the kept outputs, cell for cell; None where the
    two readings' code cells differ (then the book executes the chapter itself)."""
    book = _book_reading(chapter_md)
    mine = [c for c in executed.cells if c.cell_type == "code"]
    theirs = [c for c in book.cells if c.cell_type == "code"]
    if len(mine) != len(theirs) or any(
        a.source != b.source for a, b in zip(mine, theirs)
    ):
        return None
    for a, b in zip(mine, theirs):
        b.outputs = a.outputs
        b.execution_count = a.execution_count
    # not the kernelspec: jupyter-cache hashes the book's own, which must stay as read
    for key in ("language_info", "widgets"):
        if key in executed.metadata:
            book.metadata[key] = executed.metadata[key]
    return book


def _candidates(ledger: Path, root: Path) -> tuple[dict, dict]:
    """``(current, execute)``: the book's reading of each chapter whose kept execution is
    current, with the kept outputs merged in; and why every other page is executed."""
    import nbformat
    from build_tools import chapter_id, notebook_chapters

    from attnbook.claims import reads_ledger

    shared = shared_key(root)
    current, execute = {}, {}
    for md in notebook_chapters(root):
        chapter = chapter_id(md, root)
        if reads_ledger(chapter):
            execute[chapter] = "reads the ledger: executed last by the book"
            continue
        reason = why_not_current(chapter, md, ledger, shared)
        if reason is None:
            executed = nbformat.read(str(executed_path(ledger, chapter)), as_version=4)
            merged = _merged(md, executed)
            if merged is not None:
                current[chapter] = (md, merged)
                continue
            reason = "the book reads other code cells than the kept execution"
        execute[chapter] = reason
    return current, execute


def handover(ledger: Path, cache: Path, root: Path = ROOT, log=print) -> dict:
    """Fill the book build's execution cache with the current executions kept in ``ledger``
    and remove every other ledger record (see the module docstring).
    Returns ``{"handed": [...], "execute": {chapter: reason}}``."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    ledger, cache = Path(ledger), Path(cache)
    if cache.exists():
        shutil.rmtree(cache)  # nothing of an earlier build is reused unchecked
    jc = get_cache(str(cache))
    current, execute = _candidates(ledger, root)
    # jupyter-cache finds outputs by the code cells alone: two chapters with the same cells
    # could be given each other's outputs, so neither is handed over
    digests = {c: jc.create_hashed_notebook(nb)[1] for c, (_, nb) in current.items()}
    for chapter, digest in digests.items():
        twins = [c for c, d in digests.items() if d == digest and c != chapter]
        if twins:
            execute[chapter] = f"its code cells are those of {twins[0]}"
    handed = [c for c in current if c not in execute]
    for chapter in handed:
        md, merged = current[chapter]
        jc.cache_notebook_bundle(
            CacheBundleIn(
                merged, str(md.resolve()), data={"handed_over_by": "make test"}
            ),
            check_validity=True,
            overwrite=True,
        )
    # every record the book does not get from a handed execution goes: the book writes those
    # of the chapters it executes, and a chapter no longer in the book leaves none behind
    for record in sorted(ledger.glob("*.json")) if ledger.is_dir() else []:
        if record.stem.replace("__", "/") not in handed:
            record.unlink()
    log(
        f"executions handed to the book build: {len(handed)} chapters from {ledger}; "
        f"the book executes {len(execute)}"
    )
    for chapter, reason in execute.items():
        log(f"  executes {chapter}: {reason}")
    return {"handed": handed, "execute": execute}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser(
        "handover", help="fill the book's execution cache from make test's runs"
    )
    p.add_argument("--ledger", type=Path, default=ROOT / "_build" / "ledger")
    p.add_argument("--cache", type=Path, default=ROOT / "_build" / ".jupyter_cache")
    p.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args(argv)
    summary = handover(args.ledger, args.cache)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
