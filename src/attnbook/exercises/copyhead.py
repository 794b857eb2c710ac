"""Checkers of Part II's coding exercises (the copy head: ``book/copyhead/*``).

Each checker runs the student's function on a few inputs — a typical one, a batched one and an
edge case a common mistake gets wrong — and compares it with the package's tested
implementation in :mod:`attnbook.copyhead` (or :mod:`attnbook.sgld`, :mod:`attnbook.train`);
before a plain "wrong value" it looks for the usual mistakes and names them in the hint.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .. import sgld, train
from ..copyhead import action as A
from ..copyhead import copy_task, expected_statistics, order_parameters, token_mse
from .core import as_array, assert_close, call, checker, fail, require_function
from .core import randn as _randn

__all__ = [
    "check_copy_data",
    "check_pooling_loss",
    "check_order_parameters",
    "check_data_action",
    "check_linear_action",
    "check_linear_onset",
    "check_softmax_order",
    "check_softmax_action",
    "check_split_rhat",
    "check_reached_minimum",
]

DT = torch.float64


def _pair(label: str, out, on: str, what: str) -> tuple:
    """``out`` as a pair ``(first, second)``, or a helpful failure."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        fail(
            label,
            f"expected a pair {what}, got {type(out).__name__}",
            on=on,
            hint=f"the answer is a pair {what}, in that order",
        )
    return out


def _scalar(label: str, value, on: str, what: str) -> float:
    arr = as_array(label, value, on=on, what=what)
    if arr.size != 1:
        fail(
            label,
            f"expected one number for {what}, got shape {arr.shape}",
            on=on,
            hint="the answer is one number (a float or a 0-d tensor), not an array",
        )
    return float(arr.reshape(()))


def _near(got, value, rtol=1e-7) -> bool:
    return bool(np.allclose(got, value, rtol=rtol, atol=1e-12))


# --- copy-task --------------------------------------------------------------------------------


@checker(
    "ex-copy-data",
    what="a function copy_data(tokens, vocab_size)",
    hints=(
        (
            "Two building blocks: a one-hot encoding that is told the vocabulary size, and a "
            "shift along the position axis by one step with wrap-around."
        ),
        (
            "torch.nn.functional.one_hot takes the number of classes as its second argument; "
            "torch.roll shifts along one axis and wraps the end round to the front: choose "
            "the axis of positions and the direction that brings position l − 1 to l."
        ),
        (
            "Test on one sequence of three tokens with a vocabulary of five: X should have "
            "shape (1, 3, 5), and the target at position 0 should be the one-hot of the LAST "
            "token."
        ),
    ),
)
def check_copy_data(fn) -> None:
    """One-hot inputs ``X`` and previous-token targets ``Y`` (periodic) from integer tokens."""
    label = "ex-copy-data"
    require_function(label, fn, "a function copy_data(tokens, vocab_size)")
    cases = [(6, 10, 5, 0, ""), (3, 7, 9, 1, " (tokens never reach vocab_size − 1)")]
    cases.append((2, 3, 2, 2, " (short sequences, L = 3)"))
    for P, L, V, seed, note in cases:
        X, Y = copy_task(P, L, V, seed=seed)
        if note.startswith(" (tokens never"):
            X = torch.nn.functional.one_hot(X.argmax(-1) % (V - 2), V).to(DT)
            Y = torch.roll(X, 1, dims=-2)
        tokens = X.argmax(-1)
        on = f"tokens of shape {tuple(tokens.shape)} (P={P}, L={L}), vocab_size={V}{note}"
        out = call(label, fn, tokens.clone(), V, on=on)
        gx, gy = _pair(label, out, on, "(X, Y)")
        gx = as_array(label, gx, on=on, what="X")
        gy = as_array(label, gy, on=on, what="Y")
        if gx.shape != tuple(X.shape):
            hint = (
                "X has shape (P, L, vocab_size): one one-hot vector of length vocab_size "
                "per token"
            )
            if gx.shape[-1] != V and gx.shape[:-1] == tuple(X.shape[:-1]):
                hint = (
                    "one_hot guesses the width from the largest token present: tell it "
                    "the number of classes (num_classes), the vocabulary size"
                )
            fail(
                label,
                f"wrong shape of X: got {gx.shape}, expected {tuple(X.shape)}",
                on=on,
                hint=hint,
            )
        assert_close(
            label,
            gx,
            X,
            on=on,
            hint="X is not the one-hot encoding of the tokens: check each position's row",
            what="X",
        )
        hint = (
            "Y is not the previous-token target: check the direction of the shift along "
            "the positions and the wrap-around at position 0"
        )
        if gy.shape == tuple(Y.shape):
            if _near(gy, torch.roll(X, -1, dims=-2)):
                hint = (
                    "that is the NEXT token: the target is the previous one, so the shift "
                    "goes the other way"
                )
            elif _near(gy[:, 1:], Y[:, 1:]) and not _near(gy[:, 0], Y[:, 0]):
                hint = (
                    "position 0 must wrap around: its target is the LAST token of the "
                    "sequence (torch.roll, not slicing)"
                )
            elif _near(gy, X):
                hint = "Y equals X: shift it by one position along the sequence axis"
        assert_close(
            label,
            gy,
            Y,
            on=on,
            hint=hint,
            what="Y",
            shape_hint="Y has the shape of X",
        )


