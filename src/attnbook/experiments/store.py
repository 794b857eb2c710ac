"""The results store of a sweep: one directory per run, resumable, never pickled.

Layout of a run directory::

    manifest.json              experiment, scale, device, dtype, axes, fixed fields, every
                               point's index and config hash, provenance (versions, git commit
                               and dirty flag, the numeric signature of the process that made
                               the directory), the command, ``allow_dirty``, and the
                               experiment's re-check spec (``recheck``, with its reasons)
    points/<hash>.npz          the arrays of one point (``np.savez``; read with allow_pickle=False)
    points/<hash>.json         its config, config hash, versions, git commit, the numeric
                               signature of the worker that computed it and its
                               ``signature_key``, ``allow_dirty`` / ``allow_mixed``, device,
                               wall_s, and the SHA-256 of the .npz — written last: a point is
                               finished when its .json exists and the .npz matches the hash
    points/<hash>.error.json   the error of a failed point (removed when it later succeeds)
    .run.lock                  held (``fcntl.flock``) by the run in progress, naming its pid

Every file is written to a temporary name in the same folder and renamed (``os.replace``), so a
run killed at any moment leaves only whole files (and temporary ones, removed on the next run).
A point is in one of three states (:meth:`RunStore.state`): *done*; *pending* (no .json: never
finished, or killed between its two files); *damaged* (a .json that is not JSON or records no
SHA-256, a missing .npz, or an .npz whose SHA-256 differs from the recorded one: a truncated or
changed file). :func:`status` lists damaged points apart; :func:`load` refuses them unless told
to skip them with a warning; ``attnbook run`` recomputes them and says so.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import tempfile
import warnings
from pathlib import Path

import numpy as np

from .. import provenance as _prov
from ..results import file_sha256
from . import (
    ConfigMismatch,
    DamagedPoints,
    RunLocked,
    config_dict,
    config_hash,
    json_value,
)

__all__ = [
    "MANIFEST",
    "LOCK",
    "RunStore",
    "provenance",
    "git_commit",
    "open_store",
    "run_lock",
    "read_manifest",
    "read_point",
    "read_point_meta",
    "status",
    "load",
]

MANIFEST = "manifest.json"
LOCK = ".run.lock"
FORMAT = 1
_COMPARED = ("experiment", "scale", "device", "dtype", "axes", "fixed")
DONE, PENDING, DAMAGED = "done", "pending", "damaged"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def git_commit() -> str | None:
    """The commit of the source tree attnbook is imported from (``+dirty`` when tracked files
    changed), or ``None`` outside a git checkout (:func:`attnbook.provenance.git_commit`)."""
    return _prov.git_commit()


def provenance() -> dict:
    """Versions of attnbook, torch, NumPy, Python and dask, the git commit (``git_commit``,
    with ``+dirty``; ``dirty``; ``diff_sha256`` of the uncommitted changes), the host, and the
    numeric signature of this process (``numeric_signature``, ``signature_key``)."""
    import attnbook

    try:
        import dask

        dask_version = dask.__version__
    except ImportError:  # pragma: no cover - dask is a dependency
        dask_version = None
    st = _prov.git_state()
    sig = _prov.numeric_signature(git=False)
    sig |= {"git_commit": st["commit"], "dirty": st["dirty"]}
    commit = st["commit"] and st["commit"] + ("+dirty" if st["dirty"] else "")
    return {
        "attnbook": attnbook.__version__,
        "git_commit": commit,
        "dirty": st["dirty"],
        "diff_sha256": st["diff_sha256"],
        "torch": sig["versions"]["torch"],
        "numpy": np.__version__,
        "python": platform.python_version(),
        "dask": dask_version,
        "host": platform.node(),
        "signature_key": sig["key"],
        "numeric_signature": sig,
    }


def _atomic_write(path: Path, write) -> None:
    """``write(file)`` to a temporary file beside ``path``, fsync, then rename over ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_json(path: Path, obj: dict) -> None:
    text = json.dumps(obj, indent=1, sort_keys=False, default=str) + "\n"
    _atomic_write(path, lambda f: f.write(text.encode()))


def _point_axes(axes: dict, index) -> dict:
    """The axis values of a manifest point (``index``: its position on each axis)."""
    return {a: axes[a][i] for a, i in zip(axes, index)}


