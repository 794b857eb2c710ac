r"""The Part II explorer: the copy head's theory over sample size :math:`P`, sequence length
:math:`L` and vocabulary :math:`V`, built on :mod:`attnbook.copyhead.action`.

* :func:`explorer_thresholds` — the theory's sample sizes at ``(L, V)``: the linear pooling onset
  :math:`P_\text{on}`, the saddle crossover to copying, its fluctuation-corrected estimate
  :math:`2L^2V/(V-1)`, and for softmax the critical length :math:`L_c`, the transition
  :math:`P^\star` and the coexistence window (absent below :math:`L_c`);
* :func:`explorer_curves` — the saddle order parameters and training losses over a grid of
  :math:`P` (cached per ``(L, V)``);
* :func:`plot_actions` / :func:`plot_order` — the effective actions at one :math:`P` and the order
  parameters against :math:`P`, on given axes (what the static figures of the book draw);
* :func:`copyhead_explorer` — the ``ipywidgets`` explorer: sliders for :math:`(P, L, V)`. Measured
  on a 2-core CPU shared by ten processes: ≈ 0.7 s to redraw for a new :math:`P` (the curves
  are cached), 1.7–2.9 s for a new :math:`(L, V)` (thresholds and curves computed once, then
  cached); on an idle CPU a few times less.

Unit hyper-parameters (:math:`\kappa=\sigma_w=\sigma_g=\sigma_b=1`), as in the chapters.
"""

from __future__ import annotations

import functools
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from attnbook.copyhead import action as A
from attnbook.validation import check_positive, check_positive_int

__all__ = [
    "explorer_thresholds",
    "explorer_curves",
    "plot_actions",
    "plot_order",
    "explorer_figure",
    "copyhead_explorer",
    "SEQ_LENS",
    "VOCAB_SIZES",
]

#: the sequence lengths and vocabulary sizes the explorer's sliders offer
SEQ_LENS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
VOCAB_SIZES = (2, 3, 4, 6, 8, 12, 16, 24, 32)

_DT = torch.float64


def _check_lv(seq_len, vocab_size) -> tuple[int, int]:
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    V = check_positive_int(vocab_size, "vocab_size", minimum=2)
    return L, V


@functools.lru_cache(maxsize=64)
def _thresholds(L: int, V: int) -> dict:
    L_c = A.softmax_critical_length(vocab_size=V)
    p_star, window = math.nan, None
    if L >= L_c:
        p_star = A.softmax_critical_p(seq_len=L, vocab_size=V)
        window = A.softmax_fold_window(seq_len=L, vocab_size=V)
    return {
        "P_on": A.linear_onset_p(seq_len=L, vocab_size=V),
        "P_cross": A.linear_crossover_p(seq_len=L, vocab_size=V),
        "P_cross_fluct": 2 * L**2 * V / (V - 1),
        "L_c": L_c,
        "P_star": p_star,
        "window": window,
    }


def explorer_thresholds(*, seq_len: int, vocab_size: int) -> dict:
    """The theory's sample sizes at ``(seq_len, vocab_size)`` (unit hyper-parameters).

    Keys: ``P_on`` (linear pooling onset), ``P_cross`` (linear crossover at the saddle),
    ``P_cross_fluct`` (its fluctuation-corrected estimate ``2L²V/(V−1)``), ``L_c`` (softmax
    critical length), ``P_star`` (softmax transition; NaN below ``L_c``) and ``window`` (the
    softmax coexistence window ``(lo, hi)``; ``None`` below ``L_c``).
    """
    return dict(_thresholds(*_check_lv(seq_len, vocab_size)))


def _p_max(th: dict) -> float:
    top = max(10 * th["P_on"], 3 * th["P_cross_fluct"])
    if not math.isnan(th["P_star"]):
        top = max(top, 3 * th["P_star"])
    return 10 ** math.ceil(math.log10(top))


