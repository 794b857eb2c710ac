r"""Stage-by-stage theory of the population flow: closed forms and their SymPy derivations.

The four-stage story (condensation, focus, dilution, symmetry breaking) is the paper's
(Chen, Lin, Xu, Luo, *Focus and Dilution*, arXiv 2605.01199, ICML 2026 — known to us through a
summary only). The formulas below are **our reconstruction** for the model of
:mod:`attnbook.focus.population`; each is derived symbolically here and checked numerically
in the tests (autograd Jacobians, finite differences, the integrated flow).

Stage I (origin). With :math:`\Phi = 0`, :math:`\partial_M L|_0 = -\pi b^\top`,
:math:`b = \pi - \tfrac1d\mathbf 1`, so the linearised flow is :math:`\dot W_0 = \pi b^\top W_1^\top`,
:math:`\dot W_1^\top = b\pi^\top W_0`: one unstable mode :math:`W_0 \propto \pi\alpha^\top`,
:math:`W_1\propto \alpha b^\top` with rate :math:`\|\pi\|\,\|b\|`; attention gets no gradient.

Stage II (saddle :math:`\theta_c^1`). :math:`W_0 = g\pi\alpha^\top`, :math:`W_1 = \alpha\beta^\top`,
:math:`W_Q = W_K = 0`, :math:`g\|\pi\|^2\beta = \tilde\ell := \log\pi - \overline{\log\pi}\,\mathbf 1`,
:math:`g^2 = \|\tilde\ell\|/\|\pi\|^3` (balanced norms). There :math:`\mathrm{softmax}(M^\top\pi) = \pi`.
For the lazy chain the attention block has the single unstable rate

.. math:: c = \frac{\lambda\,\|\tilde\ell\|\, S_3\, T}{\|\pi\|^5},\quad
          S_3 = \textstyle\sum\pi^3 - (\sum\pi^2)^2,\quad T = \sum_q \pi_q^2(\log\pi_q + H(\pi)).

Stage III (rank-one manifold). :math:`W_0 = \gamma\alpha^\top`, :math:`W_1 = \alpha\beta^\top`,
:math:`W_{Q,K} = \lambda_{Q,K}\,\alpha\tilde\alpha^\top` (:math:`\|\alpha\|=\|\tilde\alpha\|=1`) is invariant;
:math:`M = \gamma\beta^\top`, :math:`\Phi = \lambda_Q\lambda_K\gamma\gamma^\top`, and the flow reduces
to the gradient flow of :math:`L(\gamma,\beta,\lambda_Q,\lambda_K)` (:func:`reduced_ode`).

Stage IV (leaving the manifold). :func:`plateau_instability` gives the rank-one plateau's
transverse rate (of order :math:`\delta` near :math:`\delta = 0`). At :math:`\delta = 0` the
symmetric plateau can also be unstable **along** the manifold: :func:`symmetric_plateau` returns
its curvature against moving the rare tokens apart, which changes sign with the laziness
(measured numerically; no closed form here).
"""

from __future__ import annotations

import numbers
from functools import lru_cache

import numpy as np
import sympy as sp
import torch

from ..linalg import entropy
from ..markov import as_probability_vector
from ..validation import as_tensor, check_finite, check_positive_int
from .population import Params

__all__ = [
    "condensation_directions",
    "condensation_rate",
    "attention_growth_rate",
    "saddle_point",
    "log_ratio_vector",
    "origin_linearisation",
    "condensation_rate_symbolic_d",
    "saddle_attention_block",
    "reduced_ode",
    "reduced_to_params",
    "project_rank_one",
    "rank_one_minimum",
    "rank_one_lowest_minimum",
    "rank_one_orbits",
    "solve_reduced",
    "plateau_instability",
    "symmetric_plateau",
]


# ----------------------------------------------------------------------------- closed forms
def _pi(pi, positive=False):
    p = as_probability_vector(pi, "pi")
    if p.shape[-1] < 2:
        raise ValueError("pi must have at least two entries")
    if positive and bool((p <= 0).any()):
        raise ValueError("pi must be strictly positive (log pi enters the formula)")
    return p


