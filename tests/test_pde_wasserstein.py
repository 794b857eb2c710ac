"""Tests of attnbook.pde.wasserstein against closed forms."""

import numpy as np
import pytest
import torch

from attnbook.pde import conditional_w2, w2_particles
from attnbook.pde.wasserstein import bures_wasserstein

RNG = np.random.default_rng(11)


def test_w2_particles_basic_identities():
    x = RNG.normal(size=(40, 2))
    assert w2_particles(x, x) == pytest.approx(0.0, abs=1e-7)  # sqrt of round-off
    shift = np.array([0.3, -0.4])
    assert w2_particles(x, x + shift) == pytest.approx(0.5, rel=1e-9)
    assert w2_particles(torch.as_tensor(x), x[::-1].copy()) == pytest.approx(
        0.0, abs=1e-7
    )


def test_w2_particles_1d_is_sorted_matching():
    x, y = RNG.normal(size=(30, 1)), RNG.normal(size=(30, 1)) * 2 + 1
    ref = np.sqrt(np.mean((np.sort(x[:, 0]) - np.sort(y[:, 0])) ** 2))
    assert w2_particles(x, y) == pytest.approx(ref, rel=1e-9)


def test_bures_wasserstein_closed_forms():
    m1, m2 = np.array([0.0, 1.0]), np.array([1.0, 1.0])
    S = np.array([[1.0, 0.3], [0.3, 0.5]])
    assert bures_wasserstein(m1, S, m2, S) == pytest.approx(1.0, rel=1e-9)
    # commuting (diagonal) covariances: sum (sqrt a - sqrt b)^2
    D1, D2 = np.diag([1.0, 4.0]), np.diag([9.0, 1.0])
    assert bures_wasserstein(m1, D1, m1, D2) == pytest.approx(np.sqrt(4 + 1), rel=1e-9)
    S2 = np.array([[0.7, -0.1], [-0.1, 0.9]])
    assert bures_wasserstein(m1, S, m2, S2) == pytest.approx(
        bures_wasserstein(m2, S2, m1, S), rel=1e-9
    )


def test_bures_wasserstein_vs_large_samples():
    S1, S2 = np.array([[1.0, 0.3], [0.3, 0.5]]), np.array([[0.4, -0.1], [-0.1, 0.8]])
    m1, m2 = np.zeros(2), np.array([0.5, 0.0])
    rng = np.random.default_rng(0)
    x, y = rng.multivariate_normal(m1, S1, 1500), rng.multivariate_normal(m2, S2, 1500)
    assert w2_particles(x, y) == pytest.approx(
        bures_wasserstein(m1, S1, m2, S2), abs=0.06
    )


def test_conditional_w2_and_errors():
    x = RNG.normal(size=(5, 2))
    assert conditional_w2(x, x + [3.0, 4.0]) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="cov1"):
        bures_wasserstein([0, 0], [[1.0, 2.0], [2.0, 1.0]], [0, 0], np.eye(2))
    with pytest.raises(ValueError, match="cov2"):
        bures_wasserstein([0, 0], np.eye(2), [0, 0], np.eye(3))
    with pytest.raises(ValueError, match="x and y"):
        w2_particles(np.ones((3, 2)), np.ones((3, 3)))
    with pytest.raises(ValueError, match="weights_x"):
        w2_particles(np.ones((3, 2)), np.ones((3, 2)), weights_x=[0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="same shape"):
        conditional_w2(np.ones((3, 2)), np.ones((4, 2)))
