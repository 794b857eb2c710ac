r"""The Part III explorer: the Gaussian covariance flow of one attention layer over (A, V, Σ₀).

In two dimensions, :func:`gaussian_view` integrates the moment equations
(:func:`attnbook.pde.gaussian_flow`) from :math:`N(0, \Sigma_0)` and reports the fate as the
package's result states it: a finite-time blow-up (its time), unbounded growth that takes
infinite time (its rate), or a flow that stays finite on the window (with the eigenvalues that
decay: clustering towards a lower rank). :func:`draw_gaussian_view` draws the eigenvalues of
:math:`\Sigma(t)` against :math:`t` and the shape of the ellipse :math:`\Sigma(t)/\operatorname{tr}\Sigma(t)`
over time; :func:`gaussian_explorer` puts sliders on the parameters (a live kernel is needed;
an update takes well under a second on a CPU) and :func:`explorer_grid` draws a static grid
of views for the HTML book.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np

from ..errors import DivergenceError
from ..validation import check_positive, check_positive_int
from .gaussian import check_covariance, gaussian_flow
from .plots import gaussian_ellipse

__all__ = [
    "EXPLORER_KINDS",
    "GaussianView",
    "sym2",
    "layer_matrices",
    "gaussian_view",
    "draw_gaussian_view",
    "explorer_grid",
    "gaussian_explorer",
]

#: the kinds the explorer offers (those with a Gaussian closure and a 2-D (A, V) layer)
EXPLORER_KINDS = ("softmax", "l2", "sinkhorn")
#: threshold on |entries| at which the flow is examined for blow-up against growth
_THRESHOLD = 1e6
#: an eigenvalue "decays" when it shrank by this factor over the second half of the window
_DECAY = 0.8
#: relative tolerance of the integration: a picture, not a claim (the chapters use 1e-10)
_RTOL = 1e-7


@dataclass(frozen=True)
class GaussianView:
    """One explorer frame: the flow of :math:`\\Sigma(t)` and its fate in words."""

    t: np.ndarray  #: (m,) times reached
    cov: np.ndarray  #: (m, 2, 2) covariances
    eigenvalues: np.ndarray  #: (m, 2) ascending eigenvalues of cov
    fate: str  #: "blow-up", "growth", "bounded" or "diverged"
    summary: str  #: one sentence with the number behind the fate
    blowup_time: float | None  #: the package's finite-time singularity, else None
    growth_rate: float | None  #: the package's exponential rate, else None
    n_decaying: int  #: eigenvalues shrinking at the end of a bounded window
    wall_s: float


def sym2(eigenvalues, angle: float) -> np.ndarray:
    """The symmetric 2 × 2 matrix with these eigenvalues, eigenvectors rotated by ``angle`` (rad)."""
    lam = np.asarray(eigenvalues, dtype=float)
    if lam.shape != (2,) or not np.all(np.isfinite(lam)):
        raise ValueError(f"eigenvalues must be two finite numbers, got {eigenvalues!r}")
    angle = float(angle)
    c, s = math.cos(angle), math.sin(angle)
    R = np.array([[c, -s], [s, c]])
    return R @ np.diag(lam) @ R.T


def layer_matrices(
    *,
    a=(1.0, -0.5),
    a_angle: float = 0.0,
    skew: float = 0.0,
    v=(1.0, 1.0),
    v_angle: float = 0.0,
    sigma=(1.0, 0.5),
    sigma_angle: float = 0.3,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""``(A, V, Σ₀)`` from the explorer's sliders.

    :math:`A = R_{a}\operatorname{diag}(a)R_a^\top + \text{skew}\,\begin{psmallmatrix}0&1\\-1&0\end{psmallmatrix}`
    (the skew part leaves :math:`A + A^\top` unchanged), :math:`V` symmetric with eigenvalues
    ``v``, :math:`\Sigma_0` with eigenvalues ``sigma`` (positive).
    """
    sig = np.asarray(sigma, dtype=float)
    if sig.shape != (2,) or not np.all(sig > 0):
        raise ValueError(f"sigma must be two positive eigenvalues, got {sigma!r}")
    J = np.array([[0.0, 1.0], [-1.0, 0.0]])
    A = sym2(a, a_angle) + float(skew) * J
    return A, sym2(v, v_angle), sym2(sig, sigma_angle)


