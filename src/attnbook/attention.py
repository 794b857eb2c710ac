r"""Attention maps on batched tensors: the normalisations used across the book.

Every map turns queries ``q`` (shape ``(..., n_q, k)``) and keys ``k`` (``(..., n_k, k)``) into a
weight matrix ``P`` (``(..., n_q, n_k)``); a layer then outputs ``P @ values``. With scores
:math:`s_{ij} = \text{scale}\,\langle q_i, k_j\rangle`:

==========  ==========================================================  =====================
kind        weights :math:`P_{ij}`                                       rows sum to
==========  ==========================================================  =====================
softmax     :math:`e^{s_{ij}} / \sum_l e^{s_{il}}`                       1
linear      :math:`s_{ij} / n` (n = number of visible keys)             —
l2          :math:`e^{-|q_i-k_j|^2} / \sum_l e^{-|q_i-k_l|^2}`           1
sigmoid     :math:`\sigma(s_{ij} + b) / n`                               —
sinkhorn    :math:`e^{f_i + g_j + s_{ij}}`, doubly stochastic scaling    1 (columns n_q/n_k)
==========  ==========================================================  =====================

The 1/n of linear and sigmoid attention is the mean-field convention (particles carry mass
1/n), as in Castin et al. (2025). ℓ² attention is softmax of the shifted score
:math:`2\langle q_i,k_j\rangle - |k_j|^2` (the :math:`|q_i|^2` term cancels in the row
normalisation). Sinkhorn's first half-step (row normalisation) is softmax.

A causal mask lets query ``i`` see keys ``j <= i`` only. Sinkhorn has no causal version: the
only doubly stochastic lower-triangular matrix is the identity, so it is refused.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from .arrays import numpy_in_numpy_out
from .device import as_generator, default_dtype
from .errors import NotConverged
from .linalg import entropy
from .validation import (
    as_tensor,
    check_choice,
    check_finite,
    check_ndim,
    check_positive,
    check_positive_int,
    check_same_last_dim,
)

__all__ = [
    "KINDS",
    "ALL_KINDS",
    "KIND_ALIASES",
    "resolve_kind",
    "scores",
    "causal_mask",
    "attention_weights",
    "normalize_scores",
    "masked_softmax",
    "l2_score_terms",
    "softmax_pool",
    "SCORE_KINDS",
    "sinkhorn",
    "SinkhornResult",
    "example_tokens",
    "row_entropy",
    "entropy_vs_beta",
    "linear_expansion_gap",
    "SinkhornNotConverged",
    "SinkhornWarning",
    "self_attention",
]

#: The attention maps of :func:`attention_weights`.
KINDS = ("softmax", "linear", "l2", "sigmoid", "sinkhorn")
#: The book's whole ``kind`` vocabulary: the maps and multi-head softmax attention.
ALL_KINDS = (*KINDS, "multihead")
#: The one table of spellings accepted for a kind (every part resolves names through it).
KIND_ALIASES = {
    "multi-head": "multihead",
    "multi_head": "multihead",
    "multi-head softmax": "multihead",
    "multihead_softmax": "multihead",
    "multihead-softmax": "multihead",
    "ell2": "l2",
    "L2": "l2",
    "ℓ²": "l2",
}


def resolve_kind(kind, allowed=ALL_KINDS, name: str = "kind") -> str:
    """The canonical name of an attention ``kind`` (aliases resolved), checked against ``allowed``.

    Raises ``TypeError`` for a non-string and ``ValueError`` naming the allowed kinds.
    """
    if not isinstance(kind, str):
        raise TypeError(f"{name} must be a string, got {type(kind).__name__}")
    canonical = KIND_ALIASES.get(kind, KIND_ALIASES.get(kind.lower(), kind.lower()))
    if canonical not in allowed:
        raise ValueError(f"unknown {name} {kind!r}; expected one of {tuple(allowed)}")
    return canonical


class SinkhornNotConverged(NotConverged, RuntimeError):
    """Sinkhorn's scaling did not reach the requested tolerance (one of the package's
    :mod:`attnbook.errors`; still a ``RuntimeError``, as it was before the family)."""


class SinkhornWarning(RuntimeWarning):
    """Sinkhorn's scaling stopped before the requested tolerance."""


@dataclass
class SinkhornResult:
    """A Sinkhorn plan and how it was reached."""

    plan: torch.Tensor  #: (..., n, m), rows sum to 1, columns to n/m
    log_u: torch.Tensor  #: row potentials f
    log_v: torch.Tensor  #: column potentials g
    iterations: int  #: full (row + column) Sinkhorn iterations used
    max_error: float  #: largest deviation of a column sum from n/m at the end
    converged: bool
    newton_steps: int = (
        0  #: Newton steps used after the Sinkhorn iterations (0: none needed)
    )


