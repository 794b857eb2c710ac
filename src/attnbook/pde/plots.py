"""Plotting helpers of Part III (the chapters' figures): ellipses, clouds, PSD cone."""

from __future__ import annotations

import numpy as np

from ..linalg import check_psd

__all__ = ["gaussian_ellipse", "cone_coordinates", "plot_cloud_panels"]


def gaussian_ellipse(mean, cov, k: float = 2.0, n_points: int = 100) -> np.ndarray:
    """Points ``(2, n_points)`` of the k-σ ellipse of ``N(mean, cov)`` in the plane."""
    S = check_psd(np.asarray(cov, float), "cov")
    th = np.linspace(0, 2 * np.pi, n_points)
    w, U = np.linalg.eigh(S)
    circle = np.stack([np.cos(th), np.sin(th)])
    return (
        np.asarray(mean, float)[:, None]
        + k * (U * np.sqrt(np.clip(w, 0, None))) @ circle
    )


def cone_coordinates(S) -> np.ndarray:
    """``(a − b, 2c, a + b)`` for ``S = [[a, c], [c, b]]`` (batched): the PSD cone as a solid cone.

    Rank-one matrices lie on its surface, multiples of the identity on its axis.
    """
    S = np.asarray(S, float)
    a, b, c = S[..., 0, 0], S[..., 1, 1], S[..., 0, 1]
    return np.stack([a - b, 2 * c, a + b], axis=-1)


def plot_cloud_panels(axes, clouds, titles, *, start=None, colors=None, s=4):
    """Scatter one 2-D cloud per axis (grey ``start`` cloud behind), equal aspect."""
    for i, (ax, cloud, title) in enumerate(zip(axes, clouds, titles)):
        if start is not None:
            ax.scatter(*np.asarray(start).T, s=s, color="0.75")
        color = None if colors is None else colors[i]
        ax.scatter(*np.asarray(cloud).T, s=s, color=color)
        ax.set_title(title)
        ax.set_aspect("equal")
    return axes
