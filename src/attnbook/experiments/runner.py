"""Run the pending points of a sweep as tasks on Dask ``distributed``.

By default an in-process ``LocalCluster`` sized to the machine (one single-threaded worker
process per core, at most one per pending point); with ``scheduler="tcp://HOST:PORT"`` the
points go to any running Dask cluster (``dask scheduler`` + ``dask worker``, dask-jobqueue,
Kubernetes). Each point is one task (:func:`compute_point`); results stream back with
``as_completed`` and are written by this process to the results store, so workers need
attnbook installed but no shared file system.

Before computing anything a run refuses a source tree with uncommitted changes to tracked files
(:class:`~attnbook.experiments.DirtyTree`; ``allow_dirty`` overrides and is recorded), takes
the run directory's lock (a second run on it fails at once:
:class:`~attnbook.experiments.RunLocked`) and refuses to resume a directory whose finished
points were made at another commit (:class:`~attnbook.experiments.MixedCommits`;
``allow_mixed`` overrides and is recorded in each new point). Each point records the numeric
signature of the worker that computed it (:func:`attnbook.provenance.numeric_signature`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .. import provenance as _prov
from . import DEVICES, DTYPES, DirtyTree, MixedCommits, get, run_point
from .store import (
    _now,
    _point_axes,
    _point_record,
    check_out_directory,
    open_store,
    provenance,
    read_point_meta,
    run_lock,
)

__all__ = [
    "RunReport",
    "SchedulerUnreachable",
    "compute_point",
    "numeric_threads",
    "run_sweep",
]


class SchedulerUnreachable(ConnectionError):
    """No Dask scheduler answered at the given address within the timeout."""


@dataclass
class RunReport:
    """What :func:`run_sweep` did: counts, the failures (index, error) and the wall time."""

    directory: Path
    total: int
    skipped: int
    computed: int
    failed: list = field(default_factory=list)
    wall_s: float = 0.0
    damaged: list = field(
        default_factory=list
    )  # recomputed: {"index", "axes", "reason"}
    stale: list = field(
        default_factory=list
    )  # recomputed: {"index", "axes", "changed"}
    left_out: int = 0  # unfinished or stale points outside ``only`` (not computed)

    @property
    def ok(self) -> bool:
        return not self.failed


def _device_name(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name(0)})"
    return device


@contextlib.contextmanager
def numeric_threads(threads: int = 1):
    """Torch's intra-op threads and NumPy's and SciPy's BLAS threads set to ``threads`` for the
    block (restored afterwards): the thread counts are part of the numeric signature, so a
    re-check (:mod:`~attnbook.experiments.verify`) computes under the same ones as the run."""
    import torch

    _prov.load_numeric_libraries()  # limits reach only loaded libraries
    n = max(1, int(threads))
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # a dependency; without it BLAS keeps its own count
        limits = contextlib.nullcontext()
    else:
        limits = threadpool_limits(limits=n, user_api="blas")
    try:
        with limits:
            yield n
    finally:
        torch.set_num_threads(old)


def compute_point(name: str, config: dict, threads: int = 1):
    """One task: compute a point, return ``(arrays, meta)`` (runs on a Dask worker).

    Torch's intra-op threads and the BLAS threads are set to ``threads`` for the call (one per
    worker by default, so that workers do not oversubscribe the cores) and restored
    afterwards. ``meta`` holds the numeric signature of this worker under those threads.
    """
    import torch

    get(name)  # import the experiment's modules before the clock starts
    device = config.get("device", "cpu")
    with numeric_threads(threads) as n:
        # on the worker: with --scheduler it may be another machine than the one writing
        sig = _prov.numeric_signature(device=device, git=False)
        started = _now()
        t0 = time.perf_counter()
        arrays = run_point(name, config)
        # a test hook: slow every point down so that a test can kill a run half-way
        time.sleep(float(os.environ.get("ATTNBOOK_TEST_POINT_DELAY", "0") or 0))
        if device == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    meta = {
        "started_at": started,
        "wall_s": wall,
        "device_name": _device_name(device),
        "torch_threads": n,
        "worker_pid": os.getpid(),
        "signature_key": sig["key"],
        "numeric_signature": sig,
    }
    return arrays, meta


def _client(scheduler, workers, n_pending, timeout):
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            return Client(scheduler, timeout=f"{timeout}s"), None
        except (OSError, TimeoutError) as err:
            raise SchedulerUnreachable(
                f"no Dask scheduler answered at {scheduler} within {timeout} s ({err}). "
                "Start one (`dask scheduler` and `dask worker ADDRESS`), check the "
                "address, or omit --scheduler to use a local cluster."
            ) from None
    n = workers or os.cpu_count() or 1
    n = max(1, min(int(n), n_pending))
    cluster = LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
    )
    return Client(cluster), cluster


def _source(meta: dict) -> tuple[str | None, str | None]:
    """(bare commit, SHA-256 of the uncommitted diff) that a point or provenance records."""
    commit = meta.get("git_commit")
    bare = commit.split("+", 1)[0] if isinstance(commit, str) else None
    return bare, meta.get("diff_sha256")


def _other_sources(store, finished: list[dict], prov: dict) -> list[str]:
    """The commits (``+dirty:<diff>`` when known) of finished points made from another tree."""
    now_commit, now_diff = _source(prov)
    others = set()
    for p in finished:
        try:
            meta = read_point_meta(store.dir, p["hash"])
        except (OSError, ValueError):
            continue  # damaged points are recomputed, not compared
        commit, diff = _source(meta)
        if commit != now_commit or (diff and now_diff and diff != now_diff):
            others.add(f"{commit}" + (f"+dirty:{diff[:12]}" if diff else ""))
    return sorted(others)


def _check_device_dtype(device: str, dtype: str) -> None:
    """Refuse an unknown device or dtype, and ``cuda`` where torch sees no GPU."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("device 'cuda' requested but torch sees no CUDA device")