def condensation_directions(pi) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The stage-I condensation vectors :math:`(\pi/\|\pi\|,\; b/\|b\|)`, :math:`b = \pi - \tfrac1d\mathbf 1`.

    :math:`W_0`'s column space aligns with the first, :math:`W_1`'s row space with the second.
    Batched over leading dimensions of ``pi``. A uniform ``pi`` has no condensation direction
    (``b = 0``; the origin is then a critical point of the loss) and raises ``ValueError``.
    """
    p = _pi(pi)
    b = p - 1.0 / p.shape[-1]
    nb = b.norm(dim=-1, keepdim=True)
    if bool((nb < 1e-12).any()):
        raise ValueError(
            "pi is uniform: b = pi - 1/d vanishes and there is no condensation direction"
        )
    return p / p.norm(dim=-1, keepdim=True), b / nb


def condensation_rate(pi) -> torch.Tensor:
    r"""Growth rate :math:`\|\pi\|\,\|\pi - \tfrac1d\mathbf 1\|` of the unstable mode at the origin."""
    p = _pi(pi)
    return p.norm(dim=-1) * (p - 1.0 / p.shape[-1]).norm(dim=-1)


def log_ratio_vector(pi) -> torch.Tensor:
    r""":math:`\tilde\ell = \log\pi - \mathrm{mean}(\log\pi)\mathbf 1` (the saddle's logits)."""
    lp = torch.log(_pi(pi, positive=True))
    return lp - lp.mean(-1, keepdim=True)


def attention_growth_rate(pi, lam) -> torch.Tensor:
    r"""Rate :math:`c = \lambda\|\tilde\ell\| S_3 T/\|\pi\|^5` of the unstable attention mode at the saddle
    :math:`\theta_c^1` for ``lazy_chain(pi, lam)`` (reconstructed; see the module docstring).

    ``pi`` (..., d) strictly positive; ``lam`` a number or array broadcastable to the batch,
    ``0 <= lam < 1``. Returns a tensor of the broadcast batch shape. (``c = 0`` for uniform pi.)
    """
    p = _pi(pi, positive=True)
    if isinstance(lam, numbers.Real) and not isinstance(lam, bool):
        lam_t = torch.tensor(float(lam), dtype=p.dtype)
    else:
        lam_t = as_tensor(lam, "lam", dtype=p.dtype, device=p.device)
    check_finite(lam_t, "lam")
    if bool(((lam_t < 0) | (lam_t >= 1)).any()):
        raise ValueError("lam must satisfy 0 <= lam < 1")
    ell = log_ratio_vector(p)
    s2 = (p**2).sum(-1)
    S3 = (p**3).sum(-1) - s2**2
    H = entropy(p)
    T = (p**2 * (torch.log(p) + H[..., None])).sum(-1)
    return lam_t * ell.norm(dim=-1) * S3 * T / p.norm(dim=-1) ** 5


def saddle_point(pi, m: int, *, alpha=None) -> Params:
    r"""The saddle :math:`\theta_c^1` (balanced): :math:`W_0 = g\pi\alpha^\top`, :math:`W_1 = \alpha\beta^\top`,
    :math:`W_Q = W_K = 0` with :math:`g^2 = \|\tilde\ell\|/\|\pi\|^3`, :math:`\beta = \tilde\ell/(g\|\pi\|^2)`.

    ``alpha`` is a direction in :math:`\mathbb R^m` (normalised here; default :math:`e_1`).
    """
    p = _pi(pi, positive=True)
    if p.dim() != 1:
        raise ValueError("saddle_point takes a single pi (d,)")
    m = check_positive_int(m, "m")
    if alpha is None:
        a = torch.zeros(m, dtype=p.dtype)
        a[0] = 1.0
    else:
        a = as_tensor(alpha, "alpha", dtype=p.dtype)
        if a.shape != (m,):
            raise ValueError(f"alpha must have shape ({m},), got {tuple(a.shape)}")
        if float(a.norm()) == 0:
            raise ValueError("alpha must be non-zero")
        a = a / a.norm()
    ell = log_ratio_vector(p)
    n = p.norm()
    if float(ell.norm()) == 0:
        raise ValueError("pi is uniform: the saddle is the origin")
    g = torch.sqrt(ell.norm() / n**3)
    beta = ell / (g * n**2)
    z = torch.zeros(m, m, dtype=p.dtype)
    return Params(g * torch.outer(p, a), torch.outer(a, beta), z, z.clone())


# ----------------------------------------------------------------------------- SymPy
def _symbols(d: int):
    d = check_positive_int(d, "d", minimum=2)
    pis = sp.symbols(f"pi0:{d}", positive=True)
    return d, sp.Matrix(pis)


def _loss_symbolic(M, Phi, pi, P, rows=None):
    """L = sum_q pi_q [ -P_q . z_q + log sum_j exp z_qj ], z_q = M^T w_q, w_q ∝ pi_k e^{Phi_qk}
    (summed over the query tokens in ``rows``, default all)."""
    d = pi.shape[0]
    L = 0
    for q in range(d) if rows is None else rows:
        e = [pi[k] * sp.exp(Phi[q, k]) for k in range(d)]
        Z = sum(e)
        w = sp.Matrix([ek / Z for ek in e])
        z = M.T * w
        L += pi[q] * (
            -(P[q, :] * z)[0, 0] + sp.log(sum(sp.exp(z[j]) for j in range(d)))
        )
    return L


@lru_cache(maxsize=8)
def origin_linearisation(d: int) -> dict:
    r"""Stage I in SymPy for a given ``d`` with symbolic :math:`\pi` and laziness :math:`\lambda`.

    Returns a dict with

    * ``grad_M`` — :math:`\partial_M L` at the origin (derived by differentiating the loss, then
      using :math:`\sum\pi = 1`), equal to :math:`-\pi b^\top`;
    * ``grad_Phi`` — :math:`\partial_\Phi L` at :math:`M = 0` (identically zero: attention is frozen);
    * ``K`` — the :math:`2d\times 2d` matrix of the linearised flow on one column pair
      :math:`(W_0\alpha, W_1^\top\alpha)`; ``rate`` :math:`\|\pi\|\|b\|`; ``mode`` its eigenvector
      :math:`(\|b\|\pi, \|\pi\| b)`; ``residual`` :math:`K\,\text{mode} - \text{rate}\cdot\text{mode}`
      (simplifies to zero);
    * ``symbols`` — ``(pi, lam)``.
    """
    d, pi = _symbols(d)
    lam = sp.Symbol("lam", nonnegative=True)
    Msym = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"M{i}{j}"))
    Phis = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"F{i}{j}"))
    P = lam * sp.eye(d) + (1 - lam) * sp.ones(d, 1) * pi.T
    L = _loss_symbolic(Msym, Phis, pi, P)
    at0 = {**{s: 0 for s in Msym}, **{s: 0 for s in Phis}}
    on_simplex = {pi[-1]: 1 - sum(pi[:-1])}
    grad_M = sp.Matrix(
        d,
        d,
        lambda i, j: sp.simplify(sp.diff(L, Msym[i, j]).xreplace(at0).subs(on_simplex)),
    )
    at_M0 = {s: 0 for s in Msym}
    grad_Phi = sp.Matrix(
        d, d, lambda i, j: sp.simplify(sp.diff(L, Phis[i, j]).xreplace(at_M0))
    )
    b = pi - sp.ones(d, 1) / d
    K = sp.zeros(2 * d, 2 * d)
    K[:d, d:] = pi * b.T
    K[d:, :d] = b * pi.T
    npi, nb = sp.sqrt((pi.T * pi)[0, 0]), sp.sqrt((b.T * b)[0, 0])
    mode = sp.Matrix.vstack(nb * pi, npi * b)
    residual = sp.simplify(K * mode - npi * nb * mode)
    expected = (-pi * b.T).subs(on_simplex)
    return {
        "grad_M": grad_M,
        "grad_M_expected": expected,
        "grad_Phi": grad_Phi,
        "K": K,
        "rate": npi * nb,
        "mode": mode,
        "residual": residual,
        "symbols": (pi, lam),
    }


