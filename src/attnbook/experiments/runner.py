"""Run the pending points of a sweep as tasks on Dask ``distributed``.

By default an in-process ``LocalCluster`` sized to the machine (one single-threaded worker
process per core, at most one per pending point); with ``scheduler="tcp://HOST:PORT"`` the
points go to any running Dask cluster (``dask scheduler`` + ``dask worker``, dask-jobqueue,
Kubernetes). Each point is one task (:func:`compute_point`); results stream back with
``as_completed`` and are written by this process to the results store, so workers need
attnbook installed but no shared file system.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from . import DEVICES, DTYPES, get, run_point
from .store import _now, open_store, provenance

__all__ = ["RunReport", "SchedulerUnreachable", "compute_point", "run_sweep"]


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

    @property
    def ok(self) -> bool:
        return not self.failed


def _device_name(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name(0)})"
    return device


def compute_point(name: str, config: dict, threads: int = 1):
    """One task: compute a point, return ``(arrays, meta)`` (runs on a Dask worker).

    Torch's intra-op threads are set to ``threads`` for the call (one per worker by default,
    so that workers do not oversubscribe the cores) and restored afterwards.
    """
    import torch

    get(name)  # import the experiment's modules before the clock starts
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    started = _now()
    t0 = time.perf_counter()
    try:
        arrays = run_point(name, config)
        # a test hook: slow every point down so that a test can kill a run half-way
        time.sleep(float(os.environ.get("ATTNBOOK_TEST_POINT_DELAY", "0") or 0))
        if config.get("device") == "cuda":
            torch.cuda.synchronize()
    finally:
        torch.set_num_threads(old)
    wall = time.perf_counter() - t0
    meta = {
        "started_at": started,
        "wall_s": wall,
        "device_name": _device_name(config.get("device", "cpu")),
        "torch_threads": max(1, int(threads)),
        "worker_pid": os.getpid(),
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
) -> RunReport:
    """Run (or resume) the sweep ``name`` at ``scale`` into the run directory ``out``.

    Finished points are skipped; the others are submitted as Dask tasks and written to the
    store as they complete. A failing point is recorded (``points/<hash>.error.json``) and the
    others continue. Raises :class:`UnknownExperiment`, :class:`ConfigMismatch`,
    :class:`SchedulerUnreachable` or ``ValueError`` (bad device/dtype) before computing anything.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("device 'cuda' requested but torch sees no CUDA device")
    exp = get(name)
    points = exp.points(scale, device=device, dtype=dtype)
    store = open_store(
        out, exp, scale, points, device=device, dtype=dtype, command=command
    )
    pending = store.pending()
    report = RunReport(
        store.dir, total=len(points), skipped=len(points) - len(pending), computed=0
    )
    if not pending:
        return report
    t0 = time.perf_counter()
    client, cluster = _client(scheduler, workers, len(pending), connect_timeout)
    prov = provenance()
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
            total=len(points),
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
                "axes": {a: axes[a][i] for a, i in zip(axes, p["index"])},
                "config": p["config"],
                "config_hash": p["hash"],
                **prov,
            }
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
    return report