def _head_loss_reference(c1: float, c_G: float, L: int, V: int) -> float:
    """Expected per-token loss of ``A = c1 J/L + c_G S`` with ``W = I``: the package's linear
    head (``A = (G + bJ)/L``, so ``b = c1`` and ``G = L c_G S``) on the expected statistics."""
    idx = torch.arange(L)
    S = torch.zeros(L, L, dtype=DT)
    S[idx, (idx - 1) % L] = 1.0
    p = {
        "G": (L * float(c_G) * S)[None],
        "W": torch.eye(V, dtype=DT)[None],
        "b": torch.tensor([float(c1)], dtype=DT),
    }
    stats = expected_statistics(1.0, L, V)
    return float(token_mse(p, stats, kind="linear"))


def _head_loss_wrong(c1: float, c_G: float, L: int, V: int) -> list:
    """The usual wrong losses of the template head, each with the hint that names its slip."""
    s, sq = c1 + c_G, c1**2 / L + 2 * c1 * c_G / L + c_G**2  # Σ a_m, Σ a_m²
    on_target = c1 / L + c_G  # the weight a_{l−1} on the target
    return [
        (
            (1 - 1 / V) * (1 - 1 / L),
            (
                "that is the loss of uniform pooling alone (the proposition's head): the "
                "loss depends on c1 and c_G"
            ),
        ),
        (
            sq - 2 * on_target + 1,
            (
                "tokens at two different positions are equal with probability 1/V, so "
                "their scalar product has expectation 1/V, not 0"
            ),
        ),
        (
            (1 - 1 / V) * sq + s**2 / V - 2 * s / V + 1,
            (
                "the target is one of the averaged tokens (position l − 1): E hᵀy has a "
                "share from the weight on that position"
            ),
        ),
        (
            (1 - 1 / V) * (sq - 2 * c_G + 1) + (s - 1) ** 2 / V,
            (
                "the weight on the target is not c_G alone: the target's position also "
                "gets its share of the pooling"
            ),
        ),
        (
            (1 - 1 / V) * (c1**2 / L + c_G**2 - 2 * on_target + 1) + (s - 1) ** 2 / V,
            "Σ_m a_m² has a cross term: position l − 1 carries both c1/L and c_G",
        ),
    ]