def condensation_rate_symbolic_d() -> dict:
    r"""The stage-I rate for **symbolic** ``d``: :math:`\|b\|^2 = \sum_i\pi_i^2 - 1/d` on the simplex.

    Uses SymPy sums over an indexed :math:`\pi_i`, :math:`i = 1..d`; returns ``norm_b_sq`` (the
    expanded sum with :math:`\sum_i \pi_i = 1` substituted), ``rate`` and the symbols.
    """
    d = sp.Symbol("d", positive=True, integer=True)
    i = sp.Symbol("i", integer=True, positive=True)
    pi = sp.IndexedBase("pi")
    raw = sp.Sum((pi[i] - 1 / d) ** 2, (i, 1, d))
    # split the sum term by term (linearity), pull constants out, then use sum_i pi_i = 1
    terms = sp.Add.make_args(sp.expand((pi[i] - 1 / d) ** 2))
    total = sum(sp.factor_terms(sp.Sum(t, (i, 1, d)).doit()) for t in terms)
    total = sp.simplify(total.subs(sp.Sum(pi[i], (i, 1, d)), 1))
    s2 = sp.Sum(pi[i] ** 2, (i, 1, d))
    return {
        "d": d,
        "pi": pi,
        "i": i,
        "norm_b_sq_raw": raw,
        "norm_b_sq": total,
        "rate": sp.sqrt(s2) * sp.sqrt(total),
    }


