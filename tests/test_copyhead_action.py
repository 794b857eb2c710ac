import numpy as np
import pytest
import sympy as sp
import torch
from scipy import integrate

from attnbook.copyhead import action as A
from attnbook.copyhead import (
    copy_statistics,
    copy_task,
    expected_statistics,
    order_parameters,
    pooling_matrix,
    shift_matrix,
)
from attnbook.copyhead.action import linear as linear_mod

torch.set_num_threads(1)
dt = torch.float64


def test_readout_integral_sympy_matches_quadrature():
    F, (w, s, k, lam, beta) = A.derive_readout_integral()
    vals = {s: 0.8, k: 1.7, lam: 2.3, beta: -0.9}

    def f(x):
        return np.exp(
            -(x**2) / (2 * 0.8**2) - (2.3 * x**2 + 2 * 0.9 * x) / (2 * 1.7)
        ) / np.sqrt(2 * np.pi * 0.8**2)

    Z, _ = integrate.quad(f, -np.inf, np.inf)
    assert float(F.subs(vals)) == pytest.approx(-np.log(Z), rel=1e-10)


def test_sympy_data_action_equals_closed_form_and_numeric():
    D = A.derive_data_action()
    assert sp.simplify(D - A.brief_data_action()) == 0
    sy = A.symbols()
    args = [
        sy[n] for n in ("q_F", "q_S", "m_1", "m_2", "P", "V", "kappa", "sigma_w", "L")
    ]
    f = sp.lambdify(args, D, "numpy")
    x = (0.3, 0.2, 0.7, 0.6, 123.0, 5, 0.8, 1.3, 9)
    num = A.data_action(
        *[torch.tensor(v, dtype=dt) for v in x[:4]],
        n_sequences=123.0,
        vocab_size=5,
        kappa=0.8,
        sigma_w=1.3,
    )
    assert float(num) == pytest.approx(f(*x), rel=1e-12)


def test_exact_action_equals_dense_gaussian_and_monte_carlo_over_readout():
    L, V, P, kappa, sw = 3, 2, 2, 0.9, 0.8
    X, Y = copy_task(P, L, V, seed=3, dtype=dt)
    G = torch.randn(L, L, dtype=dt, generator=torch.Generator().manual_seed(0))
    Am = G / L
    exact = float(
        A.exact_data_action(Am, copy_statistics(X, Y), kappa=kappa, sigma_w=sw)
    )
    # dense: each output column y_i ~ N(0, σ_w² H Hᵀ) times the unnormalised likelihood
    H = torch.einsum("la,pav->plv", Am, X).reshape(-1, V)
    Yf = Y.reshape(-1, V)
    N, k = H.shape[0], kappa * L
    cov = k * torch.eye(N, dtype=dt) + sw**2 * H @ H.T
    dense = sum(
        float(
            -torch.distributions.MultivariateNormal(
                torch.zeros(N, dtype=dt), cov
            ).log_prob(Yf[:, i])
        )
        - 0.5 * N * np.log(2 * np.pi * k)
        for i in range(V)
    )
    assert exact == pytest.approx(dense, rel=1e-10)
    # Monte Carlo over the readout: −log E_W exp(−loss(W))
    g = torch.Generator().manual_seed(1)
    W = sw * torch.randn(400_000, V, V, generator=g, dtype=dt)
    lossW = ((torch.einsum("nij,tj->nti", W, H) - Yf) ** 2).sum((1, 2)) / (2 * k)
    mc = -float(torch.logsumexp(-lossW, 0) - np.log(len(W)))
    assert mc == pytest.approx(exact, abs=0.01)


def test_exact_action_on_expected_statistics_is_the_closed_form():
    L, V, P = 7, 4, 300.0
    g = torch.Generator().manual_seed(2)
    Am = torch.randn(5, L, L, generator=g, dtype=dt) / L + 0.1
    exact = A.exact_data_action(
        Am, expected_statistics(P, L, V, dtype=dt), kappa=1.2, sigma_w=0.7
    )
    closed = A.data_action(
        *A.attention_statistics(Am), n_sequences=P, vocab_size=V, kappa=1.2, sigma_w=0.7
    )
    assert torch.allclose(exact, closed, rtol=1e-12)