def scores(queries, keys, *, scale: float = 1.0) -> torch.Tensor:
    r"""The score matrix :math:`s_{ij} = \text{scale}\,\langle q_i, k_j\rangle`, batched."""
    q = check_finite(
        check_ndim(as_tensor(queries, "queries"), "queries", 2, at_least=True),
        "queries",
    )
    k = check_finite(
        check_ndim(as_tensor(keys, "keys"), "keys", 2, at_least=True), "keys"
    )
    check_same_last_dim(q, "queries", k, "keys")
    q, k = _common_dtype(q, k)
    return scale * (q @ k.transpose(-1, -2))


def causal_mask(n: int, *, device=None) -> torch.Tensor:
    """Boolean ``(n, n)`` mask, True where query ``i`` may attend to key ``j`` (``j <= i``)."""
    n = check_positive_int(n, "n")
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def _common_dtype(*ts: torch.Tensor):
    dtype = ts[0].dtype
    for t in ts[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return tuple(t.to(dtype) for t in ts)


# --------------------------------------------------------------------------------------
# The attention kernel: masked softmax, ℓ² scores, and softmax pooling without the matrix.
# pde, focus and gradient_flow call these; nothing else in the package writes a softmax.


def masked_softmax(logits: torch.Tensor, mask=None, *, dim: int = -1) -> torch.Tensor:
    """Softmax of ``logits`` along ``dim``, over the entries where ``mask`` is True.

    ``mask`` (bool, broadcastable to ``logits``): the visible entries; ``None`` = all (a
    plain softmax, no extra pass). With a mask, a row that sees nothing — every entry
    masked or ``-inf`` — gets zero weights (no output) instead of NaN, and a zero gradient.
    Unchecked: the inner loop of samplers and training steps. NumPy in, NumPy out (the
    largest entry subtracted, then ``exp`` and the row sum)."""
    if isinstance(logits, np.ndarray):
        return _masked_softmax_numpy(logits, mask, dim)
    if mask is None:
        return torch.softmax(logits, dim=dim)
    logits = logits.masked_fill(~mask, float("-inf"))
    empty = torch.isneginf(logits).all(dim, keepdim=True)
    # an empty row is softmaxed as zeros (no NaN in the values or the gradient), then cleared
    return torch.softmax(logits.masked_fill(empty, 0.0), dim=dim).masked_fill(
        empty, 0.0
    )


def _masked_softmax_numpy(logits, mask, dim):
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    top = logits.max(dim, keepdims=True)
    empty = None if mask is None else np.isneginf(top)
    if empty is not None:
        top = np.where(empty, 0.0, top)
    e = np.exp(logits - top)
    w = (
        e / e.sum(dim, keepdims=True)
        if empty is None
        else e / np.where(empty, 1.0, e.sum(dim, keepdims=True))
    )
    return w


def l2_score_terms(queries, keys, gram=None):
    r"""ℓ² scores :math:`-|q_i - K x_j|^2`, up to a constant per row, as a product plus a bias.

    ``keys``: the tokens :math:`x_j` ``(..., n_k, d)``; ``gram``: :math:`G = K^\top K`
    ``(..., d, d)`` (``None``: :math:`K = I`); ``queries``: :math:`K^\top q_i`
    ``(..., n_q, d)`` (with ``gram=None``, the queries themselves). Returns ``(q', k', b)``
    with ``score_ij = <q'_i, k'_j> + b_j`` (row constants dropped: they cancel in every
    normalisation over ``j``). Both sides are centred at the keys' mean :math:`c` first,
    :math:`q' = 2K^\top(q - Kc)`, :math:`k' = x - c`, :math:`b = -|K(x - c)|^2`, so the
    product's round-off scales with the cloud's spread, not with :math:`|x|^2` as the plain
    expansion's does (which loses every digit when tokens cluster far from the origin), at
    the cost of one matrix product. NumPy arrays or tensors, the same in and out.
    """
    if isinstance(keys, np.ndarray):
        return _l2_score_terms_numpy(queries, keys, gram)
    c = keys.mean(-2, keepdim=True)
    kc = keys - c
    if gram is None:
        return 2 * (queries - c), kc, -(kc * kc).sum(-1)
    return 2 * (queries - c @ gram), kc, -((kc @ gram) * kc).sum(-1)


def _l2_score_terms_numpy(queries, keys, gram):
    # The same terms as the torch lines, bit for bit, with fewer temporaries: in the ODE
    # integrators' inner loop at n = 256 these O(n d) passes are a twentieth of a velocity.
    # the mean: NumPy's mean is this sum and division, with one more pass
    c = keys.sum(-2, keepdims=True)
    c /= keys.shape[-2]
    kc = keys - c
    q = queries - (c if gram is None else c @ gram)
    q *= 2
    sq = kc * kc if gram is None else (kc @ gram) * kc
    b = sq.sum(-1)
    return q, kc, np.negative(b, out=b)


def _l2_scores(queries, keys) -> torch.Tensor:
    """The ℓ² score matrix (up to row constants) of :func:`l2_score_terms`."""
    q, k, b = l2_score_terms(queries, keys)
    return q @ k.mT + b.unsqueeze(-2)


def _pool_rows(n_k: int, batch: int, cuda: bool) -> int:
    """Query rows per block: the block of scores stays cache-sized on a CPU, large on a GPU."""
    return max(1, ((1 << 27) if cuda else (1 << 21)) // max(1, n_k * batch))


def _exp_(s: torch.Tensor) -> torch.Tensor:
    """``s.exp_()``; on a CPU through NumPy's vectorised exp, 2-3x faster than torch's."""
    if s.device.type == "cpu" and not s.requires_grad and s.is_contiguous():
        a = s.numpy()
        np.exp(a, out=a)
        return s
    return s.exp_()


def _pool_torch(q, k, v, bias) -> torch.Tensor:
    n_q, n_k, d = q.shape[-2], k.shape[-2], v.shape[-1]
    v1 = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)  # values and a ones column
    batch = math.prod(q.shape[:-2])
    rows = _pool_rows(n_k, batch, q.device.type == "cuda")
    # |s_ij| <= |q_i| |k_j| + |b_j|: when that bound is far from exp's overflow and
    # underflow (checked once per call, on a CPU), the max-subtraction pass is not needed.
    shift = True
    if q.device.type == "cpu" and n_q * n_k >= (1 << 20):  # small n: the pass is cheap
        bound = float((q.norm(dim=-1).amax() * k.norm(dim=-1).amax()).detach())
        if bias is not None:
            bound += float(bias.abs().amax().detach())
        shift = not bound < (600.0 if q.dtype == torch.float64 else 60.0)
    bias = None if bias is None else bias.unsqueeze(-2)
    parts = []
    for r0 in range(0, n_q, rows):
        s = q[..., r0 : r0 + rows, :] @ k.mT  # (..., rows, n_k)
        if bias is not None:
            s += bias
        if shift:
            s -= s.amax(-1, keepdim=True)  # stable exponentials
        r = _exp_(s) @ v1
        parts.append(r[..., :d] / r[..., d:])
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-2)


