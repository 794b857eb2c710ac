"""Checkers of Part III's coding exercises (book/pde: particles, mean-field, gaussians,
clustering-blowup, gradient-flow).

Every checker runs the student's function on NumPy inputs — a typical case, a second shape and
an edge case that a usual mistake gets wrong — and compares it with the package's tested
implementation (:mod:`attnbook.pde`, :mod:`attnbook.flows`, :mod:`attnbook.linalg`). Before a
plain "wrong value" it computes the usual wrong answers and names the one it sees in the hint.
"""

from __future__ import annotations

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


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _spd(d: int, seed: int) -> np.ndarray:
    G = _rng(seed).normal(size=(d, d))
    return G @ G.T / d + 0.3 * np.eye(d)


def _shapes(**arrays) -> str:
    return ", ".join(f"{k} of shape {np.shape(v)}" for k, v in arrays.items())


def _same(got, other, *, rtol=1e-7, atol=1e-9) -> bool:
    """``got`` equals the wrong answer ``other`` (same shape, all finite)."""
    g, o = np.asarray(got, float), np.asarray(other, float)
    return (
        g.shape == o.shape
        and bool(np.all(np.isfinite(g)))
        and np.allclose(g, o, rtol=rtol, atol=atol)
    )


def _row_softmax(S: np.ndarray, axis: int = -1) -> np.ndarray:
    E = np.exp(S - S.max(axis, keepdims=True))
    return E / E.sum(axis, keepdims=True)


def _scalar(label: str, value, *, on: str, what: str) -> float:
    arr = as_array(label, value, on=on, what=what)
    if arr.size != 1:
        fail(
            label,
            f"expected {what} (one number), got an array of shape {arr.shape}",
            on=on,
            hint="return a single float",
        )
    return float(arr.reshape(()))


# --- particles --------------------------------------------------------------------------------


@checker("ex-pde-velocity", what="a function softmax_velocity(x, A, V)")
def check_softmax_velocity(fn) -> None:
    """Γ(x_i) = Σ_j softmax_j(⟨A x_i, x_j⟩) V x_j for a cloud ``x`` ``(n, d)`` → ``(n, d)``."""
    label = "ex-pde-velocity"
    require_function(label, fn, "a function softmax_velocity(x, A, V)")
    rng = _rng(0)
    cases = [
        (rng.normal(size=(6, 2)), rng.normal(size=(2, 2)), rng.normal(size=(2, 2)), ""),
        (rng.normal(size=(5, 3)), rng.normal(size=(3, 3)), rng.normal(size=(3, 3)), ""),
        (
            30 * rng.normal(size=(4, 2)),
            np.eye(2) + 0.5 * rng.normal(size=(2, 2)),
            np.eye(2),
            " (a spread cloud: scores of several hundred)",
        ),
    ]
    for x, A, V, note in cases:
        on = _shapes(x=x, A=A, V=V) + note
        got = as_array(
            label, call(label, fn, x.copy(), A.copy(), V.copy(), on=on), on=on
        )
        expected = _pde.velocity(x, kind="softmax", A=A, V=V)
        P = _row_softmax(x @ A.T @ x.T)
        hint = "Γ(x_i) = Σ_j P_ij V x_j with P_ij = softmax over j of ⟨A x_i, x_j⟩"
        if not np.all(np.isfinite(got)):
            hint = (
                "exp of a large score overflows (inf/inf = NaN): subtract each row's "
                "maximum score before exponentiating"
            )
        elif _same(got, _row_softmax(x @ A.T @ x.T, axis=0) @ x @ V.T):
            hint = (
                "normalise each row (over the keys j, the last axis), not each column"
            )
        elif _same(got, _row_softmax(x @ A @ x.T) @ x @ V.T):
            hint = "the score is ⟨A x_i, x_j⟩ = x_j·(A x_i): with tokens as rows, x @ A.T @ x.T"
        elif _same(got, P @ x):
            hint = "apply the value matrix V to each x_j"
        elif _same(got, P @ x @ V):
            hint = "V x_j for the rows x_j is x @ V.T (not x @ V)"
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
    return [
        (x + h * k1, "that is Euler's step x + h f(x): RK4 evaluates f four times"),
        (x + h * k2, "that is the midpoint rule (RK2): RK4 has four stages"),
        (
            x + h * (k1 + k2 + k3 + k4) / 4,
            "weight the stages 1, 2, 2, 1 and divide by 6",
        ),
        (
            x + h / 6 * (k1 + 2 * j2 + 2 * j3 + field(x + h * j3)),
            "the 2nd and 3rd stages are taken at half steps: f(x + h/2 k1), f(x + h/2 k2)",
        ),
    ]