@lru_cache(maxsize=8)
def saddle_attention_block(d: int) -> dict:
    r"""Stage II in SymPy: the attention gradient :math:`G^0 = \partial_\Phi L` at the saddle and the
    rate of the attention mode, for symbolic :math:`\pi` (``d`` given) and laziness :math:`\lambda`.

    At :math:`\theta_c^1` (:math:`M^* = \pi\tilde\ell^\top/\|\pi\|^2`, :math:`\Phi = 0`) the linearised
    attention flow is :math:`\dot W_Q = -\kappa\,\alpha\alpha^\top W_K`,
    :math:`\dot W_K = -\kappa\,\alpha\alpha^\top W_Q` with :math:`\kappa = g^2\,\pi^\top G^0\pi`, so the
    unstable rate is :math:`c = |\kappa|` (mode :math:`W_Q = \pm W_K = \alpha v^\top`).

    Returns ``G0`` (matrix), ``kappa``, ``rate_derived`` (:math:`-\kappa`), ``rate_closed_form``
    (the formula of :func:`attention_growth_rate`), ``numeric`` — a function
    ``(pi_values, lam) -> (rate_derived, rate_closed_form)`` made with ``lambdify`` — ``precise``,
    the same pair in ``digits``-digit mpmath arithmetic with ``pi_values`` renormalised to sum
    to one in that precision (``(pi_values, lam, digits=50)``), and symbols.

    The two expressions agree on the simplex only: off it (a float64 law sums to one within
    an ulp) their difference is amplified by the cancellations in :math:`S_3` and :math:`T`,
    to a relative 1e-11 for nearly uniform laws. ``precise`` removes both errors.
    """
    d, pi = _symbols(d)
    lam = sp.Symbol("lam", nonnegative=True)
    P = lam * sp.eye(d) + (1 - lam) * sp.ones(d, 1) * pi.T
    logs = sp.Matrix([sp.log(x) for x in pi])
    ell = logs - sp.ones(d, 1) * (sum(logs) / d)
    n2 = (pi.T * pi)[0, 0]
    Mstar = pi * ell.T / n2
    Phis = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"F{i}{j}"))
    # only query q's term of the loss depends on row q of Phi: differentiate it alone
    L_rows = [_loss_symbolic(Mstar, Phis, pi, P, rows=[q]) for q in range(d)]
    at0 = {s: 0 for s in Phis}
    G0 = sp.Matrix(d, d, lambda i, j: sp.diff(L_rows[i], Phis[i, j]).xreplace(at0))
    g2 = sp.sqrt((ell.T * ell)[0, 0]) / n2 ** sp.Rational(3, 2)
    kappa = g2 * (pi.T * G0 * pi)[0, 0]
    H = -sum(x * sp.log(x) for x in pi)
    S3 = sum(x**3 for x in pi) - n2**2
    T = sum(x**2 * (sp.log(x) + H) for x in pi)
    closed = lam * sp.sqrt((ell.T * ell)[0, 0]) * S3 * T / n2 ** sp.Rational(5, 2)
    f = sp.lambdify((list(pi), lam), [-kappa, closed], "numpy")
    f_mp = sp.lambdify((list(pi), lam), [-kappa, closed], "mpmath")

    def _law(pi_values):
        pv = np.asarray(pi_values, dtype=float)
        if pv.shape != (d,) or abs(pv.sum() - 1) > 1e-12 or np.any(pv <= 0):
            raise ValueError(
                f"pi_values must be a positive probability vector of length {d}"
            )
        return pv

    def numeric(pi_values, lam_value):
        a, b = f(list(_law(pi_values)), float(lam_value))
        return float(a), float(b)

    def precise(pi_values, lam_value, digits: int = 50):
        import mpmath

        pv = _law(pi_values)
        digits = check_positive_int(digits, "digits", minimum=16)
        with mpmath.workdps(digits):
            pm = [mpmath.mpf(float(v)) for v in pv]
            total = mpmath.fsum(pm)
            return tuple(f_mp([v / total for v in pm], mpmath.mpf(float(lam_value))))

    return {
        "G0": G0,
        "kappa": kappa,
        "rate_derived": -kappa,
        "rate_closed_form": closed,
        "numeric": numeric,
        "precise": precise,
        "symbols": (pi, lam),
    }