@functools.lru_cache(maxsize=64)
def _curves(L: int, V: int, n_points: int) -> dict:
    th = _thresholds(L, V)
    P = np.geomspace(1.0, _p_max(th), n_points)
    lin = A.linear_saddle(P, seq_len=L, vocab_size=V)
    soft = A.softmax_saddle(P, seq_len=L, vocab_size=V, n_grid=1501)
    return {
        "P": P,
        "linear_m": lin.m,
        "linear_c_G": lin.c_G,
        "linear_loss": lin.train_mse,
        "softmax_a_G": soft.a_G,
        "softmax_loss": soft.train_mse,
    }


def explorer_curves(*, seq_len: int, vocab_size: int, n_points: int = 60) -> dict:
    """Saddle order parameters and training losses on a log grid of ``P`` (1 to past the last
    threshold): keys ``P``, ``linear_m``, ``linear_c_G``, ``linear_loss``, ``softmax_a_G``,
    ``softmax_loss`` (NumPy arrays). Cached per ``(seq_len, vocab_size, n_points)``."""
    L, V = _check_lv(seq_len, vocab_size)
    n = check_positive_int(n_points, "n_points", minimum=2)
    return {k: v.copy() for k, v in _curves(L, V, n).items()}


def _mark_thresholds(ax, th: dict) -> None:
    ax.axvline(
        th["P_on"], color="C0", ls=":", lw=1.2, label=r"linear onset $P_\mathrm{on}$"
    )
    ax.axvline(th["P_cross"], color="C1", ls="-.", lw=1.2, label="linear crossover")
    ax.axvline(
        th["P_cross_fluct"],
        color="0.5",
        ls="--",
        lw=1.2,
        label="$2L^2V/(V-1)$ (fluct.)",
    )
    if th["window"] is not None:
        ax.axvspan(*th["window"], color="C3", alpha=0.12, label="softmax: two minima")
        ax.axvline(th["P_star"], color="C3", lw=1.2, label=r"softmax $P^\star$")


def plot_order(ax, n_sequences=None, *, seq_len: int, vocab_size: int, legend=True):
    """The saddle order parameters against ``P`` at ``(seq_len, vocab_size)`` with the
    thresholds of :func:`explorer_thresholds` marked, and ``n_sequences`` (if given) as a black
    line. Returns ``ax``."""
    L, V = _check_lv(seq_len, vocab_size)
    th, cv = _thresholds(L, V), _curves(L, V, 60)
    ax.plot(cv["P"], cv["linear_m"], color="C0", lw=2, label="linear: pooling $m$")
    ax.plot(cv["P"], cv["linear_c_G"], color="C1", lw=2, label="linear: copy $c_G$")
    ax.plot(cv["P"], cv["softmax_a_G"], color="C3", lw=2, label="softmax: copy $a_G$")
    _mark_thresholds(ax, th)
    if n_sequences is not None:
        P = check_positive(n_sequences, "n_sequences")
        ax.axvline(P, color="k", lw=1.5, label=f"$P = {P:.3g}$")
    title = f"L = {L}, V = {V}"
    if th["window"] is None:
        title += f" (L < L_c = {th['L_c']}: softmax has no jump)"
    ax.set_title(title, fontsize=10)
    ax.set_xscale("log")
    ax.set_xlabel("$P$ (sequences)")
    ax.set_ylabel("order parameter")
    ax.set_ylim(-0.05, 1.3)
    if legend:
        ax.legend(fontsize=9, loc="upper left", ncol=2)
    return ax


