r"""Hand-written closed forms of the Gaussian Transformer flow — the references of the tests.

Written from the equations (theory brief, Part III), independently of the SymPy derivations in
:mod:`attnbook.pde.symbolic`, so that each checks the other.

* Scalar softmax (:math:`d = 1`, :math:`\dot\sigma^2 = 2va\sigma^4`):
  :math:`\sigma^2(t) = \sigma_0^2/(1 - 2va\sigma_0^2 t)`,
  :math:`\alpha(t) = \alpha_0 e^{vt}(1 - 2va\sigma_0^2 t)^{-1/2}`, blow-up at
  :math:`T^* = 1/(2va\sigma_0^2)` when :math:`va > 0`.
* :math:`V = I`, any :math:`A` (:math:`\dot\Sigma = \Sigma(A + A^\top)\Sigma`):
  :math:`\Sigma(t) = \Sigma_0(I - tB\Sigma_0)^{-1}`, :math:`B = A + A^\top`, i.e.
  :math:`(\Sigma_0^{-1} - tB)^{-1}`; blow-up at :math:`T^* = 1/\lambda_{\max}(\Sigma_0^{1/2}B\Sigma_0^{1/2})`
  when positive. If :math:`B \preceq 0`, :math:`\Sigma(t) \to U(U^\top\Sigma_0^{-1}U)^{-1}U^\top`
  (``U``: orthonormal basis of :math:`\ker B`) — a rank-deficient limit, *clustering*.
* Moment right-hand sides :math:`(\dot\alpha, \dot\Sigma)` of softmax, ℓ², linear and
  Sinkhorn attention on :math:`N(\alpha, \Sigma)`.
"""

from __future__ import annotations

import math

import numpy as np

from ..linalg import psd_sqrt

__all__ = [
    "scalar_softmax_variance",
    "scalar_softmax_mean",
    "scalar_blowup_time",
    "identity_value_covariance",
    "identity_value_blowup_time",
    "clustering_limit",
    "softmax_moment_rhs",
    "l2_moment_rhs",
    "linear_moment_rhs",
    "sinkhorn_moment_rhs",
    "sinkhorn_scalar_rhs",
    "kernel_basis",
]


def _scalar(value, name):
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def scalar_blowup_time(var0: float, v: float, a: float) -> float:
    r""":math:`T^* = 1/(2va\sigma_0^2)` if :math:`va > 0`, else ``inf`` (no blow-up)."""
    var0, v, a = _scalar(var0, "var0"), _scalar(v, "v"), _scalar(a, "a")
    if var0 <= 0:
        raise ValueError(f"var0 must be positive, got {var0}")
    return 1.0 / (2 * v * a * var0) if v * a > 0 else math.inf


def scalar_softmax_variance(t, var0: float, v: float, a: float) -> np.ndarray:
    r""":math:`\sigma^2(t) = \sigma_0^2/(1 - 2va\sigma_0^2 t)` (``t`` before the blow-up time)."""
    t = np.asarray(t, dtype=float)
    if np.any(t >= scalar_blowup_time(var0, v, a)):
        raise ValueError("t must stay before the blow-up time 1/(2 v a var0)")
    return var0 / (1 - 2 * v * a * var0 * t)


def scalar_softmax_mean(t, mean0: float, var0: float, v: float, a: float) -> np.ndarray:
    r""":math:`\alpha(t) = \alpha_0 e^{vt}(1 - 2va\sigma_0^2 t)^{-1/2}`."""
    t = np.asarray(t, dtype=float)
    return (
        mean0 * np.exp(v * t) * np.sqrt(scalar_softmax_variance(t, var0, v, a) / var0)
    )


def _sym_matrix(M, name):
    M = np.asarray(M, dtype=float)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {M.shape}")
    return M


def identity_value_blowup_time(cov0, A) -> float:
    r""":math:`T^* = 1/\lambda_{\max}(\Sigma_0^{1/2}(A + A^\top)\Sigma_0^{1/2})` for :math:`V = I` (``inf`` if ≤ 0)."""
    S, A = _sym_matrix(cov0, "cov0"), _sym_matrix(A, "A")
    R = psd_sqrt(S)
    lam = float(np.linalg.eigvalsh(R @ (A + A.T) @ R).max())
    return 1.0 / lam if lam > 0 else math.inf


def identity_value_covariance(t, cov0, A) -> np.ndarray:
    r""":math:`\Sigma(t) = \Sigma_0(I - t(A + A^\top)\Sigma_0)^{-1}` for :math:`V = I`; shape ``(len(t), d, d)``."""
    S, A = _sym_matrix(cov0, "cov0"), _sym_matrix(A, "A")
    t = np.atleast_1d(np.asarray(t, dtype=float))
    if np.any(t >= identity_value_blowup_time(S, A)):
        raise ValueError("t must stay before the blow-up time")
    B = A + A.T
    out = S @ np.linalg.inv(np.eye(len(S)) - t[:, None, None] * (B @ S))
    return (out + out.transpose(0, 2, 1)) / 2