@checker("ex-pde-rk4-step", what="a function rk4_step(x, field, step_size)")
def check_rk4_step(fn) -> None:
    """One classical Runge–Kutta step of dx/dt = field(x) of size ``step_size``."""
    label = "ex-pde-rk4-step"
    require_function(label, fn, "a function rk4_step(x, field, step_size)")
    rng = _rng(1)
    M = rng.normal(size=(2, 2))
    A, V = rng.normal(size=(2, 2)), np.eye(2) + 0.3 * rng.normal(size=(2, 2))

    def linear(y):
        return y @ M.T

    def softmax_field(y):
        return _pde.velocity(y, kind="softmax", A=A, V=V)

    def cubic(y):
        return -(y**3)

    cases = [
        (rng.normal(size=(5, 2)), linear, 0.3, "field(x) = x @ M.T (linear)"),
        (
            rng.normal(size=(8, 2)),
            softmax_field,
            0.2,
            "softmax velocity of pde.velocity",
        ),
        (np.array([[2.0], [-1.5], [0.5]]), cubic, 0.25, "field(x) = −x³ (stiff-ish)"),
    ]
    for x, field, h, name in cases:
        on = f"x of shape {x.shape}, {name}, step_size = {h}"
        got = as_array(label, call(label, fn, x.copy(), field, h, on=on), on=on)
        expected = _rk4_reference(field, x, h)
        hint = "k1 = f(x), k2 = f(x + h/2 k1), k3 = f(x + h/2 k2), k4 = f(x + h k3); x + h/6 (k1 + 2k2 + 2k3 + k4)"
        for wrong, why in _rk_wrong(field, x, h):
            if _same(got, wrong) and not _same(got, expected):
                hint = why
                break
        assert_close(label, got, expected, on=on, hint=hint, what="the new positions")


# --- mean-field -------------------------------------------------------------------------------


@checker("ex-mf-w2-1d", what="a function w2_1d(x, y)")
def check_w2_1d(fn) -> None:
    """Exact W₂ between two 1-D empirical measures with ``n`` equal-mass atoms each."""
    label = "ex-mf-w2-1d"
    require_function(label, fn, "a function w2_1d(x, y)")
    rng = _rng(2)
    x1 = rng.normal(size=40)
    cases = [
        (rng.normal(size=7), 1.0 + 2.0 * rng.normal(size=7), ""),
        (x1, x1[::-1] + 0.5, " (y is x shifted by 0.5, listed in reverse order)"),
        (x1, rng.permutation(x1), " (y is a permutation of x: the same measure)"),
    ]
    for x, y, note in cases:
        on = _shapes(x=x, y=y) + note
        got = _scalar(
            label, call(label, fn, x.copy(), y.copy(), on=on), on=on, what="W₂"
        )
        expected = _pde.w2_particles(x[:, None], y[:, None])
        sq = np.mean((np.sort(x) - np.sort(y)) ** 2)
        hint = "W₂² = (1/n) Σ_i (x_(i) − y_(i))² with both samples sorted (the monotone coupling)"
        if math.isclose(
            got, math.sqrt(np.mean((x - y) ** 2)), rel_tol=1e-9
        ) and not math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12):
            hint = (
                "sort both samples first: in 1-D the optimal plan matches them in order"
            )
        elif math.isclose(got, sq, rel_tol=1e-9) and sq > 0:
            hint = "that is W₂²: take the square root"
        elif math.isclose(got, math.sqrt(len(x) * sq), rel_tol=1e-9) and sq > 0:
            hint = "each atom has mass 1/n: average the squared gaps, do not sum them"
        assert_close(
            label, got, expected, on=on, hint=hint, what="W₂", rtol=1e-9, atol=1e-12
        )


