r"""Finite Markov chains: the data of Part I (and of any chapter that needs bigram sequences).

A chain on the vocabulary :math:`[d] = \{0, \dots, d-1\}` is a row-stochastic matrix
:math:`P` (:math:`P_{ij} = \Pr(x_{t+1}=j \mid x_t=i)`); its stationary law :math:`\pi` solves
:math:`\pi^\top P = \pi^\top`, :math:`\mathbf 1^\top\pi = 1`.

The reference family of Part I is the *lazy chain*

.. math::  P = \lambda I + (1-\lambda)\,\mathbf 1\pi^\top, \qquad 0 \le \lambda < 1,

which stays put with probability :math:`\lambda` and otherwise redraws from :math:`\pi`; its
stationary law is :math:`\pi` for every :math:`\lambda`. The *δ-perturbed* family breaks the
symmetry of the rare tokens: :math:`\pi_0 = p_{\rm top}`,
:math:`\pi_i = (1-p_{\rm top})/(d-1) + c_i\,\delta` with :math:`\sum_i c_i = 0`.

Every function accepts NumPy arrays or torch tensors, batched over leading dimensions, and
returns float64 tensors (chains are small; float32 rounding would fail the stochasticity checks).
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from . import linalg
from .device import as_generator
from .validation import (
    as_tensor,
    check_finite,
    check_ndim,
    check_positive_int,
    check_probability_vector,
    check_stochastic_matrix,
)

__all__ = [
    "as_probability_vector",
    "as_stochastic_matrix",
    "lazy_chain",
    "stationary",
    "perturbed_stationary",
    "perturbed_chain",
    "sample_sequences",
    "entropy_rate",
    "entropy",
    "estimate_chain",
]


def _as_float64(x, name):
    # chains are validated and computed in float64: a float32 row sums to 1 only to ~1e-7
    return as_tensor(x, name).to(torch.float64)


def _tol(x) -> float:
    """Sum-to-one tolerance matching the precision the caller used (float32 input: 1e-5)."""
    if isinstance(x, torch.Tensor):
        return 1e-8 if x.dtype == torch.float64 else 1e-5
    if isinstance(x, np.ndarray) and x.dtype != np.float64:
        return 1e-5
    return 1e-8


def as_probability_vector(x, name: str) -> torch.Tensor:
    """Validate a (batch of) probability vector(s) at the input's precision; float64, renormalised."""
    t = check_probability_vector(_as_float64(x, name), name, atol=_tol(x))
    return t / t.sum(-1, keepdim=True)


def as_stochastic_matrix(x, name: str) -> torch.Tensor:
    """Validate a (batch of) row-stochastic matrices at the input's precision; float64, renormalised."""
    t = check_stochastic_matrix(_as_float64(x, name), name, atol=_tol(x))
    return t / t.sum(-1, keepdim=True)


def lazy_chain(pi, lam) -> torch.Tensor:
    r"""The lazy chain :math:`P = \lambda I + (1-\lambda)\mathbf 1\pi^\top`.

    Parameters
    ----------
    pi : array (..., d)
        Stationary law (non-negative, sums to one); leading dimensions are a batch.
    lam : float or array broadcastable to ``pi.shape[:-1]``
        Laziness, ``0 <= lam < 1`` (``lam = 1`` would make every state absorbing).

    Returns
    -------
    P : tensor (..., d, d), row-stochastic, with ``stationary(P) == pi``.
    """
    pi = as_probability_vector(pi, "pi")
    if isinstance(lam, numbers.Real) and not isinstance(lam, bool):
        lam_t = torch.tensor(float(lam), dtype=pi.dtype, device=pi.device)
    else:
        lam_t = as_tensor(lam, "lam", dtype=pi.dtype, device=pi.device)
    check_finite(lam_t, "lam")
    if bool(((lam_t < 0) | (lam_t >= 1)).any()):
        raise ValueError(
            f"lam must satisfy 0 <= lam < 1, got {lam_t.flatten()[:4].tolist()}"
        )
    d = pi.shape[-1]
    try:
        lam_b = lam_t.expand(pi.shape[:-1])[..., None, None]
    except RuntimeError:
        raise ValueError(
            f"lam of shape {tuple(lam_t.shape)} does not broadcast to the batch "
            f"shape {tuple(pi.shape[:-1])} of pi"
        ) from None
    eye = torch.eye(d, dtype=pi.dtype, device=pi.device)
    return lam_b * eye + (1 - lam_b) * pi[..., None, :].expand(*pi.shape[:-1], d, d)


