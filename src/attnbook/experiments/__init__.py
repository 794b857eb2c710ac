"""Named experiments at scale: a registry of sweeps, a resumable Dask runner, ``load`` → xarray.

An *experiment* is a plain function of one sweep point — a small frozen dataclass of sizes,
seeds, ``device`` and ``dtype`` — that returns a dict of NumPy arrays. Each experiment declares
its sweep axes at three scales: ``smoke`` (seconds; the tests), ``book`` (minutes on a 2-core
CPU; what the chapters show) and ``paper`` (the papers' sizes; hours on a GPU). Work that can be
batched (seeds, chains, random draws) is batched *inside* a point, so one point fills a device.

* :mod:`~attnbook.experiments.focus`, :mod:`~attnbook.experiments.copyhead`,
  :mod:`~attnbook.experiments.pde` — the experiments of Parts I, II and III (registered on import).
* :mod:`~attnbook.experiments.store` — the results store: one ``.npz`` + one ``.json`` per point,
  written atomically, resumable, refusing a directory of another configuration, telling damaged
  points from pending ones, locked against a second run.
* :mod:`~attnbook.experiments.runner` — runs the pending points of a sweep as Dask tasks.
* :mod:`~attnbook.experiments.recheck` — how each experiment's outputs are re-checked on another
  machine (its ``recheck`` spec); :mod:`~attnbook.experiments.verify` re-runs archived points
  and applies it (bitwise on the same numeric signature, the spec's tolerances elsewhere).
* :mod:`~attnbook.experiments.registry_index` — the registry as packaged JSON, so that
  ``attnbook experiments`` lists the experiments without importing them.

The command line (``attnbook experiments [verify] | run | status``) is :mod:`attnbook.cli`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .recheck import Recheck

__all__ = [
    "load_archive",
    "SCALES",
    "DEVICES",
    "DTYPES",
    "Scale",
    "Experiment",
    "register",
    "get",
    "names",
    "config_hash",
    "run_point",
    "load",
    "run",
    "status",
    "UnknownExperiment",
    "ConfigMismatch",
    "DirtyTree",
    "MixedCommits",
    "RunLocked",
    "DamagedPoints",
]

SCALES = ("smoke", "book", "paper")
DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "float64")


class UnknownExperiment(KeyError):
    """No experiment of that name (or no such scale) is registered."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly
        return str(self.args[0]) if self.args else ""


class ConfigMismatch(ValueError):
    """A run directory holds the results of a different configuration."""


class DirtyTree(ValueError):
    """``run`` refused: tracked files differ from the commit (``allow_dirty`` overrides)."""


class MixedCommits(ValueError):
    """``run`` refused to resume: finished points were made at another commit
    (``allow_mixed`` overrides)."""


class RunLocked(RuntimeError):
    """Another run holds the run directory's lock."""


class DamagedPoints(ValueError):
    """Finished points of a run directory are damaged (unreadable or changed files);
    ``points`` lists ``{"index", "axes", "hash", "reason"}``."""

    def __init__(self, message: str, points: list | None = None):
        super().__init__(message)
        self.points = list(points or [])


@dataclass(frozen=True)
class Scale:
    """The sweep of one scale: ``axes`` (name → values, in order) and ``fixed`` config fields."""

    axes: dict[str, tuple]
    fixed: dict[str, Any] = field(default_factory=dict)

    @property
    def n_points(self) -> int:
        return int(np.prod([len(v) for v in self.axes.values()]))


@dataclass(frozen=True)
class Experiment:
    """A named sweep: ``function(config) -> {name: array}`` over the points of a :class:`Scale`.

    ``config`` is the frozen dataclass of one point (it must have ``device`` and ``dtype``
    fields); ``dims`` names the inner dimensions of each output array (unnamed ones become
    ``<output>_<i>``); ``note`` is shown by ``attnbook experiments``; ``recheck``
    (:class:`~attnbook.experiments.recheck.Recheck`) says how each output is compared when an
    archived point is re-run on another machine. ``inputs`` (optional), ``inputs(config) ->
    {path: sha256}``, names the files a point depends on beyond the code's commit (a chapter
    and the modules it imports): each point records them, and a finished point whose inputs
    changed since is *stale* and recomputed on resume — such a sweep mixes commits by design,
    point by point, each point recording its own.
    """

    name: str
    part: str
    description: str
    function: Callable[[Any], dict]
    config: type
    scales: dict[str, Scale]
    dims: dict[str, tuple[str, ...]] = field(default_factory=dict)
    note: str = ""
    recheck: Recheck | None = None
    inputs: Callable[[Any], dict] | None = None

    def scale(self, scale: str) -> Scale:
        if scale not in self.scales:
            raise UnknownExperiment(
                f"experiment {self.name!r} has no scale {scale!r}; "
                f"choose one of {', '.join(self.scales)}"
            )
        return self.scales[scale]

    def points(
        self, scale: str, *, device: str = "cpu", dtype: str = "float64"
    ) -> list[tuple[tuple[int, ...], Any]]:
        """Every point of ``scale`` as ``(index, config)``, index = position on each axis."""
        sc = self.scale(scale)
        names_ = list(sc.axes)
        out = []
        ranges = [range(len(sc.axes[a])) for a in names_]
        for idx in itertools.product(*ranges):
            values = {a: sc.axes[a][i] for a, i in zip(names_, idx)}
            cfg = self.config(**sc.fixed, **values, device=device, dtype=dtype)
            out.append((tuple(idx), cfg))
        return out

    def describe(self) -> dict:
        """A JSON-ready summary: part, description, axes and point counts per scale, the
        outputs' dimensions and the re-check spec."""
        return {
            "name": self.name,
            "part": self.part,
            "description": self.description,
            "note": self.note,
            "scales": {
                s: {
                    "axes": {a: json_value(v) for a, v in sc.axes.items()},
                    "fixed": {k: json_value(v) for k, v in sc.fixed.items()},
                    "n_points": sc.n_points,
                }
                for s, sc in self.scales.items()
            },
            "dims": {k: list(v) for k, v in self.dims.items()},
            "recheck": self.recheck.to_json() if self.recheck else None,
        }