def _pool_numpy(q, k, v, bias) -> np.ndarray:
    # Two differences from the torch path, both round-off only: the max-subtraction pass is
    # skipped at every size when the bound allows it (it costs O(n d) here, NumPy's float32
    # max being slow), and the row sums are a separate sum rather than a ones column (a
    # 3-column product is slower in OpenBLAS than a 2-column one and a sum).
    n_q, n_k = q.shape[-2], k.shape[-2]
    rows = _pool_rows(n_k, math.prod(q.shape[:-2]), False)
    kT = np.swapaxes(k, -1, -2)
    # the largest norms as the root of the largest squared norm (one root, not n; sqrt being
    # monotone and correctly rounded, the same number)
    bound = float(np.sqrt((q * q).sum(-1).max()) * np.sqrt((k * k).sum(-1).max()))
    if bias is not None:
        bound += float(np.abs(bias).max())
        bias = bias[..., None, :]
    shift = not bound < (600.0 if q.dtype == np.float64 else 60.0)
    parts = []
    for r0 in range(0, n_q, rows):
        s = q[..., r0 : r0 + rows, :] @ kT
        if bias is not None:
            s += bias
        if shift:
            s -= s.max(-1, keepdims=True)
        np.exp(s, out=s)
        parts.append((s @ v) / s.sum(-1, keepdims=True))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-2)


def softmax_pool(queries, keys, values, *, key_bias=None):
    r"""Softmax attention's output :math:`\sum_j \mathrm{softmax}_j(\langle q_i, k_j\rangle +
    b_j)\, v_j` without forming the ``n_q x n_k`` weight matrix.

    ``queries (..., n_q, d)``, ``keys (..., n_k, d)``, ``values (..., n_k, d_v)``,
    ``key_bias (..., n_k)`` (log-masses, ℓ²'s :math:`-|Kx_j|^2`; default none), with
    broadcastable leading dimensions. Rows are taken in blocks of a device-sized number of
    scores, so large ``n`` stays in cache on a CPU. NumPy arrays run in NumPy (on these
    skinny shapes its products and ``exp`` are 2-5x faster than torch's on a CPU) and come
    back as NumPy; tensors run in torch. Unchecked: the inner loop of integrators (the
    caller validates once). ℓ² attention is this kernel on :func:`l2_score_terms`.
    """
    if isinstance(queries, np.ndarray):
        return _pool_numpy(queries, keys, values, key_bias)
    return _pool_torch(queries, keys, values, key_bias)