def stationary(P) -> torch.Tensor:
    r"""Stationary law :math:`\pi` of a row-stochastic matrix (batched over leading dimensions).

    Solves :math:`(P^\top - I)\pi = 0` with one equation replaced by :math:`\mathbf 1^\top\pi = 1`.
    The chain must have a unique stationary law (one closed communicating class); otherwise the
    system is singular and a ``ValueError`` says so.
    """
    P = as_stochastic_matrix(P, "P")
    d = P.shape[-1]
    A = P.transpose(-1, -2) - torch.eye(d, dtype=P.dtype, device=P.device)
    A = A.clone()
    A[..., -1, :] = 1.0
    rhs = torch.zeros(*P.shape[:-1], dtype=P.dtype, device=P.device)
    rhs[..., -1] = 1.0
    pi, info = torch.linalg.solve_ex(A, rhs)
    if bool((info != 0).any()) or not bool(torch.isfinite(pi).all()):
        raise ValueError("P has no unique stationary law (the chain is reducible)")
    resid = (pi[..., None, :] @ P)[..., 0, :] - pi
    if float(resid.abs().max()) > 1e-6 or bool((pi < -1e-9).any()):
        raise ValueError("P has no unique stationary law (the chain is reducible)")
    return pi.clamp_min(0.0) / pi.clamp_min(0.0).sum(-1, keepdim=True)


def perturbed_stationary(
    d: int, pi_top: float, delta: float = 0.0, *, c=None
) -> torch.Tensor:
    r"""The δ-perturbed law :math:`\pi_0 = p_{\rm top}`, :math:`\pi_i = (1-p_{\rm top})/(d-1) + c_i\delta`.

    ``c`` (length ``d-1``, summing to zero) defaults to ``linspace(1, -1, d-1)``; for ``d = 4``
    and ``delta = 0.02`` this gives ``(0.7, 0.12, 0.10, 0.08)`` at ``pi_top = 0.7``.
    ``delta = 0`` makes the ``d-1`` rare tokens exactly symmetric.
    """
    d = check_positive_int(d, "d", minimum=2)
    if not isinstance(pi_top, numbers.Real) or not 0 < pi_top < 1:
        raise ValueError(f"pi_top must be a number in (0, 1), got {pi_top!r}")
    if not isinstance(delta, numbers.Real) or delta < 0:
        raise ValueError(f"delta must be a non-negative number, got {delta!r}")
    if c is None:
        c_t = (
            torch.linspace(1.0, -1.0, d - 1, dtype=torch.float64)
            if d > 2
            else torch.zeros(1, dtype=torch.float64)
        )
    else:
        c_t = as_tensor(c, "c", dtype=torch.float64)
        check_ndim(c_t, "c", 1)
        if c_t.shape[0] != d - 1:
            raise ValueError(f"c must have d-1 = {d - 1} entries, got {c_t.shape[0]}")
        if abs(float(c_t.sum())) > 1e-10:
            raise ValueError(f"c must sum to zero, sums to {float(c_t.sum()):.3g}")
    rest = (1.0 - pi_top) / (d - 1) + c_t * delta
    if bool((rest <= 0).any()):
        raise ValueError(
            f"delta = {delta} is too large: a rare token's probability would be <= 0"
        )
    return torch.cat([torch.tensor([float(pi_top)], dtype=torch.float64), rest])


def perturbed_chain(
    d: int, pi_top: float, delta: float, lam: float, *, c=None
) -> torch.Tensor:
    """``lazy_chain(perturbed_stationary(d, pi_top, delta, c=c), lam)``."""
    return lazy_chain(perturbed_stationary(d, pi_top, delta, c=c), lam)


