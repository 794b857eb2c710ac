"""attnbook.linalg against SciPy and POT: PSD square root and check, entropy, KL, Bures."""

import numpy as np
import pytest
import scipy.linalg
import scipy.stats
import torch

from attnbook import linalg


def _spd(d, seed, batch=()):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((*batch, d, d))
    return A @ np.swapaxes(A, -1, -2) + 0.1 * np.eye(d)


def test_psd_sqrt_matches_scipy_sqrtm_and_squares_back():
    S = _spd(4, 0)
    R = linalg.psd_sqrt(S)
    assert isinstance(R, np.ndarray) and R.dtype == np.float64
    np.testing.assert_allclose(R, scipy.linalg.sqrtm(S).real, atol=1e-12)
    np.testing.assert_allclose(R @ R, S, atol=1e-12)
    np.testing.assert_allclose(R, R.T, atol=0)


def test_psd_sqrt_batched_and_tensor_in_tensor_out():
    S = _spd(3, 1, batch=(2, 5))
    R = linalg.psd_sqrt(torch.from_numpy(S))
    assert isinstance(R, torch.Tensor) and R.shape == (2, 5, 3, 3)
    for i in range(2):
        for j in range(5):
            np.testing.assert_allclose(
                R[i, j].numpy(), scipy.linalg.sqrtm(S[i, j]).real, atol=1e-12
            )


def test_psd_sqrt_of_a_singular_matrix_clips_round_off():
    v = np.array([[1.0], [2.0], [-1.0]])
    S = v @ v.T  # rank one: two eigenvalues are 0 up to round-off
    R = linalg.psd_sqrt(S)
    np.testing.assert_allclose(R, S / np.linalg.norm(v), atol=1e-12)


def test_check_psd_tolerance_policy():
    S = np.diag([2.0, 1.0, 0.0])
    tol = linalg.psd_tolerance(S)
    assert tol == pytest.approx(linalg.PSD_RTOL * 2.0)
    # an eigenvalue just above -tol passes (and is symmetrised), just below fails
    ok = S.copy()
    ok[2, 2] = -0.5 * tol
    np.testing.assert_allclose(linalg.check_psd(ok), ok)
    bad = S.copy()
    bad[2, 2] = -2 * tol
    with pytest.raises(ValueError, match="cov must be positive semi-definite"):
        linalg.check_psd(bad, "cov")
    # the tolerance scales with the matrix: the same relative error passes at any unit
    np.testing.assert_allclose(linalg.check_psd(1e6 * ok), 1e6 * ok)
    # the floor of 1 for small matrices
    assert linalg.psd_tolerance(1e-3 * S) == pytest.approx(linalg.PSD_RTOL)
    with pytest.raises(ValueError, match="positive definite"):
        linalg.check_psd(S, "S", strict=True)
    linalg.check_psd(S + np.eye(3), "S", strict=True)


def test_check_psd_asymmetric_and_shape_errors_name_the_argument():
    with pytest.raises(ValueError, match="Sigma must be symmetric"):
        linalg.check_psd(np.array([[1.0, 0.5], [0.0, 1.0]]), "Sigma")
    with pytest.raises(ValueError, match="Sigma must be a square"):
        linalg.check_psd(np.ones((2, 3)), "Sigma")
    with pytest.raises(ValueError, match="Sigma contains"):
        linalg.check_psd(np.array([[np.nan, 0.0], [0.0, 1.0]]), "Sigma")
    with pytest.raises(TypeError, match="Sigma"):
        linalg.check_psd("not a matrix", "Sigma")
    with pytest.raises(ValueError, match="S must be positive semi-definite"):
        linalg.psd_sqrt(-np.eye(2))


