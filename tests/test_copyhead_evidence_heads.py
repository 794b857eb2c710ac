"""Copy-head pack/unpack, readouts, statistics helpers, the softmax critical length and the
experiment helpers of ``attnbook.copyhead.heads``."""

import numpy as np
import pytest
import torch

from attnbook import sgld
from attnbook.copyhead import (
    CopyStats,
    attention_matrix,
    copy_statistics,
    copy_task,
    expected_statistics,
    heads,
    nested_statistics,
    order_parameters,
    pooling_matrix,
    shift_matrix,
    softmax_critical_length,
    token_mse,
)
from attnbook.copyhead import action as A

torch.set_num_threads(1)
dt = torch.float64


def test_pack_unpack_round_trip_and_validation():
    g = torch.Generator().manual_seed(0)
    G = torch.randn(3, 5, 5, generator=g, dtype=dt)
    b = torch.randn(3, generator=g, dtype=dt)
    theta = A.pack({"G": G, "b": b})
    assert theta.shape == (3, 26)
    back = A.unpack(theta, 5)
    assert torch.equal(back["G"], G) and torch.equal(back["b"], b)
    no_b = A.unpack(A.pack({"G": G}), 5)
    assert no_b["b"] is None and torch.equal(no_b["G"], G)
    draws = torch.stack([theta, 2 * theta])  # (draws, chains, d)
    assert A.unpack(draws, 5)["G"].shape == (2, 3, 5, 5)
    with pytest.raises(ValueError, match="columns"):
        A.unpack(theta, 4)
    with pytest.raises(TypeError, match="params"):
        A.pack(G)
    with pytest.raises(ValueError, match="b"):
        A.pack({"G": G, "b": b[:2]})


def test_theta_attention_is_the_model_attention():
    g = torch.Generator().manual_seed(1)
    G, b = (
        torch.randn(2, 4, 4, generator=g, dtype=dt),
        torch.randn(2, generator=g, dtype=dt),
    )
    theta = A.pack({"G": G, "b": b})
    direct = (G + b[:, None, None]) / 4  # the formula, written out
    assert torch.allclose(A.theta_attention(theta, 4), direct, rtol=1e-14)
    soft = A.theta_attention(A.pack({"G": G}), 4, kind="softmax")
    assert torch.allclose(soft, torch.exp(G) / torch.exp(G).sum(-1, keepdim=True))
    assert np.allclose(attention_matrix(G.numpy(), kind="softmax"), soft.numpy())


def test_readouts_are_sign_invariant_and_match_order_parameters():
    L, V = 6, 3
    A_t = 0.3 * pooling_matrix(L) + 0.5 * shift_matrix(L)
    G = (L * A_t)[None]  # linear attention: A = G / L with b = 0
    theta = A.pack({"G": G, "b": torch.zeros(1, dtype=dt)})
    r, r_flip = A.readouts(theta), A.readouts(-theta)
    assert r["m"] == pytest.approx([0.8]) and r["c_G"] == pytest.approx([0.5])
    assert r_flip["m"] == pytest.approx(r["m"]) and r_flip["c_G"] == pytest.approx(
        r["c_G"]
    )
    X, Y = copy_task(50, L, V, seed=0)
    stats = copy_statistics(X[None], Y[None])
    with_loss = A.readouts(theta, stats)
    W = A.posterior_mean_readout(A_t[None], stats)
    net = {"G": G, "W": W, "b": torch.zeros(1, dtype=dt)}
    assert with_loss["loss"] == pytest.approx(token_mse(net, stats).numpy(), rel=1e-12)
    soft = A.readouts(A.pack({"G": 2.0 * shift_matrix(L)[None]}), kind="softmax")
    c1, cG = order_parameters(torch.softmax(2.0 * shift_matrix(L), -1))
    assert soft["c_G"] == pytest.approx([float(cG)])


