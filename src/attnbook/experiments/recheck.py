"""How an experiment's archived outputs are re-checked on another machine.

On the numeric path that made an archive (the same :func:`attnbook.provenance.signature_key`) a
re-run must give the same bits. On another path — another CPU, another MKL or OpenBLAS kernel —
round-off differs, and saddle escapes, ODE step control and float32 training amplify it. Each
experiment therefore states, per output, what agreement to demand there (its ``recheck``):

* :func:`exact` — integers and outputs fixed by the config (a time grid, a stationary law);
* :func:`tolerance` — ``|new − old| ≤ atol + rtol·|old|`` elementwise, with NaN and ±inf in the
  same places;
* :func:`ensemble_mean` — for random ensembles (float32 training of several models, chains):
  the mean over the ensemble dimension ``dim`` agrees within ``k`` standard errors of the
  difference, plus ``atol + rtol·|mean|``. Event times (a stage's start, an escape) are NaN
  where a run ended first; with ``censor`` such an entry counts as the run's end, so that an
  event just before the end on one machine and just after it on another compares by the
  little it moved instead of failing on where the NaN fell.

Every rule carries a one-line ``reason`` (with the measured difference it was sized from), and
the spec is written into each new run's manifest. :mod:`attnbook.experiments.verify` applies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Rule",
    "Recheck",
    "Comparison",
    "exact",
    "tolerance",
    "ensemble_mean",
    "within_stderr",
    "not_compared",
    "compare",
    "compare_bitwise",
]

KINDS = ("exact", "tolerance", "ensemble", "stderr", "skip")


@dataclass(frozen=True)
class Rule:
    """How one output is compared across machines (make one with :func:`exact`,
    :func:`tolerance`, :func:`ensemble_mean`, :func:`within_stderr` or :func:`not_compared`)."""

    kind: str
    reason: str
    rtol: float = 0.0
    atol: float = 0.0
    dim: str | None = None
    k: float | None = None
    se: str | None = None
    censor: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ValueError("reason must say why this rule (a non-empty string)")
        for name in ("rtol", "atol"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number ≥ 0, got {v!r}")
        if self.kind == "ensemble" and (not isinstance(self.dim, str) or not self.dim):
            raise ValueError("dim must name the ensemble dimension of the output")
        if self.kind == "stderr" and (not isinstance(self.se, str) or not self.se):
            raise ValueError("se must name the output holding the standard errors")
        if self.censor is not None and (
            self.kind != "ensemble"
            or not isinstance(self.censor, str)
            or not self.censor
        ):
            raise ValueError(
                "censor (the output holding the run's times) applies to ensemble rules"
            )
        if self.kind in ("ensemble", "stderr") and not (
            isinstance(self.k, (int, float)) and self.k > 0
        ):
            raise ValueError(f"k must be a number > 0, got {self.k!r}")

    def to_json(self) -> dict:
        d = {"kind": self.kind, "reason": self.reason}
        if self.kind in ("tolerance", "ensemble", "stderr"):
            d |= {"rtol": float(self.rtol), "atol": float(self.atol)}
        if self.kind == "ensemble":
            d |= {"dim": self.dim, "k": float(self.k)}
            if self.censor:
                d["censor"] = self.censor
        if self.kind == "stderr":
            d |= {"se": self.se, "k": float(self.k)}
        return d

    @classmethod
    def from_json(cls, d: dict) -> Rule:
        if not isinstance(d, dict):
            raise TypeError(f"a rule must be a JSON object, got {type(d).__name__}")
        keys = ("kind", "reason", "rtol", "atol", "dim", "k", "se", "censor")
        return cls(**{k: d[k] for k in keys if k in d})

    def describe(self) -> str:
        if self.kind in ("exact", "skip"):
            return {"exact": "exact", "skip": "not compared"}[self.kind]
        parts = (
            [f"rtol {self.rtol:.1g}"] if self.rtol or self.kind == "tolerance" else []
        )
        parts += [f"atol {self.atol:.1g}"] if self.atol else []
        if self.kind == "tolerance":
            return ", ".join(parts)
        head = (
            f"mean over {self.dim} within {self.k:g} SE"
            if self.kind == "ensemble"
            else f"within {self.k:g}·√(old² + new²) of {self.se}"
        )
        tail = f"; NaN counts as the end of {self.censor}" if self.censor else ""
        return head + "".join(f" + {p}" for p in parts) + tail


def exact(*, reason: str) -> Rule:
    """Equal values (NaN where NaN): integers and outputs the config alone determines."""
    return Rule("exact", reason)


def tolerance(rtol: float, atol: float = 0.0, *, reason: str) -> Rule:
    """``|new − old| ≤ atol + rtol·|old|`` elementwise; NaN and ±inf in the same places."""
    return Rule("tolerance", reason, rtol=rtol, atol=atol)


def ensemble_mean(
    dim: str,
    k: float,
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    censor: str | None = None,
    reason: str,
) -> Rule:
    """The mean over ``dim`` agrees within ``k`` standard errors of the difference
    (``sqrt(s_new²/n + s_old²/n)``) plus ``atol + rtol·|mean_old|``, at every other index;
    NaN and ±inf in the same places elementwise (finite entries only are averaged).

    ``censor`` names the output holding the run's times, for event times that are NaN where
    the run ended before the event: on both sides a NaN is replaced by the largest of those
    times (the run's end) and every entry is averaged."""
    return Rule("ensemble", reason, rtol=rtol, atol=atol, dim=dim, k=k, censor=censor)


def within_stderr(
    se: str, k: float, *, rtol: float = 0.0, atol: float = 0.0, reason: str
) -> Rule:
    """Monte Carlo estimates with their standard errors in the output ``se``:
    ``|new − old| ≤ k·sqrt(se_new² + se_old²) + atol + rtol·|old|`` elementwise."""
    return Rule("stderr", reason, rtol=rtol, atol=atol, k=k, se=se)


def not_compared(*, reason: str) -> Rule:
    """Not compared, even on the same numeric signature: a timing, say."""
    return Rule("skip", reason)


@dataclass(frozen=True)
class Recheck:
    """An experiment's re-check spec: a :class:`Rule` per output.

    ``shorten`` (config changes) and ``shortened_outputs``: for a sweep whose every point is too
    long to re-run in a test (hours of SGLD), the re-check runs the point with these changes
    and compares only the outputs fixed before the changed part starts (data sets, theory
    numbers, step-rule curvatures).
    """

    outputs: dict[str, Rule]
    shorten: dict = field(default_factory=dict)
    shortened_outputs: tuple[str, ...] = ()

    def __post_init__(self):
        for name, rule in self.outputs.items():
            if not isinstance(rule, Rule):
                raise TypeError(f"the rule of output {name!r} must be a Rule")
        for name, rule in self.outputs.items():
            if rule.kind == "stderr" and rule.se not in self.outputs:
                raise ValueError(
                    f"the rule of {name!r} names se={rule.se!r}, no output"
                )
            if rule.censor is not None and rule.censor not in self.outputs:
                raise ValueError(
                    f"the rule of {name!r} names censor={rule.censor!r}, no output"
                )
        missing = set(self.shortened_outputs) - set(self.outputs)
        if missing:
            raise ValueError(f"shortened_outputs {sorted(missing)} have no rule")
        if bool(self.shorten) != bool(self.shortened_outputs):
            raise ValueError("give shorten and shortened_outputs together")

    def to_json(self) -> dict:
        d = {"outputs": {k: r.to_json() for k, r in self.outputs.items()}}
        if self.shorten:
            d["shorten"] = dict(self.shorten)
            d["shortened_outputs"] = list(self.shortened_outputs)
        return d

    @classmethod
    def from_json(cls, d: dict) -> Recheck:
        if not isinstance(d, dict) or not isinstance(d.get("outputs"), dict):
            raise ValueError("a recheck spec must be a JSON object with 'outputs'")
        return cls(
            outputs={k: Rule.from_json(v) for k, v in d["outputs"].items()},
            shorten=dict(d.get("shorten", {})),
            shortened_outputs=tuple(d.get("shortened_outputs", ())),
        )


@dataclass
class Comparison:
    """The outcome for one output: ``ok``, the largest absolute and relative differences,
    ``worst`` (largest difference / allowed; ≤ 1 passes) and a ``detail`` when it fails."""

    ok: bool
    max_abs: float = 0.0
    max_rel: float = 0.0
    worst: float = 0.0
    detail: str = ""


def _diffs(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    g, w = got.astype(np.float64), want.astype(np.float64)
    both = np.isfinite(g) & np.isfinite(w)
    if not both.any():
        return 0.0, 0.0
    d = np.abs(g[both] - w[both])
    scale = np.abs(w[both])
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(scale > 0, d / scale, np.where(d > 0, np.inf, 0.0))
    return float(d.max()), float(rel.max())


def _same_shape(got, want) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape}, archived {want.shape}"
    return ""


def _nonfinite_mismatch(got: np.ndarray, want: np.ndarray) -> str:
    if got.dtype.kind not in "fc" and want.dtype.kind not in "fc":
        return ""
    g, w = got.astype(np.float64), want.astype(np.float64)
    bad = (np.isnan(g) != np.isnan(w)) | (np.isposinf(g) != np.isposinf(w))
    bad |= np.isneginf(g) != np.isneginf(w)
    n = int(bad.sum())
    return f"NaN/inf in other places at {n} of {g.size} entries" if n else ""


def _entries_with_other_bits(a: np.ndarray, b: np.ndarray) -> int:
    if a.size == 0:
        return 0
    bits_a = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, -1)
    bits_b = np.ascontiguousarray(b).reshape(-1).view(np.uint8).reshape(b.size, -1)
    return int((bits_a != bits_b).any(-1).sum())