def plot_actions(axes, n_sequences, *, seq_len: int, vocab_size: int):
    """The effective actions at one ``P``: linear attention's ``min_{c_G} S(m, c_G) − S(0, 0)``
    against the pooling ``m`` (saddle) on ``axes[0]``, softmax's ``S(g) − S(0)`` against the
    symmetric logit ``g`` on ``axes[1]``. Returns ``axes``."""
    L, V = _check_lv(seq_len, vocab_size)
    P = check_positive(n_sequences, "n_sequences")
    m = torch.linspace(-1.5, 1.5, 121, dtype=_DT)
    c = torch.linspace(-1.2, 1.2, 121, dtype=_DT)
    S = A.linear_action(m[:, None], c[None], n_sequences=P, seq_len=L, vocab_size=V)
    S0 = A.linear_action(
        torch.zeros((), dtype=_DT),
        torch.zeros((), dtype=_DT),
        n_sequences=P,
        seq_len=L,
        vocab_size=V,
    )
    axes[0].plot(m.numpy(), (S.min(1).values - S0).numpy(), color="C0", lw=2)
    axes[0].set_xlabel("pooling $m$ ($c_G$ at its best)")
    axes[0].set_ylabel("$S - S(0, 0)$")
    axes[0].set_title(f"linear, P = {P:.3g}", fontsize=10)
    g = torch.linspace(-0.5, math.log(L) + 3, 301, dtype=_DT)
    Sg = A.softmax_action(g, n_sequences=P, seq_len=L, vocab_size=V)
    Sg0 = A.softmax_action(
        torch.zeros((), dtype=_DT), n_sequences=P, seq_len=L, vocab_size=V
    )
    dS = (Sg - Sg0).numpy()
    axes[1].plot(g.numpy(), dS, color="C3", lw=2)
    axes[1].set_ylim(
        dS.min() - 2, dS.min() + 12
    )  # the minima and the barrier, not the wall
    axes[1].set_xlabel("softmax logit $g$")
    axes[1].set_ylabel("$S(g) - S(0)$")
    axes[1].set_title(f"softmax, P = {P:.3g}", fontsize=10)
    for ax in axes:
        ax.axhline(0, color="0.7", lw=0.8)
    return axes


def copyhead_explorer(
    *, n_sequences: float = 300.0, seq_len: int = 32, vocab_size: int = 4
):
    """Sliders for ``(P, L, V)``: the linear and softmax effective actions at ``P`` and the saddle
    order parameters against ``P``, with the theory's thresholds marked. Returns the widget."""
    import ipywidgets as W

    L0, V0 = _check_lv(seq_len, vocab_size)
    P0 = check_positive(n_sequences, "n_sequences")
    if L0 not in SEQ_LENS or V0 not in VOCAB_SIZES:
        raise ValueError(
            f"seq_len must be one of {SEQ_LENS} and vocab_size one of {VOCAB_SIZES}, "
            f"got {L0}, {V0}"
        )
    p_slider = W.FloatLogSlider(
        value=P0, base=10, min=0, max=6, step=0.05, description="P"
    )
    l_slider = W.SelectionSlider(options=SEQ_LENS, value=L0, description="L")
    v_slider = W.SelectionSlider(options=VOCAB_SIZES, value=V0, description="V")
    out = W.Output()

    def draw(*_):
        with out:
            out.clear_output(wait=True)
            fig = explorer_figure(
                p_slider.value, seq_len=l_slider.value, vocab_size=v_slider.value
            )
            plt.show()
            plt.close(fig)

    for w in (p_slider, l_slider, v_slider):
        w.observe(draw, names="value")
    draw()
    return W.VBox([W.HBox([p_slider, l_slider, v_slider]), out])


def explorer_figure(n_sequences, *, seq_len: int, vocab_size: int):
    """The explorer's view as one figure: the two actions at ``P`` (top) and the order
    parameters against ``P`` (bottom). Returns the figure (not shown)."""
    fig = plt.figure(figsize=(7.5, 6.2), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=(1, 1.2))
    plot_actions(
        [fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])],
        n_sequences,
        seq_len=seq_len,
        vocab_size=vocab_size,
    )
    plot_order(
        fig.add_subplot(grid[1, :]),
        n_sequences,
        seq_len=seq_len,
        vocab_size=vocab_size,
    )
    return fig
