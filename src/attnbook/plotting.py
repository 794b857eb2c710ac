"""One figure style for the whole book, and the plots that several chapters share.

``use_style()`` is called by :func:`attnbook.notebook.setup_chapter`; every figure function
returns its ``Figure`` so a chapter can add to it, and never calls ``plt.show()`` itself.
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

__all__ = [
    "use_style",
    "KIND_COLORS",
    "KIND_LABELS",
    "to_numpy",
    "matrix_panels",
    "annotate_value",
    "entropy_curves",
    "PAGE_WIDTH_IN",
    "MIN_FONT_PT",
    "panel_columns",
    "effective_font_size",
    "check_legible",
]

#: Width (inches) at which a figure is shown in the book's text column and in the PDF. A wider
#: figure is scaled down to it, and its fonts with it.
PAGE_WIDTH_IN = 7.5

#: The smallest font size (points, as printed at page width) we accept in a figure.
MIN_FONT_PT = 7.5

#: One colour per attention kind, the same in every chapter.
KIND_COLORS = {
    "softmax": "#1f77b4",
    "linear": "#7f7f7f",
    "l2": "#2ca02c",
    "sigmoid": "#ff7f0e",
    "sinkhorn": "#9467bd",
    "multihead": "#8c564b",
    "causal": "#d62728",
}

#: How each kind is written in legends and titles.
KIND_LABELS = {
    "softmax": "softmax",
    "linear": "linear",
    "l2": "ℓ²",
    "sigmoid": "sigmoid",
    "sinkhorn": "Sinkhorn",
    "multihead": "multi-head",
    "causal": "causal softmax",
}

_STYLE = {
    "figure.figsize": (6.4, 3.6),
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "font.size": 10,
    "axes.titlesize": 10.5,
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "legend.frameon": False,
    "legend.fontsize": 9,
    "image.cmap": "viridis",
    "lines.linewidth": 1.8,
    "figure.constrained_layout.use": True,
}


def use_style() -> None:
    """Apply the book's Matplotlib style (idempotent); in a notebook, figures are shown as
    PNGs at twice the pixel density (sharp on a phone or a HiDPI screen, same size on the
    page)."""
    mpl.rcParams.update(_STYLE)
    mpl.rcParams["axes.prop_cycle"] = mpl.cycler(color=list(KIND_COLORS.values()))
    _inline_retina()


def _inline_retina() -> None:
    try:
        from IPython import get_ipython
    except ImportError:  # no IPython: plain scripts save their own figures
        return
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats("retina")


def to_numpy(x) -> np.ndarray:
    """A NumPy copy of a tensor or array (detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def matrix_panels(
    matrices: Mapping[str, object],
    *,
    ncols: int | None = None,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar: bool = True,
    panel_size: float = 2.2,
    suptitle: str | None = None,
):
    """Draw several matrices side by side as heat maps (rows = queries, columns = keys).

    ``matrices`` maps a panel title to a 2-D array or tensor. By default the panels wrap into
    as many rows as keep the figure within :data:`PAGE_WIDTH_IN`. Returns ``(fig, axes)``.
    """
    if not matrices:
        raise ValueError("matrices must hold at least one matrix")
    n = len(matrices)
    ncols = panel_columns(n, panel_size) if ncols is None else ncols
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(panel_size * ncols + 0.6, panel_size * nrows + 0.4),
        squeeze=False,
    )
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, (title, mat) in zip(axes.flat, matrices.items()):
        arr = to_numpy(mat)
        if arr.ndim != 2:
            raise ValueError(f"matrix {title!r} must be 2-D, got shape {arr.shape}")
        im = ax.imshow(arr, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
        ax.set_title(title)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
        ax.grid(False)
        if colorbar:
            fig.colorbar(im, ax=ax, shrink=0.8)
    if suptitle:
        fig.suptitle(suptitle)
    return fig, axes


def annotate_value(ax, text: str, *, loc: str = "upper right") -> None:
    """Write a measured number in a corner of a panel (so the figure shows what the claim checks)."""
    pos = {
        "upper right": (0.98, 0.95, "right", "top"),
        "upper left": (0.02, 0.95, "left", "top"),
        "lower right": (0.98, 0.05, "right", "bottom"),
        "lower left": (0.02, 0.05, "left", "bottom"),
    }
    if loc not in pos:
        raise ValueError(f"unknown loc {loc!r}; expected one of {tuple(pos)}")
    x, y, ha, va = pos[loc]
    ax.text(
        x,
        y,
        text,
        transform=ax.transAxes,
        ha=ha,
        va=va,
        fontsize=9,
        bbox=dict(boxstyle="round,pad=0.25", fc="white", ec="0.8", alpha=0.9),
    )


def entropy_curves(
    betas, curves: Mapping[str, object], *, n: int | None = None, ax=None
):
    """Mean row entropy against the inverse temperature β, one curve per attention kind.

    ``curves`` maps a kind (a key of :data:`KIND_LABELS`) to its entropies at ``betas``; with
    ``n`` a dotted line marks log n, the entropy of uniform attention. Returns ``(fig, ax)``.
    """
    if not curves:
        raise ValueError("curves must hold at least one curve")
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.5, 3.2))
    else:
        fig = ax.figure
    b = to_numpy(betas)
    for kind, values in curves.items():
        ax.semilogx(
            b,
            to_numpy(values),
            label=KIND_LABELS.get(kind, kind),
            color=KIND_COLORS.get(kind),
        )
    if n is not None:
        ax.axhline(np.log(n), ls=":", color="0.5", label="log n (uniform)")
    ax.set(xlabel="inverse temperature β", ylabel="mean row entropy (nats)")
    ax.legend()
    return fig, ax