@checker("ex-mf-rate", what="a function fit_slope(n, errors)")
def check_fit_slope(fn) -> None:
    """The least-squares slope of log(errors) against log(n) (the rate exponent)."""
    label = "ex-mf-rate"
    require_function(label, fn, "a function fit_slope(n, errors)")
    n = 2.0 ** np.arange(4, 11)
    noise = np.exp(0.2 * _rng(3).normal(size=len(n)))
    cases = [
        (n, 3.0 * n**-0.5, "errors = 3 n^(−1/2) exactly"),
        (n, 0.8 * n**-0.25 * noise, "noisy errors ≈ 0.8 n^(−1/4)"),
        (np.array([10.0, 1000.0]), np.array([0.5, 0.05]), "two points"),
    ]
    for nn, err, name in cases:
        on = f"n = {nn.astype(int).tolist()}, {name}"
        got = _scalar(
            label,
            call(label, fn, nn.copy(), err.copy(), on=on),
            on=on,
            what="the slope",
        )
        expected = _pde.fit_rate(nn, err).slope
        lx, ly = np.log(nn), np.log(err)
        hint = "fit log(errors) = log c + slope · log n by least squares (np.polyfit(..., 1))"
        if math.isclose(
            got, np.polyfit(ly, lx, 1)[0], rel_tol=1e-6
        ) and not math.isclose(got, expected, rel_tol=1e-6):
            hint = "the axes are swapped: regress log(errors) on log(n)"
        elif math.isclose(got, np.polyfit(nn, err, 1)[0], rel_tol=1e-6):
            hint = "fit on log–log axes: take the logarithms of n and of the errors"
        elif math.isclose(
            got, (ly[-1] - ly[0]) / (lx[-1] - lx[0]), rel_tol=1e-9
        ) and not math.isclose(got, expected, rel_tol=1e-6):
            hint = "use every point (least squares), not only the two end points"
        elif math.isclose(got, -expected, rel_tol=1e-6):
            hint = "the sign: errors that decrease with n have a negative slope"
        assert_close(
            label,
            got,
            expected,
            on=on,
            hint=hint,
            what="the slope",
            rtol=1e-6,
            atol=1e-9,
        )


# --- gaussians --------------------------------------------------------------------------------


@checker("ex-gauss-moment-rhs", what="a function softmax_moments(mean, cov, A, V)")
def check_softmax_moments(fn) -> None:
    """(α', Σ') of the softmax Gaussian flow: V(I + ΣA)α and VΣAΣ + ΣAᵀΣVᵀ."""
    label = "ex-gauss-moment-rhs"
    require_function(label, fn, "a function softmax_moments(mean, cov, A, V)")
    rng = _rng(4)
    cases = [
        (
            rng.normal(size=2),
            _spd(2, 5),
            rng.normal(size=(2, 2)),
            rng.normal(size=(2, 2)),
            "",
        ),
        (
            rng.normal(size=3),
            _spd(3, 6),
            rng.normal(size=(3, 3)),
            rng.normal(size=(3, 3)),
            "",
        ),
        (np.zeros(2), _spd(2, 7), rng.normal(size=(2, 2)), np.eye(2), " (zero mean)"),
    ]
    for a, S, A, V, note in cases:
        on = _shapes(mean=a, cov=S, A=A, V=V) + note
        out = call(label, fn, a.copy(), S.copy(), A.copy(), V.copy(), on=on)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            fail(
                label,
                f"expected a pair (mean', cov'), got {type(out).__name__}",
                on=on,
                hint="return dmean, dcov",
            )
        dm, dS = (as_array(label, z, on=on) for z in out)
        em, eS = cf.softmax_moment_rhs(a, S, A, V)
        hint = "α' = V(I + ΣA)α (the mean is pulled by the weights' shift ΣAα)"
        if _same(dm, V @ (a + S @ A.T @ a)) and not _same(dm, em):
            hint = "the shift of the weights is ΣAα (A, not Aᵀ)"
        elif _same(dm, V @ S @ A @ a) and not _same(dm, em):
            hint = (
                "the mean also moves with Vα (the softmax average of V x is V(α + ΣAα))"
            )
        assert_close(label, dm, em, on=on, hint=hint, what="mean'")
        hint = "Σ' = JΣ + ΣJᵀ with J = VΣA: VΣAΣ + ΣAᵀΣVᵀ"
        if _same(dS, V @ S @ A @ S):
            hint = "Σ' must be symmetric: add the transpose ΣAᵀΣVᵀ of VΣAΣ"
        elif _same(dS, 2 * V @ S @ A @ S) or _same(
            dS, V @ S @ A.T @ S + S @ A @ S @ V.T
        ):
            hint = "the two terms are VΣAΣ and its transpose ΣAᵀΣVᵀ"
        assert_close(label, dS, eS, on=on, hint=hint, what="cov'")