@checker(
    "ex-copy-pooling-loss",
    what="a function head_loss(c1, c_G, seq_len, vocab_size)",
    hints=(
        (
            "Write the prediction as a weighted sum of one-hot tokens, h the sum over "
            "positions m of a_m x_m, and expand the expected squared error into E‖h‖², the "
            "cross term E hᵀy and the constant E‖y‖²."
        ),
        (
            "For i.i.d. uniform one-hot tokens, a token's scalar product with itself is one, "
            "and two tokens at different positions agree with probability 1/V; the target is "
            "itself the token at position l − 1, which gets the pooled share c1/L as well as "
            "c_G."
        ),
        (
            "Collect the terms in the sum of the weights, the sum of their squares and the "
            "weight on the target; then test your function on the head of the proposition (c1 "
            "one, c_G zero) and on the pure copy head, whose losses you know."
        ),
    ),
)
def check_pooling_loss(fn) -> None:
    """Expected per-token loss of the head ``A = c1 J/L + c_G S`` with readout ``W = I``."""
    label = "ex-copy-pooling-loss"
    require_function(label, fn, "a function head_loss(c1, c_G, seq_len, vocab_size)")
    cases = [
        (0.3, 0.5, 16, 4, ""),
        (1.0, 0.0, 24, 8, " (uniform pooling, the head of the proposition)"),
        (0.0, 1.0, 10, 3, " (the copy head)"),
        (-0.4, 1.3, 7, 5, " (a negative pooling strength)"),
        (2.0, -1.0, 2, 2, " (L = 2: the head attends only to the other token)"),
    ]
    for c1, c_G, L, V, note in cases:
        on = f"c1={c1:g}, c_G={c_G:g}, seq_len={L}, vocab_size={V}{note}"
        got = _scalar(label, call(label, fn, c1, c_G, L, V, on=on), on, "the loss")
        expected = _head_loss_reference(c1, c_G, L, V)
        hint = (
            "the loss is off: expand the expected squared error of the weighted sum of "
            "tokens term by term; a token agrees with itself, two different positions agree "
            "with probability 1/V, and the target is the token at l − 1"
        )
        if not _near(got, expected):
            for wrong, message in _head_loss_wrong(c1, c_G, L, V):
                if _near(got, wrong) and not _near(expected, wrong):
                    hint = message
                    break
        assert_close(label, got, expected, on=on, hint=hint, what="the loss")


# --- bayesian-view ----------------------------------------------------------------------------


def _template(c1, cG, L: int) -> torch.Tensor:
    idx = torch.arange(L)
    S = torch.zeros(L, L, dtype=DT)
    S[idx, (idx - 1) % L] = 1.0
    return (
        torch.as_tensor(c1, dtype=DT)[..., None, None] / L
        + torch.as_tensor(cG, dtype=DT)[..., None, None] * S
    )


@checker(
    "ex-bayes-order-parameters",
    what="a function order_params(A)",
    reference=("attnbook.copyhead.order.order_parameters",),
    hints=(
        (
            "This is a least-squares fit of A on two fixed matrices in the Frobenius inner "
            "product; the two templates are not orthogonal, so fit both coefficients "
            "together."
        ),
        (
            "The right-hand side of the normal equations holds the inner products of A with "
            "the two templates: one uses every entry of A, the other the entries just below "
            "the diagonal plus the wrap-around entry in the top-right corner."
        ),
        (
            "Solve the 2 × 2 system in closed form so it works on a batch, and test on a "
            "matrix you build as 0.3 J/L + 0.5 S for L of 5: you must get those two numbers "
            "back."
        ),
    ),
)
def check_order_parameters(fn) -> None:
    """Least-squares ``(c_1, c_G)`` of ``A (..., L, L)`` on the templates ``J/L`` and ``S``."""
    label = "ex-bayes-order-parameters"
    require_function(label, fn, "a function order_params(A)")
    cases = [
        (_template(0.3, 0.5, 8), " (exactly 0.3 J/L + 0.5 S)"),
        (_template(0.3, 0.5, 8) + 0.05 * _randn(8, 8, seed=20), " (with noise)"),
        (torch.softmax(_randn(3, 6, 6, seed=21), -1), " (batched)"),
        (_randn(2, 2, seed=22), " (L = 2)"),
    ]
    for A_in, note in cases:
        on = f"A of shape {tuple(A_in.shape)}{note}"
        out = _pair(label, call(label, fn, A_in.clone(), on=on), on, "(c1, cG)")
        c1, cG = order_parameters(A_in)
        L = A_in.shape[-1]
        g1 = as_array(label, out[0], on=on, what="c1")
        gG = as_array(label, out[1], on=on, what="cG")
        hint = (
            "c1 or cG is off: fit both templates together by least squares, with the inner "
            "products of A with J/L and with S on the right-hand side of the normal equations"
        )
        if gG.shape == tuple(cG.shape):
            sub = A_in.diagonal(-1, -2, -1).sum(-1) + A_in[..., 0, L - 1]
            sup = A_in.diagonal(1, -2, -1).sum(-1) + A_in[..., L - 1, 0]
            if L > 2 and _near(gG, (sup - A_in.sum((-1, -2)) / L) / (L - 1)):
                hint = (
                    "you used the entries above the diagonal: the ones of S lie BELOW the "
                    "diagonal (row l attends to the previous token), with the wrap-around "
                    "in the top-right corner"
                )
            elif _near(gG, sub / L) or _near(g1, A_in.mean((-1, -2)) * L):
                hint = (
                    "the templates J/L and S are not orthogonal: projecting on each one "
                    "alone is wrong, fit both coefficients together"
                )
        assert_close(label, g1, c1, on=on, hint=hint, what="c1")
        assert_close(label, gG, cG, on=on, hint=hint, what="cG")