def sample_sequences(
    P,
    n_seq: int,
    length: int,
    *,
    init=None,
    seed: int | torch.Generator | None = None,
    device=None,
) -> torch.Tensor:
    r"""Sample ``n_seq`` sequences of ``length`` tokens from the chain ``P`` (vectorised).

    The first token is drawn from ``init`` (default: the stationary law, so every window is a
    stationary sample); each next token by inverse-CDF sampling of the row of the current
    token. All uniforms are drawn at once from one generator (``seed``: an int, a
    ``torch.Generator``, or ``None`` for torch's global generator), so the same seed gives the
    same sequences. ``P`` may be batched ``(..., d, d)``; the result has shape
    ``(..., n_seq, length)`` and dtype ``int64``, on ``device`` (default: ``P``'s device).
    """
    P = as_stochastic_matrix(P, "P")
    n_seq = check_positive_int(n_seq, "n_seq")
    length = check_positive_int(length, "length")
    dev = torch.device(device) if device is not None else P.device
    P = P.to(dev)
    batch = P.shape[:-2]
    d = P.shape[-1]
    if init is None:
        init_t = stationary(P)
    else:
        init_t = as_probability_vector(init, "init").to(dev)
        if init_t.shape[-1] != d:
            raise ValueError(
                f"init must have {d} entries (the size of P), got {init_t.shape[-1]}"
            )
        init_t = init_t.expand(*batch, d)
    gen = as_generator(seed, dev)
    u = torch.rand(*batch, n_seq, length, generator=gen, device=dev, dtype=P.dtype)
    cum = P.cumsum(-1)  # (..., d, d)
    cum_init = init_t.cumsum(-1)[..., None, :]  # (..., 1, d)
    x = torch.empty(*batch, n_seq, length, dtype=torch.long, device=dev)
    # count of CDF values below u = the sampled index (clamped against rounding of the last entry)
    x[..., 0] = (cum_init < u[..., 0:1]).sum(-1).clamp_max(d - 1)
    flat_cum = cum.reshape(-1, d, d)
    nb = flat_cum.shape[0]
    bidx = torch.arange(nb, device=dev)[:, None].expand(nb, n_seq)
    xf = x.reshape(nb, n_seq, length)
    uf = u.reshape(nb, n_seq, length)
    for t in range(1, length):
        rows = flat_cum[bidx, xf[..., t - 1]]  # (nb, n_seq, d)
        xf[..., t] = (rows < uf[..., t : t + 1]).sum(-1).clamp_max(d - 1)
    return xf.reshape(*batch, n_seq, length)


def entropy(p, *, dim: int = -1) -> torch.Tensor:
    r"""Shannon entropy :math:`-\sum_k p_k\log p_k` (nats) along ``dim``, with :math:`0\log 0 = 0`."""
    return linalg.entropy(_as_float64(p, "p"), dim=dim)


def entropy_rate(P, pi=None) -> torch.Tensor:
    r"""Entropy rate :math:`h = -\sum_i \pi_i \sum_j P_{ij}\log P_{ij}` (nats per token).

    This is the Bayes-optimal cross-entropy of next-token prediction given the previous token:
    the floor of every loss curve in Part I.
    """
    P = as_stochastic_matrix(P, "P")
    if pi is None:
        pi = stationary(P)
    else:
        pi = as_probability_vector(pi, "pi").to(P.device)
        if pi.shape[-1] != P.shape[-1]:
            raise ValueError(f"pi must have {P.shape[-1]} entries, got {pi.shape[-1]}")
    return (pi * entropy(P)).sum(-1)


def estimate_chain(
    tokens, d: int, *, smoothing: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Bigram estimate of a chain from token ids: :math:`\hat P_{ij} \propto n_{ij} + \text{smoothing}`.

    ``tokens`` is one stream ``(L,)`` or a batch of sequences ``(..., L)`` (transitions are
    counted within each sequence, never across two).

    Returns ``(P_hat, pi_hat)`` with ``pi_hat`` the unigram frequencies. Rows of tokens that
    never occur (and ``smoothing = 0``) are set to ``pi_hat`` so that ``P_hat`` stays stochastic.
    """
    t = as_tensor(tokens, "tokens", allow_int=True)
    if t.is_floating_point():
        raise TypeError("tokens must be integer ids")
    t = t.long().cpu()
    if t.dim() == 0:
        raise ValueError("tokens must be a sequence of ids")
    d = check_positive_int(d, "d", minimum=2)
    if t.shape[-1] < 2:
        raise ValueError("tokens must hold at least two ids per sequence")
    if int(t.min()) < 0 or int(t.max()) >= d:
        raise ValueError(
            f"tokens must lie in [0, {d}), found range [{int(t.min())}, {int(t.max())}]"
        )
    if not isinstance(smoothing, numbers.Real) or smoothing < 0:
        raise ValueError(f"smoothing must be a non-negative number, got {smoothing!r}")
    pairs = (t[..., :-1] * d + t[..., 1:]).reshape(
        -1
    )  # transitions within each sequence only
    counts = torch.bincount(pairs, minlength=d * d).reshape(d, d).to(torch.float64)
    t = t.reshape(-1)
    pi_hat = torch.bincount(t, minlength=d).to(torch.float64)
    pi_hat = pi_hat / pi_hat.sum()
    counts = counts + smoothing
    rows = counts.sum(-1, keepdim=True)
    P_hat = torch.where(rows > 0, counts / rows.clamp_min(1e-300), pi_hat.expand(d, d))
    return P_hat, pi_hat
