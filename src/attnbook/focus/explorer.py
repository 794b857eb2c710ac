r"""The Part I explorer: the population flow's four stages as functions of δ and ρ.

δ is the asymmetry of the rare tokens (:func:`attnbook.markov.perturbed_stationary`) and ρ the
laziness of the chain (the seed paper's λ; ``lam`` in :func:`attnbook.markov.lazy_chain`). For
each setting, :func:`explorer_run` integrates the population flow of Part I once from the same
initialisation and keeps the curves the stages are read from: the loss (with the entropy rate
:math:`h`), the type-level attention entropy :math:`H_u`, :math:`\lVert\Phi\rVert_F` and the
second singular value of :math:`W_0`. Results are cached per setting, so moving a slider back to
a setting already seen redraws at once; :func:`explorer_runs` fills the cache for a list of
settings. :func:`focus_explorer` is the ipywidgets front-end (needs a live
kernel); :func:`explorer_figure` draws the same panels for several settings, for the static book.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import torch

from .. import markov
from ..device import as_generator
from ..validation import check_positive, check_positive_int
from .metrics import analyse_flow
from .plots import shade_stages
from .population import init_params, population_flow, time_grid

__all__ = [
    "DELTAS",
    "RHOS",
    "ExplorerRun",
    "explorer_run",
    "explorer_runs",
    "explorer_figure",
    "focus_explorer",
]

#: the settings offered by the explorer's sliders
DELTAS = (0.0, 0.01, 0.02, 0.04)
RHOS = (0.3, 0.5, 0.8)

#: the curves drawn, in panel order: (key of ExplorerRun, panel title, y scale)
PANELS = (
    ("loss_gap", "loss − h", "log"),
    ("entropy_uniform", "attention entropy H_u", "linear"),
    ("phi_norm", "‖Φ‖_F", "linear"),
    ("sigma2_W0", "σ₂(W₀)", "log"),
)


@dataclass(frozen=True)
class ExplorerRun:
    """The curves of one population flow (times ``t``) and its stage times."""

    delta: float
    rho: float
    t: np.ndarray
    loss: np.ndarray
    h: float
    entropy_uniform: np.ndarray
    phi_norm: np.ndarray
    sigma2_W0: np.ndarray
    stages: dict
    wall_s: float

    @property
    def loss_gap(self) -> np.ndarray:
        return np.maximum(self.loss - self.h, 1e-9)  # round-off floor, for a log axis


_CACHE: dict = {}


def _setting(delta, rho) -> tuple[float, float]:
    if not isinstance(delta, numbers.Real) or not 0 <= delta < 0.1:
        raise ValueError(f"delta must be a number in [0, 0.1), got {delta!r}")
    if not isinstance(rho, numbers.Real) or not 0 < rho < 1:
        raise ValueError(f"rho must be a number in (0, 1), got {rho!r}")
    return round(float(delta), 6), round(float(rho), 6)


def _options(t_end, eps, m, seed) -> tuple:
    t_end = check_positive(t_end, "t_end")
    eps = check_positive(eps, "eps")
    m = check_positive_int(m, "m")
    return float(t_end), float(eps), m, _int_seed(seed)


def _int_seed(seed) -> int:
    """The cache keys on an int: a generator or None (torch's global) gives one draw."""
    if seed is None or isinstance(seed, torch.Generator):
        return int(as_generator(seed, numpy=True).integers(2**31))
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(
            f"seed must be an int, a torch.Generator or None, got {type(seed).__name__}"
        )
    return int(seed)


def explorer_runs(
    settings, *, t_end: float = 2e4, eps: float = 1e-3, m: int = 8, seed=None
) -> list[ExplorerRun]:
    """The runs of ``settings`` (a list of ``(delta, rho)``), integrating only those not
    cached yet. The chains are ``perturbed_chain(4, 0.7, delta, rho)``; every
    setting starts from the same ``init_params(4, m, eps=eps, seed=seed)``. ``seed``: an
    int, a ``torch.Generator`` or ``None`` (one int drawn from torch's global generator,
    which ``setup_chapter`` seeds); the cache is keyed on the int."""
    opts = _options(t_end, eps, m, seed)
    seed = opts[-1]
    keys = [(*_setting(dl, r), *opts) for dl, r in settings]
    if not keys:
        raise ValueError("settings must hold at least one (delta, rho)")
    todo = list(dict.fromkeys(k for k in keys if k not in _CACHE))
    start = init_params(4, m, eps=eps, seed=seed)
    for (
        key
    ) in todo:  # one flow each: a batch would step at the pace of its stiffest chain
        chain = markov.perturbed_chain(4, 0.7, key[0], key[1])
        flow = population_flow(
            start, chain, t_end, t_eval=time_grid(t_end, n_dense=301, n_log=150)
        )
        curves, stages = analyse_flow(flow)
        _CACHE[key] = ExplorerRun(
            delta=key[0],
            rho=key[1],
            t=flow.t,
            loss=flow.loss,
            h=float(markov.entropy_rate(chain)),
            entropy_uniform=curves["entropy_uniform"],
            phi_norm=curves["phi_norm"],
            sigma2_W0=curves["sv_W0"][:, 1],
            stages=stages,
            wall_s=flow.wall_s,
        )
    return [_CACHE[k] for k in keys]


def explorer_run(delta: float = 0.02, rho: float = 0.5, **options) -> ExplorerRun:
    """The run of one setting (cached): see :func:`explorer_runs`."""
    return explorer_runs([(delta, rho)], **options)[0]


def _draw(axes, run: ExplorerRun, *, label=None, style="-", color=None, shade=True):
    keep = run.t > 0
    for ax, (key, title, yscale) in zip(axes, PANELS):
        ax.plot(run.t[keep], getattr(run, key)[keep], style, color=color, label=label)
        ax.set_xscale("log")
        ax.set_yscale(yscale)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("t", fontsize=9)
        ax.tick_params(labelsize=9)
        if shade:
            shade_stages(ax, run.stages, t_end=run.t[-1])


def explorer_figure(runs, *, figsize=(6.8, 5.4)):
    """Four panels (loss − h, H_u, ‖Φ‖_F, σ₂(W₀) against log t), one curve per run.

    With one run the stages are shaded; with several, each run gets its own colour and
    a legend names its (δ, ρ). Fonts are at least 9 pt at ``figsize``, which is the width of
    the book's page (about 7 in), so they stay legible there. Returns the figure.
    """
    import matplotlib.pyplot as plt

    runs = [runs] if isinstance(runs, ExplorerRun) else list(runs)
    if not runs or not all(isinstance(r, ExplorerRun) for r in runs):
        raise TypeError("runs must be an ExplorerRun or a list of them")
    fig, axes = plt.subplots(2, 2, figsize=figsize, layout="constrained")
    styles = ("-", "--", ":", "-.")
    for i, run in enumerate(runs):
        label = f"δ = {run.delta:g}, ρ = {run.rho:g}"
        _draw(
            axes.flat,
            run,
            label=label,
            style=styles[(i // 10) % 4],
            color=None if len(runs) > 1 else "k",
            shade=len(runs) == 1,
        )
    if len(runs) > 1:
        axes.flat[0].legend(fontsize=9, loc="lower left")
    else:
        fig.suptitle(f"δ = {runs[0].delta:g}, ρ = {runs[0].rho:g}", fontsize=10)
    return fig


def focus_explorer(
    *,
    deltas=DELTAS,
    rhos=RHOS,
    start=(0.02, 0.5),
    precompute: bool = False,
    **options,
):
    """Sliders over δ and ρ showing the four stages of the population flow (ipywidgets).

    Each new setting integrates one flow (about a second on a CPU); settings already seen are
    cached and redraw at once; ``precompute=True`` integrates every setting of the sliders
    first (about 20 s), after which every update only redraws (well under a second).
    ``start`` is the setting shown first (one of the sliders'); ``options`` go to
    :func:`explorer_runs`. Returns the widget.
    """
    import ipywidgets as W
    import matplotlib.pyplot as plt

    options = {**options, "seed": _int_seed(options.get("seed"))}  # one for all draws
    deltas = [_setting(dl, 0.5)[0] for dl in deltas]
    rhos = [_setting(0.0, r)[1] for r in rhos]
    if not deltas or not rhos:
        raise ValueError("deltas and rhos must hold at least one value each")
    start = _setting(*start)
    if start[0] not in deltas or start[1] not in rhos:
        raise ValueError(f"start {start} is not a setting of the sliders")
    if precompute:
        explorer_runs([(dl, r) for dl in deltas for r in rhos], **options)
    delta = W.SelectionSlider(options=deltas, value=start[0], description="δ")
    rho = W.SelectionSlider(options=rhos, value=start[1], description="ρ")
    out = W.Output()

    def draw(*_):
        run = explorer_run(delta.value, rho.value, **options)
        with out:
            out.clear_output(wait=True)
            explorer_figure(run)
            plt.show()
            st = run.stages
            print(
                f"stage ends: I {st['I_end']:.0f}, II {st['II_end']:.0f}, III "
                f"{st['III_end']:.0f}; escape (σ₂ > 0.1) {st['IV_escape']:.0f}; "
                f"final loss − h = {run.loss[-1] - run.h:.2e}"
            )

    for w in (delta, rho):
        w.observe(draw, names="value")
    draw()
    return W.VBox([W.HBox([delta, rho]), out])
