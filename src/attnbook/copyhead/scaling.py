r"""Finite-size scaling of the softmax transition in the symmetric-logit ansatz: the coexistence
window, the barrier between the two minima at :math:`P^\star`, and the precursor, against ``L``.

The barrier sets how a sampler sees the transition: a chain crosses a barrier of
:math:`\Delta S` units of action in a time :math:`\propto e^{\Delta S}`, so at :math:`\Delta S\approx1`
(``L = 32``) hot and cold starts agree after a few hundred steps, while at
:math:`\Delta S\gtrsim10` they keep their start for any practical run (hysteresis).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnbook.copyhead.action import (
    softmax_action,
    softmax_critical_length,
    softmax_critical_p,
    softmax_fold_window,
)
from attnbook.copyhead.action.numerics import logit_grid
from attnbook.validation import check_positive_int

__all__ = ["softmax_barrier", "SoftmaxScaling", "softmax_scaling"]


def softmax_barrier(
    *,
    seq_len: int,
    vocab_size: int,
    n_sequences=None,
    n_grid: int = 8001,
    **hyper,
) -> float:
    """Height of the barrier of the symmetric-logit action ``S(g)`` above its unstructured
    minimum, at ``n_sequences`` (default :math:`P^\\star`, where both minima are equally deep).

    Raises ``ValueError`` where ``S(g)`` has a single minimum (below the critical length or
    outside the coexistence window)."""
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    P = (
        softmax_critical_p(seq_len=L, vocab_size=vocab_size, **hyper)
        if n_sequences is None
        else float(n_sequences)
    )
    g = logit_grid(L, n_grid=n_grid)
    S = softmax_action(
        g, n_sequences=P, seq_len=L, vocab_size=vocab_size, **hyper
    ).numpy()
    inner = np.nonzero((S[1:-1] < S[:-2]) & (S[1:-1] <= S[2:]))[0] + 1  # local minima
    if len(inner) < 2:
        raise ValueError(
            f"S(g) has {len(inner)} minimum at L = {L}, P = {P:.4g}: no barrier (below "
            "the critical length or outside the coexistence window)"
        )
    i0, i1 = inner[0], inner[-1]
    return float(S[i0 : i1 + 1].max() - S[i0])


@dataclass(frozen=True)
class SoftmaxScaling:
    """Per ``L``: ``p_star``, the coexistence window ``window_lo``/``window_hi`` and its width
    over ``L²``, and the ``barrier`` at :math:`P^\\star` (arrays over ``seq_len``)."""

    seq_len: np.ndarray
    p_star: np.ndarray
    window_lo: np.ndarray
    window_hi: np.ndarray
    barrier: np.ndarray

    @property
    def window_over_L2(self) -> np.ndarray:
        return self.window_hi / self.seq_len**2


def softmax_scaling(seq_lens, *, vocab_size: int, **hyper) -> SoftmaxScaling:
    """:class:`SoftmaxScaling` for every ``L`` in ``seq_lens`` (each at least the critical
    length :func:`~attnbook.copyhead.action.softmax_critical_length`)."""
    Ls = np.asarray(seq_lens).reshape(-1)
    if Ls.size == 0:
        raise ValueError("seq_lens must not be empty")
    L_c = softmax_critical_length(vocab_size=vocab_size, **hyper)
    if (Ls < L_c).any():
        raise ValueError(
            f"every L must be at least the critical length L_c = {L_c}, got {Ls.tolist()}"
        )
    rows = []
    for L in Ls.astype(int):
        kw = dict(seq_len=int(L), vocab_size=vocab_size, **hyper)
        lo, hi = softmax_fold_window(**kw)
        rows.append((softmax_critical_p(**kw), lo, hi, softmax_barrier(**kw)))
    p, lo, hi, bar = (np.array(c, dtype=float) for c in zip(*rows))
    return SoftmaxScaling(Ls.astype(float), p, lo, hi, bar)
