r"""Order parameters of an attention matrix: how much is *pooling*, how much is *copying*.

The copy task is symmetric under relabelling the tokens and under cyclic shifts of positions,
so the posterior over the attention matrix concentrates on a few symmetric directions. Two
templates carry the story:

* uniform pooling :math:`J/L = \mathbf 1\mathbf 1^\top/L` (attend equally to every token: unigram
  statistics),
* the periodic shift :math:`S`, :math:`S_{l,\,l-1 \bmod L} = 1` (attend to the previous token:
  the copy head, bigram statistics).

For an :math:`L\times L` matrix :math:`G` the least-squares coefficients of
:math:`G \approx c_1 J/L + c_G S` solve the 2×2 normal equations

.. math::
    \begin{pmatrix}1 & 1\\ 1 & L\end{pmatrix}\begin{pmatrix}c_1\\ c_G\end{pmatrix}
    = \begin{pmatrix}\mathbf 1^\top G\mathbf 1/L\\ \operatorname{Tr}(G S^\top)\end{pmatrix},

because :math:`\langle J/L, J/L\rangle = 1`, :math:`\langle J/L, S\rangle = 1`,
:math:`\langle S, S\rangle = L` (Frobenius products). The *coverage* is the share of
:math:`\|G\|_F^2` that the projection explains, :math:`\|c_1 J/L + c_G S\|_F^2/\|G\|_F^2`.
"""

from __future__ import annotations

import torch

from attnbook.device import default_dtype
from attnbook.validation import (
    as_tensor,
    check_finite,
    check_positive_int,
    check_square,
)

__all__ = [
    "shift_matrix",
    "pooling_matrix",
    "order_parameters",
    "coverage",
    "circulant_coverage",
    "template_matrix",
]


def shift_matrix(
    seq_len: int, *, dtype: torch.dtype | None = None, device=None
) -> torch.Tensor:
    """The periodic shift ``S`` with ``S[l, (l-1) % L] = 1``: row ``l`` attends to the previous token."""
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    S = torch.zeros(L, L, dtype=default_dtype(dtype), device=device)
    idx = torch.arange(L, device=device)
    S[idx, (idx - 1) % L] = 1.0
    return S


def pooling_matrix(
    seq_len: int, *, dtype: torch.dtype | None = None, device=None
) -> torch.Tensor:
    """Uniform pooling ``J/L`` (every row is the uniform distribution over the L positions)."""
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    return torch.full((L, L), 1.0 / L, dtype=default_dtype(dtype), device=device)


def template_matrix(c1, cG, seq_len: int) -> torch.Tensor:
    """The matrix ``c1 J/L + cG S`` (batched over the shapes of ``c1`` and ``cG``)."""
    c1 = as_tensor(c1, "c1")
    cG = as_tensor(cG, "cG", dtype=c1.dtype, device=c1.device)
    J = pooling_matrix(seq_len, dtype=c1.dtype, device=c1.device)
    S = shift_matrix(seq_len, dtype=c1.dtype, device=c1.device)
    return c1[..., None, None] * J + cG[..., None, None] * S


def _projections(G: torch.Tensor):
    L = G.shape[-1]
    r1 = G.sum((-1, -2)) / L  # <G, J/L>
    idx = torch.arange(L, device=G.device)
    r2 = G[..., idx, (idx - 1) % L].sum(-1)  # <G, S> = Tr(G S^T)
    c1 = (L * r1 - r2) / (L - 1)
    cG = (r2 - r1) / (L - 1)
    return c1, cG, r1, r2


def _as_attention(G, name="G") -> torch.Tensor:
    G = as_tensor(G, name)
    check_square(G, name)
    check_finite(G, name)
    if G.shape[-1] < 2:
        raise ValueError(
            f"{name} must be at least 2x2 (one template needs two positions), "
            f"got shape {tuple(G.shape)}"
        )
    return G


def order_parameters(G):
    r"""Least-squares coefficients ``(c1, cG)`` of ``G`` on the templates ``J/L`` and ``S``.

    ``G`` is an ``L×L`` matrix or a batch ``(..., L, L)`` (NumPy array or tensor). Returns two
    tensors of the batch shape. For a row-softmax attention these are the softmax order
    parameters :math:`(\hat a_1, \hat a_G)`.
    """
    G = _as_attention(G)
    c1, cG, _, _ = _projections(G)
    return c1, cG


def coverage(G):
    r"""Share of :math:`\|G\|_F^2` explained by the two templates, in [0, 1] (batched).

    The projection's squared norm is :math:`c_1 r_1 + c_G r_2` (``c`` solves the normal equations
    with right-hand side ``r``). A zero matrix is explained exactly (coverage 1).
    """
    G = _as_attention(G)
    c1, cG, r1, r2 = _projections(G)
    total = (G * G).sum((-1, -2))
    explained = c1 * r1 + cG * r2
    safe = torch.where(total > 0, total, torch.ones_like(total))
    return torch.where(
        total > 0, (explained / safe).clamp(0.0, 1.0), torch.ones_like(total)
    )


def circulant_coverage(G):
    r"""Share of :math:`\|G\|_F^2` explained by *all* circulant matrices (the L-dimensional space
    of matrices that commute with cyclic shifts: the full symmetric subspace of the copy task).

    The projection onto circulants averages each cyclic diagonal, ``C_k = mean_l G[l, (l-k) % L]``,
    so the explained norm is ``L Σ_k C_k²``. Comparing this with :func:`coverage` shows how much
    of the symmetric structure the two templates capture.
    """
    G = _as_attention(G)
    L = G.shape[-1]
    idx = torch.arange(L, device=G.device)
    rows = idx[None, :].expand(L, L)  # [k, l] -> l
    cols = (idx[None, :] - idx[:, None]) % L  # [k, l] -> (l - k) mod L
    diag_means = G[..., rows, cols].mean(-1)  # (..., L): one mean per diagonal k
    total = (G * G).sum((-1, -2))
    explained = L * (diag_means**2).sum(-1)
    safe = torch.where(total > 0, total, torch.ones_like(total))
    return torch.where(
        total > 0, (explained / safe).clamp(0.0, 1.0), torch.ones_like(total)
    )