def kernel_basis(B, tol: float = 1e-10) -> np.ndarray:
    """Orthonormal basis ``(d, r)`` of the kernel of the symmetric matrix ``B``."""
    w, U = np.linalg.eigh(B)
    return U[:, np.abs(w) <= tol * max(1.0, np.abs(w).max())]


def clustering_limit(cov0, A, tol: float = 1e-10) -> np.ndarray:
    r"""Limit :math:`U(U^\top\Sigma_0^{-1}U)^{-1}U^\top` of :math:`\Sigma(t)` for :math:`V = I`, :math:`A + A^\top \preceq 0`.

    Raises ``ValueError`` if :math:`A + A^\top` has a positive eigenvalue (then Σ blows up) or
    ``cov0`` is singular. Returns the zero matrix when :math:`A + A^\top \prec 0`.
    """
    S, A = _sym_matrix(cov0, "cov0"), _sym_matrix(A, "A")
    B = A + A.T
    w = np.linalg.eigvalsh(B)
    if w.max() > tol * max(1.0, np.abs(w).max()):
        raise ValueError(
            f"A + A^T must be negative semi-definite, its largest eigenvalue is {w.max():.3g}"
        )
    U = kernel_basis(B, tol)
    if U.shape[1] == 0:
        return np.zeros_like(S)
    return U @ np.linalg.inv(U.T @ np.linalg.inv(S) @ U) @ U.T


def _floats(*arrays):
    return tuple(np.asarray(z, float) for z in arrays)


def softmax_moment_rhs(mean, cov, A, V):
    r""":math:`\dot\alpha = V(I + \Sigma A)\alpha`, :math:`\dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top`."""
    a, S, A, V = _floats(mean, cov, A, V)
    return V @ (a + S @ A @ a), V @ S @ A @ S + S @ A.T @ S @ V.T


def l2_moment_rhs(mean, cov, Q, K, V):
    r"""ℓ² kernel :math:`e^{-|Qx-Ky|^2}`: :math:`\Gamma(x) = V(I + 2\Sigma K^\top K)^{-1}(\alpha + 2\Sigma K^\top Qx)`."""
    a, S, Q, K, V = _floats(mean, cov, Q, K, V)
    Minv = np.linalg.inv(np.eye(len(S)) + 2 * S @ K.T @ K)
    J = 2 * V @ Minv @ S @ K.T @ Q
    return V @ Minv @ (a + 2 * S @ K.T @ Q @ a), J @ S + S @ J.T


def linear_moment_rhs(mean, cov, A, V):
    r""":math:`\dot\alpha = V(\Sigma + \alpha\alpha^\top)A\alpha`, :math:`\dot\Sigma = V(\Sigma+\alpha\alpha^\top)A\Sigma + \text{transpose}`."""
    a, S, A, V = _floats(mean, cov, A, V)
    J = V @ (S + np.outer(a, a)) @ A
    return J @ a, J @ S + S @ J.T


def sinkhorn_moment_rhs(mean, cov, A, V):
    r"""Sinkhorn: :math:`J_0 = 2\Sigma A\Sigma^{1/2}(I + M^{1/2})^{-1}\Sigma^{-1/2}`, :math:`M = I + 4\Sigma^{1/2}A^\top\Sigma A\Sigma^{1/2}`.

    :math:`\dot\alpha = V\alpha`, :math:`\dot\Sigma = VJ_0\Sigma + \Sigma J_0^\top V^\top` (needs Σ ≻ 0).
    """
    a, S, A, V = _floats(mean, cov, A, V)
    R = psd_sqrt(S)
    M = np.eye(len(S)) + 4 * R @ A.T @ S @ A @ R
    J0 = 2 * S @ A @ R @ np.linalg.inv(np.eye(len(S)) + psd_sqrt(M)) @ np.linalg.inv(R)
    return V @ a, V @ J0 @ S + S @ J0.T @ V.T


def sinkhorn_scalar_rhs(var, v: float, a: float):
    r"""1-D Sinkhorn: :math:`(\sigma^2)' = v(\sqrt{1 + 4a^2\sigma^4} - 1)/a` (:math:`= 2v\sigma^2\cdot 0` limit at :math:`a = 0`)."""
    var = np.asarray(var, float)
    if a == 0:
        return np.zeros_like(var)
    return v * (np.sqrt(1 + 4 * a * a * var * var) - 1) / a
