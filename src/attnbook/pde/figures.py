r"""The covariance flows of every attention kind, batched, and the figures drawn from them.

The chapter *The authors' figures* reproduces the figure set of Castin et al. (2025) from
attnbook's own equations. Two pieces live here:

* :func:`covariance_rhs` and :func:`batched_covariance_flow` — the zero-mean covariance ODE
  :math:`\dot\Sigma = J\Sigma + \Sigma J^\top` of softmax, ℓ², multi-head softmax and Sinkhorn
  attention for a batch of ``B`` systems at once (torch, float64), each system with its own
  parameters if wanted. The equations are those of :mod:`attnbook.pde.symbolic` (tested
  against :func:`attnbook.pde.gaussian.moment_field`):

  - softmax: :math:`J = V\Sigma A`;
  - multi-head softmax: :math:`J = \sum_h V_h\Sigma A_h`;
  - ℓ² (kernel :math:`e^{-|Qx - Ky|^2}`): :math:`J = 2V(I + 2\Sigma K^\top K)^{-1}\Sigma K^\top Q`;
  - Sinkhorn (:math:`\varepsilon = 1`): :math:`J\Sigma = 2V\Sigma A R(I + M^{1/2})^{-1}R`,
    :math:`R = \Sigma^{1/2}`, :math:`M = I + 4RA^\top\Sigma AR` (no inverse of Σ or A).

* Plot helpers: 2×2 flows in the PSD cone coloured by their start, their trace-normalised
  direction in the unit disc, and limiting-rank histograms that show the draws above a bound.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..arrays import numpy_in_numpy_out
from ..attention import resolve_kind
from ..flows import check_adaptive_method, check_times
from ..linalg import check_psd, psd_sqrt
from ..validation import as_float64_array, check_positive, check_positive_int
from .gaussian import CovarianceFlow, frozen_batch_flow
from .plots import cone_coordinates

__all__ = [
    "AUTHORS_DRAWS",
    "FIGURE_KINDS",
    "authors_draws",
    "authors_layer",
    "covariance_rhs",
    "batched_covariance_flow",
    "multihead_blocks",
    "trace_one_grid",
    "disc_coordinates",
    "rank_counts",
    "plot_cone_paths",
    "plot_disc_paths",
    "plot_rank_histogram",
]

#: The kinds whose covariance flows the authors draw.
FIGURE_KINDS = ("softmax", "l2", "multihead", "sinkhorn")


def _t(x, name: str) -> torch.Tensor:
    return torch.as_tensor(as_float64_array(x, name))


def _l2_params(d: int, A, Q, K):
    """``(KᵀQ, KᵀK)`` of the ℓ² kernel :math:`e^{-|Qx - Ky|^2}`, with a head axis."""
    if A is not None or Q is None or K is None:
        raise ValueError("kind 'l2' takes Q and K (kernel e^{-|Qx - Ky|²}), not A")
    Qt, Kt = _t(Q, "Q"), _t(K, "K")
    if Qt.shape != Kt.shape or Qt.ndim not in (2, 3) or Qt.shape[-1] != d:
        raise ValueError(
            f"Q and K must have one shape (k, {d}) or (B, k, {d}), got "
            f"{tuple(Qt.shape)} and {tuple(Kt.shape)}"
        )
    return (Kt.mT @ Qt).unsqueeze(-3), (Kt.mT @ Kt).unsqueeze(-3)


def _score_matrices(kind: str, d: int, A, Q, K) -> torch.Tensor:
    """``A`` of softmax, multi-head softmax or Sinkhorn, with a head axis."""
    if Q is not None or K is not None:
        raise ValueError(f"kind {kind!r} takes A, not Q and K")
    if A is None:
        raise ValueError(f"kind {kind!r} needs A, the score matrix (d, d)")
    At = _t(A, "A")
    want = (3, 4) if kind == "multihead" else (2, 3)
    if At.ndim not in want or At.shape[-2:] != (d, d):
        form = (
            "(H, d, d) or (B, H, d, d)"
            if kind == "multihead"
            else "(d, d) or (B, d, d)"
        )
        raise ValueError(f"A must be {form} with d = {d}, got {tuple(At.shape)}")
    if kind != "multihead":
        At = At.unsqueeze(-3)
    return At


def _value_matrices(kind: str, d: int, V, At: torch.Tensor) -> torch.Tensor:
    """``V`` (default: the identity) with a head axis, one matrix per head of ``At``."""
    if V is None:
        eye = torch.eye(d, dtype=torch.float64)
        return eye.expand(*At.shape[:-2], d, d)
    Vt = _t(V, "V")
    if Vt.shape[-2:] != (d, d):
        raise ValueError(f"V must end in ({d}, {d}), got {tuple(Vt.shape)}")
    if kind != "multihead":
        Vt = Vt.unsqueeze(-3)
    if Vt.shape[-3] != At.shape[-3]:
        raise ValueError(
            f"V must have one matrix per head ({At.shape[-3]}), got {Vt.shape[-3]}"
        )
    return Vt


def _params(kind: str, d: int, A, V, Q, K):
    """Validated parameters with a head axis: ``A, V, G`` of shape ``(..., H, d, d)``."""
    if kind == "l2":
        At, G = _l2_params(d, A, Q, K)
    else:
        At, G = _score_matrices(kind, d, A, Q, K), None
    return At, _value_matrices(kind, d, V, At), G


def _rhs(S: torch.Tensor, kind: str, A, V, G) -> torch.Tensor:
    Sh = S.unsqueeze(-3)  # (B, 1, d, d): broadcast over heads
    if kind == "l2":
        eye = torch.eye(S.shape[-1], dtype=S.dtype, device=S.device)
        J = 2 * V @ torch.linalg.solve(eye + 2 * Sh @ G, Sh @ A)
        R = (J @ Sh).sum(-3)
    elif kind == "sinkhorn":
        Rt = psd_sqrt(Sh, check=False)  # a covariance along the flow: PSD
        M = Rt @ A.mT @ Sh @ A @ Rt
        mw, mU = torch.linalg.eigh((M + M.mT) / 2)
        inner = (mU / (1 + (1 + 4 * mw.clamp(min=0)).sqrt()).unsqueeze(-2)) @ mU.mT
        R = (2 * V @ Sh @ A @ Rt @ inner @ Rt).sum(-3)
    else:
        R = (V @ Sh @ A @ Sh).sum(-3)
    return R + R.mT


@numpy_in_numpy_out("cov")
def covariance_rhs(cov, *, kind: str, A=None, V=None, Q=None, K=None):
    r""":math:`\dot\Sigma` of the zero-mean Gaussian flow for a batch ``cov`` ``(B, d, d)`` or ``(d, d)``.

    ``kind``: softmax, l2, multihead or sinkhorn. softmax and Sinkhorn take ``A`` ``(d, d)``
    or one per member ``(B, d, d)``; multihead takes stacks ``A``, ``V`` of shape
    ``(H, d, d)`` (or ``(B, H, d, d)``), ``V[h]`` the output matrix :math:`V_h` of head ``h``;
    ℓ² takes ``Q``, ``K`` ``(k, d)`` or ``(B, k, d)``. ``V`` defaults to the identity. No
    scaling is applied: pass ``A = KᵀQ/√d`` for the authors' convention. NumPy in, NumPy out.
    """
    kind = resolve_kind(kind, FIGURE_KINDS)
    S = check_psd(_t(cov, "cov"), "cov")
    if S.ndim not in (2, 3) or S.shape[-1] != S.shape[-2]:
        raise ValueError(f"cov must be (d, d) or (B, d, d), got {tuple(S.shape)}")
    return _rhs(S, kind, *_params(kind, S.shape[-1], A, V, Q, K))


def batched_covariance_flow(
    cov0,
    t,
    *,
    kind: str,
    A=None,
    V=None,
    Q=None,
    K=None,
    max_trace: float = 1e3,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    method: str = "dopri5",
) -> CovarianceFlow:
    r"""Integrate :func:`covariance_rhs` for ``B`` systems at once (float64).

    ``cov0``: ``(B, d, d)`` (or ``(d, d)``); parameters as in :func:`covariance_rhs`. A member
    whose trace passes ``max_trace`` is frozen and flagged ``exploded`` (the authors' stopping
    rule; for ℓ² and Sinkhorn this marks fast growth, not a finite-time singularity). Returns
    :class:`attnbook.pde.gaussian.CovarianceFlow` with ``cov`` of shape
    ``(len(t), B, d, d)``.

    ``method`` goes to :func:`attnbook.flows.odeint`: adaptive ``"dopri5"`` (the default), or
    a stiff ``"bdf"``, ``"radau"`` or ``"lsoda"``. A flow that converges onto a low-rank limit
    is stiff there (its fast directions decay at a rate set by the large eigenvalues), and one
    explicit step size serves the whole batch, so over long horizons the stiff methods can be
    many times cheaper. They estimate the Jacobian block by block (the members are independent).
    """
    kind = resolve_kind(kind, FIGURE_KINDS)
    S0 = check_psd(_t(cov0, "cov0"), "cov0")
    if S0.ndim == 2:
        S0 = S0[None]
    if S0.ndim != 3 or S0.shape[-1] != S0.shape[-2]:
        raise ValueError(f"cov0 must be (B, d, d) or (d, d), got {tuple(S0.shape)}")
    max_trace = check_positive(max_trace, "max_trace")
    method = check_adaptive_method(method)
    times = check_times(t)
    params = _params(kind, S0.shape[-1], A, V, Q, K)

    def field(_t, S):
        return _rhs(S, kind, *params)

    opts = dict(rtol=rtol, atol=atol, max_abs=max(1e8, 10 * max_trace))
    flow = frozen_batch_flow(
        field, S0, times, max_trace=max_trace, method=method, opts=opts
    )
    flow.cov = (flow.cov + flow.cov.transpose(0, 1, 3, 2)) / 2
    return flow


#: The panel groups of the authors' ``2d_plots.py`` whose matrices are random draws.
AUTHORS_DRAWS = ("collapse", "line", "two-lines", "both", "explosion")


def _first_draw(rng, accept):
    # the authors draw (Q, K) Gaussian until A + Aᵀ = KᵀQ + QᵀK passes their test (≤ 1000 tries)
    for _ in range(1000):
        Q, K = rng.randn(2, 2), rng.randn(2, 2)
        if accept(np.linalg.eigvalsh(K.T @ Q + Q.T @ K)):
            return Q, K
    raise RuntimeError("no draw passed the authors' test in 1000 tries")


def authors_draws(figure: str) -> dict:
    r"""``Q, K, V`` (2×2, or ``Q`` 1×2) of one panel group of the authors' ``2d_plots.py``.

    Drawn as their script draws them: NumPy's legacy Mersenne Twister (``RandomState``, the
    stream of ``np.random.seed``) with the seeds the script sets, in its order of calls.
    ``figure`` is one of :data:`AUTHORS_DRAWS`:

    - ``"collapse"`` (seed 35): ``Q`` uniform on [0, 1), ``K = −Q``, ``V = GGᵀ`` with ``G``
      Gaussian;
    - ``"line"`` (seed 36): ``Q = qᵀ`` with ``q`` a Gaussian unit vector, ``K = −Q``, ``V = I``
      (their script draws a ``V`` and does not pass it);
    - ``"two-lines"``: the first Gaussian ``(Q, K)`` from seed 36 with ``A + Aᵀ`` indefinite,
      ``V`` Gaussian from seed 32;
    - ``"both"``: the same ``(Q, K)``, ``V`` from seed 35 after a discarded 8×7 draw;
    - ``"explosion"``: the first Gaussian ``(Q, K)`` from seed 33 with ``A + Aᵀ ≻ 0``,
      ``V = I``.

    The scaling ``A = KᵀQ/√d`` is left to the caller (the chapter passes it as their code does).
    """
    if figure not in AUTHORS_DRAWS:
        raise ValueError(f"figure must be one of {AUTHORS_DRAWS}, got {figure!r}")
    RS = np.random.RandomState
    if figure == "collapse":
        rng = RS(35)
        Q = rng.rand(2, 2)
        G = rng.randn(2, 2)
        return {"Q": Q, "K": -Q, "V": G @ G.T}
    if figure == "line":
        q = RS(36).randn(1, 2)
        q = q / np.linalg.norm(q)
        return {"Q": q, "K": -q, "V": np.eye(2)}
    if figure == "explosion":
        Q, K = _first_draw(RS(33), lambda w: w[0] > 0)
        return {"Q": Q, "K": K, "V": np.eye(2)}
    Q, K = _first_draw(RS(36), lambda w: w[0] * w[1] < 0)
    if figure == "two-lines":
        return {"Q": Q, "K": K, "V": RS(32).randn(2, 2)}
    rng = RS(35)
    rng.randn(8, 7)  # the script draws and discards this before V
    return {"Q": Q, "K": K, "V": rng.randn(2, 2)}


def multihead_blocks(Q, K, V=None, *, n_heads: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Per-head ``A_h = K_hᵀQ_h/√k`` and ``V_h = W_hᵀV_h`` (``W = I``) from row blocks, ``(H, d, d)``.

    ``Q``, ``K``: ``(H·k, d)``; head ``h`` uses rows ``h·k … (h+1)·k − 1`` of ``Q``, ``K`` and
    of ``V`` (``(d, d)``, default the identity), and writes its output to the same rows.
    """
    Qn, Kn = as_float64_array(Q, "Q"), as_float64_array(K, "K")
    n_heads = check_positive_int(n_heads, "n_heads")
    if Qn.ndim != 2 or Qn.shape != Kn.shape or Qn.shape[0] % n_heads:
        raise ValueError(
            f"Q and K must share a shape (H·k, d) with H = {n_heads} dividing the rows, "
            f"got {Qn.shape} and {Kn.shape}"
        )
    d = Qn.shape[1]
    Vn = np.eye(d) if V is None else as_float64_array(V, "V")
    if Vn.shape != (d, d) or Qn.shape[0] != d:
        raise ValueError(f"V must be ({d}, {d}) and Q must have d = {d} rows")
    k = d // n_heads
    rows = [slice(h * k, (h + 1) * k) for h in range(n_heads)]
    A = np.stack([Kn[r].T @ Qn[r] / math.sqrt(k) for r in rows])
    W = np.eye(d)
    return A, np.stack([W[r].T @ Vn[r] for r in rows])