def test_copy_stats_cat_repeat_index_and_nested_statistics():
    X, Y = copy_task(7, 4, 3, batch_shape=(2,), seed=3)
    s = copy_statistics(X, Y)
    both = CopyStats.cat([s, s[:1]])
    assert both.batch_shape == (3,) and torch.equal(both.xx[2], s.xx[0])
    assert s.repeat(2).batch_shape == (4,) and torch.equal(s.repeat(2).xy[3], s.xy[1])
    nested = nested_statistics([2, 7], 4, 3, n_datasets=2, seed=3)
    assert nested.n_sequences.tolist() == [2, 2, 7, 7]
    assert torch.equal(nested.xx[2:], s.xx)  # the full sets are the same draw
    assert torch.equal(nested.xx[:2], copy_statistics(X[:, :2], Y[:, :2]).xx)
    with pytest.raises(TypeError):
        CopyStats.cat([])
    with pytest.raises(ValueError, match="n_sequences"):
        nested_statistics([0, 3], 4, 3)


def test_seed_convention_none_means_the_global_generator():
    torch.manual_seed(5)
    a = copy_task(3, 4, 3)[0]
    torch.manual_seed(5)
    b = copy_task(3, 4, 3)[0]
    c = copy_task(3, 4, 3)[0]
    assert torch.equal(a, b) and not torch.equal(b, c)
    g = torch.Generator().manual_seed(9)
    assert torch.equal(copy_task(3, 4, 3, seed=g)[0], copy_task(3, 4, 3, seed=9)[0])
    assert copy_task(3, 4, 3, seed=0)[0].dtype == torch.float64


def test_softmax_critical_length_and_refusal_below_it():
    L_c = softmax_critical_length(vocab_size=4)
    assert L_c == 19 and softmax_critical_length(vocab_size=8) == 21  # as documented
    assert A.softmax_fold_window(seq_len=L_c - 1, vocab_size=4) is None
    lo, hi = A.softmax_fold_window(seq_len=L_c, vocab_size=4)
    # an independent check: a fine grid of the action has two minima inside the window
    grid = A.softmax_saddle(np.linspace(lo, hi, 11)[1:-1], seq_len=L_c, vocab_size=4)
    assert (grid.n_minima == 2).all()
    with pytest.raises(ValueError, match="critical length"):
        A.softmax_critical_p(seq_len=L_c - 1, vocab_size=4)
    p_star = A.softmax_critical_p(seq_len=32, vocab_size=4)
    lo32, hi32 = A.softmax_fold_window(seq_len=32, vocab_size=4)
    assert lo32 < p_star < hi32
    S = A.softmax_saddle([p_star], seq_len=32, vocab_size=4)
    assert S.n_minima[0] == 2
    # at P* the two minima are equally deep
    g = torch.linspace(-2, 2 * np.log(32) + 6, 40001, dtype=dt)
    act = A.softmax_action(g, n_sequences=p_star, seq_len=32, vocab_size=4).numpy()
    low, high = act[g.numpy() < 1.5].min(), act[g.numpy() > 1.5].min()
    assert low == pytest.approx(high, abs=1e-4 * abs(low))


def test_stationary_curve_is_monotone_below_the_critical_length():
    g = np.linspace(0.05, 4, 200)
    below = A.softmax_stationary_p(g, seq_len=12, vocab_size=4)
    above = A.softmax_stationary_p(g, seq_len=32, vocab_size=4)
    assert (np.diff(below) > 0).all() and (np.diff(above) < 0).any()
    # the slope of the action vanishes at (g, P(g))
    gg = torch.tensor(g[50], dtype=dt, requires_grad=True)
    S = A.softmax_action(gg, n_sequences=float(above[50]), seq_len=32, vocab_size=4)
    (d,) = torch.autograd.grad(S, gg)
    assert abs(float(d)) < 1e-6 * 31 * g[50]


def test_small_analysis_helpers():
    x = np.array([1.0, 10.0, 100.0])
    assert heads.loglog_slope(x, 3 * x**1.5) == pytest.approx(1.5)
    assert heads.level_crossing([1.0, 4.0], [0.0, 1.0], 0.5) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        heads.level_crossing([1.0, 2.0], [0.6, 0.7], 0.5)
    P = np.array([1.0, 2.0, 3.0, 4.0])
    assert heads.landau_onset(P, 2 * (P - 1.5).clip(0), above=P > 1.9) == pytest.approx(
        1.5
    )
    assert heads.drop_width([0, 1, 2, 3], [1.0, 0.7, 0.5, 0.1]) == 2.0
    assert np.isnan(heads.drop_width([0, 1], [1.0, 0.9]))
    assert heads.gap_crossing([1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]) == pytest.approx(2.0)
    means = heads.group_mean(
        [1, 2, 3, 4], [0, 0, 1, 1], 2, keep=[True, False, True, True]
    )
    assert means.tolist() == [1.0, 3.5]


