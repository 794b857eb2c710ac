"""Tests of attnbook.pde.gradient_flow: energy structure, Gaussian energy, Sinkhorn as BW flow."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from attnbook.pde import (
    bures_wasserstein_rhs,
    displacement_interpolation,
    energy_balance,
    energy_rate,
    gaussian_energy,
    interaction_energy,
    metric_norm_sq,
    metric_tensor,
    moment_rhs,
    partition_gradient,
    sample_gaussian,
    sinkhorn_self_cost,
    sinkhorn_self_cost_particles,
    symmetric_gradient_fd,
    twisted_velocity,
    velocity,
    w2_particles,
)
from attnbook.pde.particles import partition_function

torch.set_num_threads(1)
RNG = np.random.default_rng(99)


def test_partition_gradient_matches_closed_form():
    x = RNG.normal(size=(2, 15, 3)) * 0.6
    A = RNG.normal(size=(3, 3)) * 0.5
    Z, gZ = partition_gradient(x, A=A)
    np.testing.assert_allclose(Z, partition_function(x, A=A), rtol=1e-13)
    # ∇_x Σ_j w_j e^{<Ax, x_j>} = Σ_j w_j e^{<Ax,x_j>} Aᵀ x_j
    K = np.exp(np.einsum("bid,bjd->bij", x @ A.T, x)) / 15
    np.testing.assert_allclose(gZ, K @ x @ A, rtol=1e-12)


@pytest.mark.parametrize("case", ["descent", "ascent", "indefinite"])
def test_twisted_velocity_and_energy_identity(case):
    x = RNG.normal(size=(60, 2)) * 0.7
    if case == "descent":
        A, V = -np.eye(2), np.eye(2)
    elif case == "ascent":
        A = np.array([[0.8, 0.2], [0.2, 0.5]])
        V = A
    else:  # symmetric indefinite A, V = S A with S ≻ 0
        A = np.array([[0.5, 0.2], [0.2, -0.3]])
        V = np.array([[1.0, 0.3], [0.3, 2.0]]) @ A
    v = velocity(x, kind="softmax", A=A, V=V)
    np.testing.assert_allclose(twisted_velocity(x, A=A, V=V), v, atol=1e-13)
    S, s = metric_tensor(A, V)
    assert s == (-1 if case == "descent" else 1)
    rate = energy_rate(x, v, A=A)
    assert rate == pytest.approx(s * metric_norm_sq(x, v, A=A, V=V), rel=1e-11)
    assert np.sign(rate) == s
    # and by a finite difference of E along the flow
    h = 1e-4
    xs = velocity(x, kind="softmax", A=A, V=V)
    fd = (interaction_energy(x + h * xs, A=A) - interaction_energy(x - h * xs, A=A)) / (
        2 * h
    )
    assert fd == pytest.approx(rate, rel=1e-6)


def test_energy_balance_integrates_the_identity():
    x0 = RNG.normal(size=(2, 40, 2)) * 0.6
    eb = energy_balance(
        x0, np.linspace(0, 1, 6), A=-np.eye(2), V=np.eye(2), step_size=0.01
    )
    assert eb.energy.shape == (6, 2) and eb.sign == -1
    assert np.all(np.diff(eb.energy, axis=0) < 0)  # E decreases
    assert np.abs(eb.residual).max() < 1e-8 * np.abs(eb.energy).max()


def test_metric_tensor_rejects_bad_structures():
    with pytest.raises(ValueError, match="symmetric"):
        metric_tensor(np.array([[1.0, 0.5], [0.0, 1.0]]), np.eye(2))
    with pytest.raises(ValueError, match="invertible"):
        metric_tensor(np.diag([1.0, 0.0]), np.eye(2))
    with pytest.raises(ValueError, match="definite"):
        metric_tensor(np.diag([1.0, -1.0]), np.eye(2))
    with pytest.raises(ValueError, match="A"):
        metric_tensor(np.ones((2, 3)), np.eye(2))


def test_gaussian_energy_against_particles_and_translated_formula():
    m, S = np.array([0.3, -0.2]), np.array([[0.3, 0.1], [0.1, 0.2]])
    A = np.array([[-1.0, 0.3], [0.3, 0.5]])
    x = sample_gaussian(6000, m, S, seed=1).numpy()
    assert gaussian_energy(m, S, A) == pytest.approx(
        float(interaction_energy(x, A=A)), rel=1e-2
    )
    for sig, d, mm in ((0.5, 2, [0.7, 0.0]), (0.8, 3, [0.1, -0.4, 0.2])):
        ref = (
            0.5
            * (1 - sig**4) ** (-d / 2)
            * math.exp(-np.sum(np.square(mm)) / (1 + sig**2))
        )
        assert gaussian_energy(mm, sig**2 * np.eye(d), -np.eye(d)) == pytest.approx(
            ref, rel=1e-12
        )
    assert gaussian_energy([0.0], [[1.2]], [[-1.0]]) == math.inf  # σ⁴ ≥ 1: divergent


def test_displacement_interpolation_is_a_constant_speed_geodesic():
    x, y = RNG.normal(size=(30, 2)), RNG.normal(size=(30, 2)) + [1.0, 0.0]
    path = displacement_interpolation(x, y, [0.0, 0.25, 1.0])
    W = w2_particles(x, y)
    assert w2_particles(path[0], x) < 1e-6 and w2_particles(path[-1], y) < 1e-6
    assert w2_particles(x, path[1]) == pytest.approx(0.25 * W, rel=1e-6)
    assert w2_particles(path[1], y) == pytest.approx(0.75 * W, rel=1e-6)


def _ot1_gaussian_by_minimisation(S, A):
    """½ min_C [−tr(AC) − ½ log det(I − Σ⁻¹CᵀΣ⁻¹C)] over cross-covariances C (direct search)."""
    d = len(S)
    Si = np.linalg.inv(S)

    def obj(c):
        C = c.reshape(d, d)
        sign, ld = np.linalg.slogdet(np.eye(d) - Si @ C.T @ Si @ C)
        return 1e6 if sign <= 0 else -np.trace(A @ C) - 0.5 * ld

    res = minimize(
        obj,
        np.zeros(d * d),
        method="Nelder-Mead",
        options=dict(xatol=1e-12, fatol=1e-14, maxiter=40000, maxfev=40000),
    )
    return 0.5 * res.fun


def test_sinkhorn_self_cost_closed_form():
    a, s = 0.7, 0.5  # 1-D: ρ = (√(1+4a²s²) − 1)/(2as)
    rho = (math.sqrt(1 + 4 * a * a * s * s) - 1) / (2 * a * s)
    assert sinkhorn_self_cost([[s]], [[a]]) == pytest.approx(
        0.5 * (-a * s * rho - 0.5 * math.log(1 - rho**2)), rel=1e-12
    )
    S = np.array([[0.6, 0.15], [0.15, 0.4]])
    A = np.array([[0.8, 0.3], [-0.1, -0.5]])
    assert sinkhorn_self_cost(S, A) == pytest.approx(
        _ot1_gaussian_by_minimisation(S, A), abs=1e-7
    )
    x = sample_gaussian(1200, np.zeros(2), S, seed=2).numpy()
    assert sinkhorn_self_cost_particles(x, A) == pytest.approx(
        sinkhorn_self_cost(S, A), abs=5e-3
    )
    with pytest.raises(ValueError, match="positive definite"):
        sinkhorn_self_cost(np.diag([1.0, 0.0]), A)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_sinkhorn_covariance_flow_is_bures_wasserstein_gradient_flow(d):
    B = RNG.normal(size=(d, d))
    S = B @ B.T / d + 0.4 * np.eye(d)
    A = RNG.normal(size=(d, d))
    A = (A + A.T) / 2  # symmetric, V = A
    G = symmetric_gradient_fd(lambda C: sinkhorn_self_cost(C, A), S, h=1e-5)
    _, dS = moment_rhs("sinkhorn", np.zeros(d), S, A=A, V=A)
    assert np.abs(bures_wasserstein_rhs(S, G) - dS).max() < 1e-8 * max(
        1.0, np.abs(dS).max()
    )


def test_symmetric_gradient_fd_on_a_known_function():
    M = RNG.normal(size=(3, 3))
    S = np.eye(3) + 0.1 * (M + M.T)
    G = symmetric_gradient_fd(lambda C: np.log(np.linalg.det(C)), S)
    np.testing.assert_allclose(G, np.linalg.inv(S), atol=1e-8)  # ∇ log det = Σ⁻¹
    with pytest.raises(ValueError, match="h"):
        symmetric_gradient_fd(np.trace, S, h=0.0)


def test_geometry_helpers():
    from attnbook import pde

    r, e2 = pde.radial_geodesic_energy(np.array([0.0, 0.7, 1.2]))
    np.testing.assert_allclose(e2, r**2 - 1, atol=1e-6)
    S = np.array([[1.0, 0.2], [0.2, 0.7]])
    A = np.array([[0.4, 0.1], [0.1, -0.3]])
    assert pde.sinkhorn_self_cost_minimised(S, A) == pytest.approx(
        pde.sinkhorn_self_cost(S, A), abs=1e-7
    )
    assert pde.relative_asymmetry(np.eye(3)) == 0.0
    assert pde.relative_asymmetry(np.array([[0.0, 1.0], [0.0, 0.0]])) == pytest.approx(
        np.sqrt(2)
    )
    x = np.random.default_rng(0).normal(size=(6, 2))
    Jw = pde.weighted_field_jacobian_fd(x, A=-np.eye(2), V=np.eye(2))
    assert pde.relative_asymmetry(Jw) < 1e-8
    E = pde.translation_energies(x, [0.0, 0.5], A=-np.eye(2))
    assert E.shape == (2,) and E[0] == pytest.approx(
        float(pde.interaction_energy(x, A=-np.eye(2)))
    )