@lru_cache(maxsize=8)
def reduced_ode(d: int) -> dict:
    r"""Stage III in SymPy: the gradient flow restricted to the rank-one invariant manifold.

    Coordinates :math:`(\gamma\in\mathbb R^d, \beta\in\mathbb R^d, \lambda_Q, \lambda_K)`;
    :math:`M = \gamma\beta^\top`, :math:`\Phi = \lambda_Q\lambda_K\gamma\gamma^\top`. Because the embedding
    :math:`(\gamma,\beta,\lambda_Q,\lambda_K)\mapsto(W_0,W_1,W_Q,W_K)` is an isometry onto the manifold
    and the manifold is invariant, the full flow restricted to it is the gradient flow of the
    reduced loss :math:`L_r`; SymPy differentiates :math:`L_r` for symbolic π and a general chain P.

    Returns ``loss`` (expression), ``rhs`` (list of :math:`-\partial L_r` in the order
    γ, β, λ_Q, λ_K), ``numeric`` — ``(y, P) -> dy/dt`` via ``lambdify`` (``y`` packed as
    ``[γ, β, λ_Q, λ_K]``, π taken as P's stationary law) — and the symbols.
    """
    d = check_positive_int(d, "d", minimum=2)
    gam = sp.Matrix(sp.symbols(f"gamma0:{d}", real=True))
    bet = sp.Matrix(sp.symbols(f"beta0:{d}", real=True))
    lq, lk = sp.symbols("lambda_Q lambda_K", real=True)
    pi = sp.Matrix(sp.symbols(f"pi0:{d}", positive=True))
    P = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"P{i}{j}", nonnegative=True))
    M = gam * bet.T
    Phi = lq * lk * gam * gam.T
    L = _loss_symbolic(M, Phi, pi, P)
    coords = list(gam) + list(bet) + [lq, lk]
    rhs = [-sp.diff(L, c) for c in coords]
    # common-subexpression elimination: the gradient repeats the softmax terms many times
    f = sp.lambdify((coords, list(pi), list(P)), rhs, "numpy", cse=True)
    floss = sp.lambdify((coords, list(pi), list(P)), L, "numpy", cse=True)

    def numeric(y, P_value):
        from ..markov import stationary

        Pv = as_tensor(P_value, "P", dtype=torch.float64)
        piv = stationary(Pv).numpy()
        yv = np.asarray(y, dtype=float)
        if yv.shape != (2 * d + 2,):
            raise ValueError(
                f"y must have 2d+2 = {2 * d + 2} entries, got shape {yv.shape}"
            )
        return np.asarray(f(list(yv), list(piv), list(Pv.numpy().ravel())), dtype=float)

    def numeric_loss(y, P_value):
        from ..markov import stationary

        Pv = as_tensor(P_value, "P", dtype=torch.float64)
        return float(
            floss(
                list(np.asarray(y, float)),
                list(stationary(Pv).numpy()),
                list(Pv.numpy().ravel()),
            )
        )

    return {
        "loss": L,
        "rhs": rhs,
        "coords": coords,
        "numeric": numeric,
        "numeric_loss": numeric_loss,
        "symbols": (gam, bet, lq, lk, pi, P),
    }


def reduced_to_params(y, m: int, *, alpha=None, alpha_tilde=None) -> Params:
    r"""Map reduced coordinates ``y = [γ, β, λ_Q, λ_K]`` to the full parameters
    :math:`W_0 = \gamma\alpha^\top`, :math:`W_1 = \alpha\beta^\top`,
    :math:`W_{Q,K} = \lambda_{Q,K}\alpha\tilde\alpha^\top`."""
    yv = as_tensor(y, "y", dtype=torch.float64)
    if yv.dim() != 1 or yv.shape[0] < 6 or (yv.shape[0] - 2) % 2:
        raise ValueError("y must be a vector [gamma (d), beta (d), lambda_Q, lambda_K]")
    d = (yv.shape[0] - 2) // 2
    m = check_positive_int(m, "m", minimum=2)

    def unit(v, k, name):
        if v is None:
            u = torch.zeros(m, dtype=torch.float64)
            u[k] = 1.0
            return u
        u = as_tensor(v, name, dtype=torch.float64)
        if u.shape != (m,) or float(u.norm()) == 0:
            raise ValueError(f"{name} must be a non-zero vector of length {m}")
        return u / u.norm()

    a, at = unit(alpha, 0, "alpha"), unit(alpha_tilde, 1, "alpha_tilde")
    gam, bet, lq, lk = yv[:d], yv[d : 2 * d], yv[2 * d], yv[2 * d + 1]
    return Params(
        torch.outer(gam, a),
        torch.outer(a, bet),
        lq * torch.outer(a, at),
        lk * torch.outer(a, at),
    )


