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
        hint = "π is the LEFT eigenvector of P for eigenvalue 1 (πᵀP = πᵀ), scaled to sum 1"
        if got.shape == expected.shape and np.all(np.isfinite(got)):
            if "periodic" in on and not _same(got, expected, atol=1e-8):
                hint = (
                    "iterating π ← πᵀP does not converge on a periodic chain: solve the "
                    "linear system (Pᵀ − I)π = 0 with Σπ = 1 instead"
                )
            elif _same(got, np.full_like(expected, 1 / len(expected))) and not _same(
                expected, got
            ):
                hint = (
                    "that is the right eigenvector (P·1 = 1): use the eigenvectors of "
                    "P.T, i.e. solve πᵀP = πᵀ"
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
            "h = Σ_i π_i H(P_i): the entropy of each row, averaged with the weights π_i"
        )
        if not math.isfinite(got):
            hint = (
                "0·log 0 gives NaN: use torch.special.xlogy(P, P), which gives 0 there"
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
            hint = "the sign: entropy is −Σ p log p ≥ 0"
        assert_close(label, got, expected, on=on, hint=hint, what="h")


# --- condensation -----------------------------------------------------------------------------


@checker("ex-focus-grad-m-origin", what="a function grad_M_origin(P)")
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
            "at M = 0, Φ = 0: w_q = π and r_q = 1/d − P_q, so ∂L/∂M = Σ_q π_q π r_qᵀ "
            "(use Σ_q π_q P_q = π)"
        )
        if got.shape == expected.shape:
            if _same(got, -expected):
                hint = (
                    "the sign: the gradient points uphill; the flow moves along −∂L/∂M"
                )
            elif _same(got, expected.T):
                hint = "rows of M are the (context) token types: ∂L/∂M = π rᵀ, not r πᵀ"
            elif _same(got, np.outer(np.full(len(pi), 1 / len(pi)), expected.sum(0))):
                hint = (
                    "at Φ = 0 a query attends to token types with weights π, "
                    "not uniformly: w_q = π"
                )
        assert_close(label, got, expected, on=on, hint=hint, what="∂L/∂M")


@checker(
    "ex-focus-condensation-rate",
    what="a function condensation_rate(pi)",
    reference=("attnbook.focus.theory.condensation_rate",),
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
            "c_I is the top singular value of ∂L/∂M|₀ = −π bᵀ with b = π − 1/d: ‖π‖·‖b‖"
        )
        if not math.isfinite(got):
            hint = "a uniform π has b = 0 and c_I = 0: do not divide by ‖b‖"
        elif math.isclose(got, float(p @ p), rel_tol=1e-6):
            hint = "centre π first: b = π − 1/d, not π (the uniform part does not grow)"
        elif math.isclose(got, float(np.linalg.norm(b)), rel_tol=1e-6) and got:
            hint = "the rate is ‖π‖·‖b‖: the factor ‖π‖ comes from the query side"
        elif math.isclose(got, float(p @ p) * float(b @ b), rel_tol=1e-6) and got:
            hint = "norms, not squared norms: ‖π‖·‖b‖"
        assert_close(label, got, expected, on=on, hint=hint, what="c_I")


# --- focus ------------------------------------------------------------------------------------


@checker(
    "ex-focus-type-attention",
    what="a function type_attention(Phi, pi)",
    reference=("attnbook.focus.population.attention_mixture",),
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
            "w_q(k) = π_k e^{Φ_qk} / Σ_l π_l e^{Φ_ql}: softmax over k of Φ_qk + log π_k"
        )
        if got.shape == expected.shape:
            if not np.all(np.isfinite(got)):
                hint = (
                    "e^Φ overflows for large scores: use torch.softmax(Phi + log π, -1), "
                    "which subtracts each row's maximum"
                )
            elif _same(got, torch.softmax(Phi, -1).numpy()):
                hint = "type k fills a fraction π_k of a long context: weight e^{Φ_qk} by π_k"
            elif _same(got.T, expected):
                hint = "rows are queries: normalise over the keys k (the last axis)"
            elif not np.allclose(got.sum(-1), 1.0, atol=1e-9):
                hint = "each row w_q must sum to 1: normalise over the keys (last axis)"
        assert_close(label, got, expected, on=on, hint=hint, what="w")


@checker(
    "ex-focus-rate-hand",
    what="a function growth_rate(pi, rho)",
    reference=("attnbook.focus.theory.attention_growth_rate",),
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
            "c = ρ‖ℓ̃‖S₃T/‖π‖⁵ with ℓ̃ = log π − mean(log π), S₃ = Σπ³ − (Σπ²)², "
            "T = Σ π²(log π + H(π))"
        )
        if expected and math.isclose(got, expected / rho, rel_tol=1e-6):
            hint = "the rate is proportional to the laziness ρ: multiply by rho"
        elif expected and math.isclose(
            got,
            expected * np.linalg.norm(lp) / np.linalg.norm(lp - lp.mean()),
            rel_tol=1e-6,
        ):
            hint = "centre the logits: ℓ̃ = log π − mean(log π), not log π"
        elif expected and math.isclose(got, expected * s2, rel_tol=1e-6):
            hint = "the power of ‖π‖ is 5 (‖π‖³ from g² and ‖π‖² from πᵀG⁰π)"
        assert_close(
            label, got, expected, on=on, hint=hint, rtol=1e-6, atol=1e-12, what="c"
        )


# --- dilution ---------------------------------------------------------------------------------


def _laws(d: int, seed: int) -> torch.Tensor:
    return torch.softmax(3 * torch.randn(d, d, generator=_gen(seed), dtype=F64), -1)