def _newton_step(J, rhs):
    """``J⁻¹ rhs`` per problem of the batch; where ``J`` is singular, the least-norm solution.

    The rank-one term of :func:`_newton_polish` fixes one shift of the potentials. A kernel
    that splits into blocks with couplings below the float's resolution (two clusters of
    tokens far apart: entries ``e^{-40}`` next to ``1``) has one free shift per block, so
    ``J`` is singular there; the pseudo-inverse then takes the step that leaves those shifts
    alone, which is Newton's step on the blocks.
    """
    step, info = torch.linalg.solve_ex(J, rhs.unsqueeze(-1))
    step = step.squeeze(-1)
    bad = (info != 0) | ~torch.isfinite(step).all(-1)
    if bool(bad.any()):
        step = step.clone()
        step[bad] = (
            torch.linalg.pinv(J[bad], hermitian=True) @ rhs[bad].unsqueeze(-1)
        ).squeeze(-1)
    return step


def _newton_polish(M, f, g, log_r, log_c, n_steps: int, tol: float):
    """Newton steps on the dual of the scaling problem, from Sinkhorn's potentials.

    The plan is ``exp(M + f_i + g_j)``; its row sums must be ``exp(log_r)`` and its column sums
    ``exp(log_c)``. Newton's method on the convex dual (gradient: the marginal errors; Hessian:
    ``[[diag(rows), plan], [planᵀ, diag(cols)]]``, made invertible by the rank-one term that
    fixes the shift ``f + t, g − t``) converges quadratically where Sinkhorn's linear rate is
    close to 1 (nearly decoupled blocks of tokens). A step is halved until the marginal error
    decreases.
    """
    n, m = M.shape[-2], M.shape[-1]
    r, c = log_r.exp(), log_c.exp()
    ones = torch.ones(n + m, dtype=M.dtype, device=M.device)
    v = torch.cat([ones[:n], -ones[n:]]) / math.sqrt(n + m)

    def residual(f_, g_):
        plan = (M + f_.unsqueeze(-1) + g_.unsqueeze(-2)).exp()
        res = torch.cat([plan.sum(-1) - r, plan.sum(-2) - c], dim=-1)
        return plan, res

    plan, res = residual(f, g)
    norm = res.abs().amax(-1)
    used = 0
    for used in range(n_steps + 1):  # noqa: B007 - `used` is returned
        if used == n_steps or float(norm.max()) <= tol:
            break
        rows, cols = plan.sum(-1), plan.sum(-2)
        J = (
            torch.cat(
                [
                    torch.cat([torch.diag_embed(rows), plan], dim=-1),
                    torch.cat([plan.mT, torch.diag_embed(cols)], dim=-1),
                ],
                dim=-2,
            )
            + v.unsqueeze(-1) * v
        )
        step = _newton_step(J, -res)
        t = torch.ones_like(norm)
        for _ in range(30):  # backtracking, per problem of the batch
            f_new = f + t.unsqueeze(-1) * step[..., :n]
            g_new = g + t.unsqueeze(-1) * step[..., n:]
            plan_new, res_new = residual(f_new, g_new)
            norm_new = res_new.abs().amax(-1)
            worse = ~(norm_new < norm) & (norm > tol)
            if not bool(worse.any()):
                break
            t = torch.where(worse, t / 2, t)
        keep = (norm_new < norm).unsqueeze(-1)
        f, g = torch.where(keep, f_new, f), torch.where(keep, g_new, g)
        plan, res = residual(f, g)
        if not bool(keep.any()):
            break
        norm = res.abs().amax(-1)
    return f, g, used


def _sinkhorn_reductions(logk: torch.Tensor, row_lw):
    r"""The two log-sum-exps of a Sinkhorn iteration, :math:`\log\sum_j e^{L_{ij} + g_j}` and
    :math:`\log\sum_i e^{L_{ij} + f_i + b_i}` (``b`` = ``row_lw``), and the plan
    :math:`e^{L_{ij} + f_i + g_j}`.

    When every row of ``L`` spans less than a safe range (its potentials then span less too),
    ``K = e^{L - \max_j L_{ij}}`` is formed once and each reduction is a matrix-vector product
    with max-shifted exponentials of the potentials: no exponential over the n x m entries per
    iteration. Otherwise, the plain log-domain reductions.
    """
    limit = 600.0 if logk.dtype == torch.float64 else 60.0
    c = logk.amax(-1, keepdim=True)
    spread = float((c - logk.amin(-1, keepdim=True)).max()) if logk.numel() else 0.0
    if not 2 * spread < limit:

        def row_log(g_):
            return torch.logsumexp(logk + g_.unsqueeze(-2), dim=-1)

        def col_log(f_):
            return torch.logsumexp(logk + f_.unsqueeze(-1) + row_lw, dim=-2)

        def plan_log(f_, g_):
            return (logk + f_.unsqueeze(-1) + g_.unsqueeze(-2)).exp()

        return row_log, col_log, plan_log
    K = (logk - c).exp()
    c = c.squeeze(-1)
    b = row_lw.squeeze(-1) if isinstance(row_lw, torch.Tensor) else row_lw

    def row_scaled(g_):
        gm = g_.amax(-1, keepdim=True)
        return c + gm + (K @ (g_ - gm).exp().unsqueeze(-1)).squeeze(-1).log()

    def col_scaled(f_):
        h = c + f_ + b
        hm = h.amax(-1, keepdim=True)
        return hm + ((h - hm).exp().unsqueeze(-2) @ K).squeeze(-2).log()

    def plan_scaled(f_, g_):
        # e^{L + f + g} = K e^{c + f + gm} e^{g - gm}: no second exponential over the entries
        gm = g_.amax(-1, keepdim=True)
        return K * (c + f_ + gm).exp().unsqueeze(-1) * (g_ - gm).exp().unsqueeze(-2)

    return row_scaled, col_scaled, plan_scaled


