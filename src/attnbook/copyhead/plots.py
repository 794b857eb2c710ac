"""The figures of Part II: small functions that draw on a given axis (or make a figure) and
return it, so that every chapter cell stays short. They never call ``plt.show()``."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np

from attnbook.plotting import matrix_panels, to_numpy

__all__ = [
    "training_curves",
    "attention_panels",
    "theory_and_points",
    "action_profiles",
    "phase_lines",
    "hysteresis",
    "matched_series",
]


def training_curves(steps, losses: Mapping[str, np.ndarray], *, plateau=None, ax=None):
    """Per-run loss curves (thin) and their mean (thick) per group; ``losses[name]`` is
    ``(n_records, n_runs)``. A dashed line marks ``plateau`` when given."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.6))
    for j, (name, loss) in enumerate(losses.items()):
        ax.plot(steps, loss, color=f"C{j}", lw=0.8, alpha=0.5)
        ax.plot(steps, np.mean(loss, 1), color=f"C{j}", lw=2, label=name)
    if plateau is not None:
        ax.axhline(plateau, color="0.5", ls="--", lw=1, label="pooling plateau")
    ax.set_xlabel("Adam step")
    ax.set_ylabel("loss per token")
    ax.legend()
    return ax


def attention_panels(matrices: Mapping[str, object]):
    """Attention matrices side by side on a symmetric colour scale (red > 0 > blue)."""
    vmax = max(float(np.abs(to_numpy(m)).max()) for m in matrices.values())
    fig, _ = matrix_panels(
        {k: to_numpy(v) for k, v in matrices.items()},
        cmap="RdBu_r",
        vmin=-vmax,
        vmax=vmax,
        panel_size=2.8,
    )
    return fig


def theory_and_points(
    ax,
    lines: Mapping[str, tuple] = (),
    points: Mapping[str, tuple] = (),
    *,
    xlabel: str = "$P$",
    ylabel: str = "",
    xlog: bool = True,
    ylog: bool = False,
    vline=None,
    span=None,
    legend: bool = True,
):
    """Theory curves ``lines[label] = (x, y)`` and measurements ``points[label] = (x, y[, yerr])``
    on one axis; ``vline`` marks a transition, ``span = (lo, hi)`` shades a window."""
    if span is not None:
        ax.axvspan(*span, color="0.9", label="two minima (theory)")
    for label, (x, y) in dict(lines).items():
        ax.plot(x, y, lw=1.5, label=label)
    markers = "oxs^+"
    for j, (label, xy) in enumerate(dict(points).items()):
        yerr = xy[2] if len(xy) > 2 else None
        ax.errorbar(
            xy[0], xy[1], yerr=yerr, fmt=markers[j % 5], ms=7, mfc="none", label=label
        )
    if vline is not None:
        ax.axvline(vline, color="0.6", ls=":")
    ax.set_xscale("log" if xlog else "linear")
    ax.set_yscale("log" if ylog else "linear")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if legend:
        ax.legend(fontsize=8)
    return ax


def action_profiles(g, profiles: Mapping[str, np.ndarray], *, ax=None, ylim=(-3, 8)):
    """``S(g) − S(0)`` curves, one per label."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.6))
    g = to_numpy(g)
    i0 = int(np.argmin(np.abs(g)))
    for label, S in profiles.items():
        S = to_numpy(S)
        ax.plot(g, S - S[i0], label=label)
    ax.set_ylim(*ylim)
    ax.set_xlabel("$g$")
    ax.set_ylabel("$S(g) - S(0)$")
    ax.legend()
    return ax


def phase_lines(
    L, lines: Mapping[str, tuple], points: Mapping[str, tuple] = (), *, ax=None
):
    """Transition lines in the ``(L, P)`` plane (``lines[label] = (L, P, style)``) and measured
    points (``points[label] = (L, P)``), log–log; on ``ax`` if given, else a new figure
    (returned either way)."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
    else:
        fig = ax.figure
    for label, (x, y, style) in dict(lines).items():
        ax.plot(x, y, style, label=label)
    for label, (x, y) in dict(points).items():
        ax.plot(x, y, "o", ms=8, mfc="none", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("$L$")
    ax.set_ylabel("$P$")
    ax.legend(fontsize=8)
    return fig


def hysteresis(
    ax, loop, *, p_star=None, window=None, ylabel: str = r"$\langle a_G\rangle$"
):
    """A hysteresis loop (:class:`attnbook.copyhead.hysteresis.HysteresisLoop`): the sweep up
    and the sweep down, means over data sets with Monte Carlo error bars (the chains' errors
    combined), the theory's ``p_star`` (dotted) and coexistence ``window`` (grey) if given."""
    P = np.asarray(loop.n_sequences)
    n = loop.up.shape[1]
    for key, marker, label in (
        ("up", "^-", "P swept up"),
        ("down", "v--", "P swept down"),
    ):
        y, se = getattr(loop, key), getattr(loop, key + "_se")
        err = np.sqrt((se**2).sum(1)) / n
        ax.errorbar(P, y.mean(1), yerr=err, fmt=marker, capsize=3, label=label)
    if window is not None:
        ax.axvspan(*window, color="0.85", zorder=0, label="coexistence window (ansatz)")
    if p_star is not None:
        ax.axvline(
            p_star, color="0.4", ls=":", label=r"$P^\star$ (symmetric-logit ansatz)"
        )
    ax.set_xlabel("$P$")
    ax.set_ylabel(ylabel)
    ax.legend()
    return ax


def matched_series(ax, series: Mapping[str, tuple], *, ylabel: str = "", xlabel="$P$"):
    """Theory line and measured points in one colour per label:
    ``series[label] = (x_theory, y_theory, x_points, y_points)``; log ``x``."""
    for j, (label, (xt, yt, xp, yp)) in enumerate(dict(series).items()):
        ax.plot(xt, yt, color=f"C{j}", lw=1.5, label=f"{label}: theory")
        ax.plot(xp, yp, "o", color=f"C{j}", mfc="none", ms=7, label=f"{label}: Adam")
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8, ncol=2)
    return ax


def rhat_by_size(ax, x, rhat, L, *, threshold: float = 1.1):
    """The worst R̂ of each sample size: ``x (n_L, n_P)`` (e.g. P over a crossover), ``rhat
    (n_L, n_P, 2)`` for ``|m|`` (circles) and aligned ``c_G`` (squares), one colour per ``L``,
    and the ``threshold`` dotted."""
    x, rhat = np.asarray(x, dtype=float), np.asarray(rhat, dtype=float)
    if rhat.shape != (*x.shape, 2) or len(L) != x.shape[0]:
        raise ValueError(
            f"rhat must be (n_L, n_P, 2) with x (n_L, n_P) and one L per row; got "
            f"{rhat.shape}, {x.shape}, {len(L)}"
        )
    for k, l in enumerate(L):
        ax.plot(x[k], rhat[k, :, 0], "o-", color=f"C{k}", label=f"|m|, L = {l}")
        ax.plot(x[k], rhat[k, :, 1], "s--", color=f"C{k}", label=f"$c_G$, $L = {l}$")
    ax.axhline(threshold, color="0.5", ls=":")
    ax.set(xscale="log", ylabel="worst R̂")
    ax.legend(fontsize=8)
    return ax