@checker("ex-focus-average-entropies", what="a function average_entropies(w, pi)")
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
                hint="return a tuple (H_u, H_π) of two numbers",
            )
        H = metrics.attention_entropy(w)
        expected = np.array([H.mean(), float(pi.numpy() @ H)])
        hint = "H(w_q) = −Σ_k w_q(k) log w_q(k) per query; H_u = mean over q, H_π = Σ_q π_q H(w_q)"
        if _same(got, expected[::-1]) and not _same(got, expected):
            hint = "the order: H_u (uniform average) first, then H_π (π-weighted)"
        elif not np.all(np.isfinite(got)):
            hint = "0·log 0 gives NaN: use torch.special.xlogy(w, w)"
        elif _same(got[1:], [float(metrics.attention_entropy(pi @ w))]):
            hint = (
                "H_π averages the entropies H(w_q), not the entropy of the averaged law"
            )
        assert_close(label, got, expected, on=on, hint=hint, what="(H_u, H_π)")


@checker(
    "ex-focus-position-entropy",
    what="a function position_entropy(w, pi, s)",
    reference=("attnbook.focus.metrics.position_entropy",),
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
            "type k fills s·π_k positions sharing weight w_q(k): the entropy is "
            "log s − Σ_k w_q(k) log(w_q(k)/π_k)"
        )
        if got.shape == expected.shape:
            if not np.all(np.isfinite(got)):
                hint = "0·log 0 gives NaN: use torch.special.xlogy for w log(w/π)"
            elif _same(got, metrics.attention_entropy(w)):
                hint = "that is the type-level entropy H(w_q): at the position level add log s − …"
            elif _same(
                got, np.log(s) + metrics.attention_kl(w, pi.expand_as(w).clone())
            ):
                hint = (
                    "the sign: concentrating away from π lowers the entropy, log s − KL"
                )
            elif np.all(np.isfinite(kl_back)) and _same(got, np.log(s) - kl_back):
                hint = "the KL is KL(w_q‖π) (weights w), not KL(π‖w_q)"
        assert_close(label, got, expected, on=on, hint=hint, what="the entropies")


# --- symmetry-breaking ------------------------------------------------------------------------


@checker(
    "ex-focus-perturbed-pi",
    what="a function perturbed_pi(d, pi_top, delta)",
    reference=("attnbook.markov.perturbed_stationary",),
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
        hint = "π = (pi_top, r + c₁δ, …, r + c_{d−1}δ), r = (1 − pi_top)/(d − 1), c = linspace(1, −1, d − 1)"
        if got.shape == expected.shape and not math.isclose(
            got.sum(), 1.0, rel_tol=1e-9
        ):
            hint = "π must sum to 1: the shifts ξ_iδ must sum to zero (ξ = linspace(1, −1, d − 1))"
        elif got.shape == expected.shape and _same(got[1:], expected[1:][::-1]):
            hint = "the first rare token gets +δ: c runs from +1 down to −1"
        assert_close(label, got, expected, on=on, hint=hint, what="π")


@checker(
    "ex-focus-stable-rank",
    what="a function stable_rank(A)",
    reference=("attnbook.focus.metrics.stable_rank",),
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
        hint = "stable rank = Σ_i σ_i² / σ₁² (Frobenius norm squared over spectral norm squared)"
        if math.isclose(got, s.sum() / s[0], rel_tol=1e-6) and not math.isclose(
            got, expected, rel_tol=1e-6
        ):
            hint = "square the singular values: ‖A‖_F² = Σσ_i², ‖A‖₂² = σ₁²"
        elif math.isclose(got, math.sqrt(expected), rel_tol=1e-6) and expected != 1:
            hint = "the ratio of the SQUARED norms: ‖A‖_F² / ‖A‖₂²"
        assert_close(
            label, got, expected, on=on, hint=hint, rtol=1e-6, what="the stable rank"
        )


# --- real-text --------------------------------------------------------------------------------


@checker("ex-focus-zipf", what="a function zipf(d, s)")
def check_zipf(fn) -> None:
    """The Zipf law ``π_k ∝ k^{−s}``, k = 1…d, shape ``(d,)``."""
    label = "ex-focus-zipf"
    cases = [(4, 1.0, "d = 4, s = 1"), (32, 1.1, "d = 32, s = 1.1")]
    cases.append((5, 0.0, "d = 5, s = 0 (the uniform law)"))
    for d, s, on, answer in _answers(label, fn, cases):
        got = as_array(label, answer, on=on, what="π")
        k = np.arange(1, d + 1, dtype=float)
        expected = k**-s / (k**-s).sum()
        hint = "π_k = k^(−s) / Σ_j j^(−s) for ranks k = 1, …, d"
        if got.shape == expected.shape:
            if not np.all(np.isfinite(got)):
                hint = (
                    "ranks start at 1: 0^(−s) is infinite (use torch.arange(1, d + 1))"
                )
            elif not math.isclose(got.sum(), 1.0, rel_tol=1e-9):
                hint = "normalise: π must sum to 1"
            elif s and _same(got, (k**s / (k**s).sum())):
                hint = "the exponent is −s: the most frequent token has rank 1"
        assert_close(label, got, expected, on=on, hint=hint, what="π")


@checker(
    "ex-focus-bigram",
    what="a function bigram_chain(tokens, d)",
    reference=("attnbook.markov.estimate_chain",),
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
            "count n_ij of i followed by j within each sequence, divide each row by its "
            "sum; a row of a token never seen gets the unigram frequencies"
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