def _sinkhorn_marginals(logk: torch.Tensor, log_marginal):
    """The kernel with the column masses folded in, the row log-masses ``b`` of the plan
    and the target log column sums (uniform n/m without ``log_marginal``)."""
    n, m = logk.shape[-2], logk.shape[-1]
    if log_marginal is None:
        target = torch.full((m,), math.log(n / m), dtype=logk.dtype, device=logk.device)
        return logk, 0.0, target
    lw = check_finite(
        as_tensor(log_marginal, "log_marginal", dtype=logk.dtype, device=logk.device),
        "log_marginal",
    )
    if n != m or lw.shape[-1] != n:
        raise ValueError(
            f"log_marginal needs a square kernel and one entry per token, got kernel "
            f"{tuple(logk.shape)} and log_marginal {tuple(lw.shape)}"
        )
    logk = logk + lw.unsqueeze(-2)  # the column masses w_j are part of the plan
    return logk, lw.unsqueeze(-1), lw


def _sinkhorn_initial_log_v(logk: torch.Tensor, init_log_v) -> torch.Tensor:
    """The starting column potentials: ``init_log_v`` (checked) or zeros."""
    g_shape = logk.shape[:-2] + (logk.shape[-1],)
    if init_log_v is None:
        return torch.zeros(g_shape, dtype=logk.dtype, device=logk.device)
    g = check_finite(
        as_tensor(init_log_v, "init_log_v", dtype=logk.dtype, device=logk.device),
        "init_log_v",
    )
    if g.shape != g_shape:
        raise ValueError(
            f"init_log_v must have shape {tuple(g_shape)} (one potential per column), "
            f"got {tuple(g.shape)}"
        )
    return g


def _sinkhorn_loop(f, g, target, row_lse, column_sums, error_of, n_iters, tol, every):
    """The Sinkhorn iterations: ``(f, g, err, iterations used)``; ``err`` is inf until
    the first convergence test (one every ``every`` iterations, and at the last)."""
    err = float("inf")
    it = 0
    for it in range(1, n_iters + 1):  # noqa: B007 - `it` is reported after the loop
        # row step: log sum_j exp(logk + g_j) + f_i = 0  (this alone is softmax)
        f = -row_lse(g)
        col = column_sums(f, g)
        if it % every == 0 or it == n_iters:
            err = error_of(col)  # one host sync
            if err <= tol:
                break
        g = g + target - col
    else:
        f = -row_lse(g)
    return f, g, err, it


def _sinkhorn_nonconvergence_message(n_iters, newton, err, tol) -> str:
    return (
        f"Sinkhorn did not converge in {n_iters} iterations"
        f"{f' and {newton} Newton steps' if newton else ''}: column error {err:.3g} > "
        f"tol {tol:.3g}; increase n_iters or scale the scores down"
    )


