"""The book's error budget: each claim's chance of failing at a fresh seed, from the sweep.

:func:`failure_budget` reads :func:`attnbook.experiments.ledger_seeds.sweep_summary` (the
twenty fixed seeds of ``ledger-seeds``) and says which claims depend on the seed, how likely
each is to fail at a seed nobody ran, and what that makes for the whole book;
:func:`clopper_pearson` is the exact interval of a proportion that goes with it.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["clopper_pearson", "failure_budget"]


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper–Pearson) two-sided ``level`` interval of a proportion ``k/n``."""
    from scipy.stats import beta

    if not isinstance(k, (int, np.integer)) or not isinstance(n, (int, np.integer)):
        raise TypeError(
            f"k and n must be integers, got {type(k).__name__}, {type(n).__name__}"
        )
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    a = (1 - level) / 2
    low = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return low, high


def _predictive_below(x: np.ndarray, c: float) -> float:
    """The normal model's predictive chance that the next draw of ``x`` falls below ``c``:
    Student's t with n − 1 degrees of freedom, scale ``s √(1 + 1/n)`` (the estimated
    spread's own uncertainty widens the tail)."""
    from scipy.stats import t as student_t

    s = float(x.std(ddof=1))
    if s <= 0:
        return float(x.mean() < c)
    z = (c - float(x.mean())) / (s * math.sqrt(1 + 1 / x.size))
    return float(student_t.cdf(z, x.size - 1))


def _one_sided_log(values: list, record: dict | None):
    """A claim held by one bound on a quantity of one sign (a gap above 2 %, a rate below
    0): ``(log distances to the bound, +1)``, whose negative values fail; else None."""
    if record is None or record.get("expected") is not None:
        return None
    lower, upper = record.get("lower"), record.get("upper")
    if (lower is None) == (upper is None):
        return None
    bound = lower if lower is not None else upper
    # the interval's end nearest the bound decides the claim at each seed
    x = np.array([v[1] if lower is not None else v[3] for v in values], dtype=float)
    sign = np.sign(bound)
    if sign == 0 or not np.all(np.isfinite(x)) or not np.all(np.sign(x) == sign):
        return None
    if x.size < 3 or np.ptp(x) == 0:
        return None
    # the scale the values themselves support: the log-normal wins when its likelihood of
    # the values (its Jacobian 1/|x| included) beats the normal's, as a skewed ratio's
    # does; an absolute error, half-normal, stays on its own scale
    u = np.log(np.abs(x))
    if _normal_loglik(u) - u.sum() <= _normal_loglik(x):
        return None
    # on |x| the bound keeps its direction for positive values and flips for negative
    above = (lower is not None) == (sign > 0)
    d = u - math.log(abs(bound))
    return d if above else -d


def _normal_loglik(x: np.ndarray) -> float:
    """The log-likelihood of ``x`` under the normal fitted to it (maximum likelihood)."""
    s2 = float(x.var())
    if s2 <= 0:
        return math.inf
    return -0.5 * x.size * (math.log(2 * math.pi * s2) + 1)


def failure_budget(
    summary: dict, records: list[dict] | None = None, *, rtol: float = 1e-9
) -> dict:
    """Each claim's chance of failing at a fresh seed, estimated from the sweep, and the book's.

    A claim is *seed-dependent* when its measured value differs between the sweep's seeds (by
    more than ``rtol`` of its size); the others are the same number under every seed and
    cannot fail at a new one. A seed-dependent claim is modelled on the scale its criterion
    lives on:

    * one bound on a quantity that keeps one sign at every seed, the bound of the same sign
      (a relative gap ≥ 2 %, a rate ≤ −0.1), when ``records`` (the ledger's records, for
      the criterion) are given and the values fit a log-normal better than a normal (by
      likelihood, the same number of parameters): the log distance ``ln|x| − ln|b|`` of
      the interval's end nearest the bound, as for a scale quantity (``model`` ``"log"``:
      it approaches its bound by a factor and never crosses zero);
    * otherwise the slack (the distance to failing in the claim's own units, whose sign
      decides it; not the margin, which divides it by an effect that itself varies with the
      seed) (``model`` ``"normal"``).

    On that scale the values ``m₁…mₙ`` (mean ``m̄``, standard deviation ``s``) give the normal
    model's predictive chance of a negative next value, ``P = F_{n−1}(−m̄ / (s √(1 + 1/n)))``
    (``F`` Student's t), raised to the observed rate ``k_fail/n`` where that is larger. The
    book-wide chance that a fresh seed fails some claim is at most the sum of the claims'
    chances (the union bound, whatever their dependence), and at least the largest. Beside
    the model stands what the sweep saw without one: the seeds at which some claim failed,
    ``k/n`` with its Clopper–Pearson interval.

    The normal model is a model: a slack with a heavy tail towards 0 fails more often than
    it says, one bounded above (an error below its tolerance) less often.
    """
    criteria = {(r["chapter"], c["id"]): c for r in records or () for c in r["claims"]}
    claims_out = {}
    for key, c in summary["claims"].items():
        v = np.asarray([x[2] for x in c["values"]], dtype=float)
        n, n_fail = int(c["n"]), int(c["n"]) - int(c["passed"])
        scale = max(1.0, float(np.nanmax(np.abs(v)))) if v.size else 1.0
        dependent = bool(v.size > 1 and np.nanmax(v) - np.nanmin(v) > rtol * scale)
        m = _one_sided_log(c["values"], criteria.get(key))
        model = "log"
        if m is None:
            # the slack decides the claim; the margin divides it by the effect, which
            # itself varies with the seed
            m, model = np.asarray(c.get("slacks", c["margins"]), dtype=float), "normal"
        p = 0.0
        if dependent and m.size > 1 and np.all(np.isfinite(m)):
            p = _predictive_below(m, 0.0)
        p = max(p, n_fail / n) if n else p
        claims_out[key] = {
            "seed_dependent": dependent,
            "p_fail": p,
            "n": n,
            "model": model if dependent else "fixed",
        }
    seeds_failed = sorted(
        {s for c in summary["claims"].values() for s in c["failed_seeds"]}
    )
    n_seeds = len({s for ch in summary["chapters"].values() for s in ch["seeds"]})
    ps = [c["p_fail"] for c in claims_out.values()]
    ranked = sorted(claims_out.items(), key=lambda kv: -kv[1]["p_fail"])
    return {
        "claims": claims_out,
        "n_seed_dependent": sum(c["seed_dependent"] for c in claims_out.values()),
        "book_upper": min(1.0, float(sum(ps))),
        "book_lower": max(ps, default=0.0),
        "riskiest": ranked,
        "seeds_failed": seeds_failed,
        "n_seeds": n_seeds,
        "observed_interval": (
            clopper_pearson(len(seeds_failed), n_seeds) if n_seeds else (0.0, 1.0)
        ),
    }
