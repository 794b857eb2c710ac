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
            hint=f"end with `return {what.strip('()')}`",
        )
    return out


def _scalar(label: str, value, on: str, what: str) -> float:
    arr = as_array(label, value, on=on, what=what)
    if arr.size != 1:
        fail(
            label,
            f"expected one number for {what}, got shape {arr.shape}",
            on=on,
            hint="return a float (or a 0-d tensor), not an array",
        )
    return float(arr.reshape(()))


def _near(got, value, rtol=1e-7) -> bool:
    return bool(np.allclose(got, value, rtol=rtol, atol=1e-12))


# --- copy-task --------------------------------------------------------------------------------


@checker("ex-copy-data", what="a function copy_data(tokens, vocab_size)")
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
            hint = "X has shape (P, L, vocab_size): one_hot(tokens, vocab_size)"
            if gx.shape[-1] != V and gx.shape[:-1] == tuple(X.shape[:-1]):
                hint = (
                    "one_hot(tokens) guesses the width from the largest token: pass "
                    "num_classes=vocab_size"
                )
            fail(
                label,
                f"wrong shape of X: got {gx.shape}, expected {tuple(X.shape)}",
                on=on,
                hint=hint,
            )
        assert_close(
            label, gx, X, on=on, hint="X[μ, l] = e_{tokens[μ, l]} (one-hot)", what="X"
        )
        hint = "Y[:, l] = X[:, l − 1], with l − 1 taken modulo L (periodic)"
        if gy.shape == tuple(Y.shape):
            if _near(gy, torch.roll(X, -1, dims=-2)):
                hint = (
                    "that is the NEXT token: the target is the previous one, "
                    "torch.roll(X, shifts=1, dims=1)"
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


def _pooling_reference(L: int, V: int) -> float:
    """Expected per-token loss of A = J/L, W = I (exact, from the expected statistics)."""
    p = {
        "G": torch.zeros(1, L, L, dtype=DT),
        "W": torch.eye(V, dtype=DT)[None],
        "b": torch.ones(1, dtype=DT),
    }
    stats = expected_statistics(1.0, L, V)
    return float(token_mse(p, stats, kind="linear"))


@checker("ex-copy-pooling-loss", what="a function pooling_loss(seq_len, vocab_size)")
def check_pooling_loss(fn) -> None:
    """Expected per-token loss of uniform pooling ``A = J/L`` with readout ``W = I``."""
    label = "ex-copy-pooling-loss"
    require_function(label, fn, "a function pooling_loss(seq_len, vocab_size)")
    for L, V in ((24, 8), (10, 3), (2, 2), (300, 5)):
        on = f"seq_len={L}, vocab_size={V}" + (" (shortest task)" if L == 2 else "")
        got = _scalar(label, call(label, fn, L, V, on=on), on, "the loss")
        expected = _pooling_reference(L, V)
        hint = (
            "expand E‖h − y‖² with h the average of the L tokens: E‖h‖² and E hᵀy "
            "both contain a 1/L share from the target itself"
        )
        if _near(got, (1 - 1 / V) * (1 + 1 / L)):
            hint = (
                "the sign of the 1/L term: the target is one of the averaged tokens, so "
                "pooling does slightly BETTER than 1 − 1/V"
            )
        elif _near(got, 1 - 1 / V):
            hint = (
                "1 − 1/V is the limit L → ∞; at finite L the target is one of the L "
                "averaged tokens"
            )
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
            "solve the 2×2 normal equations [[1, 1], [1, L]] (c1, cG) = "
            "(Σ A / L, Σ_l A[l, l−1])"
        )
        if gG.shape == tuple(cG.shape):
            sub = A_in.diagonal(-1, -2, -1).sum(-1) + A_in[..., 0, L - 1]
            sup = A_in.diagonal(1, -2, -1).sum(-1) + A_in[..., L - 1, 0]
            if L > 2 and _near(gG, (sup - A_in.sum((-1, -2)) / L) / (L - 1)):
                hint = (
                    "S[l, l − 1] = 1 lies BELOW the diagonal (row l attends to the "
                    "previous token), with the wrap-around at [0, L − 1]"
                )
            elif _near(gG, sub / L) or _near(g1, A_in.mean((-1, -2)) * L):
                hint = (
                    "the templates are not orthogonal (⟨J/L, S⟩ = 1): project on both "
                    "at once, through the 2×2 normal equations"
                )
        assert_close(label, g1, c1, on=on, hint=hint, what="c1")
        assert_close(label, gG, cG, on=on, hint=hint, what="cG")