def _point_record(axes: dict, point: dict, **more) -> dict:
    """A manifest point as the run reports list it (damaged, stale):
    ``{"index", "axes", "hash", **more}``."""
    index = point["index"]
    return {
        "index": index,
        "axes": _point_axes(axes, index),
        "hash": point["hash"],
    } | more


def read_manifest(directory) -> dict:
    """The manifest of a run directory (``FileNotFoundError`` / ``ValueError`` if unreadable)."""
    path = Path(directory) / MANIFEST
    if not Path(directory).is_dir():
        raise FileNotFoundError(f"{directory} is not a directory")
    if not path.is_file():
        raise FileNotFoundError(
            f"{directory} is not a run directory (no {MANIFEST}); "
            "`attnbook run EXPERIMENT --out DIR` creates one"
        )
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not readable JSON: {err}") from None


def _differences(old: dict, new: dict) -> list[str]:
    diffs = []
    for key in _COMPARED:
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                if a.get(k) != b.get(k):
                    diffs.append(
                        f"{key}.{k}: {a.get(k)!r} in the directory, {b.get(k)!r} now"
                    )
        elif a != b:
            diffs.append(f"{key}: {a!r} in the directory, {b!r} now")
    if not diffs and [p["hash"] for p in old.get("points", [])] != [
        p["hash"] for p in new["points"]
    ]:
        diffs.append(
            "the points' configurations (their hashes) differ although axes and fixed fields "
            "agree: the experiment's config defaults changed"
        )
    return diffs


class RunStore:
    """The results of one run directory (create with :func:`open_store`)."""

    def __init__(self, directory, manifest: dict):
        self.dir = Path(directory)
        self.points_dir = self.dir / "points"
        self.manifest = manifest

    def npz_path(self, h: str) -> Path:
        return self.points_dir / f"{h}.npz"

    def json_path(self, h: str) -> Path:
        return self.points_dir / f"{h}.json"

    def error_path(self, h: str) -> Path:
        return self.points_dir / f"{h}.error.json"

    def state(self, h: str) -> tuple[str, str]:
        """``("done" | "pending" | "damaged", reason)`` of the point with config hash ``h``.

        Done: the .json is JSON and the .npz has the SHA-256 it records. Pending: no .json (an
        .npz alone is a run killed between the two files). Damaged: anything else.
        """
        meta_path, npz = self.json_path(h), self.npz_path(h)
        if not meta_path.is_file():
            return PENDING, ""
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError) as err:  # UnicodeDecodeError is a ValueError
            return DAMAGED, f"{meta_path.name} is not readable JSON ({err})"
        if not isinstance(meta, dict) or not meta.get("npz_sha256"):
            return DAMAGED, f"{meta_path.name} records no npz_sha256"
        if not npz.is_file():
            return DAMAGED, f"{npz.name} is missing"
        try:
            digest = file_sha256(npz)
        except OSError as err:
            return DAMAGED, f"{npz.name} is not readable ({err})"
        if digest != meta["npz_sha256"]:
            return DAMAGED, (
                f"{npz.name} does not have the SHA-256 its .json records "
                "(truncated or changed after it was written)"
            )
        return DONE, ""

    def is_done(self, h: str) -> bool:
        """Finished: the .json exists and the .npz has the SHA-256 it records."""
        return self.state(h)[0] == DONE

    def pending(self) -> list[dict]:
        """The manifest's points that are not finished (damaged ones included), in sweep
        order: what a run computes."""
        return [p for p in self.manifest["points"] if not self.is_done(p["hash"])]

    def damaged(self) -> list[dict]:
        """The damaged points: ``{"index", "axes", "hash", "reason"}`` each."""
        axes = self.manifest["axes"]
        out = []
        for p in self.manifest["points"]:
            state, reason = self.state(p["hash"])
            if state == DAMAGED:
                out.append(_point_record(axes, p, reason=reason))
        return out

    def write(self, h: str, arrays: dict, meta: dict) -> None:
        """Store a finished point: the .npz first, then the .json that marks it finished."""
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        for k, v in arrays.items():
            if v.dtype == object:
                raise TypeError(f"output {k!r} is an object array; return numbers")
        npz = self.npz_path(h)
        _atomic_write(npz, lambda f: np.savez(f, **arrays))
        meta = dict(meta)
        meta["arrays"] = {k: [list(v.shape), str(v.dtype)] for k, v in arrays.items()}
        meta["npz_sha256"] = file_sha256(npz)
        meta["finished_at"] = _now()
        _write_json(self.json_path(h), meta)
        if self.error_path(h).exists():
            self.error_path(h).unlink()

    def write_error(self, h: str, meta: dict) -> None:
        _write_json(self.error_path(h), {**meta, "failed_at": _now()})

    def clean_temporaries(self) -> int:
        """Remove temporary files left by a killed run; returns how many."""
        n = 0
        for d in (self.dir, self.points_dir):
            for p in d.glob(".*.tmp"):
                p.unlink(missing_ok=True)
                n += 1
        return n