def trace_one_grid(n_side: int, *, radius: float = 0.5) -> np.ndarray:
    r"""Trace-one 2×2 covariances on an ``n_side × n_side`` grid of the disc, ``(B, 2, 2)``.

    The grid of points :math:`(x, y) \in [-r, r]^2` with :math:`x^2 + y^2 < 1` gives
    :math:`\Sigma = \tfrac12\begin{pmatrix}1 + x & y\\ y & 1 - x\end{pmatrix}` (cone coordinates
    :math:`(x, y, 1)`), strictly positive definite. ``radius`` ≤ 1.
    """
    n_side = check_positive_int(n_side, "n_side", minimum=2)
    radius = check_positive(radius, "radius")
    if radius > 1:
        raise ValueError(f"radius must be at most 1, got {radius}")
    g = np.linspace(-radius, radius, n_side)
    x, y = (z.ravel() for z in np.meshgrid(g, g))
    keep = x**2 + y**2 < 1 - 1e-9
    x, y = x[keep], y[keep]
    return 0.5 * np.stack([np.stack([1 + x, y], -1), np.stack([y, 1 - x], -1)], -2)


def disc_coordinates(cov) -> np.ndarray:
    r"""Trace-normalised cone coordinates :math:`((a - b)/(a + b), 2c/(a + b))`, ``(..., 2)``.

    The unit circle holds the rank-one matrices, the centre multiples of the identity.
    """
    P = cone_coordinates(as_float64_array(cov, "cov"))
    return P[..., :2] / P[..., 2:]


