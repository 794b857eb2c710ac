"""The error budget read from a sweep: seed dependence, predictive tails, Clopper–Pearson."""

import numpy as np
import pytest

from attnbook.experiments import error_budget


def _summary(claims_in: dict, seeds=tuple(range(3, 23))) -> dict:
    chapters = {"c": {"seeds": list(seeds)}}
    out = {}
    for cid, (values, margins, failed) in claims_in.items():
        out[("c", cid)] = {
            "passed": len(seeds) - len(failed),
            "n": len(seeds),
            "margins": list(np.asarray(margins) / 7.0),
            "slacks": list(margins),
            "values": [(s, v, v, v) for s, v in zip(seeds, values)],
            "failed_seeds": list(failed),
        }
    return {"chapters": chapters, "claims": out}


def test_failure_budget_is_the_normal_predictive_tail_summed_over_claims():
    from scipy.stats import norm

    rng = np.random.default_rng(5)
    m = rng.normal(2.0, 1.0, size=20)
    same = np.full(20, 0.3)
    s = _summary(
        {
            "random": (m, m, []),
            "fixed": (same, same, []),  # the same number under every seed
            "failed": (m - 2.5, m - 2.5, [3, 4]),
        }
    )
    b = error_budget.failure_budget(s)
    rand, fixed = b["claims"][("c", "random")], b["claims"][("c", "fixed")]
    assert rand["seed_dependent"] and not fixed["seed_dependent"]
    assert fixed["p_fail"] == 0.0
    # the predictive tail is wider than the plug-in normal's, and close to it at n = 20
    z = m.mean() / m.std(ddof=1)
    assert norm.cdf(-z) < rand["p_fail"] < 1.5 * norm.cdf(-z)
    failed = b["claims"][("c", "failed")]["p_fail"]
    assert failed >= 2 / 20  # at least what the sweep saw
    assert b["book_upper"] == pytest.approx(rand["p_fail"] + failed)
    assert b["book_lower"] == failed and b["riskiest"][0][0] == ("c", "failed")
    assert b["seeds_failed"] == [3, 4] and b["n_seeds"] == 20
    lo, hi = b["observed_interval"]
    assert lo < 0.1 < hi


def test_clopper_pearson_matches_its_closed_forms():
    from attnbook.experiments.error_budget import clopper_pearson

    # k = 0: the upper end solves (1 − p)ⁿ = α/2; k = n: the lower end solves pⁿ = α/2
    assert clopper_pearson(0, 20) == (0.0, pytest.approx(1 - 0.025 ** (1 / 20)))
    assert clopper_pearson(20, 20) == (pytest.approx(0.025 ** (1 / 20)), 1.0)
    lo, hi = clopper_pearson(5, 20)
    assert lo < 0.25 < hi
    with pytest.raises(ValueError, match="k"):
        clopper_pearson(21, 20)
    with pytest.raises(TypeError, match="integers"):
        clopper_pearson(1.5, 20)
