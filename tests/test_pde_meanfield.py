"""Tests of attnbook.pde.meanfield: exact 1-D W₂, rates, Jacobians and coupling bounds."""

import numpy as np
import pytest
import torch
from scipy.stats import norm

from attnbook.pde import (
    coupling_distance,
    fit_rate,
    jackknife_slopes,
    one_sided_lipschitz,
    optimal_matching,
    particle_jacobian,
    sample_gaussian,
    simulate,
    velocity,
    w2_particles,
    w2_particles_batch,
    w2_to_gaussian_1d,
)
from attnbook.pde.meanfield import gelbrich_distance

torch.set_num_threads(1)
RNG = np.random.default_rng(2024)


def _w2_fine_quantiles(x, m, s, M=400_000):
    """W₂ to N(m, s²) against a fine quantile grid (each point repeated M/n times)."""
    q = m + s * norm.ppf((np.arange(M) + 0.5) / M)
    return np.sqrt(np.mean((np.repeat(np.sort(x), M // len(x)) - q) ** 2))


def test_w2_to_gaussian_1d_matches_quantile_integral_and_is_batched():
    x = RNG.normal(size=(3, 40)) * 1.3 - 0.2
    got = w2_to_gaussian_1d(x, 0.1, 0.5)
    ref = [_w2_fine_quantiles(xb, 0.1, np.sqrt(0.5)) for xb in x]
    np.testing.assert_allclose(got, ref, rtol=1e-4)
    # (..., n, 1) input, tensor input and per-batch parameters give the same numbers
    got2 = w2_to_gaussian_1d(
        torch.as_tensor(x[..., None]), np.full(3, 0.1), np.full(3, 0.5)
    )
    np.testing.assert_allclose(got2, got, rtol=1e-12)


def test_w2_to_gaussian_1d_shift_and_scale():
    # a cloud placed exactly at the quantile midpoints-in-mass of N(0,1), shifted by c
    n = 64
    x = RNG.normal(size=n)
    base = w2_to_gaussian_1d(x, 0.0, 1.0)
    # W₂ is translation- and scale-equivariant
    assert w2_to_gaussian_1d(2.0 * x + 3.0, 3.0, 4.0) == pytest.approx(
        2 * base, rel=1e-10
    )
    with pytest.raises(ValueError, match="var"):
        w2_to_gaussian_1d(x, 0.0, -1.0)
    with pytest.raises(ValueError, match="x"):
        w2_to_gaussian_1d(np.array([0.0, np.nan]), 0.0, 1.0)


def test_gelbrich_is_a_lower_bound_and_zero_on_exact_moments():
    S = np.array([[0.5, 0.1], [0.1, 0.3]])
    m = np.array([0.2, -0.1])
    x = sample_gaussian(300, m, S, seed=3, exact_moments=True, batch=(2,)).numpy()
    # W = √(|Δm|² + tr(...)): the trace is a difference of O(1) numbers, so exact moments
    # give √(round-off) ≈ 1e-8, not 0 (which side of 0 it falls on is the CPU's)
    assert np.all(gelbrich_distance(x, m, S) < 1e-7)
    y = sample_gaussian(300, m, S, seed=4, batch=(2,)).numpy()
    g = gelbrich_distance(y, m, S)
    ref = sample_gaussian(3000, m, S, seed=5).numpy()
    # W₂(μ_n, N) is at least the Gelbrich bound; its sample proxy W₂(μ_n, ν_3000) is larger still
    assert all(gb < w2_particles(yb, ref) for gb, yb in zip(g, y))
    with pytest.raises(ValueError, match="mean"):
        gelbrich_distance(y, np.zeros(3), S)


def test_w2_batch_and_matching_agree_with_pot():
    x, y = RNG.normal(size=(3, 20, 2)), RNG.normal(size=(3, 20, 2)) + 0.5
    w = w2_particles_batch(x, y)
    assert w.shape == (3,)
    np.testing.assert_allclose(
        w, [w2_particles(a, b) for a, b in zip(x, y)], rtol=1e-10
    )
    perm = optimal_matching(x, y)
    ym = np.take_along_axis(y, perm[..., None], axis=1)
    np.testing.assert_allclose(coupling_distance(x, ym), w, rtol=1e-10)
    assert np.all(coupling_distance(x, y) >= w - 1e-12)  # any pairing is a plan
    with pytest.raises(ValueError, match="same shape"):
        coupling_distance(x, y[:, :5])


def test_fit_rate_recovers_a_power_law():
    n = 2.0 ** np.arange(3, 10)
    vals = 3.0 * n[:, None] ** -0.37 * np.exp(RNG.normal(scale=1e-3, size=(len(n), 5)))
    fit = fit_rate(n, vals)
    assert fit.slope == pytest.approx(-0.37, abs=5e-3)
    assert fit.prefactor == pytest.approx(3.0, rel=2e-2)
    assert fit.stderr < 5e-3
    np.testing.assert_allclose(fit(n), 3.0 * n**-0.37, rtol=3e-2)
    with pytest.raises(ValueError, match="values"):
        fit_rate(n, -vals)
    with pytest.raises(ValueError, match="n"):
        fit_rate([4.0], [1.0])


def test_particle_jacobian_matches_finite_differences_batched():
    x = RNG.normal(size=(2, 7, 3))
    A, V = RNG.normal(size=(3, 3)) * 0.5, RNG.normal(size=(3, 3))
    A2, V2 = RNG.normal(size=(2, 3, 3)) * 0.5, RNG.normal(size=(2, 3, 3))
    for kind in ("softmax", "multihead", "linear", "sigmoid", "l2"):
        if kind == "multihead":  # two heads: closed-form Jacobian summed over heads
            A, V = A2, V2
        J = particle_jacobian(x, kind=kind, A=A, V=V)
        assert J.shape == (2, 21, 21)
        h = 1e-6
        for b in range(2):
            for col in (0, 8, 20):
                e = np.zeros(21)
                e[col] = h
                e = e.reshape(7, 3)
                fd = (
                    velocity(x[b] + e, kind=kind, A=A, V=V)
                    - velocity(x[b] - e, kind=kind, A=A, V=V)
                ).reshape(-1) / (2 * h)
                np.testing.assert_allclose(J[b, :, col], fd, atol=1e-7)
    with pytest.raises(ValueError, match="sinkhorn"):
        particle_jacobian(x, kind="sinkhorn")


def test_softmax_jacobian_closed_form_equals_autograd_with_weights_and_mask():
    x = torch.as_tensor(RNG.normal(size=(2, 6, 2)))
    A, V = RNG.normal(size=(2, 2)), RNG.normal(size=(2, 2))
    w = torch.as_tensor(RNG.dirichlet(np.ones(6)))
    for causal, weights in ((False, None), (False, w), (True, None)):
        J = particle_jacobian(
            x, kind="softmax", A=A, V=V, causal=causal, weights=weights
        )
        for b in range(2):

            def f(y, causal=causal, weights=weights):
                return velocity(
                    y.reshape(6, 2),
                    kind="softmax",
                    A=A,
                    V=V,
                    causal=causal,
                    weights=weights,
                ).reshape(-1)

            h = 1e-6
            fd = torch.stack(
                [
                    (f(x[b].reshape(-1) + h * e) - f(x[b].reshape(-1) - h * e))
                    / (2 * h)
                    for e in torch.eye(12, dtype=torch.float64)
                ],
                dim=1,
            )
            torch.testing.assert_close(J[b], fd, atol=1e-7, rtol=0)


def test_one_sided_lipschitz_bounds_the_coupling_growth():
    """D(t) <= exp(∫Λ) D(0) for two nearby systems (first order in the perturbation)."""
    A = np.array([[0.6, 0.8], [-0.8, 0.3]])
    x0 = sample_gaussian(24, [0.0, 0.0], 0.5 * np.eye(2), seed=7)
    y0 = x0 + 1e-4 * torch.as_tensor(RNG.normal(size=(24, 2)))
    t = np.linspace(0, 1, 21)
    traj = simulate(torch.stack([x0, y0]), t, kind="softmax", A=A, step_size=0.01)
    lam = one_sided_lipschitz(traj[:, 0], kind="softmax", A=A).numpy()
    integral = np.concatenate([[0], np.cumsum((lam[1:] + lam[:-1]) / 2 * np.diff(t))])
    D = coupling_distance(traj[:, 0], traj[:, 1]).numpy()
    assert np.all(D / D[0] <= np.exp(integral) * (1 + 1e-3))
    assert D[-1] / D[0] > 1.05  # the bound is not vacuous here: the systems do separate
    # uniform weights given explicitly give the same constant
    w = np.full(24, 1 / 24)
    assert one_sided_lipschitz(
        x0.numpy(), kind="softmax", A=A, weights=w
    ) == pytest.approx(float(lam[0]), rel=1e-10)


def test_tangent_distance_matches_small_perturbations():
    import torch

    from attnbook.pde import (
        coupling_distance,
        particle_jacobian,
        sample_gaussian,
        simulate,
        tangent_distance,
    )

    A = np.array([[0.6, 0.8], [-0.8, 0.3]])
    t = np.linspace(0.0, 1.0, 11)
    X = sample_gaussian(16, [0, 0], 0.5 * np.eye(2), seed=0, batch=(2,))
    xi = torch.randn(
        2, 16, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    tr = simulate(
        torch.stack([X, X + 1e-4 * xi]), t, kind="softmax", A=A, step_size=0.01
    )
    D = coupling_distance(tr[:, 0].numpy(), tr[:, 1].numpy())
    J = particle_jacobian(tr[:, 0].numpy(), kind="softmax", A=A)
    pred = tangent_distance(J, t, xi.numpy())
    assert pred.shape == (len(t), 2)
    np.testing.assert_allclose(D / D[0], pred, rtol=5e-3)
    # a constant linear field: M = expm(tJ) exactly
    Jc = np.broadcast_to(np.diag([0.5, -0.5]), (3, 2, 2))
    out = tangent_distance(Jc, [0.0, 0.5, 1.0], np.array([[1.0, 0.0]]))
    np.testing.assert_allclose(out, np.exp([0.0, 0.25, 0.5]), rtol=1e-12)


def test_sample_disk_and_two_sample_rates():
    from attnbook.pde import sample_disk, two_sample_rates

    x = sample_disk(500, 1.2, seed=3, batch=(2,))
    assert x.shape == (2, 500, 2) and float(x.norm(dim=-1).max()) <= 1.2
    assert abs(float((x.norm(dim=-1) ** 2).mean()) - 1.2**2 / 2) < 0.05
    assert np.array_equal(x.numpy(), sample_disk(500, 1.2, seed=3, batch=(2,)).numpy())
    W, G = two_sample_rates(2, [16, 64], n_seeds=3, T=0.5, seed=1)
    assert W.shape == G.shape == (2, 3) and np.all(W > 0) and np.all(G >= 0)
    assert W.mean(1)[1] < W.mean(1)[0]


def test_jackknife_slopes_pseudovalues():
    n = np.array([32.0, 64.0, 128.0, 256.0])
    noise = np.exp(RNG.normal(scale=0.05, size=(len(n), 8)))
    vals = 2.0 * n[:, None] ** -0.8 * noise
    pseudo = jackknife_slopes(n, vals)
    assert pseudo.shape == (8,)
    assert pseudo.mean() == pytest.approx(-0.8, abs=0.05)
    # exact power law: every leave-one-out fit is the same, so every pseudo-value is it
    np.testing.assert_allclose(
        jackknife_slopes(n, np.repeat(n[:, None] ** -0.5, 6, axis=1)), -0.5, rtol=1e-12
    )
    with pytest.raises(ValueError, match="at least 5 seeds"):
        jackknife_slopes(n, vals[:, :4])
    with pytest.raises(ValueError, match="values"):
        jackknife_slopes(n, vals[:, 0])
