r"""Tokens as interacting particles: the velocity field of a deep Transformer, every variant.

A Transformer without MLP, LayerNorm or the :math:`-x_i` term, read as a flow through depth
:math:`t` (Castin, Ablin, Carrillo & Peyré, 2025), moves each token :math:`x_i \in \mathbb R^d` by

.. math::  \dot x_i = \Gamma_{\mu_n}(x_i), \qquad \mu_n = \sum_j w_j \delta_{x_j}

(uniform masses :math:`w_j = 1/n` unless stated). With :math:`A := K^\top Q / \sqrt{k}`, so that
:math:`\langle Qx, Ky\rangle/\sqrt{k} = \langle Ax, y\rangle`, the variants are

==========  ===========================================================================
kind        :math:`\Gamma_\mu(x)`
==========  ===========================================================================
softmax     :math:`V \int e^{\langle Ax,y\rangle} y\,d\mu(y) / \int e^{\langle Ax,y\rangle} d\mu(y)`
l2          same with the kernel :math:`e^{-|Qx-Ky|^2}` (no :math:`1/\sqrt{k}`; with only ``A``
            given, :math:`Q = A`, :math:`K = I`, i.e. the kernel :math:`e^{-|Ax-y|^2}`)
sinkhorn    :math:`V\int y\,\pi(dy|x)`, :math:`\pi = e^{f(x)+g(y)+\langle Ax,y\rangle}\mu\otimes\mu`
            with both marginals :math:`\mu` (entropic OT, :math:`\varepsilon = 1`)
sigmoid     :math:`V\int \sigma(\langle Ax,y\rangle + b)\, y\,d\mu(y)` (no normalisation)
linear      :math:`V\int \langle Ax,y\rangle\, y\,d\mu(y)`
multihead   :math:`\sum_h C_h \int \mathrm{softmax}_h(y)\, y\,d\mu(y)` (softmax in every head)
==========  ===========================================================================

**Heads.** Any kind runs with several heads, whose outputs are summed. Give ``A`` as a stack
``(H, d, d)``, or ``Q, K`` as stacks ``(H, k, d)``, or ``Q, K`` of shape ``(k, d)`` with
``heads=H`` (head ``h`` uses rows ``h k/H … (h+1) k/H - 1`` and :math:`A_h = K_h^\top Q_h /
\sqrt{k/H}`). ``V`` is ``(d, d)`` (the same :math:`C_h = V` in every head) or ``(H, d, d)``.

**Masks.** ``causal=True`` puts token ``i`` at position :math:`s_i = i/n` (positions never move)
and lets it see tokens ``j <= i`` only: normalised kernels are normalised over the visible
tokens, and sigmoid/linear keep the mean-field mass :math:`w_j` (so :math:`1/n`, not
:math:`1/(i+1)` as in :func:`attnbook.attention.attention_weights`). ``sink_mass=m`` makes token 0
an *attention sink*: an atom of mass ``m`` at :math:`s = 0`, the other tokens sharing ``1 - m``.
Sinkhorn has no causal version (the only doubly stochastic lower-triangular matrix is ``I``).

Defaults: ``A = I`` (or ``Q = K = I``) and ``V = I``. Inputs may be NumPy arrays (the result is
then NumPy) or tensors on any device; ``x`` is ``(n, d)`` or batched ``(..., n, d)``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from ..arrays import numpy_in_numpy_out
from ..attention import (
    l2_score_terms,
    masked_softmax,
    resolve_kind,
    sinkhorn,
    softmax_pool,
)
from ..device import as_generator, default_dtype, resolve_device
from ..errors import BlowUpError
from ..flows import check_times, odeint
from ..linalg import check_psd, psd_sqrt
from ..validation import (
    as_tensor,
    check_choice,
    check_finite,
    check_ndim,
    check_positive,
    check_positive_int,
)

__all__ = [
    "KINDS",
    "AttentionParams",
    "resolve_params",
    "attention_matrix",
    "velocity",
    "simulate",
    "interaction_energy",
    "partition_function",
    "sample_gaussian",
    "sink_weights",
    "particle_masses",
    "check_cloud",
    "prepare_inputs",
    "LayerInputs",
    "interaction_matrices",
    "BlowUpError",
]

KINDS = ("softmax", "l2", "sinkhorn", "sigmoid", "linear", "multihead")


@dataclass
class AttentionParams:
    r"""Parameters of one attention layer, with an explicit head axis.

    ``A``: ``(H, d, d)`` with :math:`\langle A_h x, y\rangle` the score (for ``l2``,
    :math:`K_h^\top Q_h` without scaling); ``G``: ``(H, d, d)`` the ℓ² key Gram matrix
    :math:`K_h^\top K_h` (None for other kinds); ``V``: ``(H, d, d)`` the value/output maps.
    """

    kind: str
    A: torch.Tensor
    V: torch.Tensor
    G: torch.Tensor | None = None

    @property
    def heads(self) -> int:
        return self.A.shape[0]


def _matrix(M, name: str, dtype, device) -> torch.Tensor:
    t = as_tensor(M, name)
    t = check_finite(t, name)
    return t.to(dtype=dtype, device=device)


def _kind(kind) -> str:
    # aliases ("multi-head", "ℓ²", ...) from the one table, attention.KIND_ALIASES
    return resolve_kind(kind, KINDS)


def resolve_params(
    d: int,
    *,
    kind: str,
    A=None,
    V=None,
    Q=None,
    K=None,
    heads=None,
    dtype=None,
    device=None,
) -> AttentionParams:
    """Check ``A, V, Q, K, heads`` against the token dimension ``d`` and stack them per head.

    Raises ``ValueError`` naming the argument for wrong shapes, both ``A`` and ``Q/K`` given,
    a head count that does not divide the rows of ``Q``/``K`` or disagrees with the stacks.
    """
    kind = _kind(kind)
    dtype, device = default_dtype(dtype), resolve_device(device)
    if heads is not None:
        heads = check_positive_int(heads, "heads")
    if A is not None and (Q is not None or K is not None):
        raise ValueError("give either A or (Q, K), not both")
    if (Q is None) != (K is None):
        raise ValueError("Q and K must be given together")
    base = "softmax" if kind == "multihead" else kind
    if A is not None:
        A, G = _score_maps_from_A(A, d, heads, base == "l2", dtype, device)
    elif Q is not None:
        A, G = _score_maps_from_QK(Q, K, d, heads, base == "l2", dtype, device)
    else:
        h = heads or 1
        A = torch.eye(d, dtype=dtype, device=device).expand(h, d, d).clone()
        G = A.clone() if base == "l2" else None
    return AttentionParams(
        kind=base, A=A, V=_value_maps(V, d, A.shape[0], dtype, device), G=G
    )


def _score_maps_from_A(A, d, heads, l2, dtype, device):
    """``(A, G)`` stacked per head from a given ``A`` (ℓ²: ``K = I``, so ``G = I``)."""
    A = _matrix(A, "A", dtype, device)
    if A.dim() == 2:
        A = A[None]
    if A.dim() != 3 or A.shape[-1] != A.shape[-2]:
        raise ValueError(
            f"A must be a square matrix (d, d) or a stack (heads, d, d), got shape "
            f"{tuple(A.shape)}"
        )
    if A.shape[-1] != d:
        raise ValueError(
            f"A must be {d}x{d} to match x's dimension d = {d}, got shape {tuple(A.shape)}"
        )
    if heads is not None and A.shape[0] != heads:
        raise ValueError(
            f"heads = {heads} disagrees with A's stack of {A.shape[0]} matrices"
        )
    G = torch.eye(d, dtype=dtype, device=device).expand_as(A).clone() if l2 else None
    return A, G


def _score_maps_from_QK(Q, K, d, heads, l2, dtype, device):
    """``(A, G)`` per head from ``Q, K``: ``A = K^T Q`` (scaled by 1/√k except for ℓ²)."""
    Q = _matrix(Q, "Q", dtype, device)
    K = _matrix(K, "K", dtype, device)
    if Q.shape != K.shape:
        raise ValueError(
            f"Q and K must have the same shape, got {tuple(Q.shape)} and {tuple(K.shape)}"
        )
    if Q.dim() not in (2, 3) or Q.shape[-1] != d:
        raise ValueError(
            f"Q and K must have shape (k, {d}) or (heads, k, {d}) to match x's "
            f"dimension d = {d}, got {tuple(Q.shape)}"
        )
    if Q.dim() == 2:
        h = heads or 1
        if Q.shape[0] % h:
            raise ValueError(
                f"heads = {h} must divide the number of rows of Q and K ({Q.shape[0]})"
            )
        Q = Q.reshape(h, Q.shape[0] // h, d)
        K = K.reshape(h, K.shape[0] // h, d)
    elif heads is not None and Q.shape[0] != heads:
        raise ValueError(
            f"heads = {heads} disagrees with the {Q.shape[0]} heads stacked in Q and K"
        )
    KtQ = K.mT @ Q
    if l2:
        return KtQ, K.mT @ K
    return KtQ / math.sqrt(Q.shape[-2]), None


def _value_maps(V, d, H, dtype, device) -> torch.Tensor:
    """``V`` stacked per head (default: the identity in every head)."""
    if V is None:
        return torch.eye(d, dtype=dtype, device=device).expand(H, d, d).clone()
    V = _matrix(V, "V", dtype, device)
    if V.dim() == 2:
        V = V[None].expand(H, *V.shape)
    if V.dim() != 3 or V.shape[-2:] != (d, d):
        raise ValueError(
            f"V must be {d}x{d} (or a stack ({H}, {d}, {d})), got shape {tuple(V.shape)}"
        )
    if V.shape[0] != H:
        raise ValueError(
            f"V must have one matrix per head ({H}), got a stack of {V.shape[0]}"
        )
    return V


def sink_weights(n: int, sink_mass: float, *, dtype=None, device=None) -> torch.Tensor:
    """Particle masses with an attention sink: token 0 carries ``sink_mass``, the others share the rest."""
    dtype, device = default_dtype(dtype), resolve_device(device)
    n = check_positive_int(n, "n", minimum=2)
    if (
        isinstance(sink_mass, bool)
        or not isinstance(sink_mass, numbers.Real)
        or not 0 <= sink_mass < 1
    ):
        raise ValueError(f"sink_mass must be a number in [0, 1), got {sink_mass!r}")
    if sink_mass == 0:
        return torch.full((n,), 1.0 / n, dtype=dtype, device=device)
    w = torch.full((n,), (1.0 - sink_mass) / (n - 1), dtype=dtype, device=device)
    w[0] = sink_mass
    return w


@dataclass(frozen=True)
class LayerInputs:
    """Checked inputs of one attention layer on a cloud (from :func:`prepare_inputs`)."""

    X: torch.Tensor  #: tokens (..., n, d)
    params: AttentionParams  #: per-head A, V (and ℓ² key Gram matrices)
    masses: torch.Tensor  #: (n,) token masses
    causal: bool
    bias: float
    uniform: bool  #: all masses equal (no log-mass bias needed)


def particle_masses(
    n: int, weights=None, sink_mass: float = 0.0, *, dtype=None, device=None
) -> torch.Tensor:
    """The masses ``(n,)`` of the tokens: ``weights`` checked (positive, summing to one), or
    uniform, or with an attention sink of mass ``sink_mass`` on token 0."""
    dtype, device = default_dtype(dtype), resolve_device(device)
    if weights is not None and sink_mass:
        raise ValueError("give either weights or sink_mass, not both")
    if weights is None:
        return (
            sink_weights(n, sink_mass or 0.0, dtype=dtype, device=device)
            if n >= 2
            else torch.ones(1, dtype=dtype, device=device)
        )
    w = check_finite(as_tensor(weights, "weights"), "weights").to(
        dtype=dtype, device=device
    )
    if w.shape != (n,):
        raise ValueError(
            f"weights must have shape ({n},) (one mass per token), got {tuple(w.shape)}"
        )
    if bool((w <= 0).any()):
        raise ValueError("weights must be positive")
    if abs(float(w.sum()) - 1) > 1e-6:
        raise ValueError(f"weights must sum to 1, sum to {float(w.sum()):.6g}")
    return w


def check_cloud(x, name: str = "x") -> torch.Tensor:
    """A finite tensor of tokens ``(..., n, d)`` (``TypeError``/``ValueError`` naming ``name``)."""
    t = check_ndim(as_tensor(x, name), name, 2, at_least=True)
    return check_finite(t, name)


def prepare_inputs(
    x,
    *,
    kind,
    A=None,
    V=None,
    Q=None,
    K=None,
    heads=None,
    causal=False,
    weights=None,
    sink_mass=0.0,
    bias=0.0,
):
    """Checked :class:`LayerInputs` for the particle functions (validated once per call).

    The argument checks shared by :func:`attention_matrix`, :func:`velocity`,
    :func:`simulate` and :func:`attnbook.pde.particle_jacobian`; their ``**layer`` keywords
    are the keywords here.
    """
    X = check_cloud(x)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if (
        isinstance(bias, bool)
        or not isinstance(bias, numbers.Real)
        or not math.isfinite(bias)
    ):
        raise TypeError(f"bias must be a finite real number, got {bias!r}")
    n, d = X.shape[-2], X.shape[-1]
    p = resolve_params(
        d, kind=kind, A=A, V=V, Q=Q, K=K, heads=heads, dtype=X.dtype, device=X.device
    )
    if causal and p.kind == "sinkhorn":
        raise ValueError(
            "kind 'sinkhorn' has no causal version: the only doubly stochastic "
            "lower-triangular matrix is the identity"
        )
    w = particle_masses(n, weights, sink_mass, dtype=X.dtype, device=X.device)
    return LayerInputs(X, p, w, causal, float(bias), weights is None and not sink_mass)


def _sinkhorn_options(dtype, tol, n_iters):
    tol = tol if tol is not None else (1e-10 if dtype == torch.float64 else 1e-5)
    return check_positive(tol, "sinkhorn_tol"), check_positive_int(
        n_iters, "n_sinkhorn_iters"
    )


def _logits(X: torch.Tensor, p: AttentionParams) -> torch.Tensor:
    r"""Scores :math:`\langle A_h x_i, x_j\rangle` (ℓ²: :math:`-|Q_h x_i - K_h x_j|^2` up to
    a row constant, through :func:`attnbook.attention.l2_score_terms`)."""
    Xh = X.unsqueeze(-3)  # (..., 1, n, d)
    AX = Xh @ p.A.mT  # (..., H, n, d): A_h x_i (ℓ²: K^T Q x_i)
    if p.kind == "l2":
        q, k, b = l2_score_terms(AX, Xh, p.G)
        return q @ k.mT + b.unsqueeze(-2)
    return AX @ Xh.mT  # (..., H, n, n)


def interaction_matrices(
    X: torch.Tensor,
    p: AttentionParams,
    w: torch.Tensor,
    *,
    causal: bool = False,
    bias: float = 0.0,
    sinkhorn_tol: float = 1e-10,
    n_sinkhorn_iters: int = 2000,
    uniform: bool = True,
    sinkhorn_state: dict | None = None,
) -> torch.Tensor:
    """The matrices :math:`P^h_{ij}` (see :func:`attention_matrix`) on checked inputs.

    ``X, p, w`` as in :class:`LayerInputs` (no validation here: the inner loop of
    solvers and Jacobians). ``uniform``: the masses are all equal (skips the log-mass bias).
    ``sinkhorn_state``: a dict that carries Sinkhorn's column potentials from one call to the
    next (a warm start between the stages and steps of an integrator); ``None``: cold start.
    """
    sink_tol, sink_iter = sinkhorn_tol, n_sinkhorn_iters
    n = X.shape[-2]
    L = _logits(X, p)
    mask = (
        torch.ones(n, n, dtype=torch.bool, device=X.device).tril() if causal else None
    )
    if p.kind == "sinkhorn":
        # the plan from μ to itself, each token carrying its mass w_i (attention.sinkhorn)
        init = None
        if sinkhorn_state is not None:
            init = sinkhorn_state.get("log_v")
            if init is not None and init.shape != L.shape[:-2] + L.shape[-1:]:
                init = None
        res = sinkhorn(
            L,
            log_marginal=w.log(),
            n_iters=sink_iter,
            tol=sink_tol,
            init_log_v=init,
            check_every=_SINKHORN_CHECK_EVERY,
        )
        if sinkhorn_state is not None:
            sinkhorn_state["log_v"] = res.log_v
        return res.plan
    if p.kind in ("softmax", "l2"):
        if not uniform:
            L = L + w.log()
        return masked_softmax(L, mask)
    P = torch.sigmoid(L + bias) * w if p.kind == "sigmoid" else L * w
    return P if mask is None else P.masked_fill(~mask, 0.0)


_SINKHORN_CHECK_EVERY = 4  # iterations between convergence tests (host syncs)


def _pool_operands(X, A, V, G, logw):
    """Queries, keys, values and key bias of the unmasked softmax / ℓ² velocity, for
    :func:`attnbook.attention.softmax_pool`; NumPy arrays or tensors alike (``A, V, G`` of
    one head ``(d, d)``, or stacked ``(H, d, d)`` with ``X`` given a head axis)."""
    XV = X @ V.swapaxes(-1, -2)  # V_h x_j
    AX = X @ A.swapaxes(-1, -2)  # A_h x_i
    keys, bias = X, None
    if G is not None:  # ℓ²: A = K^T Q, G = K^T K
        AX, keys, bias = l2_score_terms(AX, X, G)
    if logw is not None:
        bias = logw if bias is None else bias + logw
    return AX, keys, XV, bias


def _numpy_layer(X, p, w, uniform) -> dict | None:
    """The layer as NumPy arrays, converted once per call, for the kernel's NumPy path.

    ``None`` where the NumPy path does not apply: not on a CPU, or a tensor that needs
    gradients. On a CPU, NumPy's matrix products and exp on these skinny shapes are 2-5x
    faster than torch's at n <= 4096, and a velocity evaluation makes no tensor allocations
    besides its result.
    """
    tensors = (X, p.A, p.V, w) + (() if p.G is None else (p.G,))
    if any(t.device.type != "cpu" or t.requires_grad for t in tensors):
        return None
    single = p.heads == 1
    return {
        "A": (p.A[0] if single else p.A).numpy(),
        "V": (p.V[0] if single else p.V).numpy(),
        "G": None if p.G is None else (p.G[0] if single else p.G).numpy(),
        "logw": None if uniform else w.log().numpy(),
        "single": single,
    }


def _softmax_field(X, p, w, uniform, layer=None):
    """Unmasked softmax / ℓ² velocity through the attention kernel, heads summed.

    ``layer``: the NumPy copy of the layer (:func:`_numpy_layer`): the kernel then runs in
    NumPy on views of ``X``, the result back as a tensor.
    """
    if layer is not None and not X.requires_grad and X.device.type == "cpu":
        x = X.numpy()
        single = layer["single"]
        ops = _pool_operands(
            x if single else x[..., None, :, :],
            layer["A"], layer["V"], layer["G"], layer["logw"],
        )  # fmt: skip
        out = softmax_pool(*ops[:3], key_bias=ops[3])
        return torch.from_numpy(out if single else out.sum(-3))
    single = p.heads == 1
    A, V, G = (p.A[0], p.V[0], p.G) if single else (p.A, p.V, p.G)
    if single and G is not None:
        G = G[0]
    ops = _pool_operands(
        X if single else X.unsqueeze(-3), A, V, G, None if uniform else w.log()
    )
    out = softmax_pool(*ops[:3], key_bias=ops[3])
    return out if single else out.sum(-3)


def _field(
    X, p, w, causal, bias, sink_tol, sink_iter, sphere, uniform, state=None, layer=None
) -> torch.Tensor:
    """The velocity of every token; the unmasked softmax/ℓ² path avoids forming P (2x faster).

    ``layer``: the NumPy copy of the layer (:func:`_numpy_layer`) for the CPU path, or ``None``.
    """
    if p.kind in ("softmax", "l2") and not causal:
        out = _softmax_field(X, p, w, uniform, layer)
    else:
        XV = X.unsqueeze(-3) @ p.V.mT  # (..., H, n, d): V_h x_j
        P = interaction_matrices(
            X,
            p,
            w,
            causal=causal,
            bias=bias,
            sinkhorn_tol=sink_tol,
            n_sinkhorn_iters=sink_iter,
            uniform=uniform,
            sinkhorn_state=state,
        )
        out = (P @ XV).sum(-3)  # sum_h P^h X V_h^T
    if sphere:
        out = out - (out * X).sum(-1, keepdim=True) * X / (X * X).sum(-1, keepdim=True)
    return out


@numpy_in_numpy_out("x")
def attention_matrix(
    x,
    *,
    sinkhorn_tol: float | None = None,
    n_sinkhorn_iters: int = 2000,
    **layer,
):
    r"""The interaction matrices :math:`P^h_{ij}` with :math:`\dot x_i = \sum_h \sum_j P^h_{ij} V_h x_j`.

    Shape ``(..., H, n, n)``. Rows sum to one for softmax, ℓ², Sinkhorn and multihead
    (:math:`P_{ij} \propto w_j e^{\text{score}_{ij}}`); for sigmoid
    :math:`P_{ij} = w_j\sigma(\langle Ax_i,x_j\rangle + b)`, for linear
    :math:`P_{ij} = w_j\langle Ax_i, x_j\rangle`. ``layer``: the keywords of :func:`velocity`
    (``kind`` required; ``A, V, Q, K, heads, causal, weights, sink_mass, bias``).
    """
    li = prepare_inputs(x, **layer)
    tol, it = _sinkhorn_options(li.X.dtype, sinkhorn_tol, n_sinkhorn_iters)
    P = interaction_matrices(
        li.X,
        li.params,
        li.masses,
        causal=li.causal,
        bias=li.bias,
        sinkhorn_tol=tol,
        n_sinkhorn_iters=it,
        uniform=li.uniform,
    )
    return P


def velocity_field(
    li: LayerInputs, *, sphere: bool, sinkhorn_tol, n_sinkhorn_iters: int
):
    """The unchecked velocity ``X -> Γ(X)`` of a checked layer (the integrator's inner loop)."""
    tol, it = _sinkhorn_options(li.X.dtype, sinkhorn_tol, n_sinkhorn_iters)
    p, w, causal, bias, uniform = li.params, li.masses, li.causal, li.bias, li.uniform
    state = {}  # Sinkhorn's potentials, carried from one evaluation to the next
    layer = (
        _numpy_layer(li.X, p, w, uniform)
        if p.kind in ("softmax", "l2") and not causal
        else None
    )

    def field(X):
        return _field(X, p, w, causal, bias, tol, it, sphere, uniform, state, layer)

    return field


@numpy_in_numpy_out("x")
def velocity(
    x,
    *,
    sphere: bool = False,
    sinkhorn_tol: float | None = None,
    n_sinkhorn_iters: int = 2000,
    **layer,
):
    r"""Velocity :math:`\Gamma_{\mu_n}(x_i) = \sum_h \sum_j P^h_{ij} V_h x_j` of every token.

    ``x``: ``(n, d)`` or ``(..., n, d)`` (NumPy in → NumPy out). ``layer``: ``kind`` (one of
    :data:`KINDS`, required) and ``A, V, Q, K, heads, causal, weights, sink_mass, bias`` (see
    the module docstring and :func:`prepare_inputs`). ``weights``: particle masses ``(n,)``
    (positive, summing to one; default ``1/n``). ``bias``: the sigmoid's :math:`b`.
    ``sphere=True`` projects the velocity on the tangent space of the sphere,
    :math:`v_i - \langle v_i, x_i\rangle x_i/|x_i|^2` (the dynamics of tokens normalised at
    every layer). Returns the same shape as ``x``.
    """
    if not isinstance(sphere, bool):
        raise TypeError(f"sphere must be a bool, got {type(sphere).__name__}")
    li = prepare_inputs(x, **layer)
    out = velocity_field(
        li,
        sphere=sphere,
        sinkhorn_tol=sinkhorn_tol,
        n_sinkhorn_iters=n_sinkhorn_iters,
    )(li.X)
    return out


@numpy_in_numpy_out("x0")
def simulate(
    x0,
    t,
    *,
    sphere: bool = False,
    method: str = "rk4",
    step_size: float = 0.01,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    max_abs: float = 1e8,
    check_every: int = 10,
    sinkhorn_tol: float | None = None,
    n_sinkhorn_iters: int = 2000,
    device=None,
    progress: bool | None = None,
    **layer,
):
    r"""Token positions :math:`x_i(t)` of :math:`\dot x_i = \Gamma_{\mu_n(t)}(x_i)` at the times ``t``.

    ``x0``: ``(n, d)`` or a batch ``(..., n, d)`` of independent systems, integrated together.
    ``t``: strictly increasing times, ``t[0]`` the time of ``x0``. ``layer``: the keywords of
    :func:`velocity` (``kind`` required). ``method="rk4"`` (fixed step at most ``step_size``)
    or ``"dopri5"`` (adaptive, ``rtol``/``atol``), both through :mod:`attnbook.flows`.
    ``device``: where to compute (default: ``x0``'s device for a tensor,
    :func:`attnbook.device.default_device` for NumPy input). Returns ``(len(t), ..., n, d)`` —
    NumPy for NumPy input. Arguments are validated once per call; the integrator's inner loop
    calls the unchecked field. A state that stops being finite or exceeds ``max_abs``
    (checked every ``check_every`` RK4 steps and at every output time) raises
    :class:`attnbook.errors.BlowUpError` with the partial trajectory (the linear kind can
    blow up in finite time; normalised kinds grow at most exponentially).
    ``progress``: a tqdm bar (default: only for runs of 2000 steps or more).
    """
    if not isinstance(sphere, bool):
        raise TypeError(f"sphere must be a bool, got {type(sphere).__name__}")
    X0 = check_cloud(x0, "x0")
    dev = resolve_device(device, like=X0)
    li = prepare_inputs(X0.to(dev), **layer)
    times = check_times(t)
    method = check_choice(method, "method", ("rk4", "dopri5"))
    field = velocity_field(
        li,
        sphere=sphere,
        sinkhorn_tol=sinkhorn_tol,
        n_sinkhorn_iters=n_sinkhorn_iters,
    )

    def rhs(_t, X):
        return field(X)

    opts = dict(max_abs=max_abs, progress=progress)
    if method == "rk4":
        opts.update(step_size=step_size, check_every=check_every)
    else:
        opts.update(rtol=rtol, atol=atol)
    try:
        traj = odeint(rhs, li.X, times, method=method, **opts)
    except BlowUpError as err:
        raise BlowUpError(
            f"kind={li.params.kind!r}: {err}",
            time=err.time,
            partial=err.partial,
            times=err.times,
        ) from None
    return traj


def partition_sums(queries, keys, A, masses) -> torch.Tensor:
    r""":math:`\sum_j w_j e^{\langle A q_i, k_j\rangle}` for every query (the one home of the
    partition function's arithmetic; unchecked, differentiable: solvers and autograd)."""
    return torch.exp((queries @ A.mT) @ keys.mT) @ masses


@numpy_in_numpy_out("x")
def partition_function(x, *, A=None, weights=None):
    r""":math:`Z_\mu(x_i) = \sum_j w_j e^{\langle A x_i, x_j\rangle}` for every token, ``(..., n)``."""
    X = check_cloud(x)
    p = resolve_params(X.shape[-1], kind="softmax", A=A, dtype=X.dtype, device=X.device)
    if p.heads != 1:
        raise ValueError("A must be a single (d, d) matrix here")
    w = particle_masses(X.shape[-2], weights, dtype=X.dtype, device=X.device)
    return partition_sums(X, X, p.A[0], w)


@numpy_in_numpy_out("x")
def interaction_energy(x, *, A=None, weights=None):
    r"""The interaction energy :math:`E(\mu) = \tfrac12 \iint e^{\langle Ax,y\rangle} d\mu(x)\,d\mu(y)`.

    For symmetric ``A``, :math:`\delta E/\delta\mu = Z_\mu` and the softmax velocity is
    :math:`V A^{-1}\nabla Z_\mu / Z_\mu` (see the gradient-flow chapter). Batched: ``(...)``.
    """
    X = check_cloud(x)
    w = particle_masses(X.shape[-2], weights, dtype=X.dtype, device=X.device)
    Z = torch.as_tensor(partition_function(X, A=A, weights=w))
    E = 0.5 * (Z * w).sum(-1)
    return E


def sample_gaussian(
    n: int,
    mean,
    cov,
    *,
    seed=None,
    exact_moments: bool = False,
    symmetric: bool = False,
    batch: tuple[int, ...] = (),
    dtype=None,
    device=None,
) -> torch.Tensor:
    r"""``n`` draws of :math:`N(\text{mean}, \text{cov})`, shape ``(*batch, n, d)``, seeded.

    ``exact_moments=True`` recentres and rewhitens each cloud so that its empirical mean and
    (1/n-normalised) covariance equal ``mean`` and ``cov`` exactly — a particle approximation
    whose first two moments carry no sampling error (only higher moments fluctuate).
    ``symmetric=True`` draws ``n/2`` points and adds their mirror images through the mean
    (``n`` even): every odd central moment of the cloud is then exactly zero, and dynamics that
    commute with :math:`x \mapsto 2\alpha - x` keep the cloud's mean exactly where the
    Gaussian's is.
    ``seed``: an int or a ``torch.Generator`` (``None``: torch's global generator). Draws are
    made on the CPU (the same numbers everywhere) and mapped through the symmetric square root
    of ``cov`` (no eigenvector sign enters), then moved to ``device``.
    """
    n = check_positive_int(n, "n", minimum=2)
    dtype = default_dtype(dtype)
    m = check_finite(as_tensor(mean, "mean"), "mean").to(dtype)
    C = check_finite(as_tensor(cov, "cov"), "cov").to(dtype)
    if m.dim() != 1:
        raise ValueError(f"mean must be a vector (d,), got shape {tuple(m.shape)}")
    d = m.shape[0]
    if C.shape != (d, d):
        raise ValueError(
            f"cov must be {d}x{d} to match mean, got shape {tuple(C.shape)}"
        )
    # the symmetric root: unlike eigenvectors scaled by √λ, it has no sign or order that
    # LAPACK picks (and may pick differently on another CPU), so a seed gives the same cloud
    root = psd_sqrt(check_psd(C, "cov"))  # root @ root.T = C
    # seed convention: None -> torch's global generator (seeded by setup_chapter), never 0
    if not isinstance(symmetric, bool):
        raise TypeError(f"symmetric must be a bool, got {type(symmetric).__name__}")
    if symmetric and n % 2:
        raise ValueError(f"symmetric needs an even n, got n = {n}")
    gen = as_generator(seed)
    if symmetric:
        half = torch.randn(*batch, n // 2, d, generator=gen, dtype=dtype)
        z = torch.cat([half, -half], dim=-2)
    else:
        z = torch.randn(*batch, n, d, generator=gen, dtype=dtype)
    if exact_moments:
        if n <= d:
            raise ValueError(f"exact_moments needs n > d, got n = {n}, d = {d}")
        z = z - z.mean(-2, keepdim=True)
        S = z.mT @ z / n
        L = torch.linalg.cholesky(S)
        z = torch.linalg.solve_triangular(L, z.mT, upper=False).mT  # empirical cov = I
    X = m + z @ root.mT
    return X.to(resolve_device(device)) if device is not None else X
