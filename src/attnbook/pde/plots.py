"""Plotting helpers of Part III (the chapters' figures): ellipses, clouds, PSD cone."""

from __future__ import annotations

import numpy as np

from ..linalg import check_psd

__all__ = [
    "gaussian_ellipse",
    "cone_coordinates",
    "plot_cloud_panels",
    "plot_cone_flows",
]


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


def plot_cone_flows(ax, cov, *, max_trace: float = 1.2, title: str = "") -> None:
    """Draw 2×2 covariance flows ``cov`` ``(len(t), B, 2, 2)`` in the PSD cone on a 3-D axis.

    Grey wireframe: the cone's surface (rank-one matrices); each flow is drawn while its
    trace stays below ``max_trace``.
    """
    th, z = np.meshgrid(np.linspace(0, 2 * np.pi, 40), np.linspace(0, max_trace, 8))
    ax.plot_wireframe(z * np.cos(th), z * np.sin(th), z, color="0.85", lw=0.5)
    P = cone_coordinates(np.clip(cov, -5, 5))
    for b in range(cov.shape[1]):
        keep = np.trace(cov[:, b], axis1=-2, axis2=-1) < max_trace
        ax.plot(*P[keep, b].T, lw=1)
    ax.set_title(title, fontsize=8)
    ax.set(
        zlim=(0, max_trace), xlim=(-max_trace, max_trace), ylim=(-max_trace, max_trace)
    )
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_zticks([])