@checker("ex-gauss-bures", what="a function bures_w2(m1, S1, m2, S2)")
def check_bures_w2(fn) -> None:
    """W₂ between N(m1, S1) and N(m2, S2) (Bures–Wasserstein)."""
    label = "ex-gauss-bures"
    require_function(label, fn, "a function bures_w2(m1, S1, m2, S2)")
    rng = _rng(8)
    S1 = _spd(2, 9)
    cases = [
        (rng.normal(size=2), S1, rng.normal(size=2), _spd(2, 10), ""),
        (rng.normal(size=3), _spd(3, 11), np.zeros(3), _spd(3, 12), ""),
        (np.ones(2), S1, np.ones(2), S1.copy(), " (the same Gaussian twice: W₂ = 0)"),
    ]
    for m1, A1, m2, A2, note in cases:
        on = _shapes(m1=m1, S1=A1, m2=m2, S2=A2) + note
        got = _scalar(
            label,
            call(label, fn, m1.copy(), A1.copy(), m2.copy(), A2.copy(), on=on),
            on=on,
            what="W₂",
        )
        expected = float(linalg.bures_wasserstein(m1, A1, m2, A2))
        R1, R2 = linalg.psd_sqrt(A1), linalg.psd_sqrt(A2)
        mean_sq = float(np.sum((m1 - m2) ** 2))
        hint = "W₂² = |m1 − m2|² + tr(S1 + S2 − 2 (S1^{1/2} S2 S1^{1/2})^{1/2})"
        if not math.isfinite(got):
            hint = (
                "for equal Gaussians the trace is 0 up to round-off and can be −1e-16: "
                "clip W₂² at 0 before the square root"
            )
        elif math.isclose(got, expected**2, rel_tol=1e-7) and expected > 0:
            hint = "that is W₂²: take the square root"
        elif math.isclose(
            got, math.sqrt(max(expected**2 - mean_sq, 0.0)), rel_tol=1e-7
        ):
            hint = "add the squared distance of the means |m1 − m2|²"
        else:
            naive = mean_sq + np.trace(A1 + A2 - 2 * R1 @ R2)
            if math.isclose(got, math.sqrt(max(naive, 0.0)), rel_tol=1e-7):
                hint = (
                    "S1 and S2 need not commute: the cross term is "
                    "(S1^{1/2} S2 S1^{1/2})^{1/2}, not S1^{1/2} S2^{1/2}"
                )
        assert_close(
            label, got, expected, on=on, hint=hint, what="W₂", rtol=1e-6, atol=1e-7
        )


# --- clustering-blowup ------------------------------------------------------------------------


