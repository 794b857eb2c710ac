"""Re-run archived points and say whether they reproduce — bitwise, or within stated tolerances.

The rule: where the archived point's ``signature_key`` (the numeric signature of the worker
that computed it, :func:`attnbook.provenance.numeric_signature`) equals the current one, every
output must come back with the same bits. Elsewhere — another CPU, another MKL or OpenBLAS
kernel, an emulated one (``MKL_CBWR=COMPATIBLE``), or an archive made before signatures were
recorded — each output is compared under its rule in the experiment's re-check spec
(:mod:`~attnbook.experiments.recheck`): the manifest's copy where the archive has one, else the
registry's.

:func:`verify_point` re-runs one point (by default the one :func:`choose_point` picks from the
current git commit among the archive's quick points, so that successive commits cover them
all) and returns a :class:`PointCheck` with a line per output. ``attnbook experiments verify
DIR [--all]`` is the command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import provenance as _prov
from . import get, run_point
from .recheck import Recheck, compare, compare_bitwise
from .store import _point_axes, read_manifest, read_point, read_point_meta

__all__ = [
    "QUICK_S",
    "OutputCheck",
    "PointCheck",
    "recheck_spec",
    "quick_points",
    "choose_point",
    "compute",
    "verify_point",
    "verify",
]

QUICK_S = 15.0  # seconds: an archived point this short may be re-run by a test


@dataclass
class OutputCheck:
    """One output of a re-run point: the rule applied (``"bitwise"`` or the spec's), whether it
    held, the largest absolute and relative differences, ``worst`` (difference / allowed),
    the rule's reason and what failed."""

    name: str
    rule: str
    ok: bool
    max_abs: float = 0.0
    max_rel: float = 0.0
    worst: float = 0.0
    reason: str = ""
    detail: str = ""

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        diff = f"max|Δ| {self.max_abs:.2g}, max rel {self.max_rel:.2g}"
        if self.rule == "bitwise":
            how = "bitwise equal" if self.ok else "bits differ"
        elif self.rule == "exact":
            how = "exact: equal" if self.ok else "exact: values differ"
        else:
            how = f"{self.rule} (used {self.worst:.2g} of it)"
        text = f"  {mark} {self.name:<24} {how}; {diff}"
        return text + (f" — {self.detail}" if self.detail else "")


@dataclass
class PointCheck:
    """The re-check of one archived point: ``mode`` is ``"bitwise"`` (signatures agree) or
    ``"tolerance"``; ``outputs`` one :class:`OutputCheck` each; ``problems`` what prevents a
    comparison (an output missing or without a rule)."""

    directory: str
    experiment: str
    index: list
    axes: dict
    hash: str
    mode: str
    archived_key: str | None
    current_key: str
    spec_source: str
    shortened: bool = False
    chosen: str = ""
    wall_s: float = 0.0
    outputs: list[OutputCheck] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(o.ok for o in self.outputs)

    def lines(self) -> list[str]:
        why = (
            f"signature {self.current_key} as archived"
            if self.mode == "bitwise"
            else f"archived signature {self.archived_key or 'not recorded'} ≠ current "
            f"{self.current_key}; rules from the {self.spec_source}"
        )
        head = (
            f"{self.experiment} point {self.axes}{' ' + self.chosen if self.chosen else ''}: "
            f"{self.mode} path ({why}){', shortened run' if self.shortened else ''}, "
            f"re-run in {self.wall_s:.1f} s"
        )
        out = [head] + [o.line() for o in self.outputs]
        out += [f"  FAIL {p}" for p in self.problems]
        out.append(f"  -> {'agrees' if self.ok else 'DISAGREES'}")
        return out

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "outputs"}
        d["outputs"] = [o.__dict__ for o in self.outputs]
        d["ok"] = self.ok
        return d


def recheck_spec(manifest: dict) -> tuple[Recheck | None, str]:
    """The re-check spec of a run: the manifest's (``"manifest"``) where it records one, else
    the registered experiment's (``"registry"``; archives made before specs were recorded)."""
    if manifest.get("recheck"):
        return Recheck.from_json(manifest["recheck"]), "manifest"
    return get(manifest["experiment"]).recheck, "registry"


def _metas(directory, man: dict) -> dict[str, dict]:
    return {p["hash"]: read_point_meta(directory, p["hash"]) for p in man["points"]}


