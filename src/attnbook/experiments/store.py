"""The results store of a sweep: one directory per run, resumable, never pickled.

Layout of a run directory::

    manifest.json              experiment, scale, device, dtype, axes, fixed fields, every
                               point's index and config hash, provenance, the command
    points/<hash>.npz          the arrays of one point (``np.savez``; read with allow_pickle=False)
    points/<hash>.json         its config, config hash, versions, git commit, device, wall_s, and
                               the SHA-256 of the .npz — written last: a point is finished when
                               its .json exists and the .npz matches the recorded hash
    points/<hash>.error.json   the error of a failed point (removed when it later succeeds)

Every file is written to a temporary name in the same folder and renamed (``os.replace``), so a
run killed at any moment leaves only whole files (and temporary ones, removed on the next run).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..results import file_sha256
from . import ConfigMismatch, config_dict, config_hash, json_value

__all__ = [
    "MANIFEST",
    "RunStore",
    "provenance",
    "git_commit",
    "open_store",
    "read_manifest",
    "read_point",
    "status",
    "load",
]

MANIFEST = "manifest.json"
FORMAT = 1
_COMPARED = ("experiment", "scale", "device", "dtype", "axes", "fixed")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def git_commit() -> str | None:
    """The commit of the source tree attnbook is imported from, when it is a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    commit = out.stdout.strip()
    return commit + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def provenance() -> dict:
    """Versions of attnbook, torch, NumPy, Python and dask, the git commit and the host."""
    import torch

    import attnbook

    try:
        import dask

        dask_version = dask.__version__
    except ImportError:  # pragma: no cover - dask is a dependency
        dask_version = None
    return {
        "attnbook": attnbook.__version__,
        "git_commit": git_commit(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "dask": dask_version,
        "host": platform.node(),
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

    def is_done(self, h: str) -> bool:
        """Finished: the .json exists and the .npz has the SHA-256 it records."""
        meta_path, npz = self.json_path(h), self.npz_path(h)
        if not (meta_path.is_file() and npz.is_file()):
            return False
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError):
            return False
        return meta.get("npz_sha256") == file_sha256(npz)

    def pending(self) -> list[dict]:
        """The manifest's points that are not finished, in sweep order."""
        return [p for p in self.manifest["points"] if not self.is_done(p["hash"])]

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


def open_store(
    directory, experiment, scale: str, points, *, device: str, dtype: str, command=None
) -> RunStore:
    """Create the run directory, or reopen it if it holds this very configuration.

    ``points`` are ``(index, config)`` pairs (:meth:`Experiment.points`). A directory holding
    another configuration raises :class:`ConfigMismatch` naming every difference; a non-empty
    directory without a manifest is refused too (it is not a run directory).
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
        if directory.exists() and not directory.is_dir():
            raise FileExistsError(f"{directory} exists and is not a directory")
        if directory.is_dir() and any(directory.iterdir()):
            raise ConfigMismatch(
                f"{directory} is not empty and has no {MANIFEST}: it is not a run "
                "directory; choose an empty or new --out directory"
            )
        directory.mkdir(parents=True, exist_ok=True)
        manifest.update(created_at=_now(), command=command, provenance=provenance())
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
    """``{"done", "total", "pending", "failed": [{"index", "axes", "error"}], ...}``."""
    man = read_manifest(directory)
    store = RunStore(directory, man)
    axes = man["axes"]
    done, failed, wall = 0, [], 0.0
    for p in man["points"]:
        h = p["hash"]
        if store.is_done(h):
            done += 1
            try:
                wall += float(read_point_meta(directory, h).get("wall_s", 0.0))
            except (OSError, ValueError):
                pass
        elif store.error_path(h).is_file():
            err = json.loads(store.error_path(h).read_text())
            failed.append(
                {
                    "index": p["index"],
                    "axes": {a: axes[a][i] for a, i in zip(axes, p["index"])},
                    "error": err.get("error", "?"),
                }
            )
    total = len(man["points"])
    return {
        "directory": str(directory),
        "experiment": man["experiment"],
        "scale": man["scale"],
        "device": man["device"],
        "dtype": man["dtype"],
        "done": done,
        "total": total,
        "pending": total - done,
        "failed": failed,
        "wall_s": wall,
        "command": man.get("command"),
    }


def load(directory):
    """The finished points of a run as an ``xarray.Dataset``.

    Dimensions: the sweep axes (coordinates: their values), then each output's own dimensions
    (named by the experiment, else ``<output>_<i>``). Points not finished, and outputs shorter
    than the longest along a dimension (e.g. a size that is an axis), are filled with NaN.
    ``attrs`` hold the provenance: experiment, scale, device, dtype, fixed fields, command,
    versions, git commit, the number of finished points and their total ``wall_s``.
    """
    import xarray as xr

    man = read_manifest(directory)
    store = RunStore(directory, man)
    axes = man["axes"]
    shape = tuple(len(v) for v in axes.values())
    dims_of = man.get("outputs_dims", {})
    got, wall = {}, 0.0
    for p in man["points"]:
        if store.is_done(p["hash"]):
            got[tuple(p["index"])] = read_point(directory, p["hash"])
            wall += float(read_point_meta(directory, p["hash"]).get("wall_s", 0.0))
    names_ = sorted({k for arrs in got.values() for k in arrs})
    data_vars = {}
    for name in names_:
        arrs = [a[name] for a in got.values() if name in a]
        ndim = max(a.ndim for a in arrs)
        inner = tuple(
            max(a.shape[i] if a.ndim == ndim else 0 for a in arrs) for i in range(ndim)
        )
        complete = len(arrs) == len(man["points"]) and all(
            a.shape == inner for a in arrs
        )
        dtype = np.result_type(*arrs)
        if not complete and not np.issubdtype(dtype, np.floating):
            dtype = np.float64
        full = (
            np.empty(shape + inner, dtype)
            if complete
            else np.full(shape + inner, np.nan, dtype)
        )
        for idx, a in got.items():
            if name in a:
                full[idx + tuple(slice(0, s) for s in a[name].shape)] = a[name]
        inner_dims = list(dims_of.get(name, []))[:ndim]
        inner_dims += [f"{name}_{i}" for i in range(len(inner_dims), ndim)]
        data_vars[name] = (list(axes) + inner_dims, full)
    coords = {a: np.asarray(v) for a, v in axes.items()}
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
        "wall_s": wall,
        **{k: ("" if v is None else v) for k, v in prov.items()},
    }
    return xr.Dataset(data_vars, coords=coords, attrs=attrs)