def run_sweep(
    name: str,
    scale: str,
    out,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    device: str = "cpu",
    dtype: str = "float64",
    progress: bool = True,
    connect_timeout: float = 10.0,
    command: str | None = None,
    allow_dirty: bool = False,
    allow_mixed: bool = False,
    only: dict | None = None,
) -> RunReport:
    """Run (or resume) the sweep ``name`` at ``scale`` into the run directory ``out``.

    ``only`` (``{axis: values}``) computes only the unfinished or stale points whose axes
    take those values, e.g. ``{"chapter": ["focus/real-text"]}`` after editing one chapter
    when an edit to a shared module has made every point stale; the rest stay as they are
    (counted in ``RunReport.left_out``).

    Finished points are skipped; the others (damaged ones included: they are listed in
    ``RunReport.damaged``) are submitted as Dask tasks and written to the store as they
    complete. A failing point is recorded (``points/<hash>.error.json``) and the others
    continue. Raises before computing anything: :class:`UnknownExperiment`,
    :class:`ConfigMismatch`, :class:`DirtyTree` (tracked files changed and not
    ``allow_dirty``), :class:`RunLocked` (another run holds ``out``), :class:`MixedCommits`
    (finished points of another commit and not ``allow_mixed``),
    :class:`SchedulerUnreachable` or ``ValueError`` (bad device/dtype).
    """
    _check_device_dtype(device, dtype)
    exp = get(name)
    points = exp.points(scale, device=device, dtype=dtype)
    selected = _selection(exp.scale(scale).axes, only)
    prov = provenance()
    if prov["dirty"] and not allow_dirty:
        raise DirtyTree(
            f"the source tree (commit {prov['git_commit']}) has uncommitted changes to "
            "tracked files (see `git status`): results made from it could not be "
            "reproduced from any commit. Commit or stash the changes and rerun, or pass "
            "--allow-dirty (allow_dirty=True), which is recorded in the manifest and in "
            "every point."
        )
    out = Path(out)
    check_out_directory(
        out
    )  # before the lock file goes in: refuse a folder of other files
    out.mkdir(parents=True, exist_ok=True)
    with run_lock(out, command=command):
        store = open_store(
            out,
            exp,
            scale,
            points,
            device=device,
            dtype=dtype,
            command=command,
            allow_dirty=allow_dirty,
        )
        damaged = store.damaged()
        pending = store.pending()
        waiting = {p["hash"] for p in pending}
        finished = [p for p in store.manifest["points"] if p["hash"] not in waiting]
        stale = stale_points(store, exp, finished)
        if stale:
            ids = {s["hash"] for s in stale}
            pending = [
                p for p in store.manifest["points"] if p["hash"] in ids | waiting
            ]
        n_due = len(pending)
        if selected is not None:
            pending = [p for p in pending if tuple(p["index"]) in selected]
            kept = {p["hash"] for p in pending}
            stale = [s for s in stale if s["hash"] in kept]
        # with declared inputs every point certifies its own sources: commits mix by design
        others = _other_sources(store, finished, prov) if pending else []
        if exp.inputs is not None:
            others = []
        if others and not allow_mixed:
            raise MixedCommits(
                f"{out} holds {len(finished)} finished point(s) made at "
                f"{', '.join(others)}, but the source tree is now at "
                f"{prov['git_commit']}: resuming would mix the results of two versions of "
                "the code. Check out that commit and rerun, start a new --out directory, "
                "or pass --allow-mixed (allow_mixed=True), which is recorded in each new "
                "point."
            )
        report = RunReport(
            store.dir,
            total=len(points),
            skipped=len(points) - n_due,
            computed=0,
            damaged=[{k: d[k] for k in ("index", "axes", "reason")} for d in damaged],
            stale=[{k: d[k] for k in ("index", "axes", "changed")} for d in stale],
            left_out=n_due - len(pending),
        )
        if not pending:
            return report
        extra = {
            "allow_dirty": bool(allow_dirty),
            "allow_mixed": bool(allow_mixed),
            "mixed_with": others,
        }
        _compute(
            store,
            name,
            scale,
            pending,
            prov | extra,
            report,
            scheduler,
            workers,
            connect_timeout,
            progress,
        )
    return report


