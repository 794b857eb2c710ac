r"""SymPy derivations of the Gaussian moment equations of the Transformer PDE.

If the velocity field is affine on a Gaussian, :math:`\Gamma_\mu(x) = b + Jx` for
:math:`\mu = N(\alpha, \Sigma)`, the flow :math:`\dot x = b + Jx` pushes Gaussians to Gaussians
and

.. math::  \dot\alpha = b + J\alpha = \Gamma_\mu(\alpha), \qquad \dot\Sigma = J\Sigma + \Sigma J^\top .

So each attention kind reduces to one computation: the mean of :math:`y \sim N(\alpha,\Sigma)`
re-weighted by the kernel :math:`k(x, y)` — a Gaussian integral.

* softmax, :math:`k = e^{\langle Ax, y\rangle}`: the tilted mean is the gradient of the
  log-moment-generating function :math:`\Lambda(u) = u^\top\alpha + \tfrac12 u^\top\Sigma u`
  at :math:`u = Ax`.
* linear, :math:`k = \langle Ax, y\rangle` (unnormalised): :math:`\int y y^\top d\mu\,Ax` with
  :math:`\int yy^\top d\mu = \nabla^2\Lambda(0) + \nabla\Lambda(0)\nabla\Lambda(0)^\top`.
* ℓ², :math:`k = e^{-|Qx-Ky|^2}`: the product with the density is a Gaussian in :math:`y`;
  completing the square gives its mean :math:`P^{-1}c(x)` with :math:`P = -\nabla_y^2(\cdot)`.
* Sinkhorn: a Gaussian plan with cross-covariance :math:`C` whose density has the cross term
  :math:`\langle Ax, y\rangle`; block inversion gives the matrix equation
  :math:`J_0 + J_0\Sigma J_0^\top A = \Sigma A` for :math:`J_0 = C^\top\Sigma^{-1}`, solved in
  closed form (SymPy solves the scalar case; the matrix root is verified numerically).

Matrices are SymPy ``MatrixSymbol`` of symbolic size, so one derivation serves every dimension;
``lambdify`` turns the results into NumPy functions (:func:`moment_rhs`) that
:mod:`attnbook.pde.gaussian` integrates with SciPy, and the tests compare with the hand-written
formulas of :mod:`attnbook.pde.closed_forms`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np
import sympy as sp

from ..device import as_generator
from ..linalg import psd_sqrt
from ..validation import check_choice

__all__ = [
    "GAUSSIAN_KINDS",
    "Derivation",
    "derive_moment_equations",
    "moment_rhs",
    "scalar_softmax_integral",
    "scalar_sinkhorn_solution",
    "sinkhorn_cross_term",
    "sinkhorn_cross_covariance",
    "sinkhorn_fixed_point_residual",
    "affine_pushforward",
]

GAUSSIAN_KINDS = ("softmax", "l2", "sinkhorn", "linear")

d, k = sp.symbols("d k", integer=True, positive=True)
alpha = sp.MatrixSymbol("alpha", d, 1)
Sigma = sp.MatrixSymbol("Sigma", d, d)
A = sp.MatrixSymbol("A", d, d)
V = sp.MatrixSymbol("V", d, d)
Q = sp.MatrixSymbol("Q", k, d)
K = sp.MatrixSymbol("K", k, d)
x = sp.MatrixSymbol("x", d, 1)
y = sp.MatrixSymbol("y", d, 1)
u = sp.MatrixSymbol("u", d, 1)
J0 = sp.MatrixSymbol("J_0", d, d)
I_d = sp.Identity(d)
I_k = sp.Identity(k)
_A_SYM = A  # functions below take a NumPy argument named A

# Sigma is a covariance: symmetric (and, where inverted, invertible).
_SYMMETRIC = {
    Sigma.T: Sigma,
    sp.Inverse(Sigma).T: sp.Inverse(Sigma),
    sp.Inverse(Sigma.T): sp.Inverse(Sigma),
}


def _sym(expr):
    return expr.xreplace(_SYMMETRIC)


def _jacobian(vec, wrt):
    """Jacobian of a column-vector expression (SymPy's ``diff`` is in denominator layout)."""
    return _sym(vec.diff(wrt)).T


@dataclass
class Derivation:
    """The result of a derivation: velocity on the Gaussian and the moment equations.

    ``steps`` lists ``(explanation, expression)`` pairs for display in the book.
    """

    kind: str
    velocity: sp.MatrixExpr  #: Γ_μ(x) on μ = N(α, Σ), affine in x
    jacobian: sp.MatrixExpr  #: J = ∂Γ/∂x
    mean_rhs: sp.MatrixExpr  #: α' = Γ_μ(α)
    cov_rhs: sp.MatrixExpr  #: Σ' = JΣ + ΣJᵀ
    steps: list = field(default_factory=list)
    arguments: tuple = ()  #: symbols the lambdified function takes, in order

    def _repr_latex_(self) -> str:
        return (
            r"$\dot\alpha = "
            + sp.latex(self.mean_rhs)
            + r",\quad \dot\Sigma = "
            + sp.latex(self.cov_rhs)
            + "$"
        )


def affine_pushforward():
    r"""Moments under :math:`\dot x = b + Jx`: :math:`\dot\alpha = b + J\alpha`, :math:`\dot\Sigma = J\Sigma + \Sigma J^\top`.

    With :math:`Z = X - \alpha`, :math:`\dot Z = JZ`, so :math:`\frac{d}{dt}ZZ^\top = JZZ^\top + ZZ^\top J^\top`;
    taking expectations replaces :math:`ZZ^\top` by :math:`\Sigma`. Returns
    ``(d/dt ZZᵀ, mean_rhs, cov_rhs)`` (the last obtained from the first by that substitution).
    """
    b = sp.MatrixSymbol("b", d, 1)
    J = sp.MatrixSymbol("J", d, d)
    Z = sp.MatrixSymbol("Z", d, 1)
    ZZ = sp.MatrixSymbol("ZZ^T", d, d)  # stands for the product Z Zᵀ
    dZZ = (J * Z) * Z.T + Z * (J * Z).T
    cov = sp.MatAdd(J * ZZ, ZZ * J.T).xreplace({ZZ: Sigma})
    return dZZ, b + J * alpha, cov


def _softmax_tilted_mean():
    # log-MGF of N(alpha, Sigma); the softmax-weighted mean is its gradient at u = A x.
    Lam = u.T * alpha + u.T * Sigma * u / 2
    grad = _sym(Lam.diff(u))
    return Lam, grad, _sym(grad.xreplace({u: A * x}))


def derive_moment_equations(kind: str) -> Derivation:
    """Derive :math:`\\Gamma_\\mu` on :math:`N(\\alpha,\\Sigma)` and the moment ODEs for ``kind``."""
    check_choice(kind, "kind", GAUSSIAN_KINDS)
    steps = []
    if kind == "softmax":
        Lam, grad, m = _softmax_tilted_mean()
        steps += [
            ("log-MGF Λ(u) = log E e^{⟨u,Y⟩}", Lam),
            ("tilted mean ∇Λ(u) (Σ symmetric)", sp.simplify(grad)),
            ("at u = Ax: E_k[Y | x]", m),
        ]
        vel = V * m
        args = (alpha, Sigma, A, V)
    elif kind == "linear":
        Lam = u.T * alpha + u.T * Sigma * u / 2
        grad = _sym(Lam.diff(u))
        hess = _sym(grad.diff(u))
        zero = sp.ZeroMatrix(d, 1)
        second = sp.simplify(
            hess.xreplace({u: zero})
            + grad.xreplace({u: zero}) * grad.xreplace({u: zero}).T
        )
        steps += [("second moment E[YYᵀ] = ∇²Λ(0) + ∇Λ(0)∇Λ(0)ᵀ", second)]
        vel = V * second * A * x
        args = (alpha, Sigma, A, V)
    elif kind == "l2":
        expo = (
            -(Q * x - K * y).T * (Q * x - K * y)
            - (y - alpha).T * sp.Inverse(Sigma) * (y - alpha) / 2
        )
        grad = _sym(expo.diff(y))
        P = sp.simplify(-_sym(grad.diff(y)))
        c = sp.simplify(grad.xreplace({y: sp.ZeroMatrix(d, 1)}).doit())
        # Multiply P and c by Sigma on the left so that no Sigma^{-1} remains (Sigma may be singular).
        SP = sp.expand(Sigma * P)
        Sc = sp.expand(Sigma * c)
        m = sp.Inverse(SP) * Sc
        # (ΣP)⁻¹ = (I + 2ΣKᵀK)⁻¹ is a d×d inverse of a matrix as ill-conditioned as Σ: once
        # Σ has grown to 1e9 its round-off swamps the small directions of Σ' (relative error
        # 1e-8 of the largest entry). The push-through identity (I + 2ΣKᵀK)ΣKᵀ = ΣKᵀ(I + 2KΣKᵀ)
        # moves the inverse onto the k×k matrix I + 2KΣKᵀ ⪰ I, which is never ill-conditioned.
        W = sp.Inverse(I_k + 2 * K * Sigma * K.T)
        m_push = alpha + 2 * Sigma * K.T * W * (Q * x - K * alpha)
        steps += [
            ("exponent of kernel × density, in y", expo),
            ("its gradient: c(x) − P y", grad),
            ("precision P = −∇²", P),
            ("c(x) = gradient at y = 0", c),
            ("mean P⁻¹c = (ΣP)⁻¹(Σc)", m),
            ("push-through (I + 2ΣKᵀK)⁻¹ΣKᵀ = ΣKᵀ(I + 2KΣKᵀ)⁻¹: a k×k inverse", m_push),
        ]
        vel = V * m_push
        args = (alpha, Sigma, Q, K, V)
    else:  # sinkhorn
        eq = sinkhorn_cross_term()
        steps += [
            ("plan cross term ⟨Ax, y⟩ ⇔ block-inverse condition on J₀ = CᵀΣ⁻¹", eq),
            ("scalar solution (SymPy solve)", scalar_sinkhorn_solution()[1]),
        ]
        vel = V * (alpha + J0 * (x - alpha))
        args = (alpha, Sigma, J0, V)
    J = _jacobian(vel, x)
    mean_rhs = _sym(vel.xreplace({x: alpha}))
    if kind == "sinkhorn":
        mean_rhs = V * alpha  # J_0 (alpha - alpha) = 0: the mean decouples
    cov_rhs = _sym(_sym(J * Sigma + Sigma * J.T).xreplace({(Sigma * K.T).T: K * Sigma}))
    steps += [
        ("velocity Γ(x) on the Gaussian", vel),
        ("Jacobian J", J),
        ("α' = Γ(α)", mean_rhs),
        ("Σ' = JΣ + ΣJᵀ", cov_rhs),
    ]
    # fields in declaration order: kind, velocity, jacobian, mean_rhs, cov_rhs, steps, arguments
    return Derivation(kind, vel, J, mean_rhs, cov_rhs, steps, args)


@cache
def _lambdified(kind: str):
    der = derive_moment_equations(kind)
    # NumPy printing needs a concrete identity: pass it in as an extra argument.
    eye, eye_k = sp.MatrixSymbol("I_d", d, d), sp.MatrixSymbol("I_k", k, k)
    exprs = tuple(
        e.xreplace({I_d: eye, I_k: eye_k}) for e in (der.mean_rhs, der.cov_rhs)
    )
    return sp.lambdify(der.arguments + (eye, eye_k), exprs, modules="numpy")


def sinkhorn_cross_covariance(cov: np.ndarray, A: np.ndarray) -> np.ndarray:
    r""":math:`C^\top = J_0\Sigma = 2\Sigma A\Sigma^{1/2}(I + M^{1/2})^{-1}\Sigma^{1/2}` (no Σ⁻¹: Σ may be singular)."""
    R = psd_sqrt(cov)
    M = np.eye(len(cov)) + 4 * R @ A.T @ cov @ A @ R
    return 2 * cov @ A @ R @ np.linalg.solve(np.eye(len(cov)) + psd_sqrt(M), R)


def moment_rhs(
    kind: str, mean: np.ndarray, cov: np.ndarray, *, A=None, V=None, Q=None, K=None
):
    r"""``(α', Σ')`` of one head, from the lambdified SymPy derivation (NumPy float64).

    ``A`` for softmax, linear and Sinkhorn; ``Q, K`` (``(k, d)``) for ℓ². For Sinkhorn the
    cross-covariance :math:`C^\top = J_0\Sigma` is computed by the closed-form matrix root
    (:func:`sinkhorn_fixed_point_residual` checks it solves the derived equation), and
    :math:`\Sigma' = VC^\top + CV^\top`, :math:`\alpha' = V\alpha` — written without
    :math:`\Sigma^{-1}` so that singular covariances are allowed.
    """
    check_choice(kind, "kind", GAUSSIAN_KINDS)
    a = np.asarray(mean, dtype=float).reshape(-1, 1)
    S = np.asarray(cov, dtype=float)
    if kind == "l2":
        dm, dS = _lambdified(kind)(
            a,
            S,
            np.asarray(Q, float),
            np.asarray(K, float),
            np.asarray(V, float),
            np.eye(len(S)),
            np.eye(np.shape(K)[0]),
        )
    elif kind == "sinkhorn":
        Vm = np.asarray(V, float)
        CT = sinkhorn_cross_covariance(S, np.asarray(A, float))
        dm, dS = Vm @ a, Vm @ CT + CT.T @ Vm.T
    else:
        dm, dS = _lambdified(kind)(
            a, S, np.asarray(A, float), np.asarray(V, float), np.eye(len(S)), np.eye(1)
        )
    return np.asarray(dm, float).reshape(-1), np.asarray(dS, float)


def sinkhorn_cross_term():
    r"""The equation for :math:`J_0` from block inversion of the plan's covariance.

    The plan :math:`\pi` has marginals :math:`N(\alpha,\Sigma)` and covariance
    :math:`\begin{pmatrix}\Sigma & C\\ C^\top & \Sigma\end{pmatrix}`; its log-density's cross
    term is :math:`x^\top\Sigma^{-1}CS^{-1}y` with :math:`S = \Sigma - C^\top\Sigma^{-1}C`, and
    must equal :math:`\langle Ax, y\rangle = x^\top A^\top y`. With :math:`C = \Sigma J_0^\top`
    this reads :math:`J_0^\top = A^\top(\Sigma - J_0\Sigma J_0^\top)`, i.e. returned as the
    matrix expression that must vanish: :math:`J_0 + J_0\Sigma J_0^\top A - \Sigma A`.
    """
    C = Sigma * J0.T
    S = Sigma - C.T * sp.Inverse(Sigma) * C
    cross = sp.Inverse(Sigma) * C * sp.Inverse(S)  # must equal A^T
    # cross = A^T  <=>  C = Sigma A^T S  <=>  J0^T = A^T S  (left-multiply by Sigma^{-1})
    cond = _sym(
        sp.expand((sp.Inverse(Sigma) * (Sigma * A.T * S)).T)
    )  # = S A (Σ, S symmetric)
    residual = sp.expand(J0 - _sym(cond).xreplace({S.T: S}))
    del cross
    return residual


def sinkhorn_fixed_point_residual(cov: np.ndarray, A: np.ndarray) -> float:
    """Relative residual of the closed-form :math:`J_0` in the derived equation (Σ ≻ 0)."""
    S = np.asarray(cov, float)
    Am = np.asarray(A, float)
    J = sinkhorn_cross_covariance(S, Am) @ np.linalg.inv(S)
    f = sp.lambdify((J0, Sigma, _A_SYM), sinkhorn_cross_term(), modules="numpy")
    return float(np.linalg.norm(f(J, S, Am)) / max(np.linalg.norm(S @ Am), 1e-300))


def scalar_sinkhorn_solution():
    r"""Scalar Sinkhorn: solve :math:`j + j\sigma^2 j a = \sigma^2 a` for the root with :math:`j \to \sigma^2 a` as :math:`a\to 0`.

    Returns ``(j, rhs)`` with ``rhs`` :math:`= (\sigma^2)' = 2 v j \sigma^2
    = v(\sqrt{1 + 4a^2\sigma^4} - 1)/a`.
    """
    j, s2, a, v = sp.symbols("j sigma2 a v", real=True)
    s2 = sp.Symbol("sigma2", positive=True)
    sols = sp.solve(sp.Eq(j + j * s2 * j * a, s2 * a), j)
    # pick the branch that is analytic at a = 0 (the other one diverges like -1/(a σ²))
    root = [r for r in sols if sp.limit(r, a, 0) == 0][0]
    return sp.simplify(root), sp.simplify(2 * v * root * s2)


def scalar_softmax_integral():
    r"""Scalar softmax by direct integration: :math:`\int e^{axy} y\,N(y;\alpha,\sigma^2)dy / \int e^{axy} N dy`.

    SymPy evaluates both Gaussian integrals; the ratio simplifies to :math:`\alpha + a\sigma^2 x`.
    Returns ``(numerator, denominator, ratio)``.
    """
    yy, xx, a = sp.symbols("y x a", real=True)
    al = sp.Symbol("alpha", real=True)
    s = sp.Symbol("sigma", positive=True)
    dens = sp.exp(-((yy - al) ** 2) / (2 * s**2)) / sp.sqrt(2 * sp.pi * s**2)
    num = sp.integrate(
        sp.exp(a * xx * yy) * yy * dens, (yy, -sp.oo, sp.oo), conds="none"
    )
    den = sp.integrate(sp.exp(a * xx * yy) * dens, (yy, -sp.oo, sp.oo), conds="none")
    return sp.simplify(num), sp.simplify(den), sp.simplify(num / den)


def _roundoff_scales(kind, a, S, *, A=None, V=None, Q=None, K=None):
    """Size of the terms that round-off acts on, for the mean and for Σ's right-hand side:
    each closed form evaluated on the absolute values of its inputs (the denominator of the
    componentwise error bound of a product chain), times the condition number of the matrix
    the ℓ² forms invert (the hand form inverts I + 2ΣKᵀK, SymPy's push-through I + 2KΣKᵀ)."""
    ab = np.abs
    if kind == "softmax":
        return (
            (ab(V) @ (ab(a) + ab(S) @ ab(A) @ ab(a))).max(),
            (2 * ab(V) @ ab(S) @ ab(A) @ ab(S)).max(),
        )
    if kind == "linear":
        J = ab(V) @ (ab(S) + np.outer(ab(a), ab(a))) @ ab(A)
        return (J @ ab(a)).max(), (2 * J @ ab(S)).max()
    d = len(S)
    M, W = np.eye(d) + 2 * S @ K.T @ K, np.eye(len(K)) + 2 * K @ S @ K.T
    kM, kW = np.linalg.cond(M), np.linalg.cond(W)
    Mi, Wi = ab(np.linalg.inv(M)), ab(np.linalg.inv(W))
    SK = ab(S) @ ab(K).T
    mean = (
        kM * (ab(V) @ Mi @ (ab(a) + 2 * SK @ ab(Q) @ ab(a))).max()
        + kW * (ab(V) @ (ab(a) + 2 * SK @ Wi @ (ab(K) + ab(Q)) @ ab(a))).max()
    )
    cov = (
        kM * (4 * ab(V) @ Mi @ SK @ ab(Q) @ ab(S)).max()
        + kW * (4 * ab(V) @ SK @ Wi @ ab(Q) @ ab(S)).max()
    )
    return mean, cov


def closed_form_gaps(
    seed, dims=range(1, 6), *, in_roundoff_units: bool = False
) -> dict[str, float]:
    r"""Largest gap between the lambdified SymPy moment equations and the hand-typed closed
    forms of :mod:`attnbook.pde.closed_forms` (softmax, ℓ², linear) on random inputs.

    The gap is the max of the absolute mean error and the relative covariance error over
    ``dims``. With ``in_roundoff_units`` each gap is divided by its float64 round-off bound
    before the max: twice (two evaluations, each in error) Higham's :math:`\gamma_n = nu`
    for the :math:`n = 3d + 4` inner dimensions of the longest product, times the size of the
    terms (the forms evaluated on absolute values, times the condition number of an inverted
    matrix). Without an inverse (softmax, linear) the bound is rigorous. Random inputs can
    nearly cancel (a d = 1 draw with :math:`K^\top Q` 6600 times smaller than
    :math:`|K|^\top|Q|`), so a fixed bound on the plain gap holds only for the seeds it was
    set at; in these units a correct formula stays below 1 and a wrong one, off by the
    terms' own size, is off by :math:`1/(2nu)` or more. Sinkhorn is not included: its
    right-hand side uses the closed-form root itself (checked by
    :func:`sinkhorn_fixed_point_residual` and against POT in the tests).
    """
    from . import closed_forms as cf

    if not isinstance(in_roundoff_units, bool):
        raise TypeError("in_roundoff_units must be a bool")
    rng = as_generator(seed, numpy=True)
    u = np.finfo(float).eps / 2
    worst = {"softmax": 0.0, "l2": 0.0, "linear": 0.0}
    for dim in dims:
        B = rng.normal(size=(dim, dim))
        S = B @ B.T / dim + 0.3 * np.eye(dim)
        a, A, V = (
            rng.normal(size=dim),
            rng.normal(size=(dim, dim)),
            rng.normal(size=(dim, dim)),
        )
        Q, K = rng.normal(size=(2, dim)), rng.normal(size=(2, dim))
        inputs = {
            "softmax": {"A": A, "V": V},
            "l2": {"Q": Q, "K": K, "V": V},
            "linear": {"A": A, "V": V},
        }
        hand = {
            "softmax": cf.softmax_moment_rhs(a, S, A, V),
            "l2": cf.l2_moment_rhs(a, S, Q, K, V),
            "linear": cf.linear_moment_rhs(a, S, A, V),
        }
        for kd, (m2, S2) in hand.items():
            m1, S1 = moment_rhs(kd, a, S, **inputs[kd])
            gap_m, gap_S = np.abs(m1 - m2).max(), np.abs(S1 - S2).max()
            if in_roundoff_units:
                scale_m, scale_S = _roundoff_scales(kd, a, S, **inputs[kd])
                n_u = 2 * (3 * dim + 4) * u  # two evaluations, each within γ_n
                gap = max(gap_m / (n_u * scale_m), gap_S / (n_u * scale_S))
            else:
                gap = max(gap_m, gap_S / np.abs(S2).max())
            worst[kd] = max(worst[kd], float(gap))
    return worst


def display_steps(derivation: Derivation) -> None:
    """Show a derivation's steps one per line as LaTeX (in a notebook)."""
    from IPython.display import Math, display

    for text, expr in derivation.steps:
        display(
            Math(r"\text{" + text.replace("_", r"\_") + r"}:\quad " + sp.latex(expr))
        )