def _current(directory, man: dict, metas: dict[str, dict]) -> list[dict]:
    """The manifest's points that today's sources would reproduce: all of them, except for an
    experiment that records its inputs (``Experiment.inputs``, e.g. ``ledger-seeds``), where a
    point whose recorded inputs differ from the files now is stale and left out (re-running
    it runs other code, so it could not agree with the archive)."""
    from . import get
    from .runner import _config

    exp = get(man["experiment"])
    if exp.inputs is None:
        return list(man["points"])
    return [
        p
        for p in man["points"]
        if (metas[p["hash"]].get("inputs") or {})
        == exp.inputs(exp.config(**_config(p["config"])))
    ]


def quick_points(directory, *, limit_s: float = QUICK_S) -> list[dict]:
    """The current manifest points (:func:`_current`) short enough to re-run: archived
    ``wall_s`` at most ``limit_s`` and at most twice the quickest point's plus 1 s (so a test
    stays fast), else the quickest one (whose re-run the spec may shorten: its set-up still
    grows with the point's size). Raises ``ValueError`` when every point is stale."""
    man = read_manifest(directory)
    metas = _metas(directory, man)
    points = _current(directory, man, metas)
    if not points:
        raise ValueError(
            f"{directory}: every point is stale (its sources changed since it was made), so "
            f"none can be re-checked; re-run some with `attnbook run {man['experiment']} "
            "--only ...` (it resumes)"
        )
    wall = {p["hash"]: float(metas[p["hash"]].get("wall_s", 0.0)) for p in points}
    limit = min(limit_s, 2 * min(wall.values()) + 1.0)
    quick = [p for p in points if wall[p["hash"]] <= limit]
    return quick or [min(points, key=lambda p: wall[p["hash"]])]


def choose_point(directory, *, commit: str | None = None) -> tuple[dict, int, int]:
    """``(point, k, n)``: the ``k``-th of the ``n`` quick points, ``k = int(commit[:8], 16) % n``
    with ``commit`` the current git commit (0 outside a checkout), so that the choice is
    deterministic and successive commits cover every quick point."""
    quick = quick_points(directory)
    commit = commit if commit is not None else _prov.git_state()["commit"]
    k = int(commit[:8], 16) % len(quick) if commit else 0
    return quick[k], k, len(quick)


def _find(man: dict, point) -> dict:
    for p in man["points"]:
        if point == p["hash"] or (
            isinstance(point, (list, tuple)) and list(point) == p["index"]
        ):
            return p
    raise ValueError(
        f"point {point!r} is not in the manifest (give a config hash or an index list)"
    )