def test_monte_carlo_over_data_sets_agrees_with_closed_form():
    # the large-P action is an expectation: sampled data sets scatter around it
    L, V, P = 8, 6, 4000
    Am = 0.6 * shift_matrix(L, dtype=dt) + 0.3 * pooling_matrix(L, dtype=dt)
    mean, se = A.monte_carlo_data_action(Am, P, vocab_size=V, n_datasets=16, seed=0)
    closed = float(
        A.data_action(*A.attention_statistics(Am), n_sequences=P, vocab_size=V)
    )
    assert abs(float(mean) - closed) / closed < 2e-3
    assert abs(float(mean) - closed) < 5 * float(se) + 2e-3 * closed


def test_linear_order_parameter_reduction():
    action, parts = A.derive_linear_action()
    sy = A.symbols()
    L, V, P, m, cG = 6, 3, 50.0, 0.4, 0.25
    sub = {
        sy["L"]: L,
        sy["V"]: V,
        sy["P"]: P,
        sy["kappa"]: 1.1,
        sy["sigma_w"]: 0.9,
        sy["sigma_g"]: 1.3,
        sy["sigma_b"]: 1e-8,
        sy["m"]: m,
        sy["c_G"]: cG,
    }
    sym_val = float(action.subs(sub))
    num = float(
        A.linear_action(
            torch.tensor(m, dtype=dt),
            torch.tensor(cG, dtype=dt),
            n_sequences=P,
            seq_len=L,
            vocab_size=V,
            kappa=1.1,
            sigma_w=0.9,
            sigma_g=1.3,
            sigma_b=1e-8,
        )
    )
    assert num == pytest.approx(sym_val, rel=1e-10)
    # and the exact action of the corresponding G on expected statistics (b = 0: σ_b → 0)
    Am = m * pooling_matrix(L, dtype=dt) + cG * (
        shift_matrix(L, dtype=dt) - pooling_matrix(L, dtype=dt)
    )
    exact = float(
        A.exact_action(
            L * Am,
            expected_statistics(P, L, V, dtype=dt),
            kind="linear",
            kappa=1.1,
            sigma_w=0.9,
            sigma_g=1.3,
        )
    )
    assert exact == pytest.approx(num, rel=1e-9)
    c1, cg = order_parameters(Am)
    assert float(c1 + cg) == pytest.approx(m) and float(cg) == pytest.approx(cG)


def test_linear_onset_sympy_numeric_and_sign_change():
    K, roots = A.derive_linear_onset()
    sy = A.symbols()
    hyper = dict(
        seq_len=16, vocab_size=4, kappa=1.3, sigma_w=0.7, sigma_g=1.2, sigma_b=0.5
    )
    sub = {
        sy["L"]: 16,
        sy["V"]: 4,
        sy["kappa"]: 1.3,
        sy["sigma_w"]: 0.7,
        sy["sigma_g"]: 1.2,
        sy["sigma_b"]: 0.5,
    }
    p_on = A.linear_onset_p(**hyper)
    assert max(float(r.subs(sub)) for r in roots) == pytest.approx(p_on, rel=1e-10)
    kw = dict(hyper, fluctuations=False)
    assert (
        A.pooling_curvature(0.9 * p_on, **kw)
        > 0
        > A.pooling_curvature(1.1 * p_on, **kw)
    )
    # large L: κV²[1 + √(1 + 4/(σ_w²σ_m²V²))]/2 (the brief's 16.94 at V = 4)
    assert A.linear_onset_p(seq_len=4096, vocab_size=4) == pytest.approx(
        (16 * (1 + np.sqrt(1 + 4 / 16))) / 2, rel=2e-3
    )
    sad = A.linear_saddle([0.8 * 19.58, 1.5 * 19.58], seq_len=16, vocab_size=4)
    assert sad.m[0] < 1e-6 < 0.05 < sad.m[1]