def rank_one_params(y) -> Params:
    r"""The ``m = 1`` weights of reduced coordinates ``y = [γ, β, λ_Q, λ_K]``:
    :math:`W_0 = \gamma`, :math:`W_1 = \beta^\top`, :math:`W_Q = \lambda_Q`, :math:`W_K = \lambda_K`.

    With one embedding dimension every weight is rank one, so the loss of these weights is the
    loss on the rank-one manifold and its Hessian (:func:`attnbook.focus.population_hessian`)
    is the Hessian **along** the manifold (the tangential directions), for any ``m``.
    """
    t = torch.as_tensor(np.asarray(y, float))
    if t.ndim != 1 or t.numel() < 6 or t.numel() % 2:
        raise ValueError("y must be a vector [gamma (d), beta (d), lambda_Q, lambda_K]")
    d = (t.numel() - 2) // 2
    return Params(
        t[:d, None].clone(),
        t[None, d : 2 * d].clone(),
        t[2 * d].reshape(1, 1).clone(),
        t[2 * d + 1].reshape(1, 1).clone(),
    )


def project_rank_one(params) -> np.ndarray:
    r"""Reduced coordinates ``[γ, β, λ_Q, λ_K]`` of the rank-one point nearest to ``params``.

    :math:`\alpha` is :math:`W_0`'s top right singular vector, :math:`\gamma = W_0\alpha`,
    :math:`\beta = W_1^\top\alpha`, :math:`\lambda_Q = |W_Q^\top\alpha|` and
    :math:`\lambda_K = (W_K^\top\alpha)\cdot\tilde\alpha` with
    :math:`\tilde\alpha = W_Q^\top\alpha/\lambda_Q`, so that :math:`\Phi` restricted to
    :math:`\alpha` is preserved exactly. Use with :func:`reduced_to_params` and
    :func:`reduced_ode`.
    """
    W0, W1, WQ, WK = (np.asarray(x, float) for x in params)
    if W0.ndim != 2:
        raise ValueError(
            "project_rank_one takes one parameter set (W0 of shape (d, m))"
        )
    alpha = np.linalg.svd(W0)[2][0]
    q_dir, k_dir = WQ.T @ alpha, WK.T @ alpha
    nq = float(np.linalg.norm(q_dir))
    if nq == 0:
        return np.concatenate([W0 @ alpha, W1.T @ alpha, [0.0, 0.0]])
    return np.concatenate([W0 @ alpha, W1.T @ alpha, [nq, float(k_dir @ q_dir) / nq]])


def _check_reduced(y, name) -> np.ndarray:
    y = np.asarray(y, float)
    if y.ndim != 1 or y.size < 6 or y.size % 2:
        raise ValueError(
            f"{name} must be a vector [gamma (d), beta (d), lambda_Q, lambda_K]"
        )
    return y


def _minimise_rank_one(P, y0, basis=None) -> tuple[float, np.ndarray]:
    """L-BFGS on the rank-one loss over ``y = basis @ z`` (all of ``y`` if no basis)."""
    import scipy.optimize

    from .population import population_gradient

    d = (y0.size - 2) // 2
    Pt = as_tensor(P, "P", dtype=torch.float64)
    if Pt.shape != (d, d):
        raise ValueError(f"P must be {d}x{d} to match start, got {tuple(Pt.shape)}")
    B = np.eye(y0.size) if basis is None else basis

    def fun(z):
        loss, g = population_gradient(*rank_one_params(B @ z), Pt, return_loss=True)
        flat = np.concatenate([g.W0[:, 0], g.W1[0], g.WQ[0], g.WK[0]])
        return float(loss), B.T @ flat.astype(float)

    z0 = np.linalg.lstsq(B, y0, rcond=None)[0]
    res = scipy.optimize.minimize(
        fun, z0, jac=True, method="L-BFGS-B", options={"gtol": 1e-12, "ftol": 1e-15}
    )
    return float(res.fun), B @ res.x