@checker(
    "ex-bayes-data-action",
    what="a function data_action(q_F, q_S, m_1, m_2, P, V)",
    reference=("attnbook.copyhead.action.evidence.data_action",),
    hints=(
        (
            "Transcribe the closed form eq-data-action term by term with κ and σ_w set to "
            "one; compute τ from P and V first."
        ),
        (
            "It has two logarithmic terms (torch.log1p keeps them accurate) and a bracket "
            "times P/2 that starts from the constant 1 and subtracts a fit term in q_S and "
            "one in m_1."
        ),
        (
            "Test on the zero matrix, whose four statistics vanish (which terms survive?), "
            "and on the copy head; keep every operation elementwise so that batches work."
        ),
    ),
)
def check_data_action(fn) -> None:
    """The large-P data action at κ = σ_w = 1 (the closed form of bayesian-view)."""
    label = "ex-bayes-data-action"
    require_function(label, fn, "a function data_action(q_F, q_S, m_1, m_2, P, V)")
    cases = [
        ((0.2, 0.15, 1.0, 1.0), 300.0, 4, ""),
        ((1.0, 1.0, 1.0, 1.0), 50.0, 8, " (the copy head A = S)"),
        ((0.0, 0.0, 0.0, 0.0), 20.0, 3, " (the zero attention matrix)"),
    ]
    stats = A.attention_statistics(torch.softmax(_randn(4, 6, 6, seed=23), -1))
    cases.append((tuple(stats), 120.0, 5, " (a batch of 4 matrices, tensors)"))
    for (qF, qS, m1, m2), P, V, note in cases:
        args = [torch.as_tensor(t, dtype=DT) for t in (qF, qS, m1, m2)]
        on = f"q_F={_fmt(qF)}, q_S={_fmt(qS)}, m_1={_fmt(m1)}, m_2={_fmt(m2)}, P={P:g}, V={V}{note}"
        got = as_array(
            label, call(label, fn, *[a.clone() for a in args], P, V, on=on), on=on
        )
        expected = A.data_action(*args, n_sequences=P, vocab_size=V).numpy()
        hint = (
            "the action is off: compare your code term by term with the closed form "
            "eq-data-action at unit κ and σ_w (the two logarithms, the bracket times P/2, "
            "and τ)"
        )
        if got.shape == expected.shape and not _near(got, expected):
            if _near(got, expected - P / 2):
                hint = "the constant P/(2κ) is missing: check the first term of the bracket"
            elif _near(got, _data_action_tau(args, P, V, tau=P)):
                hint = (
                    "τ is off by a factor: you used P alone; check τ's definition, which "
                    "involves the vocabulary size as well"
                )
        assert_close(label, got, expected, on=on, hint=hint, what="the action")


def _fmt(t) -> str:
    t = torch.as_tensor(t)
    return f"{float(t):g}" if t.dim() == 0 else f"tensor of shape {tuple(t.shape)}"


def _data_action_tau(args, P, V, *, tau):
    qF, qS, m1, m2 = args
    return (
        0.5 * V * (V - 1) * torch.log1p(tau * qF)
        + 0.5 * V * torch.log1p(tau * m2)
        + P
        / 2
        * (
            1
            - (V - 1) / V * tau * qS**2 / (1 + tau * qF)
            - tau * m1**2 / (V * (1 + tau * m2))
        )
    ).numpy()


