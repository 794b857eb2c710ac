"""Tests of the Gaussian moment equations: SymPy derivation vs hand-written closed forms vs
Monte Carlo vs particles, and of the integrated flows (blow-up, clustering)."""

import math

import numpy as np
import pytest
import sympy as sp
import torch

from attnbook import pde
from attnbook.errors import BlowUpError, FlowDiverged
from attnbook.pde import closed_forms as cf
from attnbook.pde import (
    covariance_flow,
    derive_moment_equations,
    gaussian_flow,
    moment_rhs,
    sample_gaussian,
    simulate,
    symbolic,
)
from attnbook.pde.closed_forms import (
    clustering_limit,
    identity_value_blowup_time,
    identity_value_covariance,
    scalar_blowup_time,
    scalar_softmax_mean,
    scalar_softmax_variance,
)

torch.set_num_threads(1)
RNG = np.random.default_rng(7)


def _spd(d, rng=RNG, shift=0.3):
    B = rng.normal(size=(d, d))
    return B @ B.T / d + shift * np.eye(d)


@pytest.mark.parametrize("d", [1, 2, 4])
def test_sympy_rhs_equals_hand_written_closed_forms(d):
    a, S = RNG.normal(size=d), _spd(d)
    A, V = RNG.normal(size=(d, d)), RNG.normal(size=(d, d))
    Q, K = RNG.normal(size=(3, d)), RNG.normal(size=(3, d))
    pairs = [
        (moment_rhs("softmax", a, S, A=A, V=V), cf.softmax_moment_rhs(a, S, A, V)),
        (moment_rhs("linear", a, S, A=A, V=V), cf.linear_moment_rhs(a, S, A, V)),
        (moment_rhs("l2", a, S, Q=Q, K=K, V=V), cf.l2_moment_rhs(a, S, Q, K, V)),
    ]
    # Sinkhorn's right-hand side is one closed form written twice: it is tested against POT
    # (test_sinkhorn_moment_rhs_matches_pot_on_samples), not against itself.
    for (m1, S1), (m2, S2) in pairs:
        np.testing.assert_allclose(m1, m2, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(S1, S2, rtol=1e-9, atol=1e-11)


def test_derivations_are_displayable_and_affine():
    for kind in symbolic.GAUSSIAN_KINDS:
        der = derive_moment_equations(kind)
        assert der.steps and "Sigma" in str(der.cov_rhs)
        assert der.jacobian.free_symbols.isdisjoint({symbolic.x})  # Γ affine in x
    with pytest.raises(ValueError, match="kind"):
        derive_moment_equations("sigmoid")


def test_scalar_integrals_by_sympy():
    _, _, ratio = symbolic.scalar_softmax_integral()
    y, x, a = sp.symbols("y x a", real=True)
    al, s = sp.Symbol("alpha", real=True), sp.Symbol("sigma", positive=True)
    assert sp.simplify(ratio - (al + a * s**2 * x)) == 0
    root, rhs = symbolic.scalar_sinkhorn_solution()
    a_, s2_, v_ = sorted(rhs.free_symbols, key=str)  # a, sigma2, v
    f = sp.lambdify((s2_, v_, a_), rhs)
    for s2, v, aa in [(0.5, 1.0, 0.7), (2.0, -0.3, -1.5)]:
        assert abs(f(s2, v, aa) - cf.sinkhorn_scalar_rhs(s2, v, aa)) < 1e-12
    assert sp.simplify(sp.limit(root, a_, 0)) == 0
    # small variance: softmax-like 2 v a σ^4; large: linear 2 v σ^2 sign(a)
    assert abs(cf.sinkhorn_scalar_rhs(1e-3, 1.0, 1.0) / (2e-6) - 1) < 1e-5
    assert abs(cf.sinkhorn_scalar_rhs(1e4, 1.0, 1.0) / 2e4 - 1) < 1e-3


def test_sinkhorn_closed_form_solves_the_derived_equation():
    for d in (1, 2, 5):
        assert (
            symbolic.sinkhorn_fixed_point_residual(_spd(d), RNG.normal(size=(d, d)))
            < 1e-12
        )


def test_sinkhorn_cross_covariance_matches_entropic_ot_of_samples():
    """The closed-form plan against POT's Sinkhorn on a large sample (Monte Carlo check)."""
    import ot

    d, n = 2, 1500
    S = np.array([[1.0, 0.3], [0.3, 0.6]])
    A = np.array([[0.8, 0.2], [-0.3, 0.5]])
    x = sample_gaussian(n, np.zeros(d), S, seed=1, exact_moments=True).numpy()
    M = -(x @ A.T) @ x.T  # cost -<A x_i, x_j>
    plan = ot.sinkhorn(
        np.full(n, 1 / n), np.full(n, 1 / n), M, reg=1.0, numItermax=5000, stopThr=1e-12
    )
    C_emp = x.T @ plan @ x  # E_pi[x y^T]
    C = symbolic.sinkhorn_cross_covariance(S, A).T
    np.testing.assert_allclose(C_emp, C, atol=0.03)


def test_sinkhorn_moment_rhs_matches_pot_on_samples():
    """Σ' and α' of the Sinkhorn closure against particles whose plan is POT's (a = b = w)."""
    import ot

    n = 1200
    m, S = np.array([0.4, -0.2]), np.array([[0.9, -0.2], [-0.2, 0.5]])
    A = np.array([[0.5, 0.3], [-0.1, 0.7]])
    V = np.array([[1.0, 0.4], [-0.2, 0.8]])
    x = sample_gaussian(n, m, S, seed=3, exact_moments=True).numpy()
    w = np.full(n, 1 / n)
    plan = ot.sinkhorn(w, w, -(x @ A.T) @ x.T, reg=1.0, numItermax=5000, stopThr=1e-12)
    vel = (plan / w[:, None]) @ x @ V.T  # Γ(x_i) = V Σ_j P_ij x_j
    dm_emp = vel.mean(0)
    xc = x - x.mean(0)
    dS_emp = (xc.T @ vel + vel.T @ xc) / n
    dm, dS = moment_rhs("sinkhorn", m, S, A=A, V=V)
    np.testing.assert_allclose(dm_emp, dm, atol=1e-8)  # α' = Vα exactly (marginal = μ)
    np.testing.assert_allclose(dS_emp, dS, atol=0.05)  # Monte Carlo, n = 1200


@pytest.mark.parametrize("kind", ["softmax", "l2"])
def test_tilted_mean_by_importance_sampling(kind):
    """Γ on a Gaussian (derived) against a Monte Carlo estimate of the kernel-weighted mean."""
    d = 2
    a, S = np.array([0.3, -0.2]), np.array([[0.5, 0.1], [0.1, 0.3]])
    A, V = np.array([[0.6, -0.2], [0.3, 0.4]]), np.eye(2)
    Q, K = np.array([[0.7, 0.1], [0.0, 0.5]]), np.array([[0.4, -0.3], [0.2, 0.6]])
    der = derive_moment_equations(kind)
    eye = sp.MatrixSymbol("I_d", symbolic.d, symbolic.d)
    eye_k = sp.MatrixSymbol("I_k", symbolic.k, symbolic.k)
    lam = sp.lambdify(
        der.arguments + (symbolic.x, eye, eye_k),
        der.velocity.xreplace({symbolic.I_d: eye, symbolic.I_k: eye_k}),
        "numpy",
    )

    def f(*args):
        return lam(*args, np.eye(2))

    y = np.random.default_rng(0).multivariate_normal(a, S, size=400_000)
    x = np.array([0.5, 1.0])
    if kind == "softmax":
        logk = y @ (A @ x)
        pred = f(a[:, None], S, A, V, x[:, None], np.eye(d)).ravel()
    else:
        logk = -np.sum((Q @ x - y @ K.T) ** 2, axis=1)
        pred = f(a[:, None], S, Q, K, V, x[:, None], np.eye(d)).ravel()
    w = np.exp(logk - logk.max())
    mc = (w[:, None] * y).sum(0) / w.sum()
    np.testing.assert_allclose(pred, mc, atol=5e-3)


def test_scalar_softmax_flow_matches_closed_form_and_blows_up_on_time():
    v, a, s0, m0 = 0.8, 1.5, 0.4, 0.7
    T = scalar_blowup_time(s0, v, a)
    t = np.linspace(0, 0.95 * T, 20)
    fl = gaussian_flow([m0], [[s0]], t, kind="softmax", A=[[a]], V=[[v]])
    assert fl.blowup_time is None and len(fl.t) == 20
    np.testing.assert_allclose(
        fl.cov[:, 0, 0], scalar_softmax_variance(t, s0, v, a), rtol=1e-8
    )
    np.testing.assert_allclose(
        fl.mean[:, 0], scalar_softmax_mean(t, m0, s0, v, a), rtol=1e-8
    )
    fl2 = gaussian_flow(
        [m0], [[s0]], np.linspace(0, 2 * T, 41), kind="softmax", A=[[a]], V=[[v]]
    )
    assert fl2.blew_up and abs(fl2.blowup_time - T) < 1e-6 * T
    assert np.all(fl2.t < fl2.blowup_time) and np.all(np.isfinite(fl2.cov))


def test_matrix_blowup_time_V_identity():
    S0 = np.array([[1.0, 0.3], [0.3, 0.5]])
    A = np.array([[1.0, 0.5], [-0.2, 0.8]])
    T = identity_value_blowup_time(S0, A)
    fl = gaussian_flow(np.zeros(2), S0, np.linspace(0, 1, 11), kind="softmax", A=A)
    assert abs(fl.blowup_time / T - 1) < 1e-6
    t = np.linspace(0, 0.9 * T, 7)
    fl = gaussian_flow(np.zeros(2), S0, t, kind="softmax", A=A)
    np.testing.assert_allclose(fl.cov, identity_value_covariance(t, S0, A), rtol=1e-8)


def test_clustering_limit_rank_deficient():
    S0 = np.array([[1.0, 0.4, 0.0], [0.4, 0.8, 0.2], [0.0, 0.2, 0.5]])
    Qm = np.array([[1.0, -0.5, 0.3]])
    A = -Qm.T @ Qm  # A + A^T = -2 q q^T ⪯ 0, kernel of dimension 2
    L = clustering_limit(S0, A)
    assert np.linalg.matrix_rank(L, tol=1e-9) == 2
    t = np.array([0.0, 1e3])
    fl = gaussian_flow(np.zeros(3), S0, t, kind="softmax", A=A)
    err = np.abs(fl.cov[-1] - L).max()
    assert err < 5e-3  # O(1/t)
    np.testing.assert_allclose(
        identity_value_covariance(t, S0, A)[-1], fl.cov[-1], rtol=1e-6, atol=1e-9
    )
    with pytest.raises(ValueError, match="negative semi-definite"):
        clustering_limit(S0, np.eye(3))


def test_l2_and_sinkhorn_never_blow_up_where_softmax_does():
    S0 = np.eye(2) * 0.8
    A = 2 * np.eye(2)
    t = np.linspace(0, 1.5, 16)
    assert gaussian_flow(np.zeros(2), S0, t, kind="softmax", A=A).blew_up
    for kind in ("l2", "sinkhorn"):
        fl = gaussian_flow(np.zeros(2), S0, t, kind=kind, A=A)
        assert (
            fl.blowup_time is None and len(fl.t) == 16 and np.all(np.isfinite(fl.cov))
        )


@pytest.mark.parametrize("kind", ["softmax", "l2", "sinkhorn", "linear"])
def test_particles_follow_the_moment_ode(kind):
    m0, S0 = np.array([0.4, -0.2]), np.array([[0.6, 0.15], [0.15, 0.4]])
    A, V = np.array([[-0.4, 0.3], [0.1, -0.3]]), np.array([[1.0, 0.2], [0.0, 0.8]])
    n = 300 if kind == "sinkhorn" else 600
    x0 = sample_gaussian(n, m0, S0, seed=2, exact_moments=True)
    t = np.linspace(0, 0.5, 3)
    xT = simulate(x0, t, kind=kind, A=A, V=V, step_size=0.05)[-1].numpy()
    g = gaussian_flow(m0, S0, t, kind=kind, A=A, V=V)
    tol = (
        1e-8 if kind == "linear" else 1.5e-2
    )  # linear sees only the (exact) second moments
    np.testing.assert_allclose(xT.mean(0), g.mean[-1], atol=tol)
    np.testing.assert_allclose(np.cov(xT.T, bias=True), g.cov[-1], atol=tol)


def test_multihead_flow_is_sum_of_heads():
    m0, S0 = np.array([0.1, 0.2]), np.array([[0.5, 0.1], [0.1, 0.4]])
    A = np.array([[0.3, 0.1], [0.0, -0.2]])
    t = np.linspace(0, 0.5, 4)
    two = gaussian_flow(m0, S0, t, kind="multihead", A=np.stack([A, A]))
    one = gaussian_flow(m0, S0, t, kind="softmax", A=A, V=2 * np.eye(2))
    np.testing.assert_allclose(two.cov, one.cov, rtol=1e-8)
    np.testing.assert_allclose(two.mean, one.mean, rtol=1e-8)


def test_covariance_flow_batch_matches_single_and_predicts_rank():
    d, B = 3, 6
    rng = np.random.default_rng(3)
    S0 = np.stack([_spd(d, rng) for _ in range(B)])
    Qs = rng.normal(size=(B, d // 2, d))
    A = -np.einsum("bki,bkj->bij", Qs, Qs) / math.sqrt(d // 2)  # K = -Q
    t = np.concatenate([[0.0], np.logspace(-2, 4, 13)])
    fl = covariance_flow(S0, t, A=A)
    single = gaussian_flow(np.zeros(d), S0[0], t[:5], kind="softmax", A=A[0])
    np.testing.assert_allclose(fl.cov[:5, 0], single.cov, rtol=1e-6, atol=1e-9)
    eig = np.linalg.eigvalsh(fl.cov[-1])
    ranks = (eig > 1e-2 * eig.max(-1, keepdims=True)).sum(-1)
    assert np.all(ranks == math.ceil(d / 2)) and not fl.exploded.any()


@pytest.mark.parametrize("method", ["dopri5", "bdf", "radau", "lsoda"])
def test_covariance_flow_methods_match_the_v_identity_closed_form(method):
    # V = I: Σ(t) = (Σ₀⁻¹ − t(A + Aᵀ))⁻¹ (prop-v-identity), for a batch of independent draws
    d, B = 3, 4
    rng = np.random.default_rng(11)
    S0 = np.stack([_spd(d, rng) for _ in range(B)])
    G, W = rng.normal(size=(2, B, d, d))
    A = -G @ G.transpose(0, 2, 1) + (W - W.transpose(0, 2, 1))  # A + Aᵀ ⪯ 0, skew part
    t = np.array([0.0, 0.3, 3.0, 30.0])
    fl = covariance_flow(S0, t, A=A, method=method, rtol=1e-10, atol=1e-13)
    exact = np.linalg.inv(
        np.linalg.inv(S0)[None] - t[:, None, None, None] * (A + A.transpose(0, 2, 1))
    )
    np.testing.assert_allclose(fl.cov, exact, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="method"):
        covariance_flow(S0, t, A=A, method="rk4")


def test_covariance_flow_flags_explosions():
    S0 = np.stack([np.eye(2) * 0.5, np.eye(2) * 0.5])
    A = np.stack([np.eye(2), -np.eye(2)])
    fl = covariance_flow(S0, np.linspace(0, 3, 7), A=A, max_trace=1e3)
    assert fl.exploded.tolist() == [True, False]
    assert 1.0 <= fl.explode_time[0] <= 1.5 and np.isinf(fl.explode_time[1])  # T* = 1


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(cov0=[[1.0, 0.5], [0.0, 1.0]]), ValueError, "symmetric"),
        (dict(cov0=[[1.0, 2.0], [2.0, 1.0]]), ValueError, "positive semi-definite"),
        (dict(cov0=np.eye(3)), ValueError, "cov0"),
        (dict(cov0=np.ones((2, 3))), ValueError, "square"),
        (dict(kind="softmaxx"), ValueError, "kind"),
        (dict(kind="sigmoid"), ValueError, "sigmoid"),
        (dict(t=[0.0, 0.5, 0.2]), ValueError, "increasing"),
        (dict(A=np.eye(3)), ValueError, "A"),
        (dict(V=np.ones((2, 3))), ValueError, "V"),
        (dict(mean0=[[0.0, 0.0]]), ValueError, "mean0"),
    ],
)
def test_gaussian_flow_bad_input(kwargs, err, match):
    args = dict(mean0=np.zeros(2), cov0=np.eye(2), t=[0.0, 1.0], kind="softmax")
    args.update(kwargs)
    with pytest.raises(err, match=match):
        gaussian_flow(args.pop("mean0"), args.pop("cov0"), args.pop("t"), **args)


def test_blowup_told_from_exponential_growth():
    """ℓ² with rank-deficient K (KᵀK singular) grows exponentially: no blow-up time."""
    rng = np.random.default_rng(0)
    d = 3
    Q = rng.normal(size=(1, d))
    B = rng.normal(size=(d, d))
    V = B @ B.T / d
    fl = gaussian_flow(
        rng.normal(size=d), np.eye(d), np.linspace(0, 20, 21), kind="l2", Q=Q, K=-Q, V=V
    )
    lam = np.linalg.eigvalsh(V).max()
    assert fl.blowup_time is None and not fl.blew_up and fl.grew
    assert fl.threshold_time is not None and 0.8 * lam < fl.growth_rate < 2.2 * lam
    assert "growth" in fl.message and np.all(np.isfinite(fl.cov))
    # the same with a lower threshold: the crossing time moves, the verdict does not
    low = gaussian_flow(
        fl.mean[0],
        fl.cov[0],
        np.linspace(0, 20, 21),
        kind="l2",
        Q=Q,
        K=-Q,
        V=V,
        blowup_threshold=1e5,
    )
    assert low.grew and low.threshold_time < fl.threshold_time - 0.5 / lam
    # softmax Riccati: a finite-time singularity, found to ~1e-9
    sing = gaussian_flow([0.0], [[1.0]], np.linspace(0, 1, 11), kind="softmax")
    assert sing.blew_up and sing.growth_rate is None
    assert abs(sing.blowup_time - 0.5) < 1e-8


def test_l2_full_rank_key_map_grows_at_most_exponentially():
    """KᵀK invertible: J = 2(Σ⁻¹ + 2KᵀK)⁻¹KᵀQ stays bounded, so no finite-time blow-up."""
    rng = np.random.default_rng(1)
    d = 2
    Q, K = rng.normal(size=(d, d)), rng.normal(size=(d, d))
    t = np.linspace(0, 3, 7)
    fl = gaussian_flow(np.ones(d), np.eye(d), t, kind="l2", Q=Q, K=K)
    # ‖J‖ ≤ ‖V‖ ‖(KᵀK)⁻¹‖ ‖KᵀQ‖ =: c, hence λ_max(Σ(t)) ≤ λ_max(Σ₀) e^{2ct}
    c = np.linalg.norm(np.linalg.inv(K.T @ K), 2) * np.linalg.norm(K.T @ Q, 2)
    assert not fl.blew_up and len(fl.t) == len(t)
    assert np.all(np.linalg.eigvalsh(fl.cov)[:, -1] <= np.exp(2 * c * t) * (1 + 1e-9))


def test_quadrature_velocity_and_affine_residual():
    from attnbook.pde import affine_residual, closed_form_gaps, velocity_on_gaussian_1d

    xs = np.linspace(-1.0, 1.0, 21)
    soft = velocity_on_gaussian_1d(xs, 0.3, 0.8, a=2.0, v=1.5)
    np.testing.assert_allclose(soft, 1.5 * (0.3 + 2.0 * 0.64 * xs), rtol=1e-10)
    assert affine_residual(xs, soft) < 1e-10
    sig = velocity_on_gaussian_1d(xs, 0.3, 0.8, a=2.0, kind="sigmoid")
    mc_y = np.random.default_rng(0).normal(0.3, 0.8, size=400_000)
    mc = np.mean(mc_y / (1 + np.exp(-2.0 * 0.5 * mc_y)))
    assert (
        abs(velocity_on_gaussian_1d([0.5], 0.3, 0.8, a=2.0, kind="sigmoid")[0] - mc)
        < 5e-3
    )
    assert affine_residual(xs, sig) > 0.01
    assert max(closed_form_gaps(0, dims=(1, 3)).values()) < 1e-9


def test_plot_helpers():
    from attnbook.pde import plots

    pts = plots.gaussian_ellipse([1.0, 0.0], np.diag([4.0, 1.0]), k=1.0)
    assert pts.shape == (2, 100) and np.isclose(pts[0].max(), 3.0, atol=1e-3)
    np.testing.assert_allclose(
        plots.cone_coordinates(np.array([[2.0, 0.5], [0.5, 1.0]])), [1.0, 1.0, 3.0]
    )


@pytest.mark.slow
def test_continuation_that_loses_psd_is_reported_as_divergence():
    """Past a threshold high enough, round-off breaks positive semi-definiteness; the flow
    says so (no plain ValueError). At the default threshold the blow-up index tells the
    growth without integrating that far (before it, the continuation to 1e12 lost PSD)."""
    from attnbook.errors import FlowDiverged

    rng = np.random.default_rng(7)
    A, W = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    S0 = W @ W.T / 3 + 0.1 * np.eye(3)
    t = np.concatenate([[0.0], np.logspace(-2, 4, 40)])
    kw = dict(kind="sinkhorn", A=A, rtol=1e-8, atol=1e-10)
    with pytest.raises(FlowDiverged, match="positive semi-definiteness") as info:
        gaussian_flow(np.zeros(3), S0, t, blowup_threshold=1e10, **kw)
    assert info.value.partial is not None and np.isfinite(info.value.partial).all()
    with pytest.raises(FlowDiverged, match="before .* reached 1.0e\\+14"):
        gaussian_flow(np.zeros(3), S0, t, blowup_threshold=1e16, **kw)
    for M in (1e4, 1e8):
        flow = gaussian_flow(np.zeros(3), S0, t, blowup_threshold=M, **kw)
        # Sinkhorn is linear for large Σ: |Σ| = c e^{2t} + O(1) (rate 2 λ_max(V) = 2), so
        # the mean rate between the crossings of M/100 and M is off by O(100/M) (measured
        # 1.1 and 1.6 × 100/M at M = 1e4 and 1e8)
        assert flow.fate == "growth", flow.message
        assert abs(flow.growth_rate - 2) < 10 * 100 / M, flow.message


def test_l2_cov_fate_apart_from_the_mean():
    # K = −Q: the mean grows like e^{rt}, Σ' = −4ΣQᵀWQΣ ⪯ 0 keeps the covariance bounded
    Q1 = np.array([[1.0, 0.5]])
    g = pde.gaussian_flow(
        [1.0, 1.0], np.eye(2), np.linspace(0, 40, 41), kind="l2", Q=Q1, K=-Q1
    )
    assert g.fate == "growth" and g.cov_fate.outcome == "finite"
    assert len(g.cov_fate.t) == 41 and g.cov_fate.values.shape == (41, 2, 2)
    assert np.linalg.eigvalsh(np.diff(g.cov_fate.values, axis=0)).max() < 1e-8
    # α₀ = 0 stays 0 (α' is linear in α): nothing grows
    g0 = pde.gaussian_flow(np.zeros(2), np.eye(2), [0.0, 40.0], kind="l2", Q=Q1, K=-Q1)
    assert g0.fate == "finite" and g0.cov_fate.outcome == "finite"


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_l2_rank_one_cov_growth_is_fast_and_exponential(seed):
    rng = np.random.default_rng(seed)
    Q, K = rng.normal(size=(1, 3)), rng.normal(size=(1, 3))
    g = pde.gaussian_flow(np.zeros(3), np.eye(3), [0.0, 400.0], kind="l2", Q=Q, K=K)
    c = g.cov_fate
    assert c.outcome == "growth" and c.blowup_time is None and c.growth_rate > 0
    assert g.wall_s < 30  # minutes before the push-through form; about 1 s with it


def _rank_one_l2_rate(q, k):
    """The closed-form rate λ_max(B)/(k·v)² of ℓ² covariance growth for one row q, k
    (gaussians.md), or None when s* = 1/λ_max(B) > 100."""
    lam, U = np.linalg.eigh(np.outer(k, q) + np.outer(q, k))
    return lam[-1] / (k @ U[:, -1]) ** 2 if lam[-1] >= 1e-2 else None


@pytest.mark.parametrize("seed", [41, 42, 43, 44])
def test_l2_rank_two_cov_growth_rate_from_two_decoupled_blocks(seed):
    """A rank-2 key map in d = 4 with a known answer: two independent 2-D rank-one problems
    in orthogonal blocks, turned by a random rotation R (ℓ² distances and V = I = Σ₀ are
    invariant, so Q Rᵀ, K Rᵀ look generic). Each block grows like e^{r_i t} with no
    singularity, so |Σ|_F's mean rate lies in [min r_i, max r_i]; a singularity, or a
    rate measured from the wrong part of the state, falls outside. The classification
    needs no continuation past the threshold: each call takes about a second."""
    rng = np.random.default_rng(seed)
    while True:
        q, k = rng.normal(size=(2, 2, 2))
        rates = [_rank_one_l2_rate(q[i], k[i]) for i in range(2)]
        if None not in rates:
            break
    Q, K = np.zeros((2, 4)), np.zeros((2, 4))
    Q[0, :2], Q[1, 2:], K[0, :2], K[1, 2:] = q[0], q[1], k[0], k[1]
    R = np.linalg.qr(rng.normal(size=(4, 4)))[0]
    g = pde.gaussian_flow(
        np.zeros(4), np.eye(4), [0.0, 1e4], kind="l2", Q=Q @ R.T, K=K @ R.T
    )
    c = g.cov_fate
    assert c.outcome == "growth" and c.blowup_time is None, c.message
    # the O(1) part of Σ moves the mean rate between 1e6 and 1e8 by O(1e-6) (rank one:
    # ≤ 3e-6 over 40 draws); 1e-3 allows that part up to 1e3
    assert min(rates) * (1 - 1e-3) <= c.growth_rate <= max(rates) * (1 + 1e-3), (
        rates,
        c.message,
    )


def test_l2_field_accurate_when_sigma_is_ill_conditioned():
    # a covariance grown to 1e9 along one direction: the field's small-direction entry
    # against 50-digit arithmetic (the (I + 2ΣKᵀK)⁻¹ form was wrong there by 1e9×)
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    u = np.array([0.6, 0.8])
    S = 1e9 * np.outer(u, u) + 0.5 * np.eye(2)
    Q, K = np.array([[0.3, -1.1]]), np.array([[0.9, 0.4]])
    _, dS = pde.moment_rhs("l2", np.zeros(2), S, Q=Q, K=K, V=np.eye(2))
    Sm, Km, Qm = (mp.matrix(a.tolist()) for a in (S, K, Q))
    Jm = 2 * Sm * Km.T * mp.inverse(mp.eye(1) + 2 * Km * Sm * Km.T) * Qm
    exact = np.array((Jm * Sm + Sm * Jm.T).tolist(), dtype=float)
    w = np.array([0.8, -0.6])  # the small direction
    assert abs(w @ dS @ w - w @ exact @ w) <= 1e-6 * abs(w @ exact @ w) + 1e-12


def test_gaussian_flow_method_is_validated_and_stiff_methods_agree():
    with pytest.raises(ValueError, match="method"):
        pde.gaussian_flow(np.zeros(2), np.eye(2), [0, 1], kind="softmax", method="rk4")
    t = np.linspace(0, 2, 5)
    a = pde.gaussian_flow(np.zeros(2), np.eye(2), t, kind="softmax", A=-np.eye(2))
    b = pde.gaussian_flow(
        np.zeros(2), np.eye(2), t, kind="softmax", A=-np.eye(2), method="lsoda"
    )
    np.testing.assert_allclose(b.cov, a.cov, rtol=1e-6)
    # closed form Σ(t) = Σ₀(I + 2tΣ₀)⁻¹ for A = −I, V = I
    np.testing.assert_allclose(a.cov[-1], np.eye(2) / 5, rtol=1e-8)


def test_closed_form_gaps_in_roundoff_units(monkeypatch):
    from attnbook.pde import closed_form_gaps, closed_forms

    # seed 645 draws a d = 1 pair with Kᵀ·Q 6600 times below |K|ᵀ|Q|: the plain ℓ² gap is
    # 4e-12, far above 1e-13, but within its round-off bound
    assert closed_form_gaps(645)["l2"] > 1e-13
    for seed in (645, 374, 0, 987_654_321):
        assert max(closed_form_gaps(seed, in_roundoff_units=True).values()) < 1
    with pytest.raises(TypeError, match="in_roundoff_units"):
        closed_form_gaps(0, in_roundoff_units=1)
    # power: a formula off by 1e-9 of its terms is 1e5 round-off units off
    right = closed_forms.l2_moment_rhs
    monkeypatch.setattr(
        closed_forms,
        "l2_moment_rhs",
        lambda *args: tuple(x * (1 + 1e-9) for x in right(*args)),
    )
    assert closed_form_gaps(1, in_roundoff_units=True)["l2"] > 1e4


def test_covariance_flow_freezes_a_member_faster_than_the_batch_can_step():
    # V = I, A = c I, Σ₀ = σ I: Σ = σ/(1 − 2cσt) I, a singularity at T* = 1/(2cσ). With
    # c = 10⁴ the member crosses max_trace within a step the batch cannot resolve (the jump
    # of its right-hand side to zero at the freeze underflowed the step size and stopped
    # the whole batch); it is frozen there and the others go on, as the closed forms say.
    S0 = np.stack([np.eye(2) * 0.5] * 3)
    A = np.stack([1e4 * np.eye(2), -np.eye(2), np.eye(2)])
    t = np.linspace(0, 3, 7)
    fl = covariance_flow(S0, t, A=A, max_trace=1e3)
    assert fl.exploded.tolist() == [True, False, True]
    assert fl.explode_time[0] == t[1]  # T* = 1e-4: the first output time after it
    assert 1.0 <= fl.explode_time[2] <= 1.5  # T* = 1
    decay = 0.5 / (1 + t)  # A = −I: σ/(1 + 2σt)
    np.testing.assert_allclose(fl.cov[:, 1, 0, 0], decay, rtol=1e-6)
    np.testing.assert_allclose(fl.cov[:2, 2, 0, 0], 0.5 / (1 - t[:2]), rtol=1e-6)


def test_gaussian_flow_reports_a_stalled_continuation_as_undecided():
    # a draw of the clustering chapter (V, A with VA + AᵀVᵀ ⪯ 0): past |Σ| ≈ 3.7e9 the
    # explicit steps are held near 1/(|A||V||Σ|) while |Σ| stops growing; before the
    # evaluation budget this ran for hours
    V = [
        [2.1664904916643346, -1.8865713074940966],
        [0.8035360988572215, -0.23447261855577717],
    ]
    A = [
        [0.33388800132019114, -0.7011849490772022],
        [0.858978157902882, -0.031708876028419986],
    ]
    with pytest.raises(FlowDiverged, match="stalled") as info:
        gaussian_flow(np.zeros(2), np.eye(2), [0.0, 10.0], kind="softmax", A=A, V=V)
    assert not isinstance(info.value, BlowUpError) and info.value.time > 2.4


def test_dopri5_step_budget_is_not_a_singularity():
    from attnbook.flows import odeint_dopri5

    def stiff(_t, y):
        return -1e4 * y

    with pytest.raises(FlowDiverged, match="max_steps") as info:
        odeint_dopri5(stiff, torch.ones(2), [0.0, 1.0], max_steps=50)
    assert not isinstance(info.value, BlowUpError)