def compare_bitwise(got: np.ndarray, want: np.ndarray) -> Comparison:
    """Equal dtype, shape and bytes (the rule where the numeric signatures agree)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        return Comparison(False, detail=f"dtype {got.dtype}, archived {want.dtype}")
    if msg := _same_shape(got, want):
        return Comparison(False, detail=msg)
    max_abs, max_rel = _diffs(got, want) if got.dtype.kind in "biuf" else (0.0, 0.0)
    if got.tobytes() == want.tobytes():
        return Comparison(True, max_abs, max_rel)
    n = _entries_with_other_bits(got, want)
    return Comparison(
        False,
        max_abs,
        max_rel,
        float("inf"),
        f"{n} of {got.size} entries differ in their bits",
    )


def _compare_equal(got, want, max_abs, max_rel) -> Comparison:
    """The ``exact`` rule, and any text: equal entries (NaN equals NaN)."""
    eq = got == want
    if got.dtype.kind in "fc" or want.dtype.kind in "fc":
        eq = eq | (np.isnan(got.astype(float)) & np.isnan(want.astype(float)))
    n = int((~np.asarray(eq)).sum())
    ok = n == 0
    return Comparison(
        ok,
        max_abs,
        max_rel,
        0.0 if ok else float("inf"),
        "" if ok else f"{n} of {got.size} entries differ",
    )


def _compare_entries(rule: Rule, g, w, max_abs, max_rel, se_got, se_want) -> Comparison:
    """The ``tolerance`` and ``stderr`` rules, entry by entry (``g``, ``w`` float64)."""
    fin = np.isfinite(w)
    d = np.abs(g[fin] - w[fin])
    allowed = rule.atol + rule.rtol * np.abs(w[fin])
    if rule.kind == "stderr":
        if se_got is None or se_want is None:
            return Comparison(
                False,
                max_abs,
                max_rel,
                float("inf"),
                f"no {rule.se!r} to compare by",
            )
        s2 = np.asarray(se_got, float) ** 2 + np.asarray(se_want, float) ** 2
        allowed = allowed + rule.k * np.sqrt(np.broadcast_to(s2, w.shape)[fin])
    return _bounded(d, allowed, max_abs, max_rel, "entries")


def _compare_means(rule: Rule, g, w, dims, max_abs, max_rel) -> Comparison:
    """The ``ensemble`` rule: the mean over ``rule.dim`` of the finite entries, at every
    other index, within ``k`` standard errors (float64 ``g`` and ``w``)."""
    if rule.dim not in dims:
        return Comparison(
            False,
            max_abs,
            max_rel,
            float("inf"),
            f"no dimension {rule.dim!r} in {dims}",
        )
    axis = dims.index(rule.dim)
    fin = np.isfinite(w)
    n = fin.sum(axis)
    g0, w0 = np.where(fin, g, 0.0), np.where(fin, w, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mg, mw = g0.sum(axis) / n, w0.sum(axis) / n
        vg = np.where(fin, (g0 - np.expand_dims(mg, axis)) ** 2, 0).sum(axis) / (n - 1)
        vw = np.where(fin, (w0 - np.expand_dims(mw, axis)) ** 2, 0).sum(axis) / (n - 1)
        se = np.sqrt((vg + vw) / n)
    keep = n > 1
    d = np.abs(mg - mw)[keep]
    allowed = rule.k * se[keep] + rule.atol + rule.rtol * np.abs(mw[keep])
    return _bounded(d, allowed, max_abs, max_rel, f"means over {rule.dim}")


def compare(
    rule: Rule,
    got,
    want,
    dims: tuple[str, ...] = (),
    *,
    se_got=None,
    se_want=None,
    times_got=None,
    times_want=None,
) -> Comparison:
    """Compare a re-computed output ``got`` with the archived ``want`` under ``rule``.

    ``dims`` names the output's dimensions (needed by :func:`ensemble_mean`); ``se_got`` and
    ``se_want`` are the standard errors of :func:`within_stderr` (its ``se`` output),
    ``times_got`` and ``times_want`` the times of an ensemble rule's ``censor`` output.
    """
    got, want = np.asarray(got), np.asarray(want)
    if rule.censor and rule.kind == "ensemble" and got.shape == want.shape:
        if times_got is None or times_want is None:
            return Comparison(
                False, detail=f"no {rule.censor!r} to censor the events at"
            )
        ends = [np.nanmax(np.asarray(x, float)) for x in (times_got, times_want)]
        got, want = (
            np.where(np.isnan(x.astype(np.float64)), end, x.astype(np.float64))
            for x, end in zip((got, want), ends)
        )
    if rule.kind == "skip":
        return Comparison(True, detail="not compared")
    if msg := _same_shape(got, want):
        return Comparison(False, detail=msg)
    numeric = got.dtype.kind in "biuf" and want.dtype.kind in "biuf"
    # text (claim ids, error messages) has no size of difference: only equal or not
    max_abs, max_rel = _diffs(got, want) if numeric else (0.0, 0.0)
    if rule.kind == "exact" or not numeric:
        return _compare_equal(got, want, max_abs, max_rel)
    if msg := _nonfinite_mismatch(got, want):
        return Comparison(False, max_abs, max_rel, float("inf"), msg)
    g, w = got.astype(np.float64), want.astype(np.float64)
    if rule.kind in ("tolerance", "stderr"):
        return _compare_entries(rule, g, w, max_abs, max_rel, se_got, se_want)
    return _compare_means(rule, g, w, dims, max_abs, max_rel)


def _bounded(d, allowed, max_abs, max_rel, what: str) -> Comparison:
    if d.size == 0:
        return Comparison(True, max_abs, max_rel)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(allowed > 0, d / allowed, np.where(d > 0, np.inf, 0.0))
    worst = float(ratio.max())
    n = int((d > allowed).sum())
    detail = f"{n} of {d.size} {what} outside the tolerance" if n else ""
    return Comparison(n == 0, max_abs, max_rel, worst, detail)
