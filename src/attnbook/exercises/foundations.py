"""Checkers of the foundations chapters' coding exercises (how-to-use, attention-maps).

Each checker runs the student's function on a few inputs — a typical one, a batched or
rectangular one, and an edge case that a common mistake gets wrong — and compares it with the
package's tested implementation; before a plain "wrong value" it looks for the usual mistakes
and names them in the hint.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .. import attention as att
from ..claims import student_t_interval
from .core import as_array, assert_close, call, checker, fail, require_function
from .core import randn as _randn

__all__ = [
    "check_l2_weights",
    "check_row_entropy",
    "check_t_interval",
    "check_scaled_scores",
]


def _describe(**tensors) -> str:
    return ", ".join(f"{k} of shape {tuple(v.shape)}" for k, v in tensors.items())


# --- attention-maps ---------------------------------------------------------------------------


@checker(
    "ex-l2-weights",
    what="a function l2_weights(q, k)",
    reference=("attnbook.attention.attention_weights",),
)
def check_l2_weights(fn) -> None:
    """ℓ² attention weights ``(n_q, n_k)`` from queries ``(n_q, d)`` and keys ``(n_k, d)``."""
    label = "ex-l2-weights"
    require_function(label, fn, "a function l2_weights(q, k)")
    cloud = att.example_tokens(12, 2, seed=0)
    cases = [
        (cloud, cloud),
        (_randn(5, 3, seed=1), _randn(7, 3, seed=2)),
        (
            30 * _randn(4, 2, seed=3),
            30 * _randn(6, 2, seed=4),
        ),  # far apart: e^(-d²) → 0
    ]
    for i, (q, k) in enumerate(cases):
        on = _describe(q=q, k=k) + (" (tokens far apart)" if i == 2 else "")
        got = as_array(label, call(label, fn, q.clone(), k.clone(), on=on), on=on)
        expected = att.attention_weights(q, k, kind="l2").numpy()
        hint = "P_ij = softmax_j(2⟨q_i, k_j⟩ − ‖k_j‖²): each row is a softmax over the keys"
        if got.shape == expected.shape:
            if np.allclose(got, torch.softmax(q @ k.T, -1).numpy(), atol=1e-9):
                hint = (
                    "this is plain softmax of ⟨q_i, k_j⟩: the ℓ² score also has −‖k_j‖²"
                )
            elif not np.all(np.isfinite(got)):
                hint = (
                    "e^(−‖q−k‖²) underflows to 0 for distant tokens (0/0 = NaN): use "
                    "torch.softmax, which subtracts each row's maximum first"
                )
            elif not np.allclose(got.sum(-1), 1.0, atol=1e-9):
                hint = "each row must sum to 1: normalise over the keys (the last axis)"
        assert_close(label, got, expected, on=on, hint=hint, what="the weight matrix")


@checker(
    "ex-row-entropy",
    what="a function row_entropy(P)",
    reference=("attnbook.attention.row_entropy",),
)
def check_row_entropy(fn) -> None:
    """Entropy (nats) of each row of a row-stochastic ``P`` (``(..., n_k)`` → ``(...)``)."""
    label = "ex-row-entropy"
    require_function(label, fn, "a function row_entropy(P)")
    hard = torch.eye(4, dtype=torch.float64)[[0, 2, 2]]  # rows with zeros: 0·log 0 = 0
    cases = [
        (torch.softmax(_randn(4, 6, seed=5), -1), ""),
        (torch.full((2, 5), 0.2, dtype=torch.float64), " (uniform rows: log 5)"),
        (hard, " (one-hot rows, with zeros)"),
        (torch.softmax(_randn(2, 3, 5, seed=6), -1), " (batched)"),
    ]
    for P, note in cases:
        on = f"P of shape {tuple(P.shape)}{note}"
        got = as_array(label, call(label, fn, P.clone(), on=on), on=on)
        expected = att.row_entropy(P).numpy()
        hint = "H_i = −Σ_j P_ij log P_ij, summed over the last axis (natural log)"
        if got.shape == expected.shape:
            if not np.all(np.isfinite(got)):
                hint = (
                    "0·log 0 gives NaN: treat zero weights as contributing 0 "
                    "(e.g. torch.special.xlogy(P, P))"
                )
            elif np.allclose(got, -expected, atol=1e-9) and expected.any():
                hint = "the sign: entropy is −Σ p log p ≥ 0"
            elif np.allclose(got, expected / math.log(2), atol=1e-9) and expected.any():
                hint = (
                    "the book measures entropy in nats: use the natural log, not log2"
                )
        assert_close(label, got, expected, on=on, hint=hint, what="the entropies")


# --- how-to-use -------------------------------------------------------------------------------


@checker(
    "ex-howto-interval",
    what="a function t_interval(values)",
    reference=("attnbook.claims.student_t_interval",),
)
def check_t_interval(fn) -> None:
    """The Student-t 95 % interval ``(low, high)`` of the mean of a 1-D tensor of values."""
    label = "ex-howto-interval"
    require_function(label, fn, "a function t_interval(values)")
    for n, seed in ((5, 7), (8, 8), (30, 9)):
        values = 1.0 + 0.1 * _randn(n, seed=seed)
        on = f"{n} values, a 1-D float64 tensor (mean {float(values.mean()):.4f})"
        got = as_array(
            label, call(label, fn, values.clone(), on=on), on=on, what="(low, high)"
        )
        if got.shape != (2,):
            fail(
                label,
                f"expected two numbers (low, high), got shape {got.shape}",
                on=on,
                hint="return a tuple: (mean − half, mean + half)",
            )
        expected = np.array(student_t_interval(values.numpy()))
        mean, half = float(values.mean()), (expected[1] - expected[0]) / 2
        ratio = (got[1] - got[0]) / 2 / half
        hint = (
            "half-width = t_{0.975, n−1} · s / √n with s the sample standard deviation"
        )
        if not np.isclose((got[0] + got[1]) / 2, mean, rtol=1e-9, atol=1e-12):
            hint = "the interval must be centred on the mean of the values"
        elif np.isclose(ratio, _normal_half(values) / half, rtol=1e-3):
            hint = (
                "that is the normal quantile 1.96: use scipy.stats.t.ppf(0.975, n − 1)"
            )
        elif np.isclose(ratio, math.sqrt((n - 1) / n), rtol=1e-6):
            hint = "use the sample standard deviation (ddof=1, torch's default), not ddof=0"
        assert_close(label, got, expected, on=on, hint=hint, what="(low, high)")


def _normal_half(values: torch.Tensor) -> float:
    from scipy import stats

    return (
        float(stats.norm.ppf(0.975)) * float(values.std()) / math.sqrt(values.numel())
    )


@checker(
    "ex-howto-scaled-scores",
    what="a function scaled_scores(queries, keys)",
    reference=("attnbook.attention.scores", "attnbook.attention.attention_weights"),
)
def check_scaled_scores(fn) -> None:
    """Scores ``⟨q_i, k_j⟩ / √d`` of queries ``(..., n_q, d)`` and keys ``(..., n_k, d)``."""
    label = "ex-howto-scaled-scores"
    require_function(label, fn, "a function scaled_scores(queries, keys)")
    cases = [
        (_randn(3, 4, seed=10), _randn(5, 4, seed=11)),
        (_randn(2, 3, 16, seed=12), _randn(2, 6, 16, seed=13)),
    ]
    for q, k in cases:
        on = _describe(queries=q, keys=k)
        got = as_array(label, call(label, fn, q.clone(), k.clone(), on=on), on=on)
        expected = att.scores(q, k, scale=q.shape[-1] ** -0.5).numpy()
        hint = "score_ij = ⟨q_i, k_j⟩ / √d with d the last dimension: queries @ keys.mT"
        if got.shape == expected.shape:
            d = q.shape[-1]
            if np.allclose(got, expected * math.sqrt(d)):
                hint = "divide by √d, where d = queries.shape[-1]"
            elif np.allclose(got, expected / math.sqrt(d)):
                hint = "divide by √d, not by d"
        shape_hint = (
            "rows are queries and columns keys: queries @ keys.mT (shape n_q × n_k)"
        )
        assert_close(
            label,
            got,
            expected,
            on=on,
            hint=hint,
            shape_hint=shape_hint,
            what="the scores",
        )