def _selection(axes: dict, only: dict | None) -> set[tuple[int, ...]] | None:
    """The point indices that ``only`` selects (None: every point). A value matches an axis
    value equal to it, or whose text is equal to it (``"0.5"`` selects ``0.5``)."""
    if only is None:
        return None
    if not isinstance(only, dict) or not only:
        raise ValueError("only must be a non-empty dict {axis: values}")
    allowed = []
    for name, values in axes.items():
        if name not in only:
            allowed.append(range(len(values)))
            continue
        wanted = only[name]
        wanted = [wanted] if isinstance(wanted, (str, int, float)) else list(wanted)
        picked = [
            i for i, v in enumerate(values) if v in wanted or str(v) in map(str, wanted)
        ]
        unknown = [
            w for w in wanted if w not in values and str(w) not in map(str, values)
        ]
        if unknown:
            raise ValueError(
                f"only: {name}={unknown} is not a value of the axis ({list(values)})"
            )
        allowed.append(picked)
    extra = sorted(set(only) - set(axes))
    if extra:
        raise ValueError(f"only: unknown axes {extra} (the axes are {list(axes)})")
    return set(itertools.product(*allowed))


def stale_points(store, exp, finished: list[dict]) -> list[dict]:
    """The finished points whose recorded inputs (``Experiment.inputs``) differ from the
    files now: ``{"index", "axes", "hash", "changed"}`` each (``changed``: the paths)."""
    if exp.inputs is None:
        return []
    axes = store.manifest["axes"]
    out = []
    for p in finished:
        try:
            recorded = read_point_meta(store.dir, p["hash"]).get("inputs") or {}
        except (OSError, ValueError):
            continue  # damaged: recomputed anyway
        now = exp.inputs(exp.config(**_config(p["config"])))
        changed = sorted(
            k for k in set(recorded) | set(now) if recorded.get(k) != now.get(k)
        )
        if changed:
            out.append(_point_record(axes, p, changed=changed))
    return out


def _config(d: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}


def _compute(
    store, name, scale, pending, prov, report, scheduler, workers, timeout, progress
):
    t0 = time.perf_counter()
    exp = get(name)
    # the inputs a point depends on, read before it is computed (recorded with it)
    inputs = {
        p["hash"]: exp.inputs(exp.config(**_config(p["config"])))
        for p in pending
        if exp.inputs is not None
    }
    client, cluster = _client(scheduler, workers, len(pending), timeout)
    axes = store.manifest["axes"]
    try:
        from distributed import as_completed
        from tqdm.auto import tqdm

        futures = {}
        for p in pending:
            fut = client.submit(
                compute_point,
                name,
                p["config"],
                1,
                key=f"{name}-{p['hash'][:16]}",
                pure=False,
            )
            futures[fut] = p
        bar = tqdm(
            total=report.total - report.left_out,
            initial=report.skipped,
            desc=f"{name} [{scale}]",
            unit="point",
            disable=not progress,
        )
        for fut in as_completed(futures):
            p = futures.pop(fut)
            base = {
                "experiment": name,
                "scale": scale,
                "index": p["index"],
                "axes": _point_axes(axes, p["index"]),
                "config": p["config"],
                "config_hash": p["hash"],
                **prov,
            }
            if p["hash"] in inputs:
                base["inputs"] = inputs[p["hash"]]
            try:
                arrays, meta = fut.result()
            except Exception as err:  # a failing point is recorded, the others go on
                tb = "".join(traceback.format_exception(err))
                store.write_error(
                    p["hash"],
                    {**base, "error": f"{type(err).__name__}: {err}", "traceback": tb},
                )
                report.failed.append((p["index"], f"{type(err).__name__}: {err}"))
            else:
                # the worker's numeric signature replaces the one of this process
                store.write(p["hash"], arrays, {**base, **meta})
                report.computed += 1
            fut.release()
            bar.update(1)
        bar.close()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    report.wall_s = time.perf_counter() - t0