_REGISTRY: dict[str, Experiment] = {}


def register(experiment: Experiment) -> Experiment:
    """Add an experiment to the registry (its name must be new; every scale must be known)."""
    if not isinstance(experiment, Experiment):
        raise TypeError("experiment must be an Experiment")
    if experiment.name in _REGISTRY:
        raise ValueError(f"an experiment named {experiment.name!r} is registered")
    bad = set(experiment.scales) - set(SCALES)
    if bad:
        raise ValueError(f"unknown scale(s) {sorted(bad)}; scales are {SCALES}")
    fields_ = {f.name for f in dataclasses.fields(experiment.config)}
    if not {"device", "dtype"} <= fields_:
        raise ValueError("an experiment's config needs 'device' and 'dtype' fields")
    if experiment.recheck is not None:
        if not isinstance(experiment.recheck, Recheck):
            raise TypeError("recheck must be a Recheck (attnbook.experiments.recheck)")
        unknown = set(experiment.recheck.shorten) - fields_
        if unknown:
            raise ValueError(
                f"recheck.shorten names no config field: {sorted(unknown)}"
            )
        for out, rule in experiment.recheck.outputs.items():
            if rule.kind == "ensemble" and rule.dim not in experiment.dims.get(out, ()):
                raise ValueError(
                    f"recheck of {out!r}: dim {rule.dim!r} is not among its dims "
                    f"{experiment.dims.get(out, ())}"
                )
    _REGISTRY[experiment.name] = experiment
    return experiment


def _load_parts() -> None:
    from . import copyhead, focus, ledger_seeds, pde  # noqa: F401  (each registers its own)


def names() -> list[str]:
    """The registered experiments' names, in registration order."""
    _load_parts()
    return list(_REGISTRY)


def get(name: str) -> Experiment:
    """The experiment called ``name``; :class:`UnknownExperiment` lists the known names."""
    _load_parts()
    if name not in _REGISTRY:
        raise UnknownExperiment(
            f"unknown experiment {name!r}; known: {', '.join(_REGISTRY)} "
            "(`attnbook experiments` lists them)"
        )
    return _REGISTRY[name]


def json_value(value):
    """A config or axis value as plain JSON: tuples → lists, NumPy scalars → Python numbers."""
    if isinstance(value, (tuple, list)):
        return [json_value(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def config_dict(config) -> dict:
    """The fields of a point's config as plain JSON values."""
    return {k: json_value(v) for k, v in dataclasses.asdict(config).items()}


def config_hash(config) -> str:
    """SHA-256 of the canonical JSON of a config (dict or dataclass): the point's identity."""
    d = config if isinstance(config, dict) else config_dict(config)
    text = json.dumps(d, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def run_point(name: str, config) -> dict[str, np.ndarray]:
    """Compute one point in this process (``config``: the dataclass or its dict)."""
    exp = get(name)
    if isinstance(config, dict):
        config = exp.config(**{k: _tuple(v) for k, v in config.items()})
    out = exp.function(config)
    if not isinstance(out, dict) or not out:
        raise TypeError(f"experiment {name!r} must return a non-empty dict of arrays")
    return {k: np.asarray(v) for k, v in out.items()}


def _tuple(v):
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


def load(directory, *, damaged: str = "raise"):
    """The results of a run directory as an ``xarray.Dataset`` (see :func:`store.load`)."""
    from .store import load as _load

    return _load(directory, damaged=damaged)


def run(name: str, scale: str, out, **options):
    """Run or resume a sweep (see :func:`runner.run_sweep`)."""
    from .runner import run_sweep

    return run_sweep(name, scale, out, **options)


def status(directory) -> dict:
    """Done / total points, failures and damaged points of a run directory
    (see :func:`store.status`)."""
    from .store import status as _status

    return _status(directory)


from .archive import load_archive  # noqa: E402  (needs load, defined above)