def gaussian_view(
    A,
    V,
    cov0,
    *,
    kind: str = "softmax",
    t_max: float = 6.0,
    n_times: int = 121,
) -> GaussianView:
    r"""Integrate :math:`\Sigma(t)` from :math:`N(0, \Sigma_0)` on ``[0, t_max]`` and name its fate.

    ``kind``: one of :data:`EXPLORER_KINDS` (ℓ² with :math:`Q = A`, :math:`K = I`). The fate
    is the package's (:class:`attnbook.pde.gaussian.GaussianFlow`): ``"blow-up"`` for a
    finite-time singularity, ``"growth"`` for unbounded growth that takes infinite time,
    ``"bounded"`` when the flow stays below the threshold on the window (``n_decaying``
    eigenvalues shrank by more than 20 % over its second half: the tokens cluster along
    the others), and ``"diverged"`` when the integration itself failed.
    """
    start = time.perf_counter()
    if kind not in EXPLORER_KINDS:
        raise ValueError(f"kind must be one of {EXPLORER_KINDS}, got {kind!r}")
    t_max = check_positive(t_max, "t_max")
    n_times = check_positive_int(n_times, "n_times")
    if n_times < 3:
        raise ValueError(f"n_times must be at least 3, got {n_times}")
    S0 = check_covariance(cov0, "cov0", 2)
    t = np.linspace(0.0, t_max, n_times)
    opts = dict(kind=kind, A=A, V=V, rtol=_RTOL, atol=_RTOL * 1e-2)
    try:
        flow = gaussian_flow(np.zeros(2), S0, t, blowup_threshold=_THRESHOLD, **opts)
        if (
            flow.blew_up
        ):  # sample the approach to T* geometrically, to 1e-4 T* before it
            t_near = flow.blowup_time * (1 - np.geomspace(1, 1e-4, n_times))
            near = gaussian_flow(np.zeros(2), S0, t_near, blowup_threshold=1e12, **opts)
            flow = dataclasses.replace(flow, t=near.t, mean=near.mean, cov=near.cov)
    except DivergenceError as err:
        cov = np.asarray(err.partial)[:, 2:].reshape(-1, 2, 2)
        return _view(
            t[: len(cov)], cov, "diverged", f"the integration failed: {err}", start
        )
    eig = np.linalg.eigvalsh(flow.cov)
    if flow.blew_up:
        return _view(
            flow.t,
            flow.cov,
            "blow-up",
            f"finite-time blow-up at T* = {flow.blowup_time:.4g}",
            start,
            blowup_time=flow.blowup_time,
        )
    if flow.grew:
        return _view(
            flow.t,
            flow.cov,
            "growth",
            f"unbounded growth, no finite-time singularity (rate ≈ {flow.growth_rate:.3g})",
            start,
            growth_rate=flow.growth_rate,
        )
    half = eig[len(eig) // 2]
    decaying = int(np.sum(eig[-1] < _DECAY * half))
    text = f"finite up to t = {t_max:g}: eigenvalues {eig[-1][0]:.3g}, {eig[-1][1]:.3g}"
    if decaying:
        text += f"; {decaying} decaying (clustering towards rank {2 - decaying})"
    return _view(flow.t, flow.cov, "bounded", text, start, n_decaying=decaying)


def _view(
    t, cov, fate, summary, start, *, blowup_time=None, growth_rate=None, n_decaying=0
):
    cov = np.asarray(cov, dtype=float)
    eig = np.linalg.eigvalsh(cov) if len(cov) else np.zeros((0, 2))
    numbers = (blowup_time, growth_rate, n_decaying, time.perf_counter() - start)
    return GaussianView(np.asarray(t, dtype=float), cov, eig, fate, summary, *numbers)


def draw_gaussian_view(
    view: GaussianView, axes=None, *, n_ellipses: int = 6, title: str = ""
):
    """Eigenvalues of Σ(t) against t (left) and the ellipses of Σ(t)/tr Σ(t) (right).

    ``axes``: two matplotlib axes (default: a new 8 × 3.4 in figure). Ellipses at
    ``n_ellipses`` times, coloured from violet (t = 0) to yellow (the last time). Returns the axes.
    """
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(7.5, 3.4), layout="constrained")
    ax_eig, ax_shape = axes
    for k, style in ((1, "-"), (0, "--")):
        ax_eig.semilogy(
            view.t, view.eigenvalues[:, k], style, color="C0", label=f"λ{2 - k}"
        )
    if view.blowup_time is not None:
        ax_eig.axvline(view.blowup_time, color="C3", lw=1, ls=":", label="T*")
    ax_eig.set_xlabel("t")
    ax_eig.set_ylabel("eigenvalues of Σ(t)")
    ax_eig.legend(fontsize=9, loc="best")
    ax_eig.set_title(title or view.fate, fontsize=10)
    idx = np.unique(np.linspace(0, len(view.t) - 1, n_ellipses).round().astype(int))
    colors = plt.cm.viridis(np.linspace(0, 1, len(idx)))
    for c, i in zip(colors, idx):
        S = view.cov[i] / np.trace(view.cov[i])
        px, py = gaussian_ellipse(np.zeros(2), S, k=1.0)
        ax_shape.plot(px, py, color=c)
    ax_shape.set_aspect("equal")
    ax_shape.set_xlim(-1.05, 1.05)
    ax_shape.set_ylim(-1.05, 1.05)
    ax_shape.set_title(f"shape Σ/tr Σ, t = 0 → {view.t[-1]:.2g}", fontsize=10)
    return axes


