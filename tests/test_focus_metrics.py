"""attnbook.focus.metrics, and the four stages on one population-flow run."""

import numpy as np
import pytest
import torch

from attnbook.focus import (
    attention_growth_rate,
    init_params,
    metrics,
    population_flow,
    stage_times,
)
from attnbook.focus.metrics import (
    attention_distributions,
    attention_entropy,
    attention_kl,
    embedding_pca,
    growth_rate_fit,
    singular_values,
    stable_rank,
    trajectory_metrics,
)
from attnbook.focus.population import attention_mixture
from attnbook.markov import entropy, entropy_rate, lazy_chain, perturbed_chain

torch.set_num_threads(1)


def test_basic_metrics():
    A = np.outer([1.0, 2.0], [3.0, 0.0, 4.0])
    assert stable_rank(A) == pytest.approx(1.0)
    np.testing.assert_allclose(singular_values(np.diag([3.0, 1.0])), [3.0, 1.0])
    assert stable_rank(np.eye(3)) == pytest.approx(3.0)
    w = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(attention_entropy(w), [np.log(2), 0.0])
    pi = np.array([0.5, 0.25, 0.25])
    np.testing.assert_allclose(attention_kl(np.array([pi]), pi), [0.0], atol=1e-15)


def test_attention_distributions_match_population_mixture():
    p = init_params(4, 3, eps=0.8, seed=0, n_models=2)
    pi = np.array([0.4, 0.3, 0.2, 0.1])
    w = attention_distributions(p.W0, p.WQ, p.WK, pi)
    Phi = p.W0 @ p.WQ @ p.WK.transpose(-1, -2) @ p.W0.transpose(-1, -2)
    np.testing.assert_allclose(
        w, attention_mixture(Phi, torch.as_tensor(pi)).numpy(), atol=1e-14
    )
    wm = attention_distributions(
        p.W0, p.WQ, p.WK, pi, masked_keys=np.array([0, 0, 0, 1], bool)
    )
    assert np.all(wm[..., 3] == 0) and np.allclose(wm.sum(-1), 1)


def test_growth_rate_fit_recovers_exponent():
    t = np.linspace(0, 10, 101)
    y = 1e-4 * np.exp(0.3 * t)
    rate, (a, b) = growth_rate_fit(t, y, upper=1e-3)
    assert rate == pytest.approx(0.3, rel=1e-10) and b < 10
    with pytest.raises(ValueError, match="fewer than 3"):
        growth_rate_fit(t, y, lower=1.0)


def test_embedding_pca():
    T, d, m = 5, 3, 4
    X = np.zeros((T, d, m))
    X[:, :, 0] = np.arange(T)[:, None] * np.array([1.0, -1.0, 2.0])
    out = embedding_pca(X, 2)
    assert out["coords"].shape == (T, d, 2)
    assert out["explained"][0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="n_components"):
        embedding_pca(X, 9)


@pytest.fixture(scope="module")
def four_stage_runs():
    """delta = 0.04 (the brief's shorter alternative) and delta = 0, d = 4, m = 8, T = 3000."""
    te = np.unique(
        np.concatenate(
            [np.linspace(0, 300, 301), np.logspace(np.log10(300), np.log10(3000), 150)]
        )
    )
    out = {}
    for delta in (0.04, 0.0):
        P = perturbed_chain(4, 0.7, delta, 0.5)
        r = population_flow(init_params(4, 8, eps=1e-3, seed=0), P, 3000.0, t_eval=te)
        out[delta] = (r, trajectory_metrics(r.W0, r.W1, r.WQ, r.WK, r.pi))
    return out


@pytest.mark.slow
def test_four_stages_on_the_population_flow(four_stage_runs):
    r, m = four_stage_runs[0.04]
    st = stage_times(r.t, r.loss, m, r.pi)
    assert (
        st["I_start"]
        < st["I_end"]
        < st["II_start"]
        < st["II_end"]
        < st["III_end"]
        < st["IV_escape"]
    )
    t = r.t
    iI = np.searchsorted(t, st["I_end"])
    # stage I: rank one, W0 ∥ pi, W1 ∥ pi - 1/d, attention frozen, loss at the unigram entropy
    assert m["stable_rank_W0"][iI] < 1.01
    assert m["cos_W0_pi"][iI] > 0.9999 and m["cos_W1_b"][iI] > 0.99
    assert m["phi_norm"][iI] < 1e-4
    assert r.loss[iI] == pytest.approx(
        float(entropy(r.pi)), abs=0.01 * (np.log(4) - float(entropy(r.pi))) + 1e-3
    )
    # stage II: the top token's self-attention rises, H_u falls
    iII = np.searchsorted(t, st["II_end"])
    assert (
        m["top_self_attention"][iII] > 0.9
        and m["entropy_uniform"][iII] < m["entropy_uniform"][0] - 0.05
    )
    # stage III: H_u rises again, embeddings of top vs rest point apart
    iIII = np.searchsorted(t, st["III_end"])
    assert m["entropy_uniform"][iIII] > m["entropy_uniform"][iII] + 0.1
    assert m["cos_top_vs_rest"][iII - 40] > 0.9 and m["cos_top_vs_rest"][iIII] < -0.9
    # stage IV: new directions (sv2, sv3 of W0) and the loss falls to the entropy rate
    assert m["sv_W0"][-1, 2] > 1.0
    assert r.loss[-1] == pytest.approx(float(entropy_rate(r.P)), abs=1e-3)


