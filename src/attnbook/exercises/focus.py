"""Checkers of Part I's coding exercises (focus and dilution: ``book/focus``).

Each checker runs the student's function on a few inputs — the book's chain, a random one and
an edge case that a common mistake gets wrong (zeros in a chain, a periodic chain, a uniform
law, large scores, a token that never occurs) — and compares it with the package's tested
implementation (:mod:`attnbook.markov`, :mod:`attnbook.focus`). Before a plain "wrong value"
it looks for the usual mistakes and names them in the hint.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .. import markov
from ..focus import metrics, theory
from ..focus.population import attention_mixture
from .core import (
    CHECKERS,
    as_array,
    assert_close,
    call,
    checker,
    fail,
    require_function,
)
from .core import generator as _gen

__all__ = [
    "check_stationary",
    "check_entropy_rate",
    "check_grad_m_origin",
    "check_condensation_rate",
    "check_type_attention",
    "check_growth_rate",
    "check_average_entropies",
    "check_position_entropy",
    "check_perturbed_pi",
    "check_stable_rank",
    "check_zipf",
    "check_bigram_chain",
]

F64 = torch.float64


def _random_chain(d: int, seed: int) -> torch.Tensor:
    return torch.softmax(2 * torch.randn(d, d, generator=_gen(seed), dtype=F64), -1)


def _random_law(d: int, seed: int) -> torch.Tensor:
    return torch.softmax(torch.randn(d, generator=_gen(seed), dtype=F64), -1)


def _book_chain() -> torch.Tensor:
    return markov.perturbed_chain(4, 0.7, 0.02, 0.5)


def _fmt(x) -> str:
    return np.array2string(np.asarray(x, dtype=float), precision=3, separator=", ")


def _same(got: np.ndarray, other, **kw) -> bool:
    other = np.asarray(other, dtype=float)
    return got.shape == other.shape and bool(np.allclose(got, other, **kw))


def _answers(label: str, fn, cases):
    """Check that ``fn`` is a function; for each case ``(*args, on)`` yield ``(*args, on,
    answer)`` with ``answer = fn(*copies of args)`` (failures turned into helpful messages)."""
    require_function(label, fn, CHECKERS[label].what)
    for *args, on in cases:
        copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        yield (*args, on, call(label, fn, *copies, on=on))


def _scalar(label: str, value, *, on: str, what: str) -> float:
    arr = as_array(label, value, on=on, what=what)
    if arr.size != 1:
        fail(
            label,
            f"expected {what} (one number), got an array of shape {arr.shape}",
            on=on,
            hint="reduce to a single number (sum over the right axes)",
        )
    return float(arr.reshape(()))


# --- markov-transformer -----------------------------------------------------------------------


@checker(
    "ex-focus-stationary",
    what="a function stationary(P)",
    reference=("attnbook.markov.stationary",),
    hints=(
        (
            "π is a fixed point of one step of the chain, read as a row vector: a LEFT "
            "eigenvector of P for the eigenvalue 1, which is not the same as a right "
            "eigenvector of P."
        ),
        (
            "Rather than iterating (which oscillates on a periodic chain), solve a linear "
            "system: the fixed-point equations are dependent, so replace one of them by the "
            "condition that the entries sum to one (torch.linalg.solve, or a least-squares "
            "solve)."
        ),
        (
            "Test on the 3-cycle 0 → 1 → 2 → 0, whose law symmetry tells you, and on a 2 × 2 "
            "chain you solve by hand: multiply your vector by P from the left and compare."
        ),
    ),
)
def check_stationary(fn) -> None:
    """The stationary law π (``(d,)``, π ≥ 0, Σπ = 1, πᵀP = πᵀ) of a row-stochastic ``P``."""
    label = "ex-focus-stationary"
    periodic = torch.tensor(
        [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], dtype=F64
    )
    # period 2 with π = (1/4, 1/2, 1/4): iterating from the uniform law oscillates between
    # it and (1/6, 2/3, 1/6), so power iteration fails here (on the 3-cycle π is uniform)
    bipartite = torch.tensor(
        [[0.0, 1.0, 0.0], [0.5, 0.0, 0.5], [0.0, 1.0, 0.0]], dtype=F64
    )
    cases = [
        (_book_chain(), "P = the book's lazy chain (d = 4, ρ = 0.5)"),
        (_random_chain(5, 20), "P = a random 5 × 5 chain"),
        (periodic, "P = the periodic chain 0 → 1 → 2 → 0 (powers of P never converge)"),
        (
            bipartite,
            "P = the periodic chain 0 → 1 → {0, 2}, 2 → 1 (period 2, π not uniform)",
        ),
    ]
    for P, on, answer in _answers(label, fn, cases):
        got = as_array(label, answer, on=on, what="π")
        expected = markov.stationary(P).numpy()
        hint = (
            "π is off: check that one step of the chain leaves it unchanged (multiply it by "
            "P from the left), that it is nonnegative and that its entries sum to one"
        )
        if got.shape == expected.shape and np.all(np.isfinite(got)):
            if "periodic" in on and not _same(got, expected, atol=1e-8):
                hint = (
                    "iterating the chain does not converge on a periodic chain: find the "
                    "fixed point by solving a linear system, not by iteration"
                )
            elif _same(got, np.full_like(expected, 1 / len(expected))) and not _same(
                expected, got
            ):
                hint = (
                    "that is the right eigenvector of P (the uniform vector, for every "
                    "chain): π is a LEFT eigenvector, a row vector multiplied by P from the "
                    "left"
                )
            elif got.sum() != 0 and _same(got / got.sum(), expected, atol=1e-8):
                hint = "the direction is right: normalise so that the entries sum to 1"
        assert_close(
            label, got, expected, on=on, hint=hint, rtol=1e-6, atol=1e-8, what="π"
        )


@checker(
    "ex-focus-entropy-rate",
    what="a function entropy_rate(P)",
    reference=("attnbook.markov.entropy_rate",),
    hints=(
        (
            "The entropy rate is the uncertainty of the NEXT token given the current one: the "
            "entropy of each row of P, averaged over the current token."
        ),
        (
            "The average uses the stationary weights (markov.stationary is allowed here), and "
            "each row's entropy needs the convention 0·log 0 of zero, e.g. with "
            "torch.special.xlogy."
        ),
        (
            "Test on a chain whose rows are all equal, where the rate must be the entropy of "
            "that row, and on a permutation chain, where the next token is certain."
        ),
    ),
)
def check_entropy_rate(fn) -> None:
    """The entropy rate ``h = −Σ_i π_i Σ_j P_ij log P_ij`` (nats) of a chain, a number."""
    label = "ex-focus-entropy-rate"
    sparse = torch.tensor(
        [[0.0, 1.0, 0.0], [0.0, 0.5, 0.5], [0.9, 0.0, 0.1]], dtype=F64
    )
    cases = [
        (_book_chain(), "P = the book's lazy chain"),
        (_random_chain(5, 21), "P = a random 5 × 5 chain"),
        (sparse, "P = a 3 × 3 chain with zero transitions (0·log 0 = 0)"),
    ]
    for P, on, answer in _answers(label, fn, cases):
        got = _scalar(label, answer, on=on, what="h")
        expected = float(markov.entropy_rate(P))
        pi = markov.stationary(P)
        rows = markov.entropy(P)
        hint = (
            "h is off: check the entropy of each row (sign, natural log, zero entries) and "
            "the weights of the average over the current token"
        )
        if not math.isfinite(got):
            hint = (
                "0·log 0 gives NaN: a zero transition must contribute nothing to its row's "
                "entropy"
            )
        elif math.isclose(got, float(markov.entropy(pi)), rel_tol=1e-6):
            hint = (
                "that is H(π), the entropy of the unigram law: h is the entropy of the NEXT "
                "token given the current one"
            )
        elif math.isclose(got, float(rows.mean()), rel_tol=1e-6):
            hint = "average the rows' entropies with the stationary weights π_i, not uniformly"
        elif math.isclose(got, expected / math.log(2), rel_tol=1e-6):
            hint = "the book measures entropy in nats: use the natural log, not log2"
        elif math.isclose(got, -expected, rel_tol=1e-6):
            hint = "the sign: an entropy rate is never negative, and yours is"
        assert_close(label, got, expected, on=on, hint=hint, what="h")


# --- condensation -----------------------------------------------------------------------------


@checker(
    "ex-focus-grad-m-origin",
    what="a function grad_M_origin(P)",
    reference=("attnbook.focus.population.population_gradient",),
    hints=(
        (
            "Start from the gradient in the proposition on the population loss and evaluate "
            "each factor at the origin, where every score vanishes."
        ),
        (
            "At the origin every query attends to the token types with the same law, and the "
            "residual of query q involves the row P_q; weighted by π_q and summed over q, the "
            "rows of P enter only through their π-weighted average."
        ),
        (
            "Build the matrix as a sum of outer products over the queries for a 3-state "
            "chain; then check that changing the laziness leaves it unchanged, and which "
            "index its rows carry."
        ),
    ),
)
def check_grad_m_origin(fn) -> None:
    """∂L/∂M at θ = 0 for the chain ``P``: ``π(1/d − π)ᵀ = −π bᵀ``, shape ``(d, d)``."""
    label = "ex-focus-grad-m-origin"
    cases = [
        (_book_chain(), "P = the book's lazy chain (ρ = 0.5)"),
        (markov.perturbed_chain(4, 0.7, 0.02, 0.9), "P = the same π with ρ = 0.9"),
        (_random_chain(5, 22), "P = a random 5 × 5 chain (not lazy)"),
    ]
    for P, on, answer in _answers(label, fn, cases):
        got = as_array(label, answer, on=on, what="∂L/∂M")
        pi = markov.stationary(P)
        u, v = theory.condensation_directions(pi)
        expected = (-theory.condensation_rate(pi) * torch.outer(u, v)).numpy()
        hint = (
            "∂L/∂M is off: evaluate each factor of the gradient at the origin (the "
            "attention laws and the residuals there), then sum over the queries with their "
            "frequencies"
        )
        if got.shape == expected.shape:
            if _same(got, -expected):
                hint = (
                    "the sign: the gradient points uphill; the flow moves along −∂L/∂M"
                )
            elif _same(got, expected.T):
                hint = (
                    "your matrix is the transpose of ∂L/∂M: rows of M are the (context) "
                    "token types, so check which index each factor of the outer product "
                    "carries"
                )
            elif _same(got, np.outer(np.full(len(pi), 1 / len(pi)), expected.sum(0))):
                hint = (
                    "at the origin a query attends to the token types in proportion to "
                    "their frequencies, not uniformly"
                )
        assert_close(label, got, expected, on=on, hint=hint, what="∂L/∂M")


@checker(
    "ex-focus-condensation-rate",
    what="a function condensation_rate(pi)",
    reference=("attnbook.focus.theory.condensation_rate",),
    hints=(
        (
            "The rate is the largest singular value of a rank-one matrix, an outer product of "
            "two vectors: such a matrix has a single nonzero singular value."
        ),
        (
            "Apply the outer product u vᵀ to v and to any vector orthogonal to v: that tells "
            "you its singular value in terms of the two vectors. Here the second vector is π "
            "with its uniform part removed."
        ),
        (
            "Check on the uniform law (which factor vanishes there?), and compare with "
            "torch.linalg.matrix_norm(..., ord 2) of the matrix you build for the book's π."
        ),
    ),
)
def check_condensation_rate(fn) -> None:
    """The stage-I growth rate ``c_I = ‖π‖ ‖π − 1/d‖`` (a number) of a law ``pi``."""
    label = "ex-focus-condensation-rate"
    cases = [
        (markov.perturbed_stationary(4, 0.7, 0.02), "π = (0.7, 0.12, 0.10, 0.08)"),
        (_random_law(6, 23), "a random law with d = 6"),
        (
            torch.full((5,), 0.2, dtype=F64),
            "the uniform law with d = 5 (no condensation)",
        ),
    ]
    for pi, on, answer in _answers(label, fn, cases):
        got = _scalar(label, answer, on=on, what="c_I")
        expected = float(theory.condensation_rate(pi))
        p = pi.numpy()
        b = p - 1 / len(p)
        hint = (
            "c_I is off: it is the top singular value of the gradient at the origin, a "
            "rank-one matrix; check both of its factors"
        )
        if not math.isfinite(got):
            hint = (
                "your rate is not finite for the uniform law: do not divide by ‖b‖, which "
                "vanishes there"
            )
        elif math.isclose(got, float(p @ p), rel_tol=1e-6):
            hint = (
                "centre π first: the uniform part of π does not grow, so one factor is π "
                "with its uniform part removed, not π itself"
            )
        elif math.isclose(got, float(np.linalg.norm(b)), rel_tol=1e-6) and got:
            hint = (
                "a factor is missing: your rate has only the factor from the key side; "
                "the query side contributes a factor too (see the statement)"
            )
        elif math.isclose(got, float(p @ p) * float(b @ b), rel_tol=1e-6) and got:
            hint = (
                "your rate is squared where it should not be: check whether each factor "
                "is a norm or a squared norm"
            )
        assert_close(label, got, expected, on=on, hint=hint, what="c_I")


# --- focus ------------------------------------------------------------------------------------


@checker(
    "ex-focus-type-attention",
    what="a function type_attention(Phi, pi)",
    reference=("attnbook.focus.population.attention_mixture",),
    hints=(
        (
            "In a long context type k fills a fraction π_k of the positions, so its total "
            "weight is proportional to its frequency times the exponential of its score."
        ),
        (
            "A frequency times an exponential is the exponential of a sum: write each row as "
            "a softmax over k of a shifted score, which torch.softmax evaluates without "
            "overflow."
        ),
        (
            "Test with Φ full of zeros (what should each row be before anything is learned?) "
            "and with one huge entry in a row, which must give a one-hot row and no NaN."
        ),
    ),
)
def check_type_attention(fn) -> None:
    """The long-context attention laws ``w_q(k) ∝ π_k e^{Φ_qk}`` (rows), shape ``(d, d)``."""
    label = "ex-focus-type-attention"
    pi4 = markov.perturbed_stationary(4, 0.7, 0.02)
    cases = [
        (
            torch.zeros(4, 4, dtype=F64),
            pi4,
            "Φ = 0 (every query attends like π), d = 4",
        ),
        (torch.randn(4, 4, generator=_gen(24), dtype=F64), pi4, "a random Φ, d = 4"),
        (
            800 * torch.randn(5, 5, generator=_gen(25), dtype=F64),
            _random_law(5, 26),
            "a Φ with entries of several hundred (e^Φ overflows), d = 5",
        ),
    ]
    for Phi, pi, on, answer in _answers(label, fn, cases):
        got = as_array(label, answer, on=on, what="w")
        expected = attention_mixture(Phi, pi).numpy()
        hint = (
            "w is off: check that type k's weight grows with both its score and its "
            "frequency π_k, and that each row is normalised over k"
        )
        if got.shape == expected.shape:
            if not np.all(np.isfinite(got)):
                hint = (
                    "e^Φ overflows for large scores (inf/inf gives NaN): write each row as "
                    "a softmax, which subtracts the row's maximum first"
                )
            elif _same(got, torch.softmax(Phi, -1).numpy()):
                hint = (
                    "this ignores the frequencies: type k fills a fraction π_k of a long "
                    "context, and its weight must account for that"
                )
                if not Phi.any() and _columns_normalised(label, fn, *cases[1][:2], on):
                    # at Φ = 0 the wrong axis gives the same uniform rows: a random Φ tells
                    hint = WRONG_AXIS
            elif _same(got.T, expected):
                hint = "rows are queries: normalise over the keys k (the last axis)"
            elif _is_column_normalised(got):
                hint = WRONG_AXIS
            elif not np.allclose(got.sum(-1), 1.0, atol=1e-9):
                hint = "each row w_q must sum to 1: normalise over the keys (last axis)"
        assert_close(label, got, expected, on=on, hint=hint, what="w")


WRONG_AXIS = (
    "you normalised over the wrong axis: your columns sum to 1, but each row w_q (one query) "
    "is a law over the keys k, the last axis"
)


def _is_column_normalised(w: np.ndarray) -> bool:
    return bool(
        w.ndim == 2
        and np.allclose(w.sum(0), 1.0, atol=1e-6)
        and not np.allclose(w.sum(-1), 1.0, atol=1e-6)
    )


def _columns_normalised(label: str, fn, Phi, pi, on: str) -> bool:
    """Whether ``fn`` normalises the columns of a random ``Φ`` (the wrong axis)."""
    try:
        probe = call(label, fn, Phi.clone(), pi.clone(), on=on)
        return _is_column_normalised(as_array(label, probe, on=on, what="w"))
    except AssertionError:
        return False


@checker(
    "ex-focus-rate-hand",
    what="a function growth_rate(pi, rho)",
    reference=("attnbook.focus.theory.attention_growth_rate",),
    hints=(
        (
            "Compute each factor of the formula in its own line from its definition in the "
            "chapter: the centred logits, S₃, T and the norm of π, with torch operations on "
            "π."
        ),
        (
            "The centring subtracts the mean of log π over the d types; S₃ and T are sums "
            "over the types of powers of π (T also involves log π and the entropy H(π)); the "
            "laziness ρ is a plain factor."
        ),
        (
            "Ask which factor vanishes for the uniform law and which for i.i.d. tokens (ρ of "
            "zero), check your code agrees, then compare each factor for the book's π by "
            "hand."
        ),
    ),
)
def check_growth_rate(fn) -> None:
    """The stage-II rate ``c = ρ‖ℓ̃‖S₃T/‖π‖⁵`` at the saddle, a number."""
    label = "ex-focus-rate-hand"
    pi4 = markov.perturbed_stationary(4, 0.7, 0.02)
    cases = [
        (pi4, 0.5, "the book's π = (0.7, 0.12, 0.10, 0.08), ρ = 0.5"),
        (_random_law(6, 27), 0.8, "a random law with d = 6, ρ = 0.8"),
        (pi4, 0.0, "the book's π with i.i.d. tokens, ρ = 0"),
        (torch.full((4,), 0.25, dtype=F64), 0.5, "the uniform law, ρ = 0.5"),
    ]
    for pi, rho, on, answer in _answers(label, fn, cases):
        got = _scalar(label, answer, on=on, what="c")
        expected = float(theory.attention_growth_rate(pi, rho))
        p = pi.numpy()
        lp = np.log(p)
        s2 = (p**2).sum()
        hint = (
            "c is off: compute each factor (the centred logits, S₃, T, the power of ‖π‖ and "
            "ρ) on its own line and compare it with its definition in the chapter"
        )
        if expected and math.isclose(got, expected / rho, rel_tol=1e-6):
            hint = "the rate is proportional to the laziness ρ: multiply by rho"
        elif expected and math.isclose(
            got,
            expected * np.linalg.norm(lp) / np.linalg.norm(lp - lp.mean()),
            rel_tol=1e-6,
        ):
            hint = "centre the logits: you used log π itself, not the centred logits ℓ̃"
        elif expected and math.isclose(got, expected * s2, rel_tol=1e-6):
            hint = (
                "the power of ‖π‖ in the denominator is wrong: count the powers that g² "
                "and πᵀG⁰π contribute"
            )
        assert_close(
            label, got, expected, on=on, hint=hint, rtol=1e-6, atol=1e-12, what="c"
        )


# --- dilution ---------------------------------------------------------------------------------


def _laws(d: int, seed: int) -> torch.Tensor:
    return torch.softmax(3 * torch.randn(d, d, generator=_gen(seed), dtype=F64), -1)


@checker(
    "ex-focus-average-entropies",
    what="a function average_entropies(w, pi)",
    reference=("attnbook.focus.metrics.attention_entropy",),
    hints=(
        (
            "First compute one entropy per query, of its row w_q, then average these numbers "
            "in two different ways."
        ),
        (
            "One average is the plain mean over queries, the other weights each query's "
            "entropy by its frequency π_q: an average of entropies, not the entropy of an "
            "averaged law. Zero weights need the convention 0·log 0 of zero "
            "(torch.special.xlogy)."
        ),
        (
            "Test on laws that are all equal, where both averages must agree, and on a "
            "one-hot row, whose entropy is zero, not NaN; keep the uniform average first in "
            "the pair."
        ),
    ),
)
def check_average_entropies(fn) -> None:
    """``(H_u, H_π)``: the type-level entropies ``H(w_q)`` averaged uniformly and with ``π``."""
    label = "ex-focus-average-entropies"
    pi4 = markov.perturbed_stationary(4, 0.7, 0.02)
    focused = (
        torch.eye(4, dtype=F64)[[0, 0, 0, 0]] * 0.9 + 0.1 * pi4
    )  # every q on token 0
    focused[0] = torch.eye(4, dtype=F64)[0]  # query 0 fully focused: zeros in its row
    cases = [
        (_laws(4, 28), pi4, "random attention laws, the book's π"),
        (focused, pi4, "query 0 attends only to token 0 (zeros in its row)"),
        (_laws(6, 29), _random_law(6, 30), "random laws and a random π, d = 6"),
    ]
    for w, pi, on, answer in _answers(label, fn, cases):
        got = as_array(label, answer, on=on, what="(H_u, H_π)")
        if got.shape != (2,):
            fail(
                label,
                f"expected two numbers (H_u, H_π), got shape {got.shape}",
                on=on,
                hint="the answer is a pair of two numbers, the averages (H_u, H_π)",
            )
        H = metrics.attention_entropy(w)
        expected = np.array([H.mean(), float(pi.numpy() @ H)])
        hint = (
            "the averages are off: check each query's entropy (sign, natural log, zero "
            "weights), then the weights of each of the two averages over the queries"
        )
        if _same(got, expected[::-1]) and not _same(got, expected):
            hint = "the order: H_u (uniform average) first, then H_π (π-weighted)"
        elif not np.all(np.isfinite(got)):
            hint = "0·log 0 gives NaN: a zero weight must contribute nothing to the entropy"
        elif _same(got[1:], [float(metrics.attention_entropy(pi @ w))]):
            hint = (
                "H_π averages the entropies H(w_q), not the entropy of the averaged law"
            )
        assert_close(label, got, expected, on=on, hint=hint, what="(H_u, H_π)")


@checker(
    "ex-focus-position-entropy",
    what="a function position_entropy(w, pi, s)",
    reference=(
        "attnbook.focus.metrics.position_entropy",
        # log s − KL(w ‖ uniform) is the position entropy too
        "attnbook.focus.metrics.attention_kl",
    ),
    hints=(
        (
            "Spell out the attention over positions: type k fills about sπ_k positions, which "
            "share the weight w_q(k) of that type equally."
        ),
        (
            "Write the entropy as a sum over types of (number of positions) × (weight per "
            "position) × log(weight per position), then split the logarithm into a part with "
            "s and a part that compares w_q with π."
        ),
        (
            "Test with w_q equal to π for every query (the start of training), where the "
            "attention over the s positions is uniform, and with one-hot rows, which must not "
            "give NaN."
        ),
    ),
)
def check_position_entropy(fn) -> None:
    """Position-level entropy ``log s − KL(w_q‖π)`` of each query, shape ``(d,)``."""
    label = "ex-focus-position-entropy"
    pi4 = markov.perturbed_stationary(4, 0.7, 0.02)
    cases = [
        (_laws(4, 31), pi4, 64, "random attention laws, the book's π, s = 64"),
        (
            pi4.expand(4, 4).clone(),
            pi4,
            100,
            "w_q = π for every query (the start), s = 100",
        ),
        (torch.eye(4, dtype=F64), pi4, 32, "one-hot laws (zeros in w), s = 32"),
    ]
    for w, pi, s, on, answer in _answers(label, fn, cases):
        got = as_array(label, answer, on=on, what="entropies")
        expected = metrics.position_entropy(w, pi, s)
        kl_back = metrics.attention_kl(pi.expand_as(w).clone(), w.clamp_min(1e-300))
        hint = (
            "the entropies are off: spell out the attention over the s positions (how many "
            "positions type k fills, and the weight of each) before you take its entropy"
        )
        if got.shape == expected.shape:
            if not np.all(np.isfinite(got)):
                hint = (
                    "0·log 0 gives NaN: a type with zero weight must contribute nothing"
                )
            elif _same(got, metrics.attention_entropy(w)):
                hint = (
                    "that is the type-level entropy H(w_q): at the position level a type's "
                    "weight is shared among its positions, which brings in s and π"
                )
            elif _same(
                got, np.log(s) + metrics.attention_kl(w, pi.expand_as(w).clone())
            ):
                hint = (
                    "the sign: concentrating away from π must lower the entropy, and in "
                    "yours it raises it"
                )
            elif _same(got, np.asarray(expected, dtype=float) / math.log(2)):
                hint = (
                    "the base of the logarithm: the book measures entropy in nats (the "
                    "natural log), and yours is in bits"
                )
            elif np.all(np.isfinite(kl_back)) and _same(got, np.log(s) - kl_back):
                hint = (
                    "the divergence is the wrong way round: yours is KL(π‖w_q), averaged "
                    "with the weights π"
                )
        assert_close(label, got, expected, on=on, hint=hint, what="the entropies")


# --- symmetry-breaking ------------------------------------------------------------------------


@checker(
    "ex-focus-perturbed-pi",
    what="a function perturbed_pi(d, pi_top, delta)",
    reference=("attnbook.markov.perturbed_stationary",),
    hints=(
        (
            "The law has one frequent token and d − 1 rare ones, which share the remaining "
            "mass equally before the perturbation moves them apart."
        ),
        (
            "Build the rare part first, the equal share plus δ times the ξ of the exercise "
            "(torch.linspace from 1 down to −1), then put the frequent token in front "
            "(torch.cat), all in float64."
        ),
        (
            "Compare with the example for d of 4 given in the exercise, and check that the "
            "entries sum to one for δ of zero and for a nonzero δ."
        ),
    ),
)
def check_perturbed_pi(fn) -> None:
    """``π₀ = pi_top``, rare tokens ``(1 − pi_top)/(d − 1) + ξ_i δ``, ``ξ = linspace(1, −1, d−1)``."""
    label = "ex-focus-perturbed-pi"
    cases = [
        (d, top, delta, f"d = {d}, pi_top = {top}, delta = {delta}")
        for d, top, delta in (
            (4, 0.7, 0.02),
            (6, 0.5, 0.01),
            (4, 0.7, 0.0),
            (3, 0.4, 0.05),
        )
    ]
    for d, top, delta, on, answer in _answers(label, fn, cases):
        got = as_array(label, answer, on=on, what="π")
        expected = markov.perturbed_stationary(d, top, delta).numpy()
        hint = (
            "π is off: check the frequent token's entry, the equal share of the rare tokens "
            "and the shift of each rare token by δ"
        )
        if got.shape == expected.shape and not math.isclose(
            got.sum(), 1.0, rel_tol=1e-9
        ):
            hint = (
                "π must sum to 1: your shifts of the rare tokens do not sum to zero (each "
                "rare token gets its own multiple ξ_i of δ)"
            )
        elif got.shape == expected.shape and _same(got[1:], expected[1:][::-1]):
            hint = (
                "the shifts are in reverse order: the first rare token gets the largest "
                "shift (ξ runs from +1 down to −1)"
            )
        assert_close(label, got, expected, on=on, hint=hint, what="π")


@checker(
    "ex-focus-stable-rank",
    what="a function stable_rank(A)",
    reference=("attnbook.focus.metrics.stable_rank",),
    hints=(
        (
            "Both norms are functions of the singular values: the Frobenius norm collects all "
            "of them, the spectral norm only the largest."
        ),
        (
            "torch.linalg.svdvals gives the singular values in decreasing order; the ratio is "
            "of SQUARED norms, so square before you sum and before you divide."
        ),
        (
            "Test on a rank-one outer product, which has a single nonzero singular value, and "
            "on the 3 × 3 identity, where all singular values are equal."
        ),
    ),
)
def check_stable_rank(fn) -> None:
    """Stable rank ``‖A‖_F² / ‖A‖₂² = Σσ_i²/σ₁²`` of a matrix, a number."""
    label = "ex-focus-stable-rank"
    g = _gen(32)
    u, v = (
        torch.randn(4, 1, generator=g, dtype=F64),
        torch.randn(1, 8, generator=g, dtype=F64),
    )
    cases = [
        (torch.randn(4, 8, generator=g, dtype=F64), "a random 4 × 8 matrix"),
        (u @ v, "a rank-one 4 × 8 matrix (stable rank 1)"),
        (
            u @ v + 0.05 * torch.randn(4, 8, generator=g, dtype=F64),
            "rank one plus a small second direction (the escape of stage IV)",
        ),
        (torch.eye(3, dtype=F64), "the 3 × 3 identity"),
    ]
    for A, on, answer in _answers(label, fn, cases):
        got = _scalar(label, answer, on=on, what="the stable rank")
        expected = float(metrics.stable_rank(A))
        s = np.linalg.svd(A.numpy(), compute_uv=False)
        hint = (
            "the stable rank is off: check which two norms enter (Frobenius and spectral), "
            "which is on top, and that both are squared"
        )
        if math.isclose(got, s.sum() / s[0], rel_tol=1e-6) and not math.isclose(
            got, expected, rel_tol=1e-6
        ):
            hint = "square the singular values: you divided their plain sum by the largest one"
        elif math.isclose(got, math.sqrt(expected), rel_tol=1e-6) and expected != 1:
            hint = (
                "that is the square root of the stable rank: you took a ratio of norms, "
                "not of SQUARED norms"
            )
        assert_close(
            label, got, expected, on=on, hint=hint, rtol=1e-6, what="the stable rank"
        )


# --- real-text --------------------------------------------------------------------------------


@checker(
    "ex-focus-zipf",
    what="a function zipf(d, s)",
    reference=("attnbook.experiments.focus.zipf_law",),
    hints=(
        (
            "The law is a negative power of the rank, normalised to sum one; ranks start at "
            "1, not at 0."
        ),
        (
            "Build the ranks as a float64 tensor (torch.arange can start at 1), weight each "
            "rank by its negative power, and divide by the total: the most frequent token has "
            "rank 1."
        ),
        (
            "Check d of 3 with exponent 0, which must be the uniform law, and with exponent "
            "1, whose normalisation you can do by hand with fractions."
        ),
    ),
)
def check_zipf(fn) -> None:
    """The Zipf law ``π_k ∝ k^{−s}``, k = 1…d, shape ``(d,)``."""
    label = "ex-focus-zipf"
    cases = [(4, 1.0, "d = 4, s = 1"), (32, 1.1, "d = 32, s = 1.1")]
    cases.append((5, 0.0, "d = 5, s = 0 (the uniform law)"))
    for d, s, on, answer in _answers(label, fn, cases):
        got = as_array(label, answer, on=on, what="π")
        k = np.arange(1, d + 1, dtype=float)
        expected = k**-s / (k**-s).sum()
        hint = (
            "π is off: check the ranks (they start at 1), the sign of the exponent and the "
            "normalisation"
        )
        if got.shape == expected.shape:
            if not np.all(np.isfinite(got)):
                hint = "ranks start at 1: a rank of 0 gives an infinite weight"
            elif not math.isclose(got.sum(), 1.0, rel_tol=1e-9):
                hint = "normalise: π must sum to 1"
            elif s and _same(got, (k**s / (k**s).sum())):
                hint = (
                    "the sign of the exponent is flipped: the most frequent token, of rank "
                    "1, must get the largest weight"
                )
        assert_close(label, got, expected, on=on, hint=hint, what="π")


@checker(
    "ex-focus-bigram",
    what="a function bigram_chain(tokens, d)",
    reference=("attnbook.markov.estimate_chain",),
    hints=(
        (
            "Count transitions: for each pair of consecutive tokens inside one sequence, add "
            "one to the count of (current, next), then normalise each row of the count table."
        ),
        (
            "The pairs are neighbouring positions of the same row of tokens, so the end of one "
            "sequence never joins the start of the next; a loop works, and a vectorised count "
            "needs one integer per pair of token ids (torch.bincount counts integers)."
        ),
        (
            "A row without counts gets the unigram frequencies instead of 0/0: test on two "
            "short sequences in which one token never occurs, with a table you count by hand."
        ),
    ),
)
def check_bigram_chain(fn) -> None:
    """Bigram estimate ``P̂_ij = n_ij / Σ_l n_il`` from sequences ``(n, L)`` of ids in ``[0, d)``."""
    label = "ex-focus-bigram"
    seqs = markov.sample_sequences(_book_chain(), 20, 50, seed=33)
    unseen = markov.sample_sequences(
        markov.lazy_chain(_random_law(4, 34), 0.3), 6, 30, seed=35
    )
    edge = torch.tensor([[0, 1, 0, 1], [2, 2, 0, 0]])  # token 3 never occurs
    cases = [
        (seqs, 4, "20 sequences of the book's chain, length 50"),
        (
            unseen,
            6,
            "6 sequences using only tokens 0–3, d = 6 (tokens 4, 5 never occur)",
        ),
        (edge, 4, f"tokens = {edge.tolist()}, d = 4 (token 3 never occurs)"),
    ]
    for tokens, d, on, answer in _answers(label, fn, cases):
        got = as_array(label, answer, on=on, what="P̂")
        expected, pi_hat = markov.estimate_chain(tokens, d)
        expected = expected.numpy()
        hint = (
            "P̂ is off: check which pairs you count (consecutive tokens of one sequence), "
            "the normalisation of each row, and the row of a token never seen"
        )
        if got.shape == expected.shape:
            flat = markov.estimate_chain(tokens.reshape(-1), d)[0].numpy()
            if not np.all(np.isfinite(got)):
                hint = (
                    "a token that never occurs has an empty row (0/0): give it the "
                    "unigram frequencies"
                )
            elif _same(got, flat) and not _same(got, expected):
                hint = (
                    "count transitions within each sequence only: the last token of one "
                    "sequence is not followed by the first of the next"
                )
            elif _same(got.T, expected):
                hint = "row i is the law of the token AFTER i: normalise each row"
            elif not np.allclose(got.sum(-1), 1.0):
                hint = "each row must sum to 1: divide the counts by their row sums"
        assert_close(label, got, expected, on=on, hint=hint, what="P̂")