# --- linear-attention -------------------------------------------------------------------------


@checker(
    "ex-linear-action",
    what="a function saddle_action(m, c_G, P, L, V)",
    reference=("attnbook.copyhead.action.linear.linear_action",),
    hints=(
        (
            "The action is the prior of the parameters plus the data action, and the data "
            "action is the one the exercise lets you use, once you have the four statistics."
        ),
        (
            "Compute σ_m² from the priors (σ_b and σ_g/L both contribute), then q_F and q_S "
            "of the saddle's matrix in terms of m and c_G, with m_1 equal to m and m_2 its "
            "square."
        ),
        (
            "Test at the origin, where the prior vanishes and only the data action of the "
            "zero matrix remains, and on a tensor of several m so that everything broadcasts."
        ),
    ),
)
def check_linear_action(fn) -> None:
    """The saddle action ``S(m, c_G)`` of linear attention (unit hyper-parameters)."""
    label = "ex-linear-action"
    require_function(label, fn, "a function saddle_action(m, c_G, P, L, V)")
    grid_m = torch.linspace(-1, 1, 5, dtype=DT)
    cases = [
        (torch.tensor(0.7, dtype=DT), torch.tensor(0.4, dtype=DT), 300.0, 16, 4, ""),
        (
            torch.tensor(0.0, dtype=DT),
            torch.tensor(0.0, dtype=DT),
            50.0,
            8,
            3,
            " (origin)",
        ),
        (grid_m, 0.5 * grid_m, 80.0, 12, 6, " (batched m and c_G)"),
        (
            torch.tensor(0.5, dtype=DT),
            torch.tensor(0.9, dtype=DT),
            40.0,
            2,
            2,
            " (L = 2)",
        ),
    ]
    for m, cG, P, L, V, note in cases:
        on = f"m={_fmt(m)}, c_G={_fmt(cG)}, P={P:g}, L={L}, V={V}{note}"
        got = as_array(
            label, call(label, fn, m.clone(), cG.clone(), P, L, V, on=on), on=on
        )
        expected = A.linear_action(
            m, cG, n_sequences=P, seq_len=L, vocab_size=V
        ).numpy()
        hint = (
            "the action is off: check the prior of the parameters (σ_m² and the prior of G) "
            "and the four statistics you pass to the data action"
        )
        if got.shape == expected.shape:
            prior = m**2 / (2 * (1 + 1 / L**2)) + L**2 * (L - 1) * cG**2 / 2
            if _near(got, expected - prior.numpy()):
                hint = (
                    "add the prior: your action is the data action alone, without the "
                    "prior of the parameters"
                )
            elif _near(
                got,
                expected
                - prior.numpy()
                + (m**2 / 2 + L**2 * (L - 1) * cG**2 / 2).numpy(),
            ):
                hint = "σ_m² is not 1: both σ_b and σ_g/L contribute to it"
        assert_close(label, got, expected, on=on, hint=hint, what="the action")


@checker(
    "ex-linear-onset-p",
    what="a function onset_p(L, V)",
    reference=("attnbook.copyhead.action.linear.linear_onset_p",),
    hints=(
        (
            "The onset is where the curvature K_m(P) of the proposition changes sign; K_m is "
            "a quadratic in P, so the quadratic formula finds it."
        ),
        (
            "Identify its constant, linear and quadratic coefficients at unit "
            "hyper-parameters (the constant involves σ_m², which has a 1/L² part), and keep "
            "the positive root."
        ),
        (
            "Test for L of 16 and V of 4: evaluate K_m at your P (it should vanish to "
            "rounding) and just below it (which sign do you expect there?)."
        ),
    ),
)
def check_linear_onset(fn) -> None:
    """The saddle's pooling onset ``P_on`` (closed form, unit hyper-parameters)."""
    label = "ex-linear-onset-p"
    require_function(label, fn, "a function onset_p(L, V)")
    for L, V in ((16, 4), (16, 8), (4096, 16), (2, 2)):
        on = f"L={L}, V={V}" + (" (L = 2)" if L == 2 else "")
        got = _scalar(label, call(label, fn, L, V, on=on), on, "P_on")
        expected = A.linear_onset_p(seq_len=L, vocab_size=V)
        a = (V - 1) / L + 1
        b = ((V - 1) / L**2 + 1) / V**2
        hint = (
            "P_on is off: check the three coefficients of the quadratic K_m(P) at unit "
            "hyper-parameters, and which root you keep"
        )
        if _near(got, (a - math.sqrt(a * a + 4 * b / (1 + 1 / L**2))) / (2 * b)):
            hint = "that is the negative root: the onset is the positive root of K_m"
        elif _near(got, (a + math.sqrt(a * a + 4 * b)) / (2 * b)):
            hint = "σ_m² is not 1 at finite L: the constant of K_m has a 1/L² part"
        elif _near(got, V**2, rtol=1e-9):
            hint = "V² is the large-L scaling only: keep a and b at finite L"
        assert_close(label, got, expected, on=on, hint=hint, what="P_on", rtol=1e-9)