def sinkhorn(
    log_kernel,
    *,
    log_marginal=None,
    n_iters: int = 500,
    tol: float = 1e-9,
    n_newton_iters: int = 30,
    on_nonconvergence: str = "warn",
    init_log_v=None,
    check_every: int = 1,
) -> SinkhornResult:
    r"""Scale a positive kernel :math:`K = e^{L}` (``log_kernel`` is :math:`L`) to a transport plan.

    Without ``log_marginal``: rows sum to 1 and columns to n/m (uniform marginals); stops when
    every column sum is within ``tol`` of n/m. With ``log_marginal`` (the log-masses
    :math:`\log w` of the tokens, shape ``(..., n)``, square kernels only): the plan is the
    row-conditional :math:`P_{ij} = \pi_{ij}/w_i` of the plan :math:`\pi` whose two marginals are
    both :math:`w`, i.e. rows sum to 1 and :math:`\sum_i w_i P_{ij} = w_j`; stops when that holds
    to relative ``tol``.

    Runs up to ``n_iters`` Sinkhorn iterations, alternating row and column normalisations of
    :math:`\log P = L + f_i + g_j` in log space (no exponential overflows for large scores).
    Sinkhorn converges linearly, at a rate that approaches 1 when the kernel nearly splits
    into blocks (two clusters of tokens at a low temperature); if ``tol`` is not reached, up
    to ``n_newton_iters`` Newton steps on the dual problem finish the job (quadratic
    convergence; each solves an ``(n + m)``-dimensional linear system; 0 turns them off).
    ``on_nonconvergence`` is ``"warn"`` (default, :class:`SinkhornWarning`), ``"raise"``
    (:class:`SinkhornNotConverged`) or ``"ignore"``; a non-finite error always raises. The
    result says whether it converged and how many iterations of each kind it used.

    ``init_log_v``: starting column potentials ``(..., m)`` (default zeros), e.g. the
    ``log_v`` of a previous solve on a nearby kernel (a warm start: an ODE solver calls
    Sinkhorn on slowly moving tokens). ``check_every``: test convergence every this many
    iterations (each test is one device-to-host synchronisation; the potentials are updated at
    every iteration either way).
    """
    logk = check_finite(
        check_ndim(as_tensor(log_kernel, "log_kernel"), "log_kernel", 2, at_least=True),
        "log_kernel",
    )
    n_iters = check_positive_int(n_iters, "n_iters")
    n_newton_iters = check_positive_int(n_newton_iters, "n_newton_iters", minimum=0)
    tol = check_positive(tol, "tol")
    check_every = check_positive_int(check_every, "check_every")
    check_choice(on_nonconvergence, "on_nonconvergence", ("warn", "raise", "ignore"))
    n, m = logk.shape[-2], logk.shape[-1]
    logk, row_lw, target = _sinkhorn_marginals(logk, log_marginal)

    row_lse, col_lse, plan_of = _sinkhorn_reductions(logk, row_lw)

    def column_sums(f_, g_):
        # log of the (weighted) column sums of the row-normalised plan
        return col_lse(f_) + g_

    def error_of(col_):
        if log_marginal is None:
            return float((col_.exp() - n / m).abs().max())
        return float((col_ - target).exp().sub(1).abs().max())

    f = torch.zeros(logk.shape[:-1], dtype=logk.dtype, device=logk.device)
    g = _sinkhorn_initial_log_v(logk, init_log_v)
    f, g, err, it = _sinkhorn_loop(
        f, g, target, row_lse, column_sums, error_of, n_iters, tol, check_every
    )
    newton = 0
    if err > tol and n_newton_iters > 0 and math.isfinite(err):
        # the plan pi = exp(M + f + g) with row sums r and column sums c (see the docstring)
        M = logk + row_lw
        log_r = torch.zeros_like(f) if log_marginal is None else target.expand_as(f)
        log_c = target.expand_as(g)
        _, g_try, newton = _newton_polish(
            M, f, g, log_r, log_c, n_newton_iters, tol * 1e-3
        )
        f_try = -row_lse(g_try)
        err_try = error_of(column_sums(f_try, g_try))
        if err_try < err:
            f, g, err = f_try, g_try, err_try
    plan = plan_of(f, g)
    converged = err <= tol
    if not converged:
        msg = _sinkhorn_nonconvergence_message(n_iters, newton, err, tol)
        if on_nonconvergence == "raise" or not math.isfinite(err):
            raise SinkhornNotConverged(msg)
        if on_nonconvergence == "warn":
            warnings.warn(msg, SinkhornWarning, stacklevel=2)
    return SinkhornResult(
        plan=plan,
        log_u=f,
        log_v=g,
        iterations=it,
        max_error=err,
        converged=converged,
        newton_steps=newton,
    )


@numpy_in_numpy_out("queries")
def attention_weights(
    queries,
    keys,
    *,
    kind: str = "softmax",
    causal: bool = False,
    bias: float = 0.0,
    scale: float = 1.0,
    n_sinkhorn_iters: int = 500,
    sinkhorn_tol: float = 1e-9,
) -> torch.Tensor:
    """Attention weights ``(..., n_q, n_k)`` of one of :data:`KINDS` (see the module docstring).

    ``bias`` is used by ``sigmoid`` only; ``scale`` multiplies the inner-product score (ℓ²
    attention uses the squared distance itself, unscaled). ``causal=True`` needs ``n_q == n_k``.
    NumPy in (``queries``), NumPy out.
    """
    check_choice(kind, "kind", KINDS)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if (
        isinstance(bias, bool)
        or not isinstance(bias, (int, float))
        or not math.isfinite(bias)
    ):
        raise TypeError(f"bias must be a finite real number, got {bias!r}")
    if (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not math.isfinite(scale)
    ):
        raise TypeError(f"scale must be a finite real number, got {scale!r}")
    s = scores(queries, keys, scale=scale)
    n_q, n_k = s.shape[-2], s.shape[-1]
    mask = None
    if causal:
        if n_q != n_k:
            raise ValueError(
                f"causal=True needs as many queries as keys, got {n_q} and {n_k}"
            )
        if kind == "sinkhorn":
            raise ValueError(
                "kind 'sinkhorn' has no causal version: the only doubly stochastic "
                "lower-triangular matrix is the identity"
            )
        mask = causal_mask(n_q, device=s.device)
    if kind == "l2":
        q, k = _common_dtype(as_tensor(queries, "queries"), as_tensor(keys, "keys"))
        return masked_softmax(_l2_scores(q, k), mask)
    return _normalize(s, kind, mask, bias, n_sinkhorn_iters, sinkhorn_tol)


