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


def failure_budget(summary: dict, *, rtol: float = 1e-9) -> dict:
    """Each claim's chance of failing at a fresh seed, estimated from the sweep, and the book's.

    A claim is *seed-dependent* when its measured value differs between the sweep's seeds (by
    more than ``rtol`` of its size); the others are the same number under every seed and
    cannot fail at a new one. For a seed-dependent claim whose slacks ``m₁…mₙ`` (the distance
    to failing in the claim's own units, whose sign decides it; not the margin, which divides
    it by an effect that itself varies with the seed) have mean ``m̄`` and standard deviation
    ``s``, the chance that the next seed's slack is negative is the normal model's predictive probability
    ``P = F_{n−1}(−m̄ / (s √(1 + 1/n)))`` (``F`` Student's t: the estimated spread's own
    uncertainty widens the tail), raised to the observed rate ``k_fail/n`` where that is
    larger. The book-wide chance that a fresh seed fails some claim is at most the sum of
    the claims' chances (the union bound, whatever their dependence), and at least the
    largest. Beside the model stands what the sweep saw without one: the seeds at which
    some claim failed, ``k/n`` with its Clopper–Pearson interval.

    The normal model is a model: a slack with a heavy tail towards 0 fails more often than
    it says, one bounded above (an error below its tolerance) less often.
    """
    from scipy.stats import t as student_t

    claims_out = {}
    for key, c in summary["claims"].items():
        # the slack (distance to failing in the claim's units) decides the claim; the
        # margin divides it by the effect, which itself varies with the seed
        m = np.asarray(c.get("slacks", c["margins"]), dtype=float)
        v = np.asarray([x[2] for x in c["values"]], dtype=float)
        n, n_fail = int(c["n"]), int(c["n"]) - int(c["passed"])
        scale = max(1.0, float(np.nanmax(np.abs(v)))) if v.size else 1.0
        dependent = bool(v.size > 1 and np.nanmax(v) - np.nanmin(v) > rtol * scale)
        p = 0.0
        if dependent and m.size > 1 and np.all(np.isfinite(m)):
            s = float(m.std(ddof=1))
            if s > 0:
                z = -float(m.mean()) / (s * math.sqrt(1 + 1 / m.size))
                p = float(student_t.cdf(z, m.size - 1))
        p = max(p, n_fail / n) if n else p
        claims_out[key] = {"seed_dependent": dependent, "p_fail": p, "n": n}
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
