"""Shape statistics of token clouds: empirical covariance, flatness, limiting rank.

Batched over leading dimensions; NumPy in → NumPy out (tensors stay tensors).
"""

from __future__ import annotations

import numpy as np
import torch

from ..arrays import numpy_in_numpy_out, to_tensor

__all__ = ["empirical_cov", "eigenvalue_ratio", "numerical_rank", "trace_one_circle"]


@numpy_in_numpy_out("x")
def empirical_cov(x):
    r"""The (1/n-normalised) covariance :math:`\frac1n\sum_i (x_i - \bar x)(x_i - \bar x)^\top` of
    clouds ``(..., n, d)``; returns ``(..., d, d)``."""
    X, _ = to_tensor(x, "x")
    if X.dim() < 2:
        raise ValueError(f"x must be a cloud (..., n, d), got shape {tuple(X.shape)}")
    Z = X - X.mean(-2, keepdim=True)
    return Z.mT @ Z / X.shape[-2]


@numpy_in_numpy_out("S")
def eigenvalue_ratio(S):
    r"""Flatness :math:`\lambda_{\min}/\lambda_{\max}` of symmetric matrices ``(..., d, d)``.

    1 for an isotropic cloud, 0 for one squeezed onto a lower-dimensional subspace. A NumPy
    scalar for one NumPy matrix.
    """
    M, _ = to_tensor(S, "S")
    if M.dim() < 2 or M.shape[-1] != M.shape[-2]:
        raise ValueError(f"S must be square (..., d, d), got shape {tuple(M.shape)}")
    ev = torch.linalg.eigvalsh((M + M.mT) / 2)
    return ev[..., 0] / ev[..., -1]


@numpy_in_numpy_out("S")
def numerical_rank(S, *, rtol: float = 1e-3):
    r"""Number of eigenvalues above ``rtol`` × the largest, for symmetric PSD ``(..., d, d)``.

    The rank of a limiting covariance read off a finite-time state: eigenvalues that decay like
    :math:`1/t` fall below ``rtol`` once :math:`t \gg 1/\text{rtol}`.
    """
    M, _ = to_tensor(S, "S")
    ev = torch.linalg.eigvalsh((M + M.mT) / 2)
    return (ev > rtol * ev[..., -1:].clamp(min=0)).sum(-1)


def trace_one_circle(n: int, radius: float = 0.3) -> np.ndarray:
    """``n`` trace-one 2×2 covariances on a circle around I/2 in the PSD cone, ``(n, 2, 2)``.

    ``[[1/2 + ρ cos θ, ρ sin θ], [ρ sin θ, 1/2 − ρ cos θ]]`` with ``ρ = radius < 1/2``.
    """
    if not 0 < radius < 0.5:
        raise ValueError(
            f"radius must be in (0, 1/2) to stay positive definite, got {radius}"
        )
    th = np.linspace(0, 2 * np.pi, n, endpoint=False)
    c, s = radius * np.cos(th), radius * np.sin(th)
    return np.stack([np.stack([0.5 + c, s], -1), np.stack([s, 0.5 - c], -1)], -2)
