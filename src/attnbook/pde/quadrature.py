r"""Velocity fields on a 1-D Gaussian by Gauss–Hermite quadrature (no Gaussian closure needed).

:func:`velocity_on_gaussian_1d` evaluates :math:`\Gamma_\mu(x)` for :math:`\mu = N(m, s^2)` and a
scalar layer (``a``, ``v``) for the softmax and sigmoid kernels; :func:`affine_residual`
measures how far a field is from a straight line — zero when the lemma of the Gaussians
chapter applies.
"""

from __future__ import annotations

import numpy as np

from ..attention import masked_softmax, resolve_kind
from ..validation import as_float64_array, check_positive, check_positive_int

__all__ = ["velocity_on_gaussian_1d", "affine_residual"]


def velocity_on_gaussian_1d(
    x,
    mean: float,
    sd: float,
    *,
    a: float,
    v: float = 1.0,
    kind: str = "softmax",
    bias: float = 0.0,
    n_nodes: int = 120,
) -> np.ndarray:
    r""":math:`\Gamma_\mu(x)` on :math:`\mu = N(\text{mean}, \text{sd}^2)` at the points ``x``.

    softmax: :math:`v\int e^{axy}y\,d\mu / \int e^{axy}d\mu`; sigmoid:
    :math:`v\int\sigma(axy + b)\,y\,d\mu` — each by ``n_nodes``-point Gauss–Hermite quadrature
    (probabilists' weights), exact for polynomials of degree below ``2 n_nodes``.
    """
    kind = resolve_kind(kind, ("softmax", "sigmoid"))
    xs = as_float64_array(x, "x")
    sd = check_positive(sd, "sd")
    nodes, weights = np.polynomial.hermite_e.hermegauss(
        check_positive_int(n_nodes, "n_nodes")
    )
    y = float(mean) + sd * nodes
    w = weights / weights.sum()
    score = a * xs[..., None] * y
    if (
        kind == "softmax"
    ):  # the weights w_j e^{score_j}, normalised (attention's kernel)
        return v * (masked_softmax(score + np.log(w)) * y).sum(-1)
    return v * (w / (1 + np.exp(-(score + bias))) * y).sum(-1)


def affine_residual(x, f) -> float:
    """Largest distance of ``f(x)`` from its least-squares straight line, relative to its range."""
    xs, fs = as_float64_array(x, "x"), as_float64_array(f, "f")
    if xs.shape != fs.shape or xs.ndim != 1 or len(xs) < 3:
        raise ValueError("x and f must be 1-D arrays of the same length (at least 3)")
    coef = np.polyfit(xs, fs, 1)
    return float(np.abs(fs - np.polyval(coef, xs)).max() / np.ptp(fs))
