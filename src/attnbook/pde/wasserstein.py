r"""Wasserstein distances: particle clouds (exact OT with POT) and Gaussians (Bures–Wasserstein).

* :func:`w2_particles`: :math:`W_2(\mu, \nu)` between two weighted point clouds, by the exact
  linear program (``ot.emd2``) on the squared Euclidean cost.
* :func:`bures_wasserstein` (:func:`attnbook.linalg.bures_wasserstein`, re-exported): the
  closed form between Gaussians,
  :math:`W_2^2 = |m_1 - m_2|^2 + \operatorname{tr}\big(\Sigma_1 + \Sigma_2 - 2(\Sigma_1^{1/2}\Sigma_2\Sigma_1^{1/2})^{1/2}\big)`.
* :func:`conditional_w2`: the conditional distance of the causal (masked) dynamics,
  :math:`W_2^c(\mu,\nu)^2 = \int W_2(\mu_s, \nu_s)^2 d\rho(s)`; for two particle systems on the
  same positions :math:`s_i` (one token per position) it is :math:`(\sum_i w_i|x_i - y_i|^2)^{1/2}`.
"""

from __future__ import annotations

import numpy as np
import torch

from ..linalg import bures_wasserstein  # re-exported: the one Bures implementation

__all__ = ["w2_particles", "bures_wasserstein", "conditional_w2"]


def _cloud(x, name) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a point cloud of shape (n, d), got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values")
    return arr


def _masses(w, n, name) -> np.ndarray:
    if w is None:
        return np.full(n, 1.0 / n)
    if isinstance(w, torch.Tensor):
        w = w.detach().cpu().numpy()
    w = np.asarray(w, dtype=np.float64)
    if w.shape != (n,) or np.any(w < 0) or abs(w.sum() - 1) > 1e-8:
        raise ValueError(f"{name} must be {n} non-negative masses summing to 1")
    return w


def w2_particles(
    x, y, *, weights_x=None, weights_y=None, num_iter_max: int = 1_000_000
) -> float:
    """Exact :math:`W_2` between the clouds ``x`` ``(n, d)`` and ``y`` ``(m, d)`` (uniform masses by default)."""
    import ot

    X, Y = _cloud(x, "x"), _cloud(y, "y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"x and y must have the same dimension, got {X.shape[1]} and {Y.shape[1]}"
        )
    a, b = (
        _masses(weights_x, len(X), "weights_x"),
        _masses(weights_y, len(Y), "weights_y"),
    )
    M = ot.dist(X, Y, metric="sqeuclidean")
    cost = float(ot.emd2(a, b, M, numItermax=num_iter_max))
    return float(np.sqrt(max(cost, 0.0)))


def conditional_w2(x, y, *, weights=None) -> float:
    r"""Conditional :math:`W_2^c` of two causal particle systems sharing positions (token ``i`` ↔ ``i``)."""
    X, Y = _cloud(x, "x"), _cloud(y, "y")
    if X.shape != Y.shape:
        raise ValueError(
            f"x and y must have the same shape (same positions), got {X.shape} and {Y.shape}"
        )
    w = _masses(weights, len(X), "weights")
    return float(np.sqrt(np.sum(w * np.sum((X - Y) ** 2, axis=1))))
