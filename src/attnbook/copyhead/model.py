r"""One attention head on the copy task: softmax and linear attention (model E* of the theory brief).

Attention acts on *positions* (one-hot tokens carry no position), so the head's scores are an
:math:`L\times L` matrix :math:`G` — think :math:`G = W_Q^\top W_K` on one-hot positional codes.
With a readout :math:`W\in\mathbb R^{V\times V}` the network's output at position :math:`l` is

.. math::
    f_l = W \sum_{l'} A_{ll'}\, x_{l'},\qquad
    A = \begin{cases} (G + b\,J)/L & \text{linear attention}\\
                      \operatorname{rowsoftmax}(G) & \text{softmax attention}\end{cases}

(:math:`J = \mathbf 1\mathbf 1^\top`; the bias :math:`b` gives linear attention a cheap pooling
channel — softmax ignores it, a constant logit shift changes nothing). The loss of a data set of
:math:`P` sequences and the priors of the Bayesian view are

.. math::
    \mathcal L = \frac{1}{2\kappa L}\sum_{\mu=1}^P\sum_{l=1}^L \|f_{\mu l}-y_{\mu l}\|^2,\qquad
    W_{ij}\sim\mathcal N(0,\sigma_w^2),\ G_{ij}\sim\mathcal N(0,\sigma_g^2),\ b\sim\mathcal N(0,\sigma_b^2).

Everything is batched over a leading *model* dimension: ``params`` is a dict of tensors
``G (n, L, L)``, ``W (n, V, V)``, ``b (n,)``, so one call evaluates many networks at once.
The loss is computed from the data's sufficient statistics (:func:`copy_statistics`), which
makes its cost independent of :math:`P`; :func:`forward` is the literal per-sequence version
(used for teaching and to test the fast path).
"""

from __future__ import annotations

import torch

from attnbook.arrays import numpy_in_numpy_out
from attnbook.attention import attention_weights, normalize_scores, resolve_kind
from attnbook.copyhead.task import CopyStats
from attnbook.device import as_generator, default_dtype
from attnbook.validation import (
    as_tensor,
    check_positive,
    check_positive_int,
    check_square,
)

__all__ = [
    "KINDS",
    "resolve_copy_kind",
    "attention_matrix",
    "init_params",
    "forward",
    "data_terms",
    "loss",
    "token_mse",
    "prior_energy",
]

#: The attention kinds of the copy head (names resolved by :func:`attnbook.attention.resolve_kind`).
KINDS = ("linear", "softmax")


def resolve_copy_kind(kind) -> str:
    """The canonical copy-head ``kind`` (``"linear"`` or ``"softmax"``), aliases resolved."""
    return resolve_kind(kind, allowed=KINDS)


@numpy_in_numpy_out("G")
def attention_matrix(G, b=None, *, kind: str = "linear") -> torch.Tensor:
    """The attention matrix ``A`` from scores ``G (..., L, L)`` (and bias ``b (...)`` for linear).

    The scores are the logits of :func:`attnbook.attention.attention_weights` with one-hot
    positional keys (so the score matrix is ``G`` itself): softmax is ``rowsoftmax(G)``, linear
    attention ``(G + b J)/L`` (the mean-field ``1/n`` of the shared map). NumPy in, NumPy out.
    """
    kind = resolve_copy_kind(kind)
    G = as_tensor(G, "G")
    check_square(G, "G")
    if b is not None and kind == "linear":
        b = as_tensor(b, "b", dtype=G.dtype, device=G.device)
        if b.shape != G.shape[:-2]:
            raise ValueError(
                f"b must have the batch shape of G {tuple(G.shape[:-2])}, "
                f"got {tuple(b.shape)}"
            )
        G = G + b[..., None, None]
    keys = torch.eye(G.shape[-1], dtype=G.dtype, device=G.device)
    A = attention_weights(G, keys, kind=kind)
    return A


def scores_attention(G: torch.Tensor, b=None, *, kind: str) -> torch.Tensor:
    """:func:`attention_matrix` for a sampler's inner loop: ``G`` (and ``b``) already tensors of
    matching shapes, ``kind`` already resolved. No finiteness check, and so no host
    synchronisation; the values, and their gradients, are those of :func:`attention_matrix` bit
    for bit (tested).

    With one-hot keys the score matrix is ``G`` itself, and softmax normalises it directly.
    Linear attention keeps the product with the identity keys: without it the gradient of the
    bias ``b``, a sum over the ``L × L`` scores, is added up in another order and moves in its
    last bit, which would part every archived linear SGLD chain from its re-run."""
    if kind == "linear":
        if b is not None:
            G = G + b[..., None, None]
        keys = torch.eye(G.shape[-1], dtype=G.dtype, device=G.device)
        G = 1.0 * (G @ keys.transpose(-1, -2))  # the arithmetic of attention.scores
    return normalize_scores(G, kind=kind)


def init_params(
    n_models: int,
    seq_len: int,
    vocab_size: int,
    *,
    g_scale: float = 1.0,
    w_scale: float = 1.0,
    b_scale: float = 0.0,
    seed=None,
    dtype: torch.dtype | None = None,
    device=None,
) -> dict:
    """Gaussian initial weights for ``n_models`` networks: ``G ~ N(0, g_scale²)``,
    ``W ~ N(0, w_scale²)``, ``b ~ N(0, b_scale²)`` (scales 0 give zeros).

    ``seed``: an int, a ``torch.Generator`` or ``None`` (torch's global generator); drawn on
    the CPU, so a seed gives the same weights on every machine. ``dtype`` defaults to float64.
    """
    n = check_positive_int(n_models, "n_models")
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    V = check_positive_int(vocab_size, "vocab_size", minimum=2)
    for val, name in ((g_scale, "g_scale"), (w_scale, "w_scale"), (b_scale, "b_scale")):
        check_positive(val, name, allow_zero=True)
    dt = default_dtype(dtype)
    gen = as_generator(seed)
    G = g_scale * torch.randn(n, L, L, generator=gen, dtype=dt)
    W = w_scale * torch.randn(n, V, V, generator=gen, dtype=dt)
    b = b_scale * torch.randn(n, generator=gen, dtype=dt)
    return {
        k: v.to(device) if device is not None else v
        for k, v in (("G", G), ("W", W), ("b", b))
    }