@checker("ex-blowup-time", what="a function blowup_time(cov0, A)")
def check_blowup_time(fn) -> None:
    """T* = 1/λ_max(Σ₀^{1/2}(A + Aᵀ)Σ₀^{1/2}) of the V = I softmax flow (``inf`` if ≤ 0)."""
    label = "ex-blowup-time"
    require_function(label, fn, "a function blowup_time(cov0, A)")
    rng = _rng(13)
    cases = [
        (np.array([[1.0, 0.3], [0.3, 0.5]]), np.array([[1.0, 0.5], [-0.2, 0.8]]), ""),
        (_spd(3, 14), rng.normal(size=(3, 3)) + 0.5 * np.eye(3), ""),
        (
            np.diag([4.0, 0.25]),
            np.diag([-1.0, 0.5]) + np.array([[0, 1.5], [-1.5, 0]]),
            "",
        ),
        (_spd(2, 15), -np.eye(2), " (A = −I: the tokens cluster)"),
    ]
    for S0, A, note in cases:
        on = _shapes(cov0=S0, A=A) + note
        got = _scalar(
            label, call(label, fn, S0.copy(), A.copy(), on=on), on=on, what="T*"
        )
        expected = cf.identity_value_blowup_time(S0, A)
        B = A + A.T
        hint = "Σ(t)⁻¹ = Σ₀⁻¹ − t(A + Aᵀ): T* = 1/λ_max(Σ₀^{1/2}(A + Aᵀ)Σ₀^{1/2})"
        if math.isinf(expected):
            if math.isfinite(got):
                hint = "no eigenvalue is positive: Σ never blows up, return math.inf"
            else:
                continue
        elif math.isclose(got, 2 * expected, rel_tol=1e-7):
            hint = "the flow has A + Aᵀ (two terms), not A alone"
        elif math.isclose(
            got,
            1 / (np.linalg.eigvalsh(B).max() * np.linalg.eigvalsh(S0).max()),
            rel_tol=1e-7,
        ):
            hint = (
                "λ_max(B)·λ_max(Σ₀) is only a bound: take λ_max of Σ₀^{1/2} B Σ₀^{1/2}"
            )
        if math.isinf(got) != math.isinf(expected):
            fail(label, f"got T* = {got}, expected {expected:.6g}", on=on, hint=hint)
        assert_close(label, got, expected, on=on, hint=hint, what="T*", rtol=1e-7)


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


@checker("ex-blowup-direction", what="a function blowup_direction(cov0, A)")
def check_blowup_direction(fn) -> None:
    """The trace-normalised limit direction Σ(t)/tr Σ(t), t → T*, a (d, d) matrix."""
    label = "ex-blowup-direction"
    require_function(label, fn, "a function blowup_direction(cov0, A)")
    rng = _rng(16)
    cases = [
        (np.array([[1.0, 0.3], [0.3, 0.5]]), np.array([[1.0, 0.5], [-0.2, 0.8]]), ""),
        (_spd(3, 17), rng.normal(size=(3, 3)) + 0.5 * np.eye(3), ""),
        (np.diag([4.0, 0.25]), np.diag([0.2, 1.0]), " (A favours e₂, Σ₀ stretches e₁)"),
    ]
    for S0, A, note in cases:
        on = _shapes(cov0=S0, A=A) + note
        got = as_array(label, call(label, fn, S0.copy(), A.copy(), on=on), on=on)
        expected = _blowup_direction(S0, A)
        hint = "Σ(t) = R(I − tRBR)⁻¹R (R = Σ₀^{1/2}, B = A + Aᵀ): Rwwᵀ R / tr, w the top eigenvector of RBR"
        if got.shape == (len(S0),):
            hint = "return the d × d matrix Σ/tr Σ (the outer product u uᵀ/|u|²), not the vector"
        elif got.shape == expected.shape and np.all(np.isfinite(got)):
            wb = np.linalg.eigh(A + A.T)[1][:, -1]
            ws = np.linalg.eigh(S0)[1][:, -1]
            if abs(np.trace(got) - 1) > 1e-6 and _same(got / np.trace(got), expected):
                hint = "normalise by the trace: the direction Σ/tr Σ has trace 1"
            elif _same(got, np.outer(wb, wb)):
                hint = "Σ₀ matters: the top eigenvector of A + Aᵀ alone ignores it"
            elif _same(got, np.outer(ws, ws)):
                hint = "the top eigenvector of Σ₀ ignores A: use R(A + Aᵀ)R"
        assert_close(
            label,
            got,
            expected,
            on=on,
            hint=hint,
            shape_hint="return the d × d matrix Σ/tr Σ (u uᵀ/|u|²), not the vector u",
            what="the direction",
            rtol=1e-6,
            atol=1e-8,
        )


# --- gradient-flow ----------------------------------------------------------------------------