@pytest.mark.slow
def test_delta_zero_stalls_at_rank_one(four_stage_runs):
    r, m = four_stage_runs[0.0]
    st = stage_times(r.t, r.loss, m, r.pi)
    assert np.isnan(st["IV_escape"])
    assert m["sv_W0"][-1, 1] < 0.01 * m["sv_W0"][-1, 0]
    assert r.loss[-1] > float(entropy_rate(r.P)) + 0.1


@pytest.mark.slow
def test_measured_growth_matches_rate_along_the_run(four_stage_runs):
    r, m = four_stage_runs[0.04]
    st = stage_times(r.t, r.loss, m, r.pi)
    rate, _ = growth_rate_fit(
        r.t, np.sqrt(m["phi_norm"]), t_min=st["I_end"] + 5, t_max=st["II_start"]
    )
    assert rate == pytest.approx(float(attention_growth_rate(r.pi, 0.5)), rel=0.02)


def test_attention_mass_by_type():
    from attnbook.focus.metrics import attention_mass_by_type

    attn = torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.2, 0.7]], dtype=torch.float64)
    ctx = torch.tensor([[2, 0, 2], [1, 1, 0]])
    mass = attention_mass_by_type(attn, ctx, 3)
    np.testing.assert_allclose(mass, [[0.25, 0.0, 0.75], [0.7, 0.3, 0.0]])
    with pytest.raises(ValueError, match="context"):
        attention_mass_by_type(attn, torch.tensor([[0, 1, 5], [0, 0, 0]]), 3)
    with pytest.raises(ValueError, match="last dimension"):
        attention_mass_by_type(attn, ctx[:, :2], 3)


def test_time_grid_and_flow_progress_bar():
    from attnbook.focus import time_grid

    g = time_grid(1000.0, dense_until=10.0, n_dense=11, n_log=5)
    assert g[0] == 0.0 and g[-1] == 1000.0 and np.all(np.diff(g) > 0) and len(g) == 15
    r = population_flow(
        init_params(3, 3, eps=0.1, seed=0),
        lazy_chain([0.5, 0.3, 0.2], 0.5),
        5.0,
        t_eval=time_grid(5.0, dense_until=5.0, n_dense=6),
        progress=True,
    )
    assert r.t.shape == (6,) and np.all(np.diff(r.loss) <= 1e-12)


def test_first_time_below_per_column_and_never():
    t = np.array([0.0, 1.0, 2.0, 3.0])
    y = np.array([[5.0, 5.0], [2.0, 5.0], [0.5, 5.0], [0.1, 4.0]])
    out = metrics.first_time_below(y, t, 1.0)
    assert out.tolist() == [2.0, 3.0]  # the second never gets below: the run's end
    with pytest.raises(ValueError, match="curves"):
        metrics.first_time_below(y[:2], t, 1.0)
    with pytest.raises(ValueError, match="times"):
        metrics.first_time_below(y, t[:, None], 1.0)


def test_largest_rise_matches_brute_force_and_respects_after():
    rng = np.random.default_rng(7)
    y = rng.normal(size=(40, 3)).cumsum(0)
    t = np.linspace(0.0, 39.0, 40)
    after = np.array([0.0, 12.5, 30.0])
    out = metrics.largest_rise(y, t, after=after)
    for c, a in enumerate(after):
        first = int(np.searchsorted(t, a))
        best = max(y[j, c] - y[i, c] for i in range(first, 40) for j in range(i, 40))
        assert out["rise"][c] == pytest.approx(best, abs=1e-12)
        i_lo = int(np.searchsorted(t, out["t_low"][c]))
        i_hi = int(np.searchsorted(t, out["t_high"][c]))
        assert first <= i_lo <= i_hi and y[i_hi, c] - y[i_lo, c] == pytest.approx(best)


def test_largest_rise_respects_until():
    rng = np.random.default_rng(11)
    y = rng.normal(size=(50, 4)).cumsum(0)
    t = np.linspace(0.0, 49.0, 50)
    after = np.array([0.0, 5.5, 20.0, 30.0])
    until = np.array([49.0, 30.0, 20.0, 10.0])  # the last window is empty
    out = metrics.largest_rise(y, t, after=after, until=until)
    for c in range(3):
        lo, hi = (
            int(np.searchsorted(t, after[c])),
            int(np.searchsorted(t, until[c], "right")),
        )
        best = max(y[j, c] - y[i, c] for i in range(lo, hi) for j in range(i, hi))
        assert out["rise"][c] == pytest.approx(max(best, 0.0), abs=1e-12)
        assert after[c] <= out["t_low"][c] <= out["t_high"][c] <= until[c]
    assert np.isnan(out["rise"][3])
    assert np.isnan(metrics.largest_rise(y[:, 0], t, until=np.nan)["rise"])


def test_largest_rise_falling_curve_nan_start_and_bad_input():
    t = np.arange(5.0)
    falling = np.array([[4.0, 1.0], [3.0, 1.0], [2.0, 1.0], [1.0, 1.0], [0.0, 1.0]])
    out = metrics.largest_rise(falling, t, after=[1.0, np.nan])
    assert out["rise"][0] == 0.0  # only falls: no dilution
    assert np.isnan(out["rise"][1]) and np.isnan(
        out["t_high"][1]
    )  # no escape, no answer
    with pytest.raises(ValueError, match="curves"):
        metrics.largest_rise(falling[:3], t)
    with pytest.raises(ValueError, match="finite"):
        metrics.largest_rise(np.array([0.0, np.nan, 1.0, 2.0, 3.0]), t)