def rank_one_minimum(P, start) -> tuple[float, np.ndarray]:
    r"""Minimise the population loss over the rank-one manifold (``m = 1``: every weight is
    rank one), starting from reduced coordinates ``start = [γ, β, λ_Q, λ_K]`` (e.g.
    :func:`project_rank_one` of a run's state, to pick the basin the run is in).

    This is the loss of the **rank-one plateau** of stages III–IV, computed from the reduced
    loss alone (L-BFGS with the closed-form gradient), independently of any flow. Returns
    ``(loss, y)`` at the minimiser.
    """
    return _minimise_rank_one(P, _check_reduced(start, "start"))


def rank_one_lowest_minimum(
    P, *, n_starts: int = 8, seed=None
) -> tuple[float, np.ndarray, np.ndarray]:
    r"""The lowest of :func:`rank_one_minimum` from ``n_starts`` independent random starts.

    The starts are reduced coordinates drawn from :math:`\mathcal N(0, 1)` (``seed``: an int,
    a ``torch.Generator`` or None, see :func:`attnbook.device.as_generator`), so the result
    does not depend on any run: a run's plateau loss compared with it is a test of where the
    run went, not of where it started the minimiser. The rank-one loss has more than one
    local minimum; a start lands in the lowest basin with high probability, and the
    spread of the returned losses shows how many did. Returns ``(loss, y, losses)``.
    """
    from ..device import as_generator
    from ..markov import as_stochastic_matrix

    n_starts = check_positive_int(n_starts, "n_starts")
    P = as_stochastic_matrix(P, "P")
    if P.ndim != 2:
        raise ValueError(
            f"P must be one d×d transition matrix, got shape {tuple(P.shape)}"
        )
    d = P.shape[-1]
    starts = torch.randn(
        n_starts, 2 * d + 2, generator=as_generator(seed), dtype=torch.float64
    ).numpy()
    found = [_minimise_rank_one(P, y0) for y0 in starts]
    losses = np.array([loss for loss, _ in found])
    best = int(np.argmin(losses))
    return float(losses[best]), found[best][1], losses


def rank_one_orbits(y) -> np.ndarray:
    r"""The directions, at reduced coordinates ``y = [γ, β, λ_Q, λ_K]``, of the rank-one loss's
    continuous symmetries (rows, shape ``(3, 2d + 2)``; not normalised).

    The loss depends on the weights only through :math:`M = \gamma\beta^\top` and
    :math:`\Phi = \lambda_Q\lambda_K\gamma\gamma^\top`, and on :math:`\beta` only up to a
    multiple of :math:`\mathbf 1` (the softmax ignores a constant added to every logit). So
    it is exactly invariant under :math:`(\gamma, \beta, \lambda_Q, \lambda_K) \to (s\gamma,
    \beta/s, \lambda_Q/s, \lambda_K/s)`, :math:`(\lambda_Q, \lambda_K) \to (t\lambda_Q,
    \lambda_K/t)` and :math:`\beta \to \beta + c\mathbf 1`. At a critical point these
    directions are zero modes of the Hessian; a stability test along the manifold projects
    them out.
    """
    y = _check_reduced(y, "y")
    d = (y.size - 2) // 2
    gamma, beta, lq, lk = y[:d], y[d : 2 * d], y[2 * d], y[2 * d + 1]
    orbits = np.zeros((3, y.size))
    orbits[0] = np.concatenate([gamma, -beta, [-lq, -lk]])
    orbits[1, 2 * d :] = [lq, -lk]
    orbits[2, d : 2 * d] = 1.0
    return orbits