def test_entropy_and_kl_match_scipy():
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(6), size=4)
    q = rng.dirichlet(np.ones(6), size=4)
    p[0, 2] = 0.0  # 0 log 0 = 0
    p[0] /= p[0].sum()
    H = linalg.entropy(p)
    assert isinstance(H, np.ndarray) and H.shape == (4,)
    np.testing.assert_allclose(H, scipy.stats.entropy(p, axis=-1), atol=1e-14)
    KL = linalg.kl_divergence(p, q)
    np.testing.assert_allclose(KL, scipy.stats.entropy(p, q, axis=-1), atol=1e-14)
    # along another axis, and tensors in, tensors out
    Ht = linalg.entropy(torch.from_numpy(p.T), dim=0)
    assert isinstance(Ht, torch.Tensor)
    np.testing.assert_allclose(Ht.numpy(), H, atol=1e-14)
    assert linalg.entropy([0.5, 0.5]) == pytest.approx(np.log(2))
    # q = 0 < p gives inf
    assert np.isinf(linalg.kl_divergence([0.5, 0.5], [1.0, 0.0]))


def test_entropy_and_kl_bad_input():
    with pytest.raises(ValueError, match="p must be non-negative"):
        linalg.entropy([1.5, -0.5])
    with pytest.raises(ValueError, match="non-negative"):
        linalg.kl_divergence([0.5, 0.5], [1.5, -0.5])
    with pytest.raises(ValueError, match="p contains"):
        linalg.entropy([np.inf, 0.0])
    with pytest.raises(TypeError, match="q"):
        linalg.kl_divergence([0.5, 0.5], {"a": 1})


def _bures_direct(m1, S1, m2, S2):
    """The formula written out with SciPy's sqrtm."""
    R = scipy.linalg.sqrtm(S1).real
    cross = scipy.linalg.sqrtm(R @ S2 @ R).real
    w2 = np.sum((m1 - m2) ** 2) + np.trace(S1 + S2 - 2 * cross)
    return np.sqrt(max(w2, 0.0))


def test_bures_wasserstein_matches_pot_and_the_direct_formula():
    ot_gaussian = pytest.importorskip("ot.gaussian")
    rng = np.random.default_rng(3)
    m1, m2 = rng.standard_normal(3), rng.standard_normal(3)
    S1, S2 = _spd(3, 4), _spd(3, 5)
    d = linalg.bures_wasserstein(m1, S1, m2, S2)
    assert isinstance(d, float)
    assert d == pytest.approx(_bures_direct(m1, S1, m2, S2), rel=1e-12)
    ref = float(ot_gaussian.bures_wasserstein_distance(m1, m2, S1, S2))
    assert d == pytest.approx(ref, rel=1e-10)
    # one dimension: |m1 - m2|^2 + (s1 - s2)^2
    d1 = linalg.bures_wasserstein([0.0], [[4.0]], [3.0], [[1.0]])
    assert d1 == pytest.approx(np.sqrt(9.0 + 1.0))
    assert linalg.bures_wasserstein(m1, S1, m1, S1) == pytest.approx(0.0, abs=1e-7)


def test_bures_wasserstein_batched_tensors():
    rng = np.random.default_rng(6)
    m1, m2 = rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    S1, S2 = _spd(2, 7, batch=(4,)), _spd(2, 8, batch=(4,))
    out = linalg.bures_wasserstein(*(torch.from_numpy(a) for a in (m1, S1, m2, S2)))
    assert isinstance(out, torch.Tensor) and out.shape == (4,)
    ref = [_bures_direct(m1[i], S1[i], m2[i], S2[i]) for i in range(4)]
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)
    as_np = linalg.bures_wasserstein(m1, S1, m2, S2)
    assert isinstance(as_np, np.ndarray) and as_np.shape == (4,)


def test_bures_wasserstein_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="cov2 must be 2x2"):
        linalg.bures_wasserstein(np.zeros(2), np.eye(2), np.zeros(2), np.eye(3))
    with pytest.raises(ValueError, match="mean2 must have 2 entries"):
        linalg.bures_wasserstein(np.zeros(2), np.eye(2), np.zeros(3), np.eye(2))
    with pytest.raises(ValueError, match="cov1 must be positive semi-definite"):
        linalg.bures_wasserstein(np.zeros(2), -np.eye(2), np.zeros(2), np.eye(2))
    with pytest.raises(TypeError, match="mean1"):
        linalg.bures_wasserstein("x", np.eye(2), np.zeros(2), np.eye(2))