def test_sample_coverage_theory_limits():
    th = A.linear_saddle([5.0, 5000.0], seq_len=8, vocab_size=4, fluctuations=True)
    cov = heads.sample_coverage_theory(th, 8)
    assert ((0 < cov) & (cov < 1)).all() and cov[1] > cov[0]


def test_map_heads_run_and_agree_with_theory():
    L, V = 8, 3
    st = expected_statistics(np.array([400.0, 400.0]), L, V)
    h = heads.linear_map_heads(st, n_steps=600, lr=0.05, seed=0)
    m = A.readouts(h.params["theta"])["m"]
    sad = A.linear_saddle([400.0], seq_len=L, vocab_size=V)
    assert m == pytest.approx([sad.m[0]] * 2, rel=1e-3)
    sh = heads.softmax_map_heads(
        expected_statistics(np.array([50.0, 3000.0]), 32, 4), n_steps=300, seed=1
    )
    th = A.softmax_saddle([50.0, 3000.0], seq_len=32, vocab_size=4).a_G
    assert sh.a_G_global == pytest.approx(th, abs=5e-3)
    hot = heads.copy_start(2, 32, seed=0)
    assert A.readouts(hot, kind="softmax")["c_G"].min() > 0.4


@pytest.mark.parametrize("kind", ["softmax", "linear"])
@pytest.mark.parametrize("L", [6, 33])
def test_marginal_potential_is_exact_action_bit_for_bit_with_gradient(kind, L):
    """The sampler's potential skips the checks of exact_action, not its arithmetic: values and
    gradients equal bit for bit (else every archived SGLD chain would part from its re-run)."""
    st = nested_statistics(
        np.array([40, 300]), L, 4, n_datasets=2, seed=L, dtype=torch.float64
    )
    d = L * L + (kind == "linear")
    theta0 = (
        1.5 * torch.randn(4, d, generator=torch.Generator().manual_seed(1)).double()
    )
    pot = A.marginal_potential(st, kind=kind, sigma_g=0.8, kappa=1.3)

    def checked(th):
        p = A.unpack(th, L)
        return A.exact_action(p["G"], st, kind=kind, b=p["b"], sigma_g=0.8, kappa=1.3)

    out = []
    for f in (checked, pot):
        th = theta0.clone().requires_grad_(True)
        value = f(th)
        (grad,) = torch.autograd.grad(value.sum(), th)
        out.append((value.detach(), grad))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


@pytest.mark.parametrize("kind", ["softmax", "linear"])
def test_marginal_potential_step_reads_nothing_back_to_the_host(kind):
    """On a meta device every host read (bool(), .item(), a finiteness check) raises: a
    potential and its gradient that run there are free of host synchronisation, which is what
    lets a GPU queue SGLD steps back to back (#23 item 8)."""
    L = 7
    st = nested_statistics(
        np.array([60]), L, 3, n_datasets=2, seed=0, dtype=torch.float64
    )
    pot = A.marginal_potential(st.to(torch.device("meta")), kind=kind)
    th = torch.empty(2, L * L + (kind == "linear"), dtype=torch.float64, device="meta")
    th.requires_grad_(True)
    value = pot(th)
    (grad,) = torch.autograd.grad(value.sum(), th)
    assert value.shape == (2,) and grad.shape == th.shape
    with pytest.raises(ValueError, match="non-finite|finite"):  # the public path checks
        A.exact_action(torch.full((L, L), float("nan")), st, kind=kind)


def test_marginal_potential_marks_a_failed_factor_and_sgld_reports_it():
    L = 5
    st = nested_statistics(
        np.array([30]), L, 3, n_datasets=2, seed=0, dtype=torch.float64
    )
    pot = A.marginal_potential(st, kind="softmax")
    theta = torch.zeros(2, L * L, dtype=torch.float64)
    theta[1, 3] = float("nan")
    value = pot(theta)
    assert torch.isfinite(value[0]) and torch.isnan(value[1])
    # a step that overflows the scores: the NaN action is reported as the divergence it is
    with pytest.raises(sgld.SamplerDiverged, match="chain"):
        sgld.sample(
            pot, torch.zeros_like(theta), step_size=1e300, n_steps=5, burn_in=1, seed=0
        )