# --- softmax-attention ------------------------------------------------------------------------


@checker(
    "ex-softmax-order",
    what="a function softmax_order(g, L)",
    reference=("attnbook.copyhead.action.softmax.softmax_order_parameters",),
    hints=(
        (
            "Write one row of rowsoftmax(gS): the previous token gets one weight and every "
            "other token another; match these two numbers with the template a_1 J/L + a_G S "
            "entry by entry."
        ),
        (
            "Away from the shifted diagonal only the pooling template contributes, on it both "
            "do: that is two equations for the two unknowns."
        ),
        (
            "Test at g of zero (uniform attention: what must a_G be?) and at a large g, where "
            "e^g overflows unless you rewrite the ratios, e.g. by dividing through by e^g."
        ),
    ),
)
def check_softmax_order(fn) -> None:
    """``(a_1, a_G)`` of ``rowsoftmax(g S)`` for a tensor of logits ``g``."""
    label = "ex-softmax-order"
    require_function(label, fn, "a function softmax_order(g, L)")
    cases = [
        (torch.tensor(2.0, dtype=DT), 32, ""),
        (torch.linspace(-3, 6, 7, dtype=DT), 16, " (a batch of logits)"),
        (torch.tensor(0.0, dtype=DT), 8, " (g = 0: uniform attention)"),
        (torch.tensor([20.0, 60.0], dtype=DT), 64, " (large logits: a_G → 1)"),
    ]
    for g, L, note in cases:
        on = f"g={_fmt(g) if g.numel() == 1 else g.tolist()}, L={L}{note}"
        out = _pair(label, call(label, fn, g.clone(), L, on=on), on, "(a_1, a_G)")
        a1, aG = A.softmax_order_parameters(g, L)
        g1 = as_array(label, out[0], on=on, what="a_1")
        gG = as_array(label, out[1], on=on, what="a_G")
        hint = (
            "a_1 or a_G is off: compute the weight of the previous token and of every other "
            "token in one row, then match them with the two templates entry by entry"
        )
        eg = torch.exp(g)
        if gG.shape == tuple(aG.shape):
            if _near(gG, (eg / (eg + L - 1)).numpy()):
                hint = (
                    "your a_G is the whole weight on the previous token: part of that "
                    "weight belongs to the pooling template"
                )
            elif _near(g1, (1 / (eg + L - 1)).numpy()):
                hint = (
                    "your a_1 is off by a factor L: it is the weight of one other token, "
                    "but a_1 multiplies J/L"
                )
        assert_close(label, g1, a1, on=on, hint=hint, what="a_1")
        assert_close(label, gG, aG, on=on, hint=hint, what="a_G")