def _check_params(params: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not isinstance(params, dict) or not {"G", "W"} <= set(params):
        raise TypeError(
            "params must be a dict with tensors 'G' (n, L, L) and 'W' (n, V, V) [and 'b' (n,)]"
        )
    G, W = params["G"], params["W"]
    check_square(G, "params['G']")
    check_square(W, "params['W']")
    if G.shape[:-2] != W.shape[:-2]:
        raise ValueError(
            f"params['G'] and params['W'] must share the model dims, got "
            f"{tuple(G.shape)} and {tuple(W.shape)}"
        )
    b = params.get("b")
    if b is None:
        b = torch.zeros(G.shape[:-2], dtype=G.dtype, device=G.device)
    return G, W, b


def forward(params: dict, X, *, kind: str = "linear") -> torch.Tensor:
    """Literal network output ``f[n, μ, l] = W_n Σ_l' A_n[l, l'] x_μl'``, shape ``(n, P, L, V)``.

    ``X`` is ``(P, L, V)`` (shared by all models) or ``(n, P, L, V)`` (one data set per model).
    """
    G, W, b = _check_params(params)
    X = as_tensor(X, "X", dtype=G.dtype, device=G.device)
    if X.dim() == 3:
        X = X.expand(G.shape[0], *X.shape)
    if X.dim() != 4 or X.shape[-1] != W.shape[-1] or X.shape[-2] != G.shape[-1]:
        raise ValueError(
            f"X must be (P, L={G.shape[-1]}, V={W.shape[-1]}) or (n, P, L, V), got {tuple(X.shape)}"
        )
    A = attention_matrix(G, b, kind=kind)
    H = torch.einsum("nla,npai->npli", A, X)  # attended features h_{μl}
    return torch.einsum("nvi,npli->nplv", W, H)  # readout f_{μl} = W h_{μl}


def data_terms(A: torch.Tensor, stats: CopyStats) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``HᵀH`` and ``HᵀY`` (each ``(..., V, V)``) for attention ``A (..., L, L)``:
    :math:`H^\top H=\sum_{a,b}(A^\top A)_{ab}C_{ab}`, :math:`H^\top Y=\sum_{l,a}A_{la}D_{al}`."""
    AtA = A.transpose(-1, -2) @ A
    HH = torch.einsum("...ab,...abij->...ij", AtA, stats.xx)
    HY = torch.einsum("...la,...alij->...ij", A, stats.xy)
    return HH, HY


def _sq_error(params: dict, stats: CopyStats, kind: str) -> torch.Tensor:
    G, W, b = _check_params(params)
    if stats.xx.shape[-3] != G.shape[-1] or stats.xx.shape[-1] != W.shape[-1]:
        raise ValueError(
            f"stats are for L={stats.seq_len}, V={stats.vocab_size}; params have "
            f"L={G.shape[-1]}, V={W.shape[-1]}"
        )
    if stats.xx.dtype != G.dtype:
        stats = stats.to(dtype=G.dtype)
    A = attention_matrix(G, b, kind=kind)
    HH, HY = data_terms(A, stats)
    # Σ‖W h − y‖² = Tr(W HᵀH Wᵀ) − 2 Tr(W HᵀY) + Σ‖y‖²
    fit = torch.einsum("...ij,...jk,...ik->...", W, HH, W)
    cross = torch.einsum("...ij,...ji->...", W, HY)
    return fit - 2 * cross + stats.yy


def loss(
    params: dict, stats: CopyStats, *, kind: str = "linear", kappa: float = 1.0
) -> torch.Tensor:
    r"""Per-model loss :math:`\frac{1}{2\kappa L}\sum_{\mu,l}\|f_{\mu l}-y_{\mu l}\|^2`, shape ``(n,)``."""
    kind = resolve_copy_kind(kind)
    kappa = check_positive(kappa, "kappa")
    return _sq_error(params, stats, kind) / (2 * kappa * stats.seq_len)


def token_mse(params: dict, stats: CopyStats, *, kind: str = "linear") -> torch.Tensor:
    """Mean squared error per token, ``Σ‖f − y‖²/(P L)`` (1 for the zero network, 0 for a perfect copy)."""
    kind = resolve_copy_kind(kind)
    return _sq_error(params, stats, kind) / (stats.n_sequences * stats.seq_len)


def prior_energy(
    params: dict, *, sigma_w: float = 1.0, sigma_g: float = 1.0, sigma_b: float = 1.0
) -> torch.Tensor:
    """Negative log prior (up to a constant), ``‖W‖²/2σ_w² + ‖G‖²/2σ_g² + b²/2σ_b²`` per model."""
    G, W, b = _check_params(params)
    sw, sg, sb = (
        check_positive(s, n)
        for s, n in ((sigma_w, "sigma_w"), (sigma_g, "sigma_g"), (sigma_b, "sigma_b"))
    )
    return (
        (W**2).sum((-1, -2)) / (2 * sw**2)
        + (G**2).sum((-1, -2)) / (2 * sg**2)
        + b**2 / (2 * sb**2)
    )