def check_out_directory(directory) -> None:
    """Refuse a path that cannot become a run directory: a file, or a non-empty folder without
    a manifest (raises ``FileExistsError`` / :class:`ConfigMismatch`); touches nothing."""
    directory = Path(directory)
    if (directory / MANIFEST).exists():
        return
    if directory.exists() and not directory.is_dir():
        raise FileExistsError(f"{directory} exists and is not a directory")
    if directory.is_dir() and any(p.name != LOCK for p in directory.iterdir()):
        raise ConfigMismatch(
            f"{directory} is not empty and has no {MANIFEST}: it is not a run "
            "directory; choose an empty or new --out directory"
        )


@contextlib.contextmanager
def run_lock(directory, *, command: str | None = None):
    """Hold the run directory's lock (``fcntl.flock`` on ``.run.lock``) for the ``with`` block.

    A second holder fails at once with :class:`RunLocked` naming the first one's pid, host and
    start; the kernel releases the lock when its holder dies (even by SIGKILL), so a killed
    run never leaves the directory locked. Where ``fcntl`` is missing (Windows) runs are not
    locked.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        yield None
        return
    path = Path(directory) / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            holder = _lock_holder(path)
            raise RunLocked(
                f"{directory} is in use by another run ({holder}); two runs on one --out "
                "would compute the same points twice. Wait for it to finish (`attnbook "
                f"status {directory}` shows its progress), stop it, or use another --out."
            ) from None
        # the holder unlinks the file when it ends: if that happened between our open and
        # our flock, we hold a lock on a deleted file that a third run cannot see; retry
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    info = {
        "pid": os.getpid(),
        "host": platform.node(),
        "since": _now(),
        "command": command,
    }
    os.ftruncate(fd, 0)
    os.write(fd, (json.dumps(info) + "\n").encode())
    try:
        yield info
    finally:
        path.unlink(
            missing_ok=True
        )  # before unlocking: nobody locks the old file after us
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _lock_holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text())
        return f"pid {info['pid']} on {info.get('host')}, since {info.get('since')}"
    except (OSError, ValueError, KeyError, TypeError):
        # the holder has not written its pid yet (it does so right after locking)
        return "pid not yet recorded"


def open_store(
    directory,
    experiment,
    scale: str,
    points,
    *,
    device: str,
    dtype: str,
    command=None,
    allow_dirty: bool = False,
) -> RunStore:
    """Create the run directory, or reopen it if it holds this very configuration.

    ``points`` are ``(index, config)`` pairs (:meth:`Experiment.points`). A directory holding
    another configuration raises :class:`ConfigMismatch` naming every difference; a non-empty
    directory without a manifest is refused too (it is not a run directory). A new manifest
    records the provenance, ``allow_dirty`` and the experiment's re-check spec.
    """
    directory = Path(directory)
    sc = experiment.scale(scale)
    manifest = {
        "format": FORMAT,
        "experiment": experiment.name,
        "scale": scale,
        "device": device,
        "dtype": dtype,
        "axes": {a: json_value(vals) for a, vals in sc.axes.items()},
        "fixed": {k: json_value(v) for k, v in sc.fixed.items()},
        "outputs_dims": {k: list(v) for k, v in experiment.dims.items()},
        "points": [
            {"index": list(idx), "hash": config_hash(cfg), "config": config_dict(cfg)}
            for idx, cfg in points
        ],
    }
    if (directory / MANIFEST).exists():
        old = read_manifest(directory)
        diffs = _differences(old, manifest)
        if diffs:
            raise ConfigMismatch(
                f"{directory} holds results of a different configuration:\n  "
                + "\n  ".join(diffs)
                + "\nUse another --out directory (or delete this one to start over)."
            )
        store = RunStore(directory, old)
    else:
        check_out_directory(directory)
        directory.mkdir(parents=True, exist_ok=True)
        manifest.update(
            created_at=_now(),
            command=command,
            provenance=provenance(),
            allow_dirty=bool(allow_dirty),
            recheck=experiment.recheck.to_json() if experiment.recheck else None,
        )
        _write_json(directory / MANIFEST, manifest)
        store = RunStore(directory, manifest)
    store.points_dir.mkdir(exist_ok=True)
    store.clean_temporaries()
    return store


def read_point(directory, h: str) -> dict[str, np.ndarray]:
    """The arrays of one finished point (loaded without pickle)."""
    with np.load(Path(directory) / "points" / f"{h}.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def read_point_meta(directory, h: str) -> dict:
    return json.loads((Path(directory) / "points" / f"{h}.json").read_text())


def status(directory) -> dict:
    """``{"done", "total", "pending", "failed", "damaged", "wall_s", ...}`` of a run directory.

    ``failed`` lists ``{"index", "axes", "error"}`` of the points whose last attempt raised,
    ``damaged`` lists ``{"index", "axes", "hash", "reason"}`` (see :meth:`RunStore.state`);
    ``pending`` counts the points neither done nor damaged (failed ones included); ``stale``
    lists ``{"index", "axes", "changed"}`` of the finished points whose declared inputs changed
    since (a resumed run recomputes them).
    """
    man = read_manifest(directory)
    store = RunStore(directory, man)
    axes = man["axes"]
    done, failed, damaged, wall = 0, [], [], 0.0
    for p in man["points"]:
        h = p["hash"]
        where = _point_axes(axes, p["index"])
        state, reason = store.state(h)
        if state == DONE:
            done += 1
            try:
                wall += float(read_point_meta(directory, h).get("wall_s", 0.0))
            except (OSError, ValueError, TypeError):
                pass
            continue
        if state == DAMAGED:
            damaged.append(_point_record(axes, p, reason=reason))
            continue
        if store.error_path(h).is_file():
            try:
                error = json.loads(store.error_path(h).read_text()).get("error", "?")
            except (OSError, ValueError, AttributeError):
                error = f"{store.error_path(h).name} is not readable JSON"
            failed.append({"index": p["index"], "axes": where, "error": error})
    total = len(man["points"])
    stale = _stale(store, man)
    return {
        "directory": str(directory),
        "experiment": man["experiment"],
        "scale": man["scale"],
        "device": man["device"],
        "dtype": man["dtype"],
        "done": done,
        "total": total,
        "pending": total - done - len(damaged),
        "failed": failed,
        "damaged": damaged,
        "stale": stale,
        "wall_s": wall,
        "command": man.get("command"),
    }


def _stale(store, man) -> list[dict]:
    """Finished points whose declared inputs changed since (see ``Experiment.inputs``)."""
    from . import UnknownExperiment, get
    from .runner import stale_points

    try:
        exp = get(man["experiment"])
    except UnknownExperiment:
        return []
    if exp.inputs is None:
        return []
    done = [p for p in man["points"] if store.is_done(p["hash"])]
    return [
        {k: s[k] for k in ("index", "axes", "changed")}
        for s in stale_points(store, exp, done)
    ]


def _damage_message(directory, damaged: list[dict]) -> str:
    lines = [f"  {d['axes']} ({d['hash'][:12]}): {d['reason']}" for d in damaged]
    return (
        f"{directory}: {len(damaged)} finished point(s) are damaged:\n"
        + "\n".join(lines)
        + "\nWhat to do: restore the files (e.g. `git checkout` an archive), or rerun the "
        "command that made the directory (`attnbook run` recomputes damaged points); "
        "load(..., damaged='warn') loads the other points with a warning."
    )


def _attr(value):
    # xarray (and netCDF) attributes hold numbers and strings: nested provenance as JSON
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return value


def _read_points(directory, store: RunStore, man: dict):
    """``(arrays, wall_s, damaged)``: the arrays of each finished point by index, their
    total ``wall_s``, and the damaged points (an .npz NumPy cannot read included)."""
    axes = man["axes"]
    got, wall, bad = {}, 0.0, []
    for p in man["points"]:
        state, reason = store.state(p["hash"])
        if state == DONE:
            try:
                arrays = read_point(directory, p["hash"])
            except (OSError, ValueError, EOFError) as err:  # whole, yet not an .npz
                state, reason = DAMAGED, f"the .npz is not readable ({err})"
            else:
                got[tuple(p["index"])] = arrays
                wall += float(read_point_meta(directory, p["hash"]).get("wall_s", 0.0))
        if state == DAMAGED:
            where = {a: axes[a][i] for a, i in zip(axes, p["index"])}
            bad.append(
                {
                    "index": p["index"],
                    "axes": where,
                    "hash": p["hash"],
                    "reason": reason,
                }
            )
    return got, wall, bad


def _filled_output(name: str, got: dict, shape: tuple, n_points: int):
    """``(array, inner shape)``: output ``name`` over the sweep axes and its own
    dimensions, NaN (or "" for text) where a point is not finished or its output is
    shorter than the longest (then an integer output becomes float64)."""
    arrs = [a[name] for a in got.values() if name in a]
    ndim = max(a.ndim for a in arrs)
    inner = tuple(
        max(a.shape[i] if a.ndim == ndim else 0 for a in arrs) for i in range(ndim)
    )
    complete = len(arrs) == n_points and all(a.shape == inner for a in arrs)
    dtype = np.result_type(*arrs)
    text = dtype.kind in "US"
    if not complete and not text and not np.issubdtype(dtype, np.floating):
        dtype = np.float64
    full = (
        np.empty(shape + inner, dtype)
        if complete
        else np.full(shape + inner, "" if text else np.nan, dtype)
    )
    for idx, a in got.items():
        if name in a:
            full[idx + tuple(slice(0, s) for s in a[name].shape)] = a[name]
    return full, inner


def load(directory, *, damaged: str = "raise"):
    """The finished points of a run as an ``xarray.Dataset``.

    Dimensions: the sweep axes (coordinates: their values), then each output's own dimensions
    (named by the experiment, else ``<output>_<i>``; coordinates 0, 1, …). Points not
    finished, and outputs shorter than the longest along a dimension (e.g. a size that is an
    axis), are filled with NaN. ``attrs`` hold the provenance: experiment, scale, device,
    dtype, fixed fields, command, versions, git commit, the numeric signature (as JSON), the
    number of finished points and their total ``wall_s``.

    Damaged points (see :meth:`RunStore.state`; also an .npz that NumPy cannot read) raise
    :class:`~attnbook.experiments.DamagedPoints` listing them (``damaged="raise"``, the
    default: a figure never silently loses a point), or, with ``damaged="warn"``, are left
    out as NaN with a ``UserWarning`` that lists them.
    """
    import xarray as xr

    if damaged not in ("raise", "warn"):
        raise ValueError(f"damaged must be 'raise' or 'warn', got {damaged!r}")
    man = read_manifest(directory)
    store = RunStore(directory, man)
    axes = man["axes"]
    shape = tuple(len(v) for v in axes.values())
    dims_of = man.get("outputs_dims", {})
    got, wall, bad = _read_points(directory, store, man)
    if bad:
        message = _damage_message(directory, bad)
        if damaged == "raise":
            raise DamagedPoints(message, bad)
        warnings.warn(message, UserWarning, stacklevel=3)
    names_ = sorted({k for arrs in got.values() for k in arrs})
    data_vars = {}
    inner_sizes: dict[str, int] = {}
    for name in names_:
        full, inner = _filled_output(name, got, shape, len(man["points"]))
        ndim = len(inner)
        inner_dims = list(dims_of.get(name, []))[:ndim]
        inner_dims += [f"{name}_{i}" for i in range(len(inner_dims), ndim)]
        data_vars[name] = (list(axes) + inner_dims, full)
        for dim, size in zip(inner_dims, inner):
            inner_sizes[dim] = max(size, inner_sizes.get(dim, 0))
    coords = {a: np.asarray(v) for a, v in axes.items()}
    # integer positions on the outputs' own dimensions, so that .sel works on them too
    for dim, size in inner_sizes.items():
        if dim not in coords and dim not in data_vars:
            coords[dim] = np.arange(size)
    prov = man.get("provenance", {})
    attrs = {
        "experiment": man["experiment"],
        "scale": man["scale"],
        "device": man["device"],
        "dtype": man["dtype"],
        "fixed": json.dumps(man.get("fixed", {})),
        "command": man.get("command") or "",
        "created_at": man.get("created_at", ""),
        "n_done": len(got),
        "n_points": len(man["points"]),
        "n_damaged": len(bad),
        "wall_s": wall,
        **{k: _attr(v) for k, v in prov.items()},
    }
    return xr.Dataset(data_vars, coords=coords, attrs=attrs)