def explorer_grid(settings: dict, *, t_max: float = 6.0, panel_size: float = 3.0):
    """A static grid of explorer views: one column per setting, eigenvalues above, shapes below.

    ``settings``: title → ``(A, V, cov0, kind)``. Returns ``(fig, views)``.
    """
    if not settings:
        raise ValueError("settings must name at least one (A, V, cov0, kind)")
    n = len(settings)
    fig, axes = plt.subplots(
        2,
        n,
        figsize=(panel_size * n + 1.2, 2 * panel_size),
        squeeze=False,
        layout="constrained",
    )
    views = {}
    for j, (name, (A, V, S0, kind)) in enumerate(settings.items()):
        view = gaussian_view(A, V, S0, kind=kind, t_max=t_max)
        draw_gaussian_view(view, axes[:, j], title=f"{name}\n{view.fate}")
        views[name] = view
    return fig, views


def gaussian_explorer(*, kind: str = "softmax", t_max: float = 6.0):
    """Sliders for (A, V, Σ₀) of the 2-D Gaussian flow; returns the widget (needs a live kernel).

    A: the eigenvalues and angle of its symmetric part and a skew part; V: eigenvalues and
    angle; Σ₀: eigenvalues and angle; the attention kind; the time window.
    """
    import ipywidgets as W

    if kind not in EXPLORER_KINDS:
        raise ValueError(f"kind must be one of {EXPLORER_KINDS}, got {kind!r}")

    def slider(desc, value, lo, hi, step=0.05):
        return W.FloatSlider(
            value=value,
            min=lo,
            max=hi,
            step=step,
            description=desc,
            continuous_update=False,
        )

    controls = {
        "a1": slider("A: λ₁", 1.0, -2.0, 2.0),
        "a2": slider("A: λ₂", -0.5, -2.0, 2.0),
        "a_angle": slider("A: angle", 0.0, 0.0, math.pi),
        "skew": slider("A: skew", 0.0, -2.0, 2.0),
        "v1": slider("V: λ₁", 1.0, -2.0, 2.0),
        "v2": slider("V: λ₂", 1.0, -2.0, 2.0),
        "v_angle": slider("V: angle", 0.0, 0.0, math.pi),
        "s1": slider("Σ₀: λ₁", 1.0, 0.05, 3.0),
        "s2": slider("Σ₀: λ₂", 0.5, 0.05, 3.0),
        "s_angle": slider("Σ₀: angle", 0.3, 0.0, math.pi),
        "t_max": slider("t max", t_max, 0.5, 20.0, 0.5),
    }
    kind_box = W.Dropdown(options=list(EXPLORER_KINDS), value=kind, description="kind")
    out = W.Output()

    def draw(*_):
        c = {k: w.value for k, w in controls.items()}
        A, V, S0 = layer_matrices(
            a=(c["a1"], c["a2"]),
            a_angle=c["a_angle"],
            skew=c["skew"],
            v=(c["v1"], c["v2"]),
            v_angle=c["v_angle"],
            sigma=(c["s1"], c["s2"]),
            sigma_angle=c["s_angle"],
        )
        view = gaussian_view(A, V, S0, kind=kind_box.value, t_max=c["t_max"])
        with out:
            out.clear_output(wait=True)
            print(view.summary)
            draw_gaussian_view(view)
            plt.show()

    for w in (*controls.values(), kind_box):
        w.observe(draw, names="value")
    draw()
    names = list(controls)
    columns = [W.VBox([controls[k] for k in names[i : i + 4]]) for i in (0, 4, 8)]
    return W.VBox([W.HBox([kind_box]), W.HBox(columns), out])