@checker("ex-gf-energy", what="a function interaction_energy(x, A)")
def check_interaction_energy(fn) -> None:
    """E(μ_n) = ½ (1/n²) Σ_ij exp⟨A x_i, x_j⟩ of a cloud ``x`` ``(n, d)``."""
    label = "ex-gf-energy"
    require_function(label, fn, "a function interaction_energy(x, A)")
    rng = _rng(18)
    cases = [
        (rng.normal(size=(6, 2)), -np.eye(2), ""),
        (0.7 * rng.normal(size=(9, 3)), 0.5 * rng.normal(size=(3, 3)), ""),
        (np.array([[1.0, -0.5]]), np.array([[0.3, 0.2], [-0.1, 0.4]]), " (one token)"),
    ]
    for x, A, note in cases:
        on = _shapes(x=x, A=A) + note
        got = _scalar(
            label, call(label, fn, x.copy(), A.copy(), on=on), on=on, what="E"
        )
        expected = float(_pde.interaction_energy(x, A=A))
        K = np.exp(x @ A.T @ x.T)
        n = len(x)
        hint = "E = ½ ∬ e^{⟨Ax, y⟩} dμ dμ = (1/2n²) Σ_i Σ_j e^{⟨A x_i, x_j⟩}"
        if math.isclose(got, 2 * expected, rel_tol=1e-9):
            hint = "the energy has the factor ½"
        elif n > 1 and math.isclose(got, n * expected, rel_tol=1e-9):
            hint = "μ_n has masses 1/n: the double sum is divided by n², not n"
        elif n > 1 and math.isclose(
            got, (K.sum() - np.trace(K)) / (2 * n * n), rel_tol=1e-9
        ):
            hint = "keep the terms i = j: the double integral includes the diagonal"
        assert_close(label, got, expected, on=on, hint=hint, what="E", rtol=1e-9)


@checker("ex-gf-energy-rate", what="a function energy_rate(x, v, A)")
def check_energy_rate(fn) -> None:
    """dE/dt = Σ_i ⟨∂E/∂x_i, v_i⟩ when the tokens move with velocities ``v`` ``(n, d)``."""
    label = "ex-gf-energy-rate"
    require_function(label, fn, "a function energy_rate(x, v, A)")
    rng = _rng(19)
    x1 = rng.normal(size=(7, 2))
    A1 = -np.eye(2) + 0.3 * np.array([[1.0, 0.4], [0.4, -0.5]])
    cases = [
        (
            x1,
            _pde.velocity(x1, kind="softmax", A=A1, V=np.eye(2)),
            A1,
            " (v the softmax velocity)",
        ),
        (
            rng.normal(size=(5, 3)),
            rng.normal(size=(5, 3)),
            rng.normal(size=(3, 3)),
            " (A not symmetric)",
        ),
        (
            np.array([[0.5, 1.0]]),
            np.array([[1.0, -2.0]]),
            np.array([[0.2, 0.7], [0.1, -0.3]]),
            " (one token)",
        ),
    ]
    for x, v, A, note in cases:
        on = _shapes(x=x, v=v, A=A) + note
        got = _scalar(
            label,
            call(label, fn, x.copy(), v.copy(), A.copy(), on=on),
            on=on,
            what="dE/dt",
        )
        expected = float(_pde.energy_rate(x, v, A=A))
        n = len(x)
        K = np.exp(x @ A.T @ x.T)  # K_ij = e^{<A x_i, x_j>}
        g_first = (K @ x) @ A / (2 * n * n)  # only the terms where x_i is the query
        g_second = (K.T @ x) @ A.T / (2 * n * n)
        hint = (
            "∂E/∂x_i = (1/2n²) Σ_j [e^{⟨Ax_i,x_j⟩} Aᵀx_j + e^{⟨Ax_j,x_i⟩} A x_j]: "
            "x_i appears as query and as key"
        )
        if math.isclose(got, float((g_first * v).sum()), rel_tol=1e-9) or math.isclose(
            got, float((g_second * v).sum()), rel_tol=1e-9
        ):
            hint = "x_i appears twice in the double sum (as x and as y): add both terms"
        elif math.isclose(got, -expected, rel_tol=1e-9):
            hint = "the sign: dE/dt = + Σ_i ⟨∂E/∂x_i, v_i⟩"
        assert_close(
            label, got, expected, on=on, hint=hint, what="dE/dt", rtol=1e-8, atol=1e-12
        )