def solve_reduced(
    y0, P, t_eval, *, rtol: float = 1e-10, atol: float = 1e-12, max_abs: float = 1e8
):
    r"""Integrate the reduced (rank-one) ODE of :func:`reduced_ode` from ``y0`` at ``t_eval[0]``
    (SciPy's LSODA through :func:`attnbook.flows.odeint`). Returns ``(t, y, loss)``: times
    ``(T,)``, coordinates ``(2d+2, T)`` and the reduced loss along the way ``(T,)``. A state
    that leaves ``max_abs`` raises :class:`attnbook.errors.BlowUpError`, as every flow does."""
    from ..flows import odeint

    y0 = _check_reduced(y0, "y0")
    t_eval = np.asarray(t_eval, float)
    if t_eval.ndim != 1 or t_eval.size < 2 or np.any(np.diff(t_eval) <= 0):
        raise ValueError("t_eval must be an increasing 1-D array of at least 2 times")
    red = reduced_ode((y0.size - 2) // 2)

    def rhs(t, y):
        return torch.as_tensor(red["numeric"](y.numpy(), P), dtype=torch.float64)

    Y = odeint(
        rhs,
        torch.tensor(y0, dtype=torch.float64),
        t_eval,
        method="lsoda",
        rtol=rtol,
        atol=atol,
        max_abs=max_abs,
    ).numpy()
    loss = np.array([red["numeric_loss"](y, P) for y in Y])
    return t_eval, Y.T, loss


def plateau_instability(P, start, m: int) -> tuple[float, float]:
    r"""Loss and transverse instability of the rank-one plateau of chain ``P``.

    Minimises the loss over rank-one weights from ``start`` (reduced coordinates, see
    :func:`rank_one_minimum`), embeds the minimiser with embedding dimension ``m`` and returns
    ``(loss, lambda_1)``: the plateau loss and the top eigenvalue of the flow's Jacobian
    :math:`-\nabla^2 L` there (positive: the plateau is a saddle the flow leaves at that rate;
    about zero for symmetric rare tokens, δ = 0).
    """
    from .population import population_hessian

    loss, y = rank_one_minimum(P, start)
    H = population_hessian(*reduced_to_params(y, m), P)
    return loss, float(torch.linalg.eigvalsh(-H)[-1])


def _rare_bases(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Bases of reduced coordinates: symmetric in the rare tokens 1…d−1 (6 columns) and
    antisymmetric among them (γ and β entries zero on token 0, summing to zero on the rest)."""
    sym = np.zeros((2 * d + 2, 6))
    sym[0, 0] = sym[d, 2] = sym[2 * d, 4] = sym[2 * d + 1, 5] = 1.0
    sym[1:d, 1] = sym[d + 1 : 2 * d, 3] = 1.0
    contrasts = np.linalg.svd(np.eye(d - 1) - 1.0 / (d - 1))[0][:, : d - 2]
    anti = np.zeros((2 * d + 2, 2 * (d - 2)))
    anti[1:d, : d - 2] = contrasts
    anti[d + 1 : 2 * d, d - 2 :] = contrasts
    return sym, anti


def symmetric_plateau(P, start) -> tuple[float, np.ndarray, np.ndarray]:
    r"""The rank-one plateau of a chain whose rare tokens are exchangeable (``δ = 0``), and its
    stability against breaking their symmetry **along** the rank-one manifold.

    ``P`` (``d × d``, ``d >= 3``) must be invariant under every permutation of the tokens
    ``1 … d−1``. The loss is minimised over rank-one weights whose rare tokens share one
    embedding coordinate and one output coordinate (``start`` is symmetrised first; reduced
    coordinates as in :func:`rank_one_minimum`). Returns ``(loss, y, curvature)``: the loss and
    coordinates of that symmetric critical point, and the eigenvalues (ascending) of the
    rank-one Hessian (:func:`rank_one_params`, :func:`~attnbook.focus.population_hessian`)
    restricted to the ``2(d−2)`` directions that move the rare tokens' ``γ`` and ``β`` apart
    (zero sum over the rare tokens). All positive: the symmetric plateau is a minimum along
    the manifold and a symmetric start stays on it. ``curvature[0] < 0``: it is a saddle, and
    the rare tokens' coordinates separate at the rate ``-curvature[0]``.
    """
    from .population import population_hessian

    y0 = _check_reduced(start, "start")
    d = (y0.size - 2) // 2
    if d < 3:
        raise ValueError("symmetric_plateau needs d >= 3 (at least two rare tokens)")
    Pt = as_tensor(P, "P", dtype=torch.float64)
    if Pt.shape != (d, d):
        raise ValueError(f"P must be {d}x{d} to match start, got {tuple(Pt.shape)}")
    for perm in ([0, 2, 1, *range(3, d)], [0, *range(2, d), 1]):
        if not torch.allclose(Pt[perm][:, perm], Pt, rtol=0, atol=1e-12):
            raise ValueError("P must be invariant under permutations of tokens 1 … d-1")
    sym, anti = _rare_bases(d)
    loss, y = _minimise_rank_one(Pt, y0, sym)  # starts from y0's symmetric part
    H = population_hessian(*rank_one_params(y), Pt).numpy()
    return loss, y, np.linalg.eigvalsh(anti.T @ H @ anti)