def test_linear_saddle_is_a_minimum_and_transverse_optimum_is_stationary():
    kw = dict(seq_len=8, vocab_size=4)
    for fl in (False, True):
        sad = A.linear_saddle([30.0, 200.0, 2000.0], fluctuations=fl, **kw)
        m, c = torch.tensor(sad.m), torch.tensor(sad.c_G)
        S0 = A.linear_action(
            m, c, n_sequences=torch.tensor(sad.n_sequences), fluctuations=fl, **kw
        )
        for dm, dc in ((1e-3, 0), (-1e-3, 0), (0, 1e-4), (0, -1e-4)):
            S1 = A.linear_action(
                m + dm,
                c + dc,
                n_sequences=torch.tensor(sad.n_sequences),
                fluctuations=fl,
                **kw,
            )
            assert torch.all(S1 >= S0 - 1e-9)
        assert np.all(np.diff(sad.explained) > 0)
    P = torch.tensor([50.0, 500.0], dtype=dt)
    m, c = torch.tensor([0.3, 0.5], dtype=dt), torch.tensor([0.01, 0.1], dtype=dt)
    rho, v = A.transverse_optimum(m, c, n_sequences=P, seq_len=8, vocab_size=4)
    z = torch.stack([m, c, rho, v], -1).requires_grad_(True)
    hp = A.CopyHyper(seq_len=8, vocab_size=4)
    S = linear_mod._linear_full(z[:, 0], z[:, 1], z[:, 2], z[:, 3], P, hp, True)[0]
    (g,) = torch.autograd.grad(S.sum(), z)
    assert torch.allclose(g[:, 2:], torch.zeros(2, 2, dtype=dt), atol=1e-6)


def test_linear_crossover_scalings_at_the_saddle():
    # the brief's saddle crossover ≈ 2κV L^{3/2}/(σ_wσ_g√(V−1)) for L ≫ V
    p = A.linear_crossover_p(seq_len=64, vocab_size=4)
    assert p == pytest.approx(2 * 4 * 64**1.5 / np.sqrt(3), rel=0.2)
    p_f = A.linear_crossover_p(seq_len=16, vocab_size=4, fluctuations=True)
    assert p_f > 2 * A.linear_crossover_p(seq_len=16, vocab_size=4)


def test_softmax_order_parameters_and_action():
    a1s, aGs = A.derive_softmax_order_parameters()
    sy = A.symbols()
    L, g = 12, 1.7
    a1, aG = A.softmax_order_parameters(torch.tensor(g, dtype=dt), L)
    assert float(aG) == pytest.approx(float(aGs.subs({sy["g"]: g, sy["L"]: L})))
    G = g * (
        shift_matrix(L, dtype=dt) - pooling_matrix(L, dtype=dt)
    )  # minimal-norm logits
    o1, oG = order_parameters(torch.softmax(G, -1))
    assert float(o1) == pytest.approx(float(a1)) and float(oG) == pytest.approx(
        float(aG)
    )
    P = 400.0
    S = A.softmax_action(
        torch.tensor(g, dtype=dt), n_sequences=P, seq_len=L, vocab_size=4
    )
    exact = A.exact_action(G, expected_statistics(P, L, 4, dtype=dt), kind="softmax")
    assert float(S) == pytest.approx(float(exact), rel=1e-10)


def test_softmax_first_order_transition():
    kw = dict(seq_len=64, vocab_size=4)
    p_star = A.softmax_critical_p(**kw)
    assert p_star == pytest.approx(873, rel=0.01)  # the brief's reconstruction
    lo, hi = A.softmax_coexistence(np.arange(600, 1500, 10.0), **kw)
    assert lo < p_star < hi
    res = A.softmax_saddle([0.97 * p_star, 1.03 * p_star], **kw)
    assert res.a_G[0] < 0.01 and res.a_G[1] > 0.1  # the jump
    assert list(res.n_minima) == [2, 2]
    with pytest.raises(ValueError, match="n_sequences"):
        A.softmax_saddle([-1.0], **kw)


def test_validation_of_action_arguments():
    with pytest.raises(ValueError, match="kappa"):
        A.data_action(0.1, 0.1, 0.1, 0.1, n_sequences=10, vocab_size=3, kappa=-1)
    with pytest.raises(ValueError, match="kind"):
        A.exact_action(torch.zeros(4, 4), expected_statistics(10.0, 4, 3), kind="tanh")
    with pytest.raises(ValueError, match="L="):
        A.exact_data_action(torch.zeros(5, 5), expected_statistics(10.0, 4, 3))
    with pytest.raises(ValueError, match="level"):
        A.linear_crossover_p(seq_len=8, vocab_size=4, level=1.5)


