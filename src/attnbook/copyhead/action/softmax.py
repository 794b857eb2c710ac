r"""Softmax attention with the symmetric-logit ansatz (logit ``g`` on the previous token):
the action :math:`S(g)`, its local and global minima over ``P``, the critical length below which
there is only one minimum, the first-order transition ``P*``, the coexistence window and the
exact moments of :math:`a_G`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from attnbook.copyhead.action.evidence import data_action, train_mse_theory
from attnbook.copyhead.action.numerics import (
    CopyHyper,
    bisect_log,
    grad_and_hessian,
    logit_grid,
    p_grid,
    quadrature_moments,
)
from attnbook.validation import as_tensor, check_finite, check_positive_int

__all__ = [
    "softmax_order_parameters",
    "softmax_action",
    "SoftmaxSaddle",
    "softmax_saddle",
    "softmax_critical_length",
    "softmax_stationary_p",
    "softmax_fold_window",
    "softmax_critical_p",
    "softmax_coexistence",
    "softmax_copy_moments",
]


def softmax_order_parameters(g, seq_len: int):
    """``(a_1, a_G)`` of the symmetric-logit softmax attention ``rowsoftmax(g S)`` (batched)."""
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    g = as_tensor(g, "g")
    eg = torch.exp(g)
    return L / (eg + L - 1), (eg - 1) / (eg + L - 1)


#: the hyper-parameters of the softmax analyses (no row bias: it is flat under the softmax)
_SCALES = ("kappa", "sigma_w", "sigma_g")
_READOUT = ("vocab_size", "kappa", "sigma_w")


def _hyper(function: str, hyper: dict, required=("seq_len", "vocab_size")):
    """The validated :class:`CopyHyper` of a softmax analysis from its keywords."""
    return CopyHyper.from_keywords(function, hyper, required=required, optional=_SCALES)


def _copy_statistics(aG: torch.Tensor, L: int):
    """``(q_F, q_S, m_1, m_2)`` of symmetric-logit attention with copy coefficient ``a_G``."""
    one = torch.ones_like(aG)
    return 1 / L + aG**2 * (1 - 1 / L), 1 / L + aG * (1 - 1 / L), one, one


def softmax_action(g, *, n_sequences, **hyper):
    r""":math:`S(g) = (L-1)g^2/2\sigma_g^2 + S_\text{data}(m=1, c_G=a_G(g))` (batched).

    ``hyper``: ``seq_len``, ``vocab_size`` (required), ``kappa``, ``sigma_w``, ``sigma_g``
    (:class:`CopyHyper`)."""
    return _action(g, n_sequences, _hyper("softmax_action", hyper))


def _action(g, n_sequences, hp: CopyHyper) -> torch.Tensor:
    """:func:`softmax_action` on validated hyper-parameters."""
    L = hp.seq_len
    g = as_tensor(g, "g")
    P = as_tensor(n_sequences, "n_sequences", dtype=g.dtype, device=g.device)
    _, aG = softmax_order_parameters(g, L)
    return (L - 1) * g**2 / (2 * hp.sigma_g**2) + data_action(
        *_copy_statistics(aG, L), n_sequences=P, **hp.keywords(*_READOUT)
    )


@dataclass
class SoftmaxSaddle:
    """Minima of the softmax action over ``g`` at each ``P`` (arrays over P)."""

    n_sequences: np.ndarray
    g: np.ndarray  #: global minimiser
    a_G: np.ndarray  #: copy order parameter at the global minimum
    action: np.ndarray
    g_low: (
        np.ndarray
    )  #: the unstructured local minimum (g ≈ 0); −inf if absent (never NaN)
    g_high: np.ndarray  #: the copy local minimum; −inf if absent
    n_minima: np.ndarray  #: number of local minima (2 in the coexistence window)
    train_mse: np.ndarray
    susceptibility: np.ndarray  #: Laplace variance of a_G at the global minimum


def softmax_saddle(n_sequences, *, n_grid: int = 4001, **hyper) -> SoftmaxSaddle:
    """Local and global minima of :func:`softmax_action` on the logit grid (:func:`logit_grid`,
    vectorised over P), the global one polished by Newton steps in ``g``. ``hyper``: the
    keywords of :func:`softmax_action`."""
    P = p_grid(n_sequences)
    hp = _hyper("softmax_saddle", hyper)
    L = hp.seq_len
    g = logit_grid(L, n_grid=n_grid)
    S = _action(g[None], P[:, None], hp)  # (nP, n_grid)
    n_min, g_low, _, g_high, _ = _softmax_minima(S, g, L)

    def action(x):  # x (nP, 1): the action is separable over P
        return _action(x[:, 0], P, hp)

    x = g[S.argmin(-1)][:, None]
    for _ in range(20):
        d1, d2 = grad_and_hessian(action, x)
        x = x - d1 / torch.where(d2[..., 0] > 0, d2[..., 0], torch.ones_like(d1))
    _, d2 = grad_and_hessian(action, x)
    g_best = x[:, 0]
    _, aG = softmax_order_parameters(g_best, L)
    mse = train_mse_theory(
        *_copy_statistics(aG, L), n_sequences=P, **hp.keywords(*_READOUT)
    )
    # Laplace variance of a_G: var(g) = 1/S''(g), then the delta method, (da_G/dg)² var(g)
    daG = L * torch.exp(g_best) / (torch.exp(g_best) + L - 1) ** 2
    susc = daG**2 / d2[:, 0, 0]
    arrays = (P, g_best, aG, action(x), g_low, g_high, n_min, mse, susc)
    return SoftmaxSaddle(*(t.detach().cpu().numpy() for t in arrays))


def _softmax_minima(S: torch.Tensor, g: torch.Tensor, L: int):
    """Classify grid minima of ``S (..., n_grid)``: returns (n_min, g_low, S_low, g_high, S_high).

    With two or more local minima the lowest-g one is the unstructured minimum and the highest-g
    one the copy minimum; a single minimum is classified by ``g < ln(L)/2`` (unstructured)."""
    interior = (S[..., 1:-1] < S[..., :-2]) & (S[..., 1:-1] <= S[..., 2:])
    n_min = interior.sum(-1)
    gi = g[1:-1].expand_as(interior)
    Si = S[..., 1:-1]
    inf = torch.full_like(gi, np.inf)
    first = torch.where(interior, gi, inf).argmin(-1, keepdim=True)
    last = torch.where(interior, gi, -inf).argmax(-1, keepdim=True)
    g_first, g_last = gi.gather(-1, first)[..., 0], gi.gather(-1, last)[..., 0]
    S_first, S_last = Si.gather(-1, first)[..., 0], Si.gather(-1, last)[..., 0]
    single_low = (n_min == 1) & (g_first < np.log(L) / 2)
    has_low = (n_min >= 2) | single_low
    has_high = (n_min >= 2) | ((n_min == 1) & ~single_low)
    ninf = torch.full_like(g_first, -np.inf)
    pinf = torch.full_like(g_first, np.inf)
    return (
        n_min,
        torch.where(has_low, g_first, ninf),
        torch.where(has_low, S_first, pinf),
        torch.where(has_high, g_last, ninf),
        torch.where(has_high, S_last, pinf),
    )


def softmax_stationary_p(g, **hyper) -> np.ndarray:
    """For each logit ``g > 0``, the sample size at which ``g`` is a stationary point of the
    action, ``∂_g S(g; P) = 0`` (the prior's slope balances the data's), by bisection in log P.

    The curve ``P(g)`` is increasing below the critical length; from
    :func:`softmax_critical_length` on it folds back, and between its local maximum and minimum
    each ``P`` has three stationary points (two minima and the barrier). ``hyper``: the
    keywords of :func:`softmax_action`."""
    hp = _hyper("softmax_stationary_p", hyper)
    g = as_tensor(g, "g", dtype=torch.float64)
    if bool((g <= 0).any()):
        raise ValueError("g must be positive (g = 0 is stationary at every P)")
    return _stationary_p(hp.seq_len, hp.keywords("vocab_size", *_SCALES), g).numpy()


def _stationary_p(L: int, kw, g: torch.Tensor) -> torch.Tensor:
    """For each logit ``g > 0``, the sample size at which ``g`` is a stationary point of the
    action, ``∂_g S(g; P) = 0`` (the prior's slope balances the data's), by bisection in log P.
    """
    g = g.detach().requires_grad_(True)
    lo = torch.full_like(g, -4.0)
    hi = torch.full_like(g, 30.0)
    for _ in range(60):
        mid = (lo + hi) / 2
        S = softmax_action(g, n_sequences=torch.exp(mid), seq_len=L, **kw)
        (slope,) = torch.autograd.grad(S.sum(), g)
        lo, hi = torch.where(slope > 0, mid, lo), torch.where(slope > 0, hi, mid)
    return torch.exp((lo + hi) / 2).detach()


def _fold(L: int, kw):
    """``(P_lo, P_hi)`` of the fold of the stationary curve, or None when it is monotone."""
    g = torch.linspace(1e-3, 2 * np.log(L) + 6, 4001, dtype=torch.float64)
    Pg = _stationary_p(L, kw, g)
    falling = torch.nonzero(torch.diff(Pg) < 0).flatten()
    if len(falling) == 0:
        return None
    return float(Pg[falling[-1] + 1]), float(Pg[falling[0]])


def _has_two_minima(L: int, kw) -> bool:
    """Whether two local minima coexist at some P: the stationary curve ``P(g)`` of
    :func:`softmax_stationary_p` folds back (decreases somewhere) exactly when, for the P of the
    fold, ``∂_g S = 0`` has three roots (minimum, barrier, minimum)."""
    return _fold(L, kw) is not None


def softmax_fold_window(**hyper):
    """The coexistence window ``(P_lo, P_hi)`` from the fold of the stationary curve (the P range
    where two minima exist), or ``None`` below the critical length. ``hyper``: the keywords of
    :func:`softmax_action`."""
    hp = _hyper("softmax_fold_window", hyper)
    return _fold(hp.seq_len, hp.keywords("vocab_size", *_SCALES))


@functools.cache
def _critical_length(V: int, kappa: float, sigma_w: float, sigma_g: float) -> int:
    kw = dict(vocab_size=V, kappa=kappa, sigma_w=sigma_w, sigma_g=sigma_g)
    lo, hi = 2, 4
    while not _has_two_minima(hi, kw):
        lo, hi = hi, 2 * hi
        if hi > 4096:
            raise ValueError(
                f"no coexistence of two minima up to L = 4096 for vocab_size={V}"
            )
    while hi - lo > 1:  # two minima for every L >= L_c (tested for V = 2..16)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _has_two_minima(mid, kw) else (mid, hi)
    return hi


def softmax_critical_length(**hyper) -> int:
    r"""The critical length :math:`L_c`: the smallest ``seq_len`` at which the symmetric-logit
    action has two local minima for some ``P`` (where the curve of stationary points
    ``P(g)`` folds back).

    Below :math:`L_c` the unstructured and the copy minimum are one minimum that moves
    continuously with ``P`` (a critical end point): there is no first-order transition, no
    coexistence window and no :math:`P^\star`. 19 for ``V = 4`` and 21 for ``V = 8``
    (unit hyper-parameters; a unit test checks both). Found by doubling then bisection in ``L``; cached. ``hyper``:
    ``vocab_size`` (required), ``kappa``, ``sigma_w``, ``sigma_g``.
    """
    hp = _hyper("softmax_critical_length", hyper, required=("vocab_size",))
    return _critical_length(hp.vocab_size, hp.kappa, hp.sigma_w, hp.sigma_g)


def softmax_critical_p(**hyper) -> float:
    """First-order transition: the ``P`` where the copy basin's minimum becomes the global one.

    Bisects the gap between the two minima inside the coexistence window of
    :func:`softmax_fold_window`. Raises ``ValueError`` for ``seq_len`` below
    :func:`softmax_critical_length`: there the action has a single minimum at every ``P`` and
    no transition exists. ``hyper``: the keywords of :func:`softmax_action`.
    """
    hp = _hyper("softmax_critical_p", hyper)
    L, V = hp.seq_len, hp.vocab_size
    L_c = _critical_length(V, hp.kappa, hp.sigma_w, hp.sigma_g)
    if L < L_c:
        raise ValueError(
            f"seq_len={L} is below the critical length L_c = {L_c} (vocab_size="
            f"{V}): the symmetric-logit action has a single minimum at every P "
            f"(a critical end point), so there is no first-order transition and no P*"
        )
    P_lo, P_hi = _fold(L, hp.keywords("vocab_size", *_SCALES))

    def gap(p):
        # inside the fold window both minima exist; where the grid resolves only one (at
        # the window's ends) the side of the window decides the sign
        g = logit_grid(L)
        n_min, _, S_low, _, S_high = _softmax_minima(_action(g, p, hp), g, L)
        if int(n_min) >= 2:
            return float(S_low - S_high)
        return -1.0 if p < np.sqrt(P_lo * P_hi) else 1.0

    return bisect_log(gap, P_lo * (1 - 1e-12), P_hi * (1 + 1e-12))


def softmax_coexistence(n_sequences, **hyper):
    """``(P_low, P_high)``: first and last sample size of the grid ``n_sequences`` where both local
    minima exist (the metastability window of the first-order transition); ``None`` if never.
    ``hyper``: the keywords of :func:`softmax_action`."""
    hp = _hyper("softmax_coexistence", hyper)
    res = softmax_saddle(n_sequences, **hp.keywords("seq_len", "vocab_size", *_SCALES))
    both = res.n_minima >= 2
    if not both.any():
        return None
    return float(res.n_sequences[both].min()), float(res.n_sequences[both].max())


def softmax_copy_moments(n_sequences, *, n_grid: int = 4001, **hyper):
    r"""Mean and variance of :math:`a_G` under :math:`p(g)\propto e^{-S(g)}` (symmetric-logit softmax
    action, :func:`softmax_action`), by quadrature over the logit ``g`` — the softmax counterpart of
    :func:`linear_pooling_moments`. Near :math:`P^\star` both minima carry weight and the variance
    peaks *at* the transition (coexistence), not before it. Returns ``(mean, var)`` over ``P``.
    ``hyper``: the keywords of :func:`softmax_action`."""
    P = p_grid(n_sequences)
    hp = _hyper("softmax_copy_moments", hyper)
    g = logit_grid(hp.seq_len, n_grid=n_grid)
    S = _action(g[None], P[:, None], hp)
    check_finite(S, "the softmax action")
    _, aG = softmax_order_parameters(g, hp.seq_len)
    mean, var, _ = quadrature_moments(S, aG.expand_as(S))
    return mean.numpy(), var.numpy()