def compute(
    name: str,
    config: dict,
    *,
    threads: int = 1,
    env: dict | None = None,
    timeout: float | None = None,
) -> tuple[dict[str, np.ndarray], dict]:
    """Compute a point under ``threads`` torch and BLAS threads; ``(arrays, signature)``.

    With ``env`` (variables to set, e.g. ``{"MKL_CBWR": "COMPATIBLE"}``) the point runs in a
    fresh Python process with that environment, since MKL and OpenBLAS read theirs when they
    load; else in this process.
    """
    if env is None:
        from .runner import numeric_threads

        get(
            name
        )  # the experiment's imports first, as on a worker: they may load libraries
        with numeric_threads(threads):
            sig = _prov.numeric_signature(device=config.get("device"), git=False)
            return run_point(name, config), sig
    import attnbook

    child_env = {**os.environ, **{k: str(v) for k, v in env.items()}}
    # the child imports this very attnbook (a checkout's src/ before any installed copy)
    src = str(Path(attnbook.__file__).resolve().parents[1])
    child_env["PYTHONPATH"] = os.pathsep.join(
        [src, *filter(None, [child_env.get("PYTHONPATH")])]
    )
    with tempfile.TemporaryDirectory(prefix="attnbook-verify-") as tmp:
        cfg_path = Path(tmp) / "config.json"
        cfg_path.write_text(json.dumps(config))
        code = (
            "import sys; from attnbook.experiments.verify import _child; "
            "_child(*sys.argv[1:])"
        )
        args = [sys.executable, "-c", code, name, str(cfg_path), tmp, str(threads)]
        res = subprocess.run(
            args, env=child_env, capture_output=True, text=True, timeout=timeout
        )
        if res.returncode != 0:
            raise RuntimeError(
                f"re-running {name} under {env} failed (exit {res.returncode}):\n"
                + res.stderr[-3000:]
            )
        with np.load(Path(tmp) / "arrays.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        sig = json.loads((Path(tmp) / "signature.json").read_text())
    return arrays, sig


def _child(name: str, cfg_path: str, out: str, threads: str) -> None:
    config = json.loads(Path(cfg_path).read_text())
    arrays, sig = compute(name, config, threads=int(threads))
    np.savez(Path(out) / "arrays.npz", **arrays)
    (Path(out) / "signature.json").write_text(json.dumps(sig))


def verify_point(
    directory,
    point=None,
    *,
    env: dict | None = None,
    commit: str | None = None,
    timeout: float | None = None,
) -> PointCheck:
    """Re-run one archived point of ``directory`` and compare it with the archive.

    ``point``: a manifest point, its config hash or its index (a list); ``None`` picks one
    with :func:`choose_point` (``commit`` overrides the current commit there). The point runs
    with the torch threads it was archived with (and as many BLAS threads), in this process,
    or with ``env`` in a fresh one (:func:`compute`). Outputs are compared bitwise when the
    archived ``signature_key`` equals the re-run's, else under the re-check spec
    (:func:`recheck_spec`). When the spec shortens the run, only its ``shortened_outputs``
    are compared.
    """
    man = read_manifest(directory)
    chosen = ""
    if point is None:
        point, k, n = choose_point(directory, commit=commit)
        chosen = f"[quick point {k + 1} of {n}, chosen by the commit]"
    elif not isinstance(point, dict):
        point = _find(man, point)
    meta = read_point_meta(directory, point["hash"])
    want = read_point(directory, point["hash"])
    spec, source = recheck_spec(man)
    config, names = dict(point["config"]), None
    if spec is not None and spec.shorten:
        config.update(spec.shorten)
        names = spec.shortened_outputs
    t0 = time.perf_counter()
    got, sig = compute(
        man["experiment"],
        config,
        threads=int(meta.get("torch_threads", 1)),
        env=env,
        timeout=timeout,
    )
    wall = time.perf_counter() - t0
    archived_key = meta.get("signature_key")
    mode = "bitwise" if archived_key == sig["key"] else "tolerance"
    axes = man["axes"]
    check = PointCheck(
        directory=str(directory),
        experiment=man["experiment"],
        index=point["index"],
        axes=_point_axes(axes, point["index"]),
        hash=point["hash"],
        mode=mode,
        archived_key=archived_key,
        current_key=sig["key"],
        spec_source=source,
        shortened=names is not None,
        chosen=chosen,
        wall_s=wall,
    )
    if set(got) != set(want):
        check.problems.append(
            f"outputs {sorted(got)} differ from the archived {sorted(want)}"
        )
    dims_of = man.get("outputs_dims") or {}
    for name in names or sorted(want):
        if name not in got or name not in want:
            continue
        r = spec.outputs.get(name) if spec is not None else None
        if r is not None and r.kind == "skip":
            continue  # a timing, say: it differs on every run
        if mode == "bitwise":
            c, rule, reason = compare_bitwise(got[name], want[name]), "bitwise", ""
        elif r is None:
            check.problems.append(
                f"output {name!r} has no re-check rule (add one to the experiment's "
                "recheck spec)"
            )
            continue
        else:
            dims = tuple(dims_of.get(name, ()))
            c = compare(
                r,
                got[name],
                want[name],
                dims,
                se_got=got.get(r.se) if r.se else None,
                se_want=want.get(r.se) if r.se else None,
                times_got=got.get(r.censor) if r.censor else None,
                times_want=want.get(r.censor) if r.censor else None,
            )
            rule, reason = r.describe(), r.reason
        check.outputs.append(
            OutputCheck(
                name, rule, c.ok, c.max_abs, c.max_rel, c.worst, reason, c.detail
            )
        )
    return check


def verify(directory, *, all_points: bool = False, env: dict | None = None):
    """:func:`verify_point` of the chosen point, or of every point with ``all_points``."""
    if not all_points:
        return [verify_point(directory, env=env)]
    man = read_manifest(directory)
    return [verify_point(directory, p, env=env) for p in man["points"]]