@checker(
    "ex-bayes-data-action",
    what="a function data_action(q_F, q_S, m_1, m_2, P, V)",
    reference=("attnbook.copyhead.action.evidence.data_action",),
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
            "S = ½V(V−1)ln(1+τq_F) + ½V ln(1+τm_2) + (P/2)[1 − (V−1)/V·τq_S²/(1+τq_F) "
            "− (1/V)·τm_1²/(1+τm_2)] with τ = P/V"
        )
        if got.shape == expected.shape and not _near(got, expected):
            if _near(got, expected - P / 2):
                hint = "the constant P/(2κ): the bracket starts with 1"
            elif _near(got, _data_action_tau(args, P, V, tau=P)):
                hint = "τ = σ_w² P/(κ V) = P/V here, not P"
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
            "S = m²/(2σ_m²) + L²(L−1)c_G²/2 + S_data(q_F, q_S, m, m²) with "
            "σ_m² = 1 + 1/L², q_F = m²/L + c_G²(1 − 1/L), q_S = m/L + c_G(1 − 1/L)"
        )
        if got.shape == expected.shape:
            prior = m**2 / (2 * (1 + 1 / L**2)) + L**2 * (L - 1) * cG**2 / 2
            if _near(got, expected - prior.numpy()):
                hint = "add the prior of G: m²/(2σ_m²) + L²(L−1)c_G²/(2σ_g²)"
            elif _near(
                got,
                expected
                - prior.numpy()
                + (m**2 / 2 + L**2 * (L - 1) * cG**2 / 2).numpy(),
            ):
                hint = "σ_m² = σ_b² + σ_g²/L² = 1 + 1/L², not 1"
        assert_close(label, got, expected, on=on, hint=hint, what="the action")


@checker(
    "ex-linear-onset-p",
    what="a function onset_p(L, V)",
    reference=("attnbook.copyhead.action.linear.linear_onset_p",),
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
        hint = "P_on is the positive root of K_m(P) = 1/σ_m² + aP − bP² = 0"
        if _near(got, (a - math.sqrt(a * a + 4 * b / (1 + 1 / L**2))) / (2 * b)):
            hint = "that is the negative root: P_on = (a + √(a² + 4b/σ_m²))/(2b)"
        elif _near(got, (a + math.sqrt(a * a + 4 * b)) / (2 * b)):
            hint = "σ_m² = 1 + 1/L², not 1"
        elif _near(got, V**2, rtol=1e-9):
            hint = "V² is the large-L scaling only: keep a and b at finite L"
        assert_close(label, got, expected, on=on, hint=hint, what="P_on", rtol=1e-9)


# --- softmax-attention ------------------------------------------------------------------------


@checker(
    "ex-softmax-order",
    what="a function softmax_order(g, L)",
    reference=("attnbook.copyhead.action.softmax.softmax_order_parameters",),
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
            "rowsoftmax(gS) = a_1 J/L + a_G S: the previous token gets e^g/Z = a_1/L + a_G, "
            "every other token 1/Z = a_1/L, with Z = e^g + L − 1"
        )
        eg = torch.exp(g)
        if gG.shape == tuple(aG.shape):
            if _near(gG, (eg / (eg + L - 1)).numpy()):
                hint = (
                    "e^g/Z is the weight on the previous token, a_1/L + a_G: subtract "
                    "the uniform part"
                )
            elif _near(g1, (1 / (eg + L - 1)).numpy()):
                hint = "a_1 multiplies J/L: a_1 = L/Z, not 1/Z"
        assert_close(label, g1, a1, on=on, hint=hint, what="a_1")
        assert_close(label, gG, aG, on=on, hint=hint, what="a_G")


@checker(
    "ex-softmax-action",
    what="a function symmetric_action(g, P, L, V)",
    reference=("attnbook.copyhead.action.softmax.softmax_action",),
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
            "S(g) = (L−1)g²/2 + S_data(q_F, q_S, 1, 1) with a_G from the order "
            "parameters, q_F = 1/L + a_G²(1 − 1/L), q_S = 1/L + a_G(1 − 1/L)"
        )
        if got.shape == expected.shape:
            prior = ((L - 1) * g**2 / 2).numpy()
            if _near(got, expected - prior):
                hint = "add the prior of the minimal-norm G: (L − 1)g²/(2σ_g²)"
            elif _near(got, expected - prior + L * g.numpy() ** 2 / 2):
                hint = "the prior is (L − 1)g²/2: the minimal-norm G has L − 1 free entries per row"
        assert_close(label, got, expected, on=on, hint=hint, what="the action")


# --- theory-vs-experiment ---------------------------------------------------------------------


@checker(
    "ex-tve-split-rhat",
    what="a function split_rhat(draws)",
    reference=("attnbook.sgld.split_rhat",),
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
            "cut every chain into two halves (first n and last n draws, n = n_draws // 2), "
            "then R̂ = √(((n−1)/n·W + B/n)/W) over the 2·n_chains halves"
        )
        if _near(got, _plain_rhat(x), rtol=1e-9) and not _near(
            got, expected, rtol=1e-9
        ):
            hint = (
                "that is R̂ of whole chains: split each chain in two halves first, so a "
                "drifting chain disagrees with itself"
            )
        elif _near(got, _rhat_ddof0(x), rtol=1e-9):
            hint = "use unbiased variances (ddof = 1) for W and for the variance of the means"
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
    ]
    for final, groups, rtol, note in cases:
        on = f"final={final.tolist()}, groups={groups.tolist()}, rtol={rtol:g}{note}"
        got = call(label, fn, final.copy(), groups.copy(), rtol, on=on)
        got = as_array(label, got, on=on, what="the mask")
        expected = train.reached_minimum(final, groups, rtol=rtol, atol=0.0).keep
        hint = "keep run i when final_i ≤ best_g + rtol·|best_g|, best_g the best run of its group"
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
