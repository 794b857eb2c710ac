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
from .core import (
    as_array,
    assert_close,
    call,
    checker,
    fail,
    precision_of,
    require_function,
)
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
    hints=(
        (
            "Expand the squared distance between a query and a key: one of its three terms is "
            "the same for every key of a row, and a softmax over the keys does not see such a "
            "term."
        ),
        (
            "So each row is a softmax over the keys of a score made of a scalar product and "
            "the keys' squared norms; torch.softmax over the last axis normalises it without "
            "underflow."
        ),
        (
            "Test it on two queries and three keys in 2-D that lie close together: the "
            "weights should have shape (2, 3) and agree with the direct exponential of minus "
            "the squared distance, normalised by hand."
        ),
    ),
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
        hint = (
            "the weights differ from the ℓ² attention weights: check your score of one "
            "query–key pair against minus their squared distance (up to a term the softmax "
            "over the keys does not see), and that you normalise over the keys"
        )
        if got.shape == expected.shape:
            if np.allclose(got, torch.softmax(q @ k.T, -1).numpy(), atol=1e-9):
                hint = (
                    "this is a plain softmax of the scalar products ⟨q_i, k_j⟩: the ℓ² "
                    "score also depends on the norm of each key"
                )
            elif not np.all(np.isfinite(got)):
                hint = (
                    "the exponential underflows to 0 for distant tokens, and 0/0 gives "
                    "NaN: normalise in a way that subtracts each row's maximum score first"
                )
            elif not np.allclose(got.sum(-1), 1.0, atol=1e-9):
                hint = "each row must sum to 1: normalise over the keys (the last axis)"
        assert_close(label, got, expected, on=on, hint=hint, what="the weight matrix")


@checker(
    "ex-row-entropy",
    what="a function row_entropy(P)",
    reference=("attnbook.attention.row_entropy", "attnbook.markov.entropy"),
    hints=(
        (
            "The entropy of a row is a sum over its entries of a function of each weight "
            "alone; the only delicate entry is a weight of exactly zero, which contributes "
            "nothing."
        ),
        (
            "Look in torch.special for a product of a number and a logarithm that is defined "
            "as zero where the number is zero; think about which axis the sum runs over, so "
            "that leading batch axes survive."
        ),
        (
            "Try a one-hot row, a uniform row of length 4 and a batch of shape (2, 3, 4): "
            "work out by hand what the first two should give, and check that the third gives "
            "shape (2, 3)."
        ),
    ),
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
        hint = (
            "your entropies differ from the book's: check the sign, the base of the "
            "logarithm (nats) and the axis you sum over (the last one only)"
        )
        if got.shape == expected.shape:
            if not np.all(np.isfinite(got)):
                hint = (
                    "0·log 0 gives NaN: a zero weight must contribute nothing to the "
                    "entropy (look for a logarithm product that handles zeros)"
                )
            elif np.allclose(got, -expected, atol=1e-9) and expected.any():
                hint = "the sign: an entropy is never negative, and yours is"
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
    hints=(
        (
            "The interval is centred on the sample mean, and its half-width is a Student-t "
            "quantile times the standard error of the mean."
        ),
        (
            "Two building blocks: a quantile of Student's t distribution (scipy.stats.t; "
            "think about which tail point a two-sided 95 % interval needs and how many "
            "degrees of freedom n values leave), and the standard error of the mean (which "
            "standard deviation, and how it shrinks with n)."
        ),
        (
            "Check on five values: the interval must be symmetric about their mean and a "
            "little wider than the one with the normal quantile 1.96, since few values make t "
            "heavier."
        ),
    ),
)
def check_t_interval(fn) -> None:
    """The Student-t 95 % interval ``(low, high)`` of the mean of a 1-D tensor of values."""
    label = "ex-howto-interval"
    require_function(label, fn, "a function t_interval(values)")
    for n, seed in ((5, 7), (8, 8), (30, 9)):
        values = 1.0 + 0.1 * _randn(n, seed=seed)
        on = f"{n} values, a 1-D float64 tensor (mean {float(values.mean()):.4f})"
        answer = call(label, fn, values.clone(), on=on)
        # a float32 answer is centred only to float32's digits
        centre_tol = max(1e-9, math.sqrt(precision_of(answer)))
        got = as_array(label, answer, on=on, what="(low, high)")
        if got.shape != (2,):
            fail(
                label,
                f"expected two numbers (low, high), got shape {got.shape}",
                on=on,
                hint="the answer is a pair (low, high), the two ends of the interval",
            )
        expected = np.array(student_t_interval(values.numpy()))
        mean, half = float(values.mean()), (expected[1] - expected[0]) / 2
        ratio = (got[1] - got[0]) / 2 / half
        hint = (
            "the half-width is off: check the quantile (which distribution, how many "
            "degrees of freedom), the standard deviation (which ddof) and how the standard "
            "error shrinks with the number of values"
        )
        if not np.isclose((got[0] + got[1]) / 2, mean, rtol=centre_tol, atol=1e-12):
            hint = "the interval must be centred on the mean of the values"
        elif np.isclose(ratio, _normal_half(values) / half, rtol=1e-3):
            hint = (
                "that is the normal quantile 1.96: with few values the quantile comes from "
                "Student's t distribution with n − 1 degrees of freedom"
            )
        elif np.isclose(ratio, math.sqrt((n - 1) / n), rtol=1e-6):
            hint = (
                "your standard deviation divides by n: use the sample standard deviation "
                "(ddof 1, torch's default), not the population one (ddof 0)"
            )
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
    hints=(
        (
            "Each score is a scalar product of one query with one key, divided by the square "
            "root of the feature dimension d, the size of the last axis."
        ),
        (
            "All scalar products come out of one matrix product of the queries with the keys "
            "transposed in their last two axes (.mT), which also carries leading batch axes "
            "along."
        ),
        (
            "Check the shapes on queries (2, 3, 4) and keys (2, 5, 4): the scores should be "
            "(2, 3, 5), and one entry should match a scalar product you compute by hand."
        ),
    ),
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
        hint = (
            "the scores are off: check the scalar product of each query with each key and "
            "the scaling by the feature dimension d (the size of the last axis)"
        )
        if got.shape == expected.shape:
            d = q.shape[-1]
            if np.allclose(got, expected * math.sqrt(d)):
                hint = "the scores are not scaled: divide by √d, d the size of the last axis"
            elif np.allclose(got, expected / math.sqrt(d)):
                hint = "divide by √d, not by d"
        shape_hint = (
            "rows are queries and columns keys (shape n_q × n_k): check which operand of "
            "the product you transpose, and in which axes"
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