def rank_counts(ranks, d: int, *, bound: int | None = None) -> dict:
    """Histogram of integer ``ranks`` over ``0..d`` and how many exceed ``bound``."""
    r = np.asarray(ranks)
    if r.ndim != 1 or not np.issubdtype(r.dtype, np.integer):
        raise TypeError("ranks must be a 1-D array of integers")
    d = check_positive_int(d, "d")
    if r.size and (r.min() < 0 or r.max() > d):
        raise ValueError(f"ranks must lie in 0..{d}")
    bound = math.ceil(d / 2) if bound is None else bound
    return dict(
        counts=np.bincount(r, minlength=d + 1),
        above=int((r > bound).sum()),
        bound=bound,
        n=int(r.size),
    )


def _colors(values, cmap: str = "viridis"):
    import matplotlib as mpl

    v = np.asarray(values, float)
    span = np.ptp(v) if v.size else 1.0
    return mpl.colormaps[cmap]((v - v.min()) / (span if span > 0 else 1.0))


def plot_cone_paths(
    ax,
    cov,
    *,
    color_by=None,
    line=None,
    max_trace: float = 1.2,
    title: str = "",
    elev: float = 20,
    azim: float = -80,
) -> None:
    """2×2 flows ``cov`` ``(len(t), B, 2, 2)`` in the PSD cone of a 3-D axis, end points as dots;
    the axes are the cone coordinates :math:`(a - b, 2c, a + b)` of
    :math:`\\Sigma = \\begin{pmatrix} a & c \\\\ c & b \\end{pmatrix}`.

    Colours follow ``color_by`` (default: the start's off-diagonal entry); ``line``: a 2×2
    rank-one matrix, or a stack ``(m, 2, 2)`` of them, whose rays are drawn in black (predicted
    limit directions). A flow is drawn
    while its trace stays below ``max_trace``.
    """
    cov = as_float64_array(cov, "cov")
    th, z = np.meshgrid(np.linspace(0, 2 * np.pi, 48), np.linspace(0, max_trace, 8))
    ax.plot_wireframe(z * np.cos(th), z * np.sin(th), z, color="0.85", lw=0.4)
    P = cone_coordinates(cov)
    colors = _colors(cov[0, :, 0, 1] if color_by is None else color_by)
    tr = np.trace(cov, axis1=-2, axis2=-1)
    for b in range(cov.shape[1]):
        keep = tr[:, b] < max_trace
        ax.plot(*P[keep, b].T, color=colors[b], lw=0.8, alpha=0.7)
        if keep[-1]:
            ax.scatter(*P[-1, b], color=colors[b], s=6)
    if line is not None:
        lines = as_float64_array(line, "line")
        for L in cone_coordinates(lines.reshape(-1, 2, 2)):
            ray = np.linspace(0, max_trace / L[2], 2)[:, None] * L
            ax.plot(*ray.T, color="k", lw=1.5)
    ax.view_init(elev=elev, azim=azim)
    ax.set(
        zlim=(0, max_trace), xlim=(-max_trace, max_trace), ylim=(-max_trace, max_trace)
    )
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_zticks([])
    # the cone's coordinates of Σ = [[a, c], [c, b]] (cone_coordinates), close to the box
    for axis, label in (("x", "$a - b$"), ("y", "$2c$"), ("z", "$a + b$")):
        getattr(ax, f"set_{axis}label")(label, labelpad=-12)
    ax.set_title(title)


