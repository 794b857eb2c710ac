"""Figures of the Part I chapters: panels of curves over time with the stages shaded.

Each helper draws on matplotlib axes and returns the figure, so a chapter cell stays short.
"""

from __future__ import annotations

import numpy as np

from ..plotting import PAGE_WIDTH_IN, panel_columns

__all__ = [
    "STAGE_COLOURS",
    "shade_stages",
    "curve_panels",
    "attention_maps",
    "embedding_paths",
]

#: Colours of the four stages (I condensation, II focus, III dilution, IV symmetry breaking).
STAGE_COLOURS = {
    "I": "tab:blue",
    "II": "tab:orange",
    "III": "tab:green",
    "IV": "tab:purple",
}


def _stage_spans(stages, t_end):
    return [
        ("I", stages["I_start"], stages["I_end"]),
        ("II", stages["II_start"], stages["II_end"]),
        ("III", stages["II_end"], stages["III_end"]),
        ("IV", stages["III_end"], t_end),
    ]


def shade_stages(
    ax, stages, *, t_end=None, which=("I", "II", "III", "IV"), labels=True
):
    """Shade the stages of :func:`~attnbook.focus.metrics.stage_times` on ``ax``."""
    t_end = ax.get_xlim()[1] if t_end is None else t_end
    for k, (name, a, b) in enumerate(_stage_spans(stages, t_end)):
        if name not in which or not (np.isfinite(a) and np.isfinite(b)):
            continue
        ax.axvspan(a, b, alpha=0.15, color=STAGE_COLOURS[name], lw=0)
        if labels:
            mid = np.sqrt(a * b) if ax.get_xscale() == "log" and a > 0 else (a + b) / 2
            ax.text(
                mid,
                0.99 - 0.07 * (k % 2),
                name,
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="top",
                fontsize=8,
            )


def curve_panels(
    t,
    panels,
    *,
    stages=None,
    ncols=None,
    figsize=None,
    xscale="linear",
    yscales=None,
    xlim=None,
    hlines=None,
    which=("I", "II", "III", "IV"),
):
    """One panel per entry of ``panels``: ``(title, [(y, label, style), ...])``.

    ``t`` is shared (or give a per-curve ``(t, y)`` tuple as ``y``); ``style`` is a matplotlib
    format string or ``""``. ``yscales`` maps panel index → ``"log"``; ``hlines`` maps panel
    index → list of ``(value, style)`` reference lines. Stages are shaded when given.
    """
    import matplotlib.pyplot as plt

    n = len(panels)
    # one row when the caller sizes the figure; otherwise wrap at the page width
    ncols = ncols or (n if figsize else panel_columns(n, 3.2))
    nrows = int(np.ceil(n / ncols))
    fig, axes = plt.subplots(
        nrows, ncols, figsize=figsize or (3.2 * ncols, 2.9 * nrows), squeeze=False
    )
    t = np.asarray(t, float)
    for i, (ax, (title, curves)) in enumerate(zip(axes.flat, panels)):
        for y, label, style in curves:
            tt, yy = y if isinstance(y, tuple) else (t, y)
            keep = np.asarray(tt) > 0 if xscale == "log" else slice(None)
            ax.plot(np.asarray(tt)[keep], np.asarray(yy)[keep], style, label=label)
        ax.set_xscale(xscale)
        if yscales and i in yscales:
            ax.set_yscale(yscales[i])
        for value, style in (hlines or {}).get(i, []):
            ax.axhline(value, ls=style, c="k", lw=0.8)
        if xlim is not None:
            ax.set_xlim(*xlim)
        if stages is not None:
            shade_stages(ax, stages, t_end=t[-1], which=which)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("t")
        if any(label for _, label, _ in curves):
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    return fig


def attention_maps(maps, titles, *, figsize=None):
    """Heat maps of long-context attention matrices :math:`w_q(k)` (rows: queries q)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, len(maps), figsize=figsize or (min(2.6 * len(maps), PAGE_WIDTH_IN), 2.6)
    )
    for ax, w, title in zip(np.atleast_1d(axes), maps, titles):
        ax.imshow(np.asarray(w), vmin=0, vmax=1, cmap="viridis")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("key type k")
        ax.set_ylabel("query q")
        ax.grid(False)
    return fig


def embedding_paths(coords, marks=(), *, figsize=(7.5, 3.4)):
    """PCA paths of token embeddings (``coords`` (T, d, 3) from
    :func:`~attnbook.focus.metrics.embedding_pca`): PC1–PC2 and PC1–PC3, with markers at the
    time indices ``marks`` (circle, triangle, square, …)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=figsize)
    for tok in range(coords.shape[1]):
        c = coords[:, tok]
        (line,) = axes[0].plot(c[:, 0], c[:, 1], label=f"token {tok}")
        axes[1].plot(c[:, 0], c[:, 2], color=line.get_color())
        for i, marker in zip(marks, "o^sD"):
            for ax, j in ((axes[0], 1), (axes[1], 2)):
                ax.plot(c[i, 0], c[i, j], marker, color=line.get_color(), mec="k", ms=5)
    for ax, j in ((axes[0], 2), (axes[1], 3)):
        ax.set_xlabel("PC1")
        ax.set_ylabel(f"PC{j}")
    axes[0].legend(fontsize=7)
    return fig


def error_panels(n_windows, contexts, err, *, figsize=(7.5, 3.2)):
    """Two log-log panels of a trajectory error ``err`` (N, s, seed): (a) against the number
    of windows ``n_windows`` (one line per context), (b) against the context length
    ``contexts`` (one line per N), mean ± one standard deviation over seeds, with an
    :math:`s^{-1/2}` guide in (b)."""
    import matplotlib.pyplot as plt

    err = np.asarray(err, float)
    n_windows, contexts = np.asarray(n_windows), np.asarray(contexts)
    if err.shape[:2] != (len(n_windows), len(contexts)):
        raise ValueError("err must have shape (len(n_windows), len(contexts), n_seeds)")
    mean, sd = (
        err.mean(-1),
        err.std(-1, ddof=1) if err.shape[-1] > 1 else 0 * err[..., 0],
    )
    fig, (a, b) = plt.subplots(1, 2, figsize=figsize)
    for j, s in enumerate(contexts):
        a.errorbar(
            n_windows, mean[:, j], sd[:, j], marker="o", capsize=3, label=f"s = {s}"
        )
    for i, n in enumerate(n_windows):
        b.errorbar(contexts, mean[i], sd[i], marker="o", capsize=3, label=f"N = {n}")
    guide = mean[-1, 0] * (contexts / contexts[0]) ** -0.5
    b.plot(contexts, guide, "k--", lw=1, label=r"$\propto s^{-1/2}$")
    for ax, x, title in (
        (a, "windows per step N", "(a) against N"),
        (b, "context length s", "(b) against s"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel("trajectory error")
        ax.set_title(title)
        ax.legend(fontsize=9)
    return fig