def test_pooling_moments_match_laplace_far_from_onset_and_stay_finite_at_it():
    L, V = 64, 32
    p_on = A.linear_onset_p(seq_len=L, vocab_size=V)
    P = np.array([0.3, 1.0]) * p_on
    _, m2 = A.linear_pooling_moments(P, seq_len=L, vocab_size=V, fluctuations=False)
    lap = A.linear_saddle(P[:1], seq_len=L, vocab_size=V).var_m
    assert m2[0] == pytest.approx(lap[0], rel=0.1)  # Gaussian regime: Laplace is right
    assert (
        np.isfinite(m2[1]) and m2[1] < 0.1
    )  # Laplace diverges at the onset; this does not
    # converged in the grid
    _, m2_fine = A.linear_pooling_moments(
        P, seq_len=L, vocab_size=V, fluctuations=False, n_grid=3001
    )
    assert m2_fine == pytest.approx(m2, rel=1e-3)
    _, m2_fixed = A.linear_pooling_moments(
        P, seq_len=L, vocab_size=V, fluctuations=False, m_max=1.0, n_grid=4001
    )  # adaptive grid = fixed grid
    assert m2_fixed == pytest.approx(m2, rel=1e-3)
    with pytest.raises(ValueError, match="m_max"):
        A.linear_pooling_moments([1.0], seq_len=L, vocab_size=V, m_max=0.01)


def test_softmax_copy_moments_jump_and_match_the_saddle():
    L, V = 64, 8
    p_star = A.softmax_critical_p(seq_len=L, vocab_size=V)
    mean, var = A.softmax_copy_moments(
        np.array([0.5, 2.0]) * p_star, seq_len=L, vocab_size=V
    )
    sad = A.softmax_saddle(np.array([0.5, 2.0]) * p_star, seq_len=L, vocab_size=V)
    assert mean == pytest.approx(sad.a_G, abs=0.03)
    assert mean[1] - mean[0] > 0.15 and (var < 0.05).all()
    with pytest.raises(ValueError, match="n_sequences"):
        A.softmax_copy_moments([-1.0], seq_len=L, vocab_size=V)


def test_copy_hyper_validates_once_and_the_keywords_stay_the_api():
    hp = A.CopyHyper(seq_len=8, vocab_size=4, kappa=2, sigma_g=0.5)
    assert hp.kappa == 2.0 and isinstance(hp.kappa, float)
    assert hp.keywords("vocab_size", "kappa") == {"vocab_size": 4, "kappa": 2.0}
    assert A.CopyHyper(vocab_size=4).keywords()["sigma_b"] == 1.0
    assert "seq_len" not in A.CopyHyper(vocab_size=4).keywords()
    with pytest.raises(ValueError, match="sigma_w"):
        A.CopyHyper(seq_len=8, vocab_size=4, sigma_w=-1.0)
    with pytest.raises(ValueError, match="seq_len"):
        A.CopyHyper(seq_len=1, vocab_size=4)
    with pytest.raises(TypeError, match="seq_len"):
        A.CopyHyper(seq_len=8.0, vocab_size=4)
    # the analyses keep their keywords: required sizes, known names only
    with pytest.raises(TypeError, match="missing required keyword argument 'seq_len'"):
        A.linear_saddle([10.0], vocab_size=4)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sigma_b'"):
        A.softmax_action(0.5, n_sequences=10.0, seq_len=8, vocab_size=4, sigma_b=1.0)
    with pytest.raises(ValueError, match="kappa"):
        A.data_action(0.1, 0.1, 1.0, 1.0, n_sequences=10.0, vocab_size=4, kappa=0)
    explicit = A.softmax_saddle(
        [50.0], seq_len=8, vocab_size=4, kappa=1.0, sigma_w=1.0, sigma_g=1.0
    )
    assert explicit.g == pytest.approx(
        A.softmax_saddle([50.0], **hp.keywords("seq_len", "vocab_size")).g
    )
