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


def test_one_sided_bounds_on_one_signed_quantities_are_judged_on_the_log_scale():
    from scipy.stats import t as student_t

    rng = np.random.default_rng(7)
    gap = np.exp(rng.normal(np.log(0.2), 0.6, size=20))  # a relative gap ≥ 0.02
    rate = -np.exp(rng.normal(np.log(1.0), 0.7, size=20))  # a rate ≤ −0.05
    mixed = rng.normal(0.5, 0.3, size=20)  # both signs: no log scale
    s = _summary(
        {
            "gap": (gap, gap - 0.02, []),
            "rate": (rate, -0.05 - rate, []),
            "mixed": (mixed, mixed + 1.0, []),
        }
    )
    records = [
        {
            "chapter": "c",
            "claims": [
                {"id": "gap", "lower": 0.02, "upper": None, "expected": None},
                {"id": "rate", "lower": None, "upper": -0.05, "expected": None},
                {"id": "mixed", "lower": -1.0, "upper": None, "expected": None},
            ],
        }
    ]
    b = error_budget.failure_budget(s, records)
    out = b["claims"]
    assert [out[("c", k)]["model"] for k in ("gap", "rate", "mixed")] == [
        "log",
        "log",
        "normal",
    ]

    def tail(d):  # the predictive t tail of d below 0, by hand
        z = -d.mean() / (d.std(ddof=1) * np.sqrt(1 + 1 / d.size))
        return student_t.cdf(z, d.size - 1)

    assert out[("c", "gap")]["p_fail"] == pytest.approx(tail(np.log(gap / 0.02)))
    # |rate| must stay above 0.05: the log distance is ln|x| − ln 0.05
    assert out[("c", "rate")]["p_fail"] == pytest.approx(tail(np.log(-rate / 0.05)))
    # a normal sample stays on its own scale, whose likelihood is the better one
    sym = rng.normal(1.0, 0.1, size=20)
    s2 = _summary({"sym": (sym, sym - 0.5, [])})
    rec2 = [{"chapter": "c", "claims": [{"id": "sym", "lower": 0.5, "upper": None}]}]
    assert error_budget.failure_budget(s2, rec2)["claims"][("c", "sym")]["model"] == (
        "normal"
    )
    # the log scale is the one a skewed scale quantity lives on: its tail is far thinner
    # here than the normal model's on the slack
    plain = error_budget.failure_budget(s)["claims"][("c", "gap")]
    assert plain["model"] == "normal"
    assert out[("c", "gap")]["p_fail"] < plain["p_fail"]