@checker(
    "ex-softmax-action",
    what="a function symmetric_action(g, P, L, V)",
    reference=("attnbook.copyhead.action.softmax.softmax_action",),
    hints=(
        (
            "The action is the prior of the minimal-norm G that realises the logit g, plus "
            "the data action at the statistics of rowsoftmax(gS)."
        ),
        (
            "Get a_G from the order parameters of the previous exercise, build q_F and q_S of "
            "the symmetric matrix (its rows sum to one, so m_1 and m_2 are one) and pass them "
            "to the data action."
        ),
        (
            "The prior counts the free entries of each row of G: test at g of zero, where the "
            "prior vanishes, and at L of 2, where each row has a single free entry."
        ),
    ),
)
def check_softmax_action(fn) -> None:
    """The symmetric-logit softmax action ``S(g)`` (unit hyper-parameters)."""
    label = "ex-softmax-action"
    require_function(label, fn, "a function symmetric_action(g, P, L, V)")
    cases = [
        (torch.linspace(-0.5, 5, 12, dtype=DT), 350.0, 32, 4, " (a grid of logits)"),
        (torch.tensor(0.0, dtype=DT), 100.0, 16, 8, " (g = 0)"),
        (torch.tensor(3.0, dtype=DT), 60.0, 2, 2, " (L = 2)"),
    ]
    for g, P, L, V, note in cases:
        on = f"g={_fmt(g)}, P={P:g}, L={L}, V={V}{note}"
        got = as_array(label, call(label, fn, g.clone(), P, L, V, on=on), on=on)
        expected = A.softmax_action(g, n_sequences=P, seq_len=L, vocab_size=V).numpy()
        hint = (
            "the action is off: check the prior of the minimal-norm G and the statistics "
            "(q_F, q_S, m_1, m_2) you pass to the data action"
        )
        if got.shape == expected.shape:
            prior = ((L - 1) * g**2 / 2).numpy()
            if _near(got, expected - prior):
                hint = (
                    "add the prior: your action is the data action alone, without the "
                    "prior of the minimal-norm G"
                )
            elif _near(got, expected - prior + L * g.numpy() ** 2 / 2):
                hint = (
                    "your prior counts too many entries: the minimal-norm G has L − 1 free "
                    "entries per row"
                )
        assert_close(label, got, expected, on=on, hint=hint, what="the action")


# --- theory-vs-experiment ---------------------------------------------------------------------


@checker(
    "ex-tve-split-rhat",
    what="a function split_rhat(draws)",
    reference=("attnbook.sgld.split_rhat",),
    hints=(
        (
            "Split R̂ compares the variance between chains with the variance within them, "
            "after cutting every chain in two halves so that a drifting chain disagrees with "
            "itself."
        ),
        (
            "Put the first n and the last n draws of every chain side by side as separate "
            "columns (2 × n_chains halves), then take the mean of the within-column variances "
            "and the variance of the column means, both with ddof 1."
        ),
        (
            "With an odd number of draws the middle one is left out; test on chains that all "
            "drift the same way, where only the split makes R̂ rise well above one."
        ),
    ),
)
def check_split_rhat(fn) -> None:
    """Split-R̂ of ``draws (n_draws, n_chains)`` → one number (as :func:`attnbook.sgld.split_rhat`)."""
    label = "ex-tve-split-rhat"
    require_function(label, fn, "a function split_rhat(draws)")
    mixed = _randn(200, 4, seed=30)
    shifted = mixed + torch.tensor([0.0, 0.0, 0.0, 2.0], dtype=DT)
    drift = mixed + torch.linspace(0, 3, 200, dtype=DT)[:, None]
    cases = [
        (mixed, " (4 chains of one distribution)"),
        (shifted, " (one chain sits elsewhere)"),
        (drift, " (every chain drifts: only splitting sees it)"),
        (_randn(101, 3, seed=31), " (an odd number of draws)"),
    ]
    for x, note in cases:
        on = f"draws of shape {tuple(x.shape)}{note}"
        got = _scalar(label, call(label, fn, x.clone(), on=on), on, "R̂")
        expected = float(sgld.split_rhat(x))
        hint = (
            "R̂ is off: check the split (the first and the last halves of every chain, the "
            "middle draw left out when odd), the two variances (ddof 1) and how they combine"
        )
        if _near(got, _plain_rhat(x), rtol=1e-9) and not _near(
            got, expected, rtol=1e-9
        ):
            hint = (
                "that is R̂ of whole chains: split each chain in two halves first, so a "
                "drifting chain disagrees with itself"
            )
        elif _near(got, _rhat_ddof0(x), rtol=1e-9):
            hint = (
                "your variances use the wrong denominator: use unbiased variances (ddof 1) "
                "for W and for the variance of the means"
            )
        assert_close(label, got, expected, on=on, hint=hint, what="R̂", rtol=1e-6)