def panel_columns(
    n_panels: int, panel_width: float, *, width: float = PAGE_WIDTH_IN
) -> int:
    """How many panels of ``panel_width`` inches fit side by side in ``width`` inches (≥ 1).

    Multi-panel figures wrap into rows rather than grow past the page: a figure wider than the
    page is scaled down when shown, and its 10-point labels with it.
    """
    if not isinstance(n_panels, int) or isinstance(n_panels, bool) or n_panels < 1:
        raise ValueError(f"n_panels must be a positive integer, got {n_panels!r}")
    if not panel_width > 0:
        raise ValueError(f"panel_width must be positive, got {panel_width!r}")
    return max(1, min(n_panels, int((width - 0.6) // panel_width)))


def effective_font_size(fig, *, width: float = PAGE_WIDTH_IN) -> float:
    """The smallest visible text of ``fig`` in points once the figure is shown ``width`` wide.

    A figure wider than ``width`` is scaled down by ``width / figure width``; a narrower one is
    shown at its own size. Tick labels, titles, legends and annotations all count.
    """
    if not hasattr(fig, "get_size_inches"):
        raise TypeError(f"fig must be a Matplotlib Figure, got {type(fig).__name__}")
    if not width > 0:
        raise ValueError(f"width must be positive, got {width!r}")
    fig.canvas.draw()  # tick labels exist only once drawn
    sizes = [
        t.get_fontsize()
        for t in fig.findobj(mpl.text.Text)
        if t.get_visible() and t.get_text().strip()
    ]
    if not sizes:
        return float("inf")
    scale = min(1.0, width / fig.get_size_inches()[0])
    return float(min(sizes) * scale)


def check_legible(fig, *, width: float = PAGE_WIDTH_IN, min_pt: float = MIN_FONT_PT):
    """Raise ``ValueError`` when the smallest text of ``fig`` prints below ``min_pt`` points.

    Returns the effective size (see :func:`effective_font_size`) when it is legible.
    """
    size = effective_font_size(fig, width=width)
    if size < min_pt:
        w, h = fig.get_size_inches()
        raise ValueError(
            f"figure of {w:.1f} × {h:.1f} in prints its smallest text at {size:.1f} pt at a "
            f"page width of {width} in (minimum {min_pt} pt): wrap the panels into rows "
            "(plotting.panel_columns) or enlarge the fonts"
        )
    return size