def plot_disc_paths(ax, cov, *, color_by=None, marks=None, title: str = "") -> None:
    """Trace-normalised 2×2 flows in the unit disc (rank one on the circle), end points as dots.

    ``marks``: points ``(m, 2)`` of the disc drawn as black crosses (predicted end points).
    """
    D = disc_coordinates(cov)
    colors = _colors(
        as_float64_array(cov, "cov")[0, :, 0, 1] if color_by is None else color_by
    )
    th = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(th), np.sin(th), color="0.5", lw=0.8)
    for b in range(D.shape[1]):
        ax.plot(*D[:, b].T, color=colors[b], lw=0.7, alpha=0.7)
        ax.scatter(*D[-1, b], color=colors[b], s=6, zorder=3)
    if marks is not None:
        ax.scatter(*np.asarray(marks, float).T, marker="x", color="k", s=40, zorder=4)
    ax.set_aspect("equal")
    ax.set(xlim=(-1.08, 1.08), ylim=(-1.08, 1.08))
    ax.set_xlabel("(a − b)/tr Σ")
    ax.set_ylabel("2c/tr Σ")
    ax.set_title(title)


def plot_rank_histogram(
    ax, ranks, d: int, *, bound: int | None = None, title: str = ""
):
    """Bar chart of limiting ranks ``0..d``; bars above ``bound`` (default ⌈d/2⌉) in red."""
    rc = rank_counts(ranks, d, bound=bound)
    xs = np.arange(d + 1)
    colors = ["#1f77b4" if x <= rc["bound"] else "#d62728" for x in xs]  # above: red
    ax.bar(xs, rc["counts"], color=colors)
    ax.set_xticks(xs)
    ax.set_xlabel("rank at the final time")
    ax.set_title(title or f"d = {d}: {rc['above']} of {rc['n']} above {rc['bound']}")
    return rc


def authors_layer(kind: str, Q, d: int) -> dict:
    """The layer of the authors' rank histograms for queries ``Q`` (``(..., k, d)``), K = −Q.

    Their scaling: softmax takes ``A = KᵀQ/√d``; ℓ² takes ``Q/√d`` and ``K`` (keyword arguments
    of :func:`batched_covariance_flow`). NumPy in, NumPy out.
    """
    kind = resolve_kind(kind)
    if kind not in ("softmax", "l2"):
        raise ValueError(
            f"kind must be 'softmax' or 'l2' for the rank histograms, got {kind!r}"
        )
    d = check_positive_int(d, "d")
    Q = as_float64_array(Q, "Q")
    if Q.ndim < 2 or Q.shape[-1] != d:
        raise ValueError(f"Q must have shape (..., k, {d}), got {Q.shape}")
    if kind == "softmax":
        return dict(A=-np.swapaxes(Q, -1, -2) @ Q / math.sqrt(d))
    return dict(Q=Q / math.sqrt(d), K=-Q)