def _plain_rhat(x: torch.Tensor) -> float:
    n = x.shape[0]
    W = x.var(0).mean()
    B_n = x.mean(0).var()
    return float(torch.sqrt(((n - 1) / n * W + B_n) / W))


def _rhat_ddof0(x: torch.Tensor) -> float:
    n = x.shape[0] // 2
    h = torch.cat([x[:n], x[-n:]], 1)
    W = h.var(0, unbiased=False).mean()
    B_n = h.mean(0).var(unbiased=False)
    return float(torch.sqrt(((n - 1) / n * W + B_n) / W))


@checker(
    "ex-tve-reached-minimum",
    what="a function reached(final, groups, rtol)",
    reference=("attnbook.train.reached_minimum",),
    hints=(
        (
            "For each group find its best (smallest) final action, ignoring NaN, then keep "
            "the runs of that group within the tolerance of it."
        ),
        (
            "The tolerance is rtol times the ABSOLUTE value of the best, so that it also "
            "works for negative actions; np.nanmin over a group's runs gives the best, and "
            "any comparison with NaN is False, which is what a diverged run needs."
        ),
        (
            "Test on one group of three runs with actions −200, −199 and −200.0005 at rtol "
            "1e-5: compute the tolerance by hand first."
        ),
    ),
)
def check_reached_minimum(fn) -> None:
    """Boolean mask of runs within ``rtol·|best|`` of the best run of their group."""
    label = "ex-tve-reached-minimum"
    require_function(label, fn, "a function reached(final, groups, rtol)")
    cases = [
        (
            np.array([10.0, 10.0 + 1e-7, 10.5, 3.0, 3.0 + 1e-3]),
            np.array([0, 0, 0, 1, 1]),
            1e-5,
            "",
        ),
        (
            np.array([-200.0, -199.0, -200.0005, -50.0]),
            np.array([2, 2, 2, 7]),
            1e-5,
            " (negative actions)",
        ),
        (
            np.array([5.0, np.nan, 5.0]),
            np.array([0, 0, 0]),
            1e-3,
            " (a diverged run: NaN)",
        ),
        (
            np.array([0.0, 0.0, 1e-9, 4.0, 5.0, 5.5]),
            np.array([0, 0, 0, 1, 1, 1]),
            0.25,
            " (a best of exactly 0, and a run exactly at the tolerance)",
        ),
    ]
    for final, groups, rtol, note in cases:
        on = f"final={final.tolist()}, groups={groups.tolist()}, rtol={rtol:g}{note}"
        got = call(label, fn, final.copy(), groups.copy(), rtol, on=on)
        got = as_array(label, got, on=on, what="the mask")
        expected = train.reached_minimum(final, groups, rtol=rtol, atol=0.0).keep
        hint = (
            "the mask is off: check which best each run is compared with, how the "
            "tolerance scales with it (also for a negative best), and the NaN runs"
        )
        if got.shape == expected.shape:
            best_all = np.nanmin(final)
            if np.array_equal(
                got.astype(bool), final <= best_all + rtol * abs(best_all)
            ):
                hint = "compare each run with the best of ITS group, not with the best overall"
            elif np.array_equal(
                got.astype(bool), final <= _group_best(final, groups) * (1 + rtol)
            ):
                hint = "use |best|: with a negative best, best·(1 + rtol) lies BELOW the best"
            elif np.array_equal(
                got.astype(bool),
                final - _group_best(final, groups)
                < rtol * abs(_group_best(final, groups)),
            ):
                hint = (
                    "a run exactly at the tolerance is within it: your comparison drops the "
                    "boundary (and, with a best of 0, the best run itself)"
                )
        assert_close(
            label,
            got.astype(float),
            expected.astype(float),
            on=on,
            hint=hint,
            what="the mask",
            shape_hint="one True/False per run",
        )


def _group_best(final, groups):
    best = {g: np.nanmin(final[groups == g]) for g in np.unique(groups)}
    return np.array([best[g] for g in groups])