SCORE_KINDS = ("softmax", "linear", "sigmoid", "sinkhorn")


def _normalize(s, kind, mask, bias, n_sinkhorn_iters, sinkhorn_tol) -> torch.Tensor:
    n_k = s.shape[-1]
    n_visible = (
        mask.sum(-1, keepdim=True).to(s.dtype)
        if mask is not None
        else torch.full((1, 1), float(n_k), dtype=s.dtype, device=s.device)
    )
    if kind == "softmax":
        return masked_softmax(s, mask)
    if kind == "linear":
        w = s / n_visible
    elif kind == "sigmoid":
        w = torch.sigmoid(s + bias) / n_visible
    else:  # sinkhorn
        return sinkhorn(s, n_iters=n_sinkhorn_iters, tol=sinkhorn_tol).plan
    return w if mask is None else w.masked_fill(~mask, 0.0)


def normalize_scores(
    s: torch.Tensor, *, kind: str = "softmax", bias: float = 0.0
) -> torch.Tensor:
    """Attention weights from a score matrix ``s (..., n_q, n_k)`` that the caller has built
    and validated: the normalisation step of :func:`attention_weights` for the kinds whose
    weights depend on the scores alone (:data:`SCORE_KINDS`; ℓ² needs the tokens), with the
    same arithmetic, so ``normalize_scores(scores(q, k), kind=k)`` equals
    ``attention_weights(q, k, kind=k)`` bit for bit.

    It reads no value back to the host (no finiteness check), so an inner loop on a GPU —
    a sampler's potential — runs without synchronising; non-finite scores give non-finite
    weights, which the loop's own divergence check reports. Sinkhorn iterates to its
    default tolerance."""
    if not isinstance(s, torch.Tensor):
        raise TypeError(f"s must be a torch.Tensor, got {type(s).__name__}")
    if s.dim() < 2:
        raise ValueError(
            f"s must have at least 2 dimensions, got shape {tuple(s.shape)}"
        )
    kind = resolve_kind(kind, allowed=SCORE_KINDS)
    if isinstance(bias, bool) or not isinstance(bias, (int, float)):
        raise TypeError(f"bias must be a real number, got {bias!r}")
    return _normalize(s, kind, None, bias, 500, 1e-9)


def self_attention(
    x,
    *,
    Q,
    K,
    V,
    kind: str = "softmax",
    causal: bool = False,
    bias: float = 0.0,
    scale: float | None = None,
    n_sinkhorn_iters: int = 500,
    sinkhorn_tol: float = 1e-9,
) -> torch.Tensor:
    r"""One (multi-head) self-attention layer without residual: :math:`\sum_h P^h X V_h^\top`.

    ``x``: tokens ``(..., n, d)``. Single head: ``Q``, ``K`` of shape ``(k, d)`` and ``V`` of
    shape ``(d_out, d)``. Multi-head: a leading head axis, ``Q, K: (h, k, d)``, ``V: (h, d_out, d)``
    (each head's value-and-output map), and the heads' outputs are summed. ``scale`` defaults to
    1/√k. Returns ``(..., n, d_out)``.
    """
    X = check_finite(check_ndim(as_tensor(x, "x"), "x", 2, at_least=True), "x")
    Qm = check_finite(as_tensor(Q, "Q"), "Q")
    Km = check_finite(as_tensor(K, "K"), "K")
    Vm = check_finite(as_tensor(V, "V"), "V")
    multi = Qm.dim() == 3
    for t, name in ((Qm, "Q"), (Km, "K"), (Vm, "V")):
        if t.dim() != (3 if multi else 2):
            raise ValueError(
                f"{name} must have {'3 (heads, rows, d)' if multi else '2'} dimensions "
                f"like Q, got shape {tuple(t.shape)}"
            )
        if t.shape[-1] != X.shape[-1]:
            raise ValueError(
                f"{name} must have {X.shape[-1]} columns (the token dimension d), "
                f"got shape {tuple(t.shape)}"
            )
    if Qm.shape != Km.shape:
        raise ValueError(
            f"Q and K must have the same shape, got {tuple(Qm.shape)} and {tuple(Km.shape)}"
        )
    if multi and Vm.shape[0] != Qm.shape[0]:
        raise ValueError(
            f"V must have one map per head ({Qm.shape[0]}), got shape {tuple(Vm.shape)}"
        )
    X, Qm, Km, Vm = _common_dtype(X, Qm, Km, Vm)
    k = Qm.shape[-2]
    sc = 1.0 / math.sqrt(k) if scale is None else scale
    if not multi:
        Qm, Km, Vm = Qm[None], Km[None], Vm[None]
    Xh = X.unsqueeze(-3)  # (..., 1, n, d)
    q = Xh @ Qm.transpose(-1, -2)  # (..., h, n, k)
    kk = Xh @ Km.transpose(-1, -2)
    P = attention_weights(
        q,
        kk,
        kind=kind,
        causal=causal,
        bias=bias,
        scale=sc,
        n_sinkhorn_iters=n_sinkhorn_iters,
        sinkhorn_tol=sinkhorn_tol,
    )
    out = P @ (Xh @ Vm.transpose(-1, -2))  # (..., h, n, d_out)
    return out.sum(-3)


