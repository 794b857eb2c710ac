"""Checkers of Part III's coding exercises (book/pde: particles, mean-field, gaussians,
clustering-blowup, gradient-flow).

Every checker runs the student's function on NumPy inputs — a typical case, a second shape and
an edge case that a usual mistake gets wrong — and compares it with the package's tested
implementation (:mod:`attnbook.pde`, :mod:`attnbook.flows`, :mod:`attnbook.linalg`). Before a
plain "wrong value" it computes the usual wrong answers and names the one it sees in the hint.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from .. import flows, linalg
from .. import pde as _pde
from ..pde import closed_forms as cf
from .core import as_array, assert_close, call, checker, fail, require_function

__all__ = [
    "check_softmax_velocity",
    "check_rk4_step",
    "check_w2_1d",
    "check_fit_slope",
    "check_softmax_moments",
    "check_bures_w2",
    "check_blowup_time",
    "check_blowup_direction",
    "check_interaction_energy",
    "check_energy_rate",
]


def _exercise(
    label: str,
    what: str,
    reference: tuple[str, ...] = (),
    hints: tuple[str, ...] = (),
):
    """:func:`~attnbook.exercises.core.checker` whose body, ``body(fn, label)``, gets a function."""

    def register(body):
        @functools.wraps(body)
        def run(fn):
            require_function(label, fn, what)
            body(fn, label)

        return checker(label, what=what, reference=reference, hints=hints)(run)

    return register


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _spd(d: int, seed: int) -> np.ndarray:
    G = _rng(seed).normal(size=(d, d))
    return G @ G.T / d + 0.3 * np.eye(d)


def _shapes(note: str = "", **arrays) -> str:
    return ", ".join(f"{k} of shape {np.shape(v)}" for k, v in arrays.items()) + note


def _same(got, other, *, rtol=1e-7, atol=1e-9) -> bool:
    """``got`` equals the wrong answer ``other`` (same shape, all finite)."""
    g, o = np.asarray(got, float), np.asarray(other, float)
    if g.shape != o.shape or not np.all(np.isfinite(g)):
        return False
    return bool(np.allclose(g, o, rtol=rtol, atol=atol))


def _diagnose(got, expected, wrongs, default: str) -> str:
    """The message of the first usual wrong answer ``got`` equals (one the right answer is not)."""
    for wrong, message in wrongs:
        if _same(got, wrong) and not _same(expected, wrong):
            return message
    return default


def _answers(label: str, fn, cases, *, number: str | None = None, none_hint=None):
    """``(args, on, got)``: the student's answer on copies of each case's inputs.

    ``cases``: ``(args, on)`` pairs. ``number``: the answer is one number named so (else an array).
    """
    for args, on in cases:
        copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        raw = call(label, fn, *copies, on=on, none_hint=none_hint)
        got = as_array(label, raw, on=on, what=number or "an array")
        if number and got.size != 1:
            fail(
                label,
                f"expected {number} (one number), got an array of shape {got.shape}",
                on=on,
                hint="the answer is one number (a float), not an array",
            )
        yield args, on, (float(got.reshape(())) if number else got)


def _row_softmax(S: np.ndarray, axis: int = -1) -> np.ndarray:
    E = np.exp(S - S.max(axis, keepdims=True))
    return E / E.sum(axis, keepdims=True)


# --- particles --------------------------------------------------------------------------------


@_exercise(
    "ex-pde-velocity",
    "a function softmax_velocity(x, A, V)",
    reference=("attnbook.pde.particles.velocity",),
    hints=(
        (
            "Each token's velocity is an attention-weighted average of the value-mapped "
            "tokens: scores, a softmax over each row, then a weighted sum."
        ),
        (
            "With tokens as rows of x, all scores come from one product of x, A and x "
            "transposed (mind on which side A and V act on row vectors); subtract each row's "
            "maximum score before exponentiating."
        ),
        (
            "Test on two tokens in 2-D with A and V the identity: compute the scores, the "
            "weights and the velocities by hand and compare each intermediate."
        ),
    ),
)
def check_softmax_velocity(fn, label) -> None:
    """Γ(x_i) = Σ_j softmax_j(⟨A x_i, x_j⟩) V x_j for a cloud ``x`` ``(n, d)`` → ``(n, d)``."""
    rng = _rng(0)
    spread = 30 * rng.normal(size=(4, 2)), np.eye(2) + 0.5 * rng.normal(size=(2, 2))
    inputs = [
        (rng.normal(size=(6, 2)), rng.normal(size=(2, 2)), rng.normal(size=(2, 2)), ""),
        (rng.normal(size=(5, 3)), rng.normal(size=(3, 3)), rng.normal(size=(3, 3)), ""),
        (*spread, np.eye(2), " (a spread cloud: scores of several hundred)"),
    ]
    cases = [((x, A, V), _shapes(note, x=x, A=A, V=V)) for x, A, V, note in inputs]
    for (x, A, V), on, got in _answers(label, fn, cases):
        expected = _pde.velocity(x, kind="softmax", A=A, V=V)
        P = _row_softmax(x @ A.T @ x.T)
        wrongs = [
            (
                _row_softmax(x @ A.T @ x.T, axis=0) @ x @ V.T,
                "normalise each row (over the keys j, the last axis), not each column",
            ),
            (
                _row_softmax(x @ A @ x.T) @ x @ V.T,
                (
                    "the score of query i and key j is ⟨A x_i, x_j⟩, A applied to the "
                    "query: check on which side A multiplies when the tokens are rows"
                ),
            ),
            (P @ x, "apply the value matrix V to each x_j"),
            (
                P @ x @ V,
                (
                    "V acts from the wrong side: with the tokens as rows, check whether "
                    "your product uses V or its transpose"
                ),
            ),
        ]
        hint = (
            "the velocities are off: check the scores (on which side A acts), the softmax "
            "over each row and the value matrix V"
        )
        if not np.all(np.isfinite(got)):
            hint = (
                "exp of a large score overflows (inf/inf gives NaN): subtract each row's "
                "maximum score before exponentiating"
            )
        hint = _diagnose(got, expected, wrongs, hint)
        assert_close(label, got, expected, on=on, hint=hint, what="the velocities")


def _rk4_reference(field, x: np.ndarray, h: float) -> np.ndarray:
    def rhs(_t, y):
        return torch.as_tensor(np.asarray(field(y.numpy()), dtype=float))

    return flows.odeint_rk4(rhs, torch.as_tensor(x), [0.0, h], step_size=h)[-1].numpy()


def _rk_wrong(field, x, h):
    """The usual wrong steps: Euler, the midpoint rule, equal weights, full-step stages."""
    k1 = field(x)
    k2 = field(x + h / 2 * k1)
    k3 = field(x + h / 2 * k2)
    k4 = field(x + h * k3)
    j2 = field(x + h * k1)
    j3 = field(x + h * j2)
    full = x + h / 6 * (k1 + 2 * j2 + 2 * j3 + field(x + h * j3))
    return [
        (x + h * k1, "that is Euler's step x + h f(x): RK4 evaluates f four times"),
        (x + h * k2, "that is the midpoint rule (RK2): RK4 has four stages"),
        (
            x + h * (k1 + k2 + k3 + k4) / 4,
            "the stages are not weighted equally: RK4 averages them with Simpson's weights",
        ),
        (full, "stages 2 and 3 are taken half a step ahead, not a full step"),
        *[
            (
                one_by_one,
                (
                    "you moved the tokens one at a time: each stage must move the whole "
                    "cloud together, since the field of one token depends on all the others"
                ),
            )
            for one_by_one in _rk4_token_by_token(field, x, h)
        ],
    ]


def _rk4_token_by_token(field, x, h):
    """RK4 applied to one token at a time, the others frozen at x (or at their new place)."""
    if x.ndim != 2 or len(x) < 2:
        return []
    out = []
    for sequential in (False, True):
        y = np.array(x, dtype=float)
        for i in range(len(x)):
            base = y if sequential else np.array(x, dtype=float)

            def f_i(row, base=base, i=i):
                z = base.copy()
                z[i] = row
                return np.asarray(field(z))[i]

            r = base[i]
            k1 = f_i(r)
            k2 = f_i(r + h / 2 * k1)
            k3 = f_i(r + h / 2 * k2)
            k4 = f_i(r + h * k3)
            y[i] = r + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(y)
    return out


@_exercise(
    "ex-pde-rk4-step",
    "a function rk4_step(x, field, step_size)",
    reference=(
        "attnbook.pde.particles.simulate",
        "attnbook.flows.odeint",
        "attnbook.flows.odeint_rk4",
    ),
    hints=(
        (
            "The classical Runge–Kutta step evaluates the field four times, each stage at a "
            "state built from the previous stage's slope, and then averages the four slopes."
        ),
        (
            "Stages two and three are taken half a step ahead, stage four a full step ahead, "
            "and the slopes are averaged with Simpson's weights; every stage moves the whole "
            "cloud, since field takes all tokens at once."
        ),
        (
            "Test on the linear field x ↦ −x from x of one with a step of 0.1: compare with "
            "the exact exponential solution, which RK4 should match to about h⁵."
        ),
    ),
)
def check_rk4_step(fn, label) -> None:
    """One classical Runge–Kutta step of dx/dt = field(x) of size ``step_size``."""
    rng = _rng(1)
    M = rng.normal(size=(2, 2))
    A, V = rng.normal(size=(2, 2)), np.eye(2) + 0.3 * rng.normal(size=(2, 2))

    def linear(y):
        return y @ M.T

    def softmax_field(y):
        return _pde.velocity(y, kind="softmax", A=A, V=V)

    def cubic(y):
        return -(y**3)

    inputs = [
        (rng.normal(size=(5, 2)), linear, 0.3, "field(x) = x @ M.T (linear)"),
        (rng.normal(size=(8, 2)), softmax_field, 0.2, "the softmax velocity"),
        (np.array([[2.0], [-1.5], [0.5]]), cubic, 0.25, "field(x) = −x³"),
    ]
    cases = [
        ((x, f, h), f"x of shape {x.shape}, {name}, step_size = {h}")
        for x, f, h, name in inputs
    ]
    for (x, field, h), on, got in _answers(label, fn, cases):
        expected = _rk4_reference(field, x, h)
        default = (
            "the step is off: check the point at which each of the four stages evaluates "
            "the field, and the weights of the final average"
        )
        hint = _diagnose(got, expected, _rk_wrong(field, x, h), default)
        assert_close(label, got, expected, on=on, hint=hint, what="the new positions")


# --- mean-field -------------------------------------------------------------------------------


@_exercise(
    "ex-mf-w2-1d",
    "a function w2_1d(x, y)",
    reference=(
        "attnbook.pde.wasserstein.w2_particles",
        "attnbook.pde.meanfield.w2_particles_batch",
    ),
    hints=(
        (
            "In one dimension the optimal transport plan between two samples of equal masses "
            "matches them in increasing order."
        ),
        (
            "After sorting, the transport cost is an average over the matched pairs (mass 1/n "
            "each) of a squared gap, and W₂ is not the cost itself."
        ),
        (
            "Test with y a permutation of x (the same measure) and with y a shifted copy of "
            "x: what distance must each give?"
        ),
    ),
)
def check_w2_1d(fn, label) -> None:
    """Exact W₂ between two 1-D empirical measures with ``n`` equal-mass atoms each."""
    rng = _rng(2)
    x1 = rng.normal(size=40)
    inputs = [
        (rng.normal(size=7), 1.0 + 2.0 * rng.normal(size=7), ""),
        (x1, x1[::-1] + 0.5, " (y is x shifted by 0.5, listed in reverse order)"),
        (x1, rng.permutation(x1), " (y is a permutation of x: the same measure)"),
    ]
    cases = [((x, y), _shapes(note, x=x, y=y)) for x, y, note in inputs]
    for (x, y), on, got in _answers(label, fn, cases, number="W₂"):
        expected = _pde.w2_particles(x[:, None], y[:, None])
        sq = np.mean((np.sort(x) - np.sort(y)) ** 2)
        wrongs = [
            (
                math.sqrt(np.mean((x - y) ** 2)),
                "sort both samples first: in 1-D the optimal plan matches them in order",
            ),
            (sq, "that is W₂²: take the square root"),
            (
                math.sqrt(len(x) * sq),
                "each atom has mass 1/n: average the squared gaps, do not sum them",
            ),
            (
                float(np.mean(np.abs(np.sort(x) - np.sort(y)))),
                (
                    "that is W₁ (what scipy.stats.wasserstein_distance computes): W₂ is "
                    "built from squared gaps"
                ),
            ),
        ]
        default = (
            "use the monotone coupling the exercise names, and remember that each atom has "
            "mass 1/n"
        )
        hint = _diagnose(got, expected, wrongs, default)
        assert_close(label, got, expected, on=on, hint=hint, what="W₂", atol=1e-12)


@_exercise(
    "ex-mf-rate",
    "a function fit_slope(n, errors)",
    reference=("attnbook.pde.meanfield.fit_rate",),
    hints=(
        (
            "A power law is a straight line on log–log axes: its exponent is the slope of "
            "log(errors) against log(n)."
        ),
        (
            "Move both arrays to the axes on which a power law is straight, then fit a "
            "straight line by least squares (NumPy has a polynomial fit); think about which "
            "variable goes on the horizontal axis and which fitted coefficient is the slope."
        ),
        (
            "Test on exact data, errors 3 n^(−1/2) at a few n: the fit must recover the "
            "exponent to rounding, and a decreasing error must give a negative slope."
        ),
    ),
)
def check_fit_slope(fn, label) -> None:
    """The least-squares slope of log(errors) against log(n) (the rate exponent)."""
    n = 2.0 ** np.arange(4, 11)
    noise = np.exp(0.2 * _rng(3).normal(size=len(n)))
    inputs = [
        (n, 3.0 * n**-0.5, "errors = 3 n^(−1/2) exactly"),
        (n, 0.8 * n**-0.25 * noise, "noisy errors ≈ 0.8 n^(−1/4)"),
        (np.array([10.0, 1000.0]), np.array([0.5, 0.05]), "two points"),
    ]
    cases = [
        ((nn, e), f"n = {nn.astype(int).tolist()}, {name}") for nn, e, name in inputs
    ]
    for (nn, err), on, got in _answers(label, fn, cases, number="the slope"):
        expected = _pde.fit_rate(nn, err).slope
        lx, ly = np.log(nn), np.log(err)
        wrongs = [
            (
                np.polyfit(ly, lx, 1)[0],
                "the axes are swapped: regress log(errors) on log(n)",
            ),
            (
                np.polyfit(nn, err, 1)[0],
                "fit on log–log axes: take logarithms of n and errors",
            ),
            (
                (ly[-1] - ly[0]) / (lx[-1] - lx[0]),
                "use every point (least squares), not only the two end points",
            ),
            (-expected, "the sign: errors that decrease with n have a negative slope"),
        ]
        default = (
            "the slope is off: check the logarithms of both arrays, which one is on the "
            "horizontal axis, and that the fit is least squares over every point"
        )
        hint = _diagnose(got, expected, wrongs, default)
        assert_close(
            label, got, expected, on=on, hint=hint, what="the slope", rtol=1e-6
        )


# --- gaussians --------------------------------------------------------------------------------


@_exercise(
    "ex-gauss-moment-rhs",
    "a function softmax_moments(mean, cov, A, V)",
    reference=(
        "attnbook.pde.closed_forms.softmax_moment_rhs",
        "attnbook.pde.symbolic.moment_rhs",
    ),
    hints=(
        (
            "For a Gaussian, the softmax weights on the tokens are again Gaussian (an "
            "exponential tilt), so the velocity is affine in x and the mean and covariance "
            "obey closed ODEs."
        ),
        (
            "First find the mean of the tilted Gaussian as a function of x (the velocity is V "
            "times it); then the mean moves with the velocity at the mean, and the covariance "
            "with the velocity's Jacobian acting on both sides."
        ),
        (
            "Check that your covariance derivative is symmetric, and that with A full of "
            "zeros the covariance does not move while the mean moves with V."
        ),
    ),
)
def check_softmax_moments(fn, label) -> None:
    """(α', Σ') of the softmax Gaussian flow: V(I + ΣA)α and VΣAΣ + ΣAᵀΣVᵀ."""
    rng = _rng(4)
    inputs = [
        (
            rng.normal(size=2),
            _spd(2, 5),
            rng.normal(size=(2, 2)),
            rng.normal(size=(2, 2)),
        ),
        (
            rng.normal(size=3),
            _spd(3, 6),
            rng.normal(size=(3, 3)),
            rng.normal(size=(3, 3)),
        ),
        (np.zeros(2), _spd(2, 7), rng.normal(size=(2, 2)), np.eye(2)),
    ]
    cases = [(g, _shapes("", mean=g[0], cov=g[1], A=g[2], V=g[3])) for g in inputs]
    for (a, S, A, V), on in cases:
        out = call(label, fn, a.copy(), S.copy(), A.copy(), V.copy(), on=on)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            fail(
                label,
                f"expected a pair (mean', cov'), got {type(out).__name__}",
                on=on,
                hint="the answer is a pair (mean', cov'), the mean's derivative first",
            )
        dm, dS = (as_array(label, z, on=on) for z in out)
        em, eS = cf.softmax_moment_rhs(a, S, A, V)
        mean_wrongs = [
            (
                V @ (a + S @ A.T @ a),
                "the shift of the weights' mean uses Aᵀ where A belongs",
            ),
            (
                V @ S @ A @ a,
                (
                    "a term is missing: the tilted weights' mean contains α itself, so the "
                    "mean also moves with Vα"
                ),
            ),
        ]
        default = (
            "mean' is off: check the mean of the tilted weights (where A or Aᵀ enters) and "
            "the value matrix V"
        )
        hint = _diagnose(dm, em, mean_wrongs, default)
        assert_close(label, dm, em, on=on, hint=hint, what="mean'")
        cov_wrongs = [
            (
                V @ S @ A @ S,
                (
                    "Σ' must be symmetric and yours is not: the Jacobian acts on Σ from "
                    "both sides, so a transposed term is missing"
                ),
            ),
            (
                2 * V @ S @ A @ S,
                "you doubled one term: the second term is the transpose of the first",
            ),
            (
                V @ S @ A.T @ S + S @ A @ S @ V.T,
                "A and Aᵀ are swapped in cov': check where each enters the Jacobian",
            ),
        ]
        default = (
            "cov' is off: check the Jacobian of the velocity (it involves V, Σ and A) and "
            "that it acts on Σ from both sides"
        )
        hint = _diagnose(dS, eS, cov_wrongs, default)
        assert_close(label, dS, eS, on=on, hint=hint, what="cov'")


@_exercise(
    "ex-gauss-bures",
    "a function bures_w2(m1, S1, m2, S2)",
    reference=("attnbook.linalg.bures_wasserstein",),
    hints=(
        (
            "Look up how W₂ between two Gaussians depends on the means and on the covariances: "
            "the two contributions separate."
        ),
        (
            "The covariance part needs matrix square roots of symmetric positive matrices "
            "(psd_sqrt); work out from the formula in the chapter which matrices they are "
            "taken of, and in which order."
        ),
        (
            "Rounding can make a tiny squared distance negative; test on equal Gaussians and "
            "on two diagonal covariances, where every matrix root is a root of numbers you "
            "can take by hand."
        ),
    ),
)
def check_bures_w2(fn, label) -> None:
    """W₂ between N(m1, S1) and N(m2, S2) (Bures–Wasserstein)."""
    rng = _rng(8)
    S1 = _spd(2, 9)
    inputs = [
        (rng.normal(size=2), S1, rng.normal(size=2), _spd(2, 10), ""),
        (rng.normal(size=3), _spd(3, 11), np.zeros(3), _spd(3, 12), ""),
        (np.ones(2), S1, np.ones(2), S1.copy(), " (the same Gaussian twice: W₂ = 0)"),
    ]
    cases = [(g[:4], _shapes(g[4], m1=g[0], S1=g[1], m2=g[2], S2=g[3])) for g in inputs]
    for (m1, A1, m2, A2), on, got in _answers(label, fn, cases, number="W₂"):
        expected = float(linalg.bures_wasserstein(m1, A1, m2, A2))
        mean_sq = float(np.sum((m1 - m2) ** 2))
        naive = mean_sq + np.trace(
            A1 + A2 - 2 * linalg.psd_sqrt(A1) @ linalg.psd_sqrt(A2)
        )
        wrongs = [
            (expected**2, "that is W₂²: take the square root"),
            (
                math.sqrt(max(expected**2 - mean_sq, 0.0)),
                "add the squared distance of the means |m1 − m2|²",
            ),
            (
                math.sqrt(max(naive, 0.0)),
                (
                    "S1 and S2 need not commute: the product of their square roots is not "
                    "the nested root of the covariance part"
                ),
            ),
        ]
        hint = (
            "W₂² has a mean part and a covariance part; in the covariance part the square "
            "roots are nested: check their order"
        )
        if not math.isfinite(got):
            hint = (
                "for equal Gaussians the trace is 0 up to round-off and can be −1e-16: "
                "clip W₂² at 0 before the square root"
            )
        hint = _diagnose(got, expected, wrongs, hint)
        assert_close(label, got, expected, on=on, hint=hint, what="W₂", atol=1e-7)


# --- clustering-blowup ------------------------------------------------------------------------

_BLOWUP_INPUTS = [
    (np.array([[1.0, 0.3], [0.3, 0.5]]), np.array([[1.0, 0.5], [-0.2, 0.8]]), ""),
    (_spd(3, 14), _rng(13).normal(size=(3, 3)) + 0.5 * np.eye(3), ""),
]


@_exercise(
    "ex-blowup-time",
    "a function blowup_time(cov0, A)",
    reference=("attnbook.pde.closed_forms.identity_value_blowup_time",),
    hints=(
        (
            "Follow the exercise: the inverse covariance changes linearly in time, so the "
            "flow blows up when it first becomes singular."
        ),
        (
            "Conjugating with Σ₀^{1/2} turns the question into when I − tC stops being "
            "positive definite, for one symmetric matrix C: a question about C's eigenvalues."
        ),
        (
            "If no eigenvalue of C is positive, the flow never blows up (math.inf); test on a "
            "diagonal Σ₀ and a diagonal A, where each coordinate can be solved by hand."
        ),
    ),
)
def check_blowup_time(fn, label) -> None:
    """T* = 1/λ_max(Σ₀^{1/2}(A + Aᵀ)Σ₀^{1/2}) of the V = I softmax flow (``inf`` if ≤ 0)."""
    inputs = _BLOWUP_INPUTS + [
        (np.diag([4.0, 0.25]), np.array([[-1.0, 1.5], [-1.5, 0.5]]), " (a skew part)"),
        (_spd(2, 15), -np.eye(2), " (A = −I: the tokens cluster)"),
    ]
    cases = [((S0, A), _shapes(note, cov0=S0, A=A)) for S0, A, note in inputs]
    never = "when the flow never blows up the answer is math.inf (a number), not None"
    for (S0, A), on, got in _answers(label, fn, cases, number="T*", none_hint=never):
        expected = cf.identity_value_blowup_time(S0, A)
        if math.isinf(expected) and math.isinf(got) and got > 0:
            continue
        if math.isinf(expected) or math.isinf(got):
            fail(
                label,
                f"got T* = {got}, expected {expected:.6g}",
                on=on,
                hint="T* is math.inf exactly when the flow never blows up: check the sign "
                "of the eigenvalue that sets T*",
            )
        bound = np.linalg.eigvalsh(A + A.T).max() * np.linalg.eigvalsh(S0).max()
        wrongs = [
            (2 * expected, "the flow has A + Aᵀ (two terms), not A alone"),
            (
                1 / bound,
                (
                    "the product of the two largest eigenvalues is only a bound: T* comes "
                    "from one symmetric matrix that combines Σ₀ and A + Aᵀ"
                ),
            ),
        ]
        default = (
            "write the flow of Σ(t)⁻¹ (it is linear in t) and find the first t at which it "
            "stops being positive definite"
        )
        hint = _diagnose(got, expected, wrongs, default)
        assert_close(label, got, expected, on=on, hint=hint, what="T*")


def _blowup_direction(cov0, A) -> np.ndarray:
    r"""The limit of :math:`\Sigma(t)/\operatorname{tr}\Sigma(t)` as :math:`t \to T^*` (``V = I``).

    :math:`\Sigma(t) = R(I - tRBR)^{-1}R` with :math:`R = \Sigma_0^{1/2}`, :math:`B = A + A^\top`:
    the singular part is :math:`Rww^\top R/(1 - t\lambda_1)` for the top eigenpair
    :math:`(\lambda_1, w)` of :math:`RBR`, so the direction is :math:`Rww^\top R / w^\top\Sigma_0 w`.
    """
    S0, Am = np.asarray(cov0, float), np.asarray(A, float)
    R = linalg.psd_sqrt(S0)
    lam, U = np.linalg.eigh(R @ (Am + Am.T) @ R)
    if lam[-1] <= 0:
        raise ValueError("A + Aᵀ has no positive direction for this Σ₀: no blow-up")
    u = R @ U[:, -1]
    return np.outer(u, u) / (u @ u)


@_exercise(
    "ex-blowup-direction",
    "a function blowup_direction(cov0, A)",
    reference=(
        "attnbook.pde.closed_forms.identity_value_covariance",
        "attnbook.exercises.pde._blowup_direction",
    ),
    hints=(
        (
            "Use the closed form of Σ(t) from the blow-up time exercise: near T* one term of "
            "its eigen-expansion grows without bound and dominates the others."
        ),
        (
            "In the conjugated form, ask which eigenvalue of I − tC reaches zero first and "
            "along which vector the inverse then diverges; the conjugation changed "
            "coordinates, so bring that direction back to the original ones."
        ),
        (
            "Test on a diagonal Σ₀ and A, where you can follow each eigenvalue by hand, and "
            "compare with your closed-form Σ(t)/tr Σ(t) at a t slightly below T*."
        ),
    ),
)
def check_blowup_direction(fn, label) -> None:
    """The trace-normalised limit direction Σ(t)/tr Σ(t), t → T*, a (d, d) matrix."""
    inputs = _BLOWUP_INPUTS + [
        (np.diag([4.0, 0.25]), np.diag([0.2, 1.0]), " (A favours e₂, Σ₀ stretches e₁)"),
    ]
    cases = [((S0, A), _shapes(note, cov0=S0, A=A)) for S0, A, note in inputs]
    for (S0, A), on, got in _answers(label, fn, cases):
        expected = _blowup_direction(S0, A)
        wb = np.linalg.eigh(A + A.T)[1][:, -1]
        ws = np.linalg.eigh(S0)[1][:, -1]
        wrongs = [
            (
                np.outer(wb, wb),
                "Σ₀ matters: the top eigenvector of A + Aᵀ alone ignores it",
            ),
            (
                np.outer(ws, ws),
                "the top eigenvector of Σ₀ ignores A: the direction depends on both",
            ),
        ]
        hint = (
            "take the closed form of Σ(t) from the previous exercise and ask which term "
            "dominates as t → T*"
        )
        hint = _diagnose(got, expected, wrongs, hint)
        trace = np.trace(got) if got.shape == expected.shape else 1.0
        if abs(trace - 1) > 1e-6 and _same(got / trace, expected):
            hint = "normalise by the trace: the direction Σ/tr Σ has trace 1"
        flat = "the answer is the d × d limit matrix of Σ/tr Σ, not the vector it points along"
        tol = dict(shape_hint=flat, what="the direction", rtol=1e-6)
        assert_close(label, got, expected, on=on, hint=hint, **tol)


# --- gradient-flow ----------------------------------------------------------------------------


@_exercise(
    "ex-gf-energy",
    "a function interaction_energy(x, A)",
    reference=("attnbook.pde.particles.interaction_energy",),
    hints=(
        (
            "For the empirical measure the double integral becomes a double sum over pairs of "
            "tokens, each pair with mass 1/n²."
        ),
        (
            "All pair terms come from one kernel matrix of exponentials of ⟨A x_i, x_j⟩, with "
            "the tokens as rows of x and the diagonal included; mind the factor one half."
        ),
        (
            "Test with a single token, where the double sum has one term, and with A full of "
            "zeros (what is each pair term then?), comparing with a hand computation."
        ),
    ),
)
def check_interaction_energy(fn, label) -> None:
    """E(μ_n) = ½ (1/n²) Σ_ij exp⟨A x_i, x_j⟩ of a cloud ``x`` ``(n, d)``."""
    rng = _rng(18)
    inputs = [
        (rng.normal(size=(6, 2)), -np.eye(2), ""),
        (0.7 * rng.normal(size=(9, 3)), 0.5 * rng.normal(size=(3, 3)), ""),
        (np.array([[1.0, -0.5]]), np.array([[0.3, 0.2], [-0.1, 0.4]]), " (one token)"),
    ]
    cases = [((x, A), _shapes(note, x=x, A=A)) for x, A, note in inputs]
    for (x, A), on, got in _answers(label, fn, cases, number="E"):
        expected = float(_pde.interaction_energy(x, A=A))
        K, n = np.exp(x @ A.T @ x.T), len(x)
        wrongs = [
            (2 * expected, "the energy has the factor ½"),
            (
                n * expected,
                "μ_n has masses 1/n: the double sum is divided by n², not n",
            ),
            (
                (K.sum() - np.trace(K)) / (2 * n * n),
                "keep the diagonal terms (a token with itself): the double integral includes them",
            ),
        ]
        default = (
            "E is off: check the kernel of each pair, the masses 1/n of the tokens, the "
            "diagonal terms and the factor one half"
        )
        hint = _diagnose(got, expected, wrongs, default)
        assert_close(label, got, expected, on=on, hint=hint, what="E")


@_exercise(
    "ex-gf-energy-rate",
    "a function energy_rate(x, v, A)",
    reference=("attnbook.pde.gradient_flow.energy_rate",),
    hints=(
        (
            "By the chain rule dE/dt is the sum over tokens of ⟨∂E/∂x_i, v_i⟩: first find the "
            "gradient of E with respect to one token."
        ),
        (
            "x_i appears in the double sum both as the first and as the second argument; when "
            "A is not symmetric the two appearances give different terms, one with A and one "
            "with Aᵀ."
        ),
        (
            "Check your gradient against finite differences on two tokens in 2-D with a "
            "non-symmetric A before you multiply by the velocities."
        ),
    ),
)
def check_energy_rate(fn, label) -> None:
    """dE/dt = Σ_i ⟨∂E/∂x_i, v_i⟩ when the tokens move with velocities ``v`` ``(n, d)``."""
    rng = _rng(19)
    x1 = rng.normal(size=(7, 2))
    A1 = -np.eye(2) + 0.3 * np.array([[1.0, 0.4], [0.4, -0.5]])
    v1 = _pde.velocity(x1, kind="softmax", A=A1, V=np.eye(2))
    one = np.array([[0.5, 1.0]]), np.array([[1.0, -2.0]])
    inputs = [
        (x1, v1, A1, " (v the softmax velocity)"),
        (*rng.normal(size=(2, 5, 3)), rng.normal(size=(3, 3)), " (A not symmetric)"),
        (*one, np.array([[0.2, 0.7], [0.1, -0.3]]), " (one token)"),
    ]
    cases = [((x, v, A), _shapes(note, x=x, v=v, A=A)) for x, v, A, note in inputs]
    for (x, v, A), on, got in _answers(label, fn, cases, number="dE/dt"):
        expected = float(_pde.energy_rate(x, v, A=A))
        K, n = np.exp(x @ A.T @ x.T), len(x)  # K_ij = e^{<A x_i, x_j>}
        half = "x_i appears twice in the double sum (as x and as y): add both terms"
        wrongs = [
            (float(((K @ x) @ A * v).sum()) / (2 * n * n), half),
            (float(((K.T @ x) @ A.T * v).sum()) / (2 * n * n), half),
            (
                -expected,
                (
                    "the sign is flipped: by the chain rule the rate pairs the gradient "
                    "with the velocities, with no minus sign"
                ),
            ),
        ]
        default = (
            "dE/dt is off: check your gradient ∂E/∂x_i against finite differences (x_i "
            "enters each pair term twice), then pair it with the velocities"
        )
        hint = _diagnose(got, expected, wrongs, default)
        assert_close(label, got, expected, on=on, hint=hint, what="dE/dt", rtol=1e-8)