def example_tokens(n: int = 12, d: int = 2, *, seed=None, dtype=None) -> torch.Tensor:
    """A reproducible token cloud for demonstrations: two Gaussian clusters in ``R^d``.

    The first ``n // 2`` tokens lie around ``+e_1``, the rest around ``−e_1`` (sd 0.35), so
    every attention map has visible block structure. ``seed``: an int or a
    ``torch.Generator``; ``None`` draws from torch's global generator
    (:func:`attnbook.device.as_generator`).
    """
    n = check_positive_int(n, "n", minimum=2)
    d = check_positive_int(d, "d")
    dtype = default_dtype(dtype)
    g = as_generator(seed)
    centres = torch.zeros(n, d, dtype=dtype)
    centres[: n // 2, 0] = 1.0
    centres[n // 2 :, 0] = -1.0
    return centres + 0.35 * torch.randn(n, d, generator=g, dtype=dtype)


def entropy_vs_beta(tokens, betas, *, kind: str = "softmax") -> torch.Tensor:
    r"""Mean row entropy of self-attention on ``tokens`` at each inverse temperature β.

    Queries and keys are :math:`\sqrt\beta\,x` (so the scores are :math:`\beta\langle x_i,
    x_j\rangle`); ``kind`` is a normalised map (softmax, l2 or sinkhorn). ``tokens``:
    ``(..., n, d)``; returns ``(len(betas), ...)``.
    """
    kind = resolve_kind(kind, ("softmax", "l2", "sinkhorn"))
    x = check_finite(
        check_ndim(as_tensor(tokens, "tokens"), "tokens", 2, at_least=True), "tokens"
    )
    b = check_finite(as_tensor(betas, "betas", dtype=x.dtype), "betas").reshape(-1)
    if bool((b < 0).any()):
        raise ValueError("betas must be non-negative")
    rows = []
    for beta in b:
        q = beta.sqrt() * x
        rows.append(row_entropy(attention_weights(q, q, kind=kind)).mean(-1))
    return torch.stack(rows)


def linear_expansion_gap(scores, eps) -> torch.Tensor:
    r"""How far softmax is from its first-order expansion: uniform pooling plus linear attention.

    :math:`\max_{ij}\bigl|\operatorname{softmax}_j(\varepsilon s_i) - \tfrac1n
    - \tfrac{\varepsilon}{n}(s_{ij} - \bar s_i)\bigr|` for a score matrix ``scores``
    ``(..., n_q, n)``, batched over leading dimensions. It is
    :math:`O(\varepsilon^2)`: halving ``eps`` divides it by about 4.
    """
    S = check_finite(
        check_ndim(as_tensor(scores, "scores"), "scores", 2, at_least=True), "scores"
    )
    eps = check_positive(eps, "eps")
    n = S.shape[-1]
    approx = 1 / n + eps * (S - S.mean(-1, keepdim=True)) / n
    return (masked_softmax(eps * S) - approx).abs().amax(dim=(-2, -1))


def row_entropy(weights):
    """Shannon entropy (nats) of each row of a row-stochastic weight matrix, ``(..., n_q)``.

    :func:`attnbook.linalg.entropy` along the last axis (NumPy in, NumPy out).
    """
    P = check_finite(as_tensor(weights, "weights"), "weights")
    if bool((P < 0).any()):
        raise ValueError(
            "weights must be non-negative to have an entropy (linear attention is not)"
        )
    return entropy(weights, dim=-1)
