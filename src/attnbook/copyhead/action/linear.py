r"""Linear attention: the order-parameter action :math:`S(m, c_G)` at the saddle and with the
transverse fluctuations of ``G`` at their large-deviation optimum, its minimiser over ``P``,
the continuous pooling onset, the copy crossover and the exact one-dimensional pooling moments.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from attnbook.copyhead.action.evidence import data_action, train_mse_theory
from attnbook.copyhead.action.numerics import (
    CopyHyper,
    bisect_log,
    grad_and_hessian,
    p_grid,
    quadrature_moments,
)
from attnbook.validation import (
    as_tensor,
    check_finite,
    check_positive,
    check_positive_int,
)

__all__ = [
    "linear_action",
    "transverse_optimum",
    "LinearSaddle",
    "linear_saddle",
    "linear_onset_p",
    "pooling_curvature",
    "linear_crossover_p",
    "linear_pooling_moments",
]


#: the hyper-parameters the transverse fixed point reads (it has no row bias)
_TRANSVERSE = ("kappa", "sigma_w", "sigma_g")


def _linear_full(m, c_G, rho, v, P, hp: CopyHyper, entropy: bool):
    """Explicit linear-attention action of ``(m, c_G, ρ, v)``; returns ``(S, parts)``."""
    L, sigma_g, sigma_b = hp.seq_len, hp.sigma_g, hp.sigma_b
    sigma_m2 = sigma_b**2 + sigma_g**2 / L**2
    n_r, n_t = L - 1, L * L - L - 1
    q_F = m**2 / L + c_G**2 * (1 - 1 / L) + (n_r * rho + n_t * v) / L**3
    q_S = m / L + c_G * (1 - 1 / L)
    m_2 = m**2 + n_r * rho / L**2
    S = m**2 / (2 * sigma_m2) + L**2 * (L - 1) * c_G**2 / (2 * sigma_g**2)
    if entropy:
        xr, xv = rho / sigma_g**2, v / sigma_g**2
        S = (
            S
            + 0.5 * n_r * (xr - torch.log(xr) - 1)
            + 0.5 * n_t * (xv - torch.log(xv) - 1)
        )
    S = S + data_action(
        q_F, q_S, m, m_2, n_sequences=P, **hp.keywords("vocab_size", "kappa", "sigma_w")
    )
    return S, dict(q_F=q_F, q_S=q_S, m_1=m, m_2=m_2, rho=rho, v=v)


def transverse_optimum(
    m, c_G, *, n_sequences, tol: float = 1e-10, max_iter: int = 400, **hyper
):
    r"""Large-deviation optimum of the transverse variances ``(ρ, v)`` (per entry of ``G``).

    ``ρ``: the :math:`L-1` directions that change row sums; ``v``: the :math:`L^2-L-1` row-sum-free
    directions orthogonal to the copy template. Stationarity of
    :math:`\tfrac n2(x/\sigma_g^2-\ln x) + S_\text{data}` gives the fixed point
    :math:`1/v = 1/\sigma_g^2 + 2\,\partial_{q_F}S/L^3`,
    :math:`1/\rho = 1/\sigma_g^2 + 2\,\partial_{q_F}S/L^3 + 2\,\partial_{m_2}S/L^2`; both
    derivatives are positive, so iterating from the prior value converges monotonically.
    ``hyper``: ``seq_len``, ``vocab_size``, ``kappa``, ``sigma_w``, ``sigma_g``
    (:class:`CopyHyper`).
    """
    hp = CopyHyper.from_keywords("transverse_optimum", hyper, optional=_TRANSVERSE)
    return _transverse(m, c_G, n_sequences, hp, tol, max_iter)


def _transverse(m, c_G, n_sequences, hp: CopyHyper, tol: float, max_iter: int):
    L, V, kappa, sigma_w, sigma_g = (
        hp.seq_len,
        hp.vocab_size,
        hp.kappa,
        hp.sigma_w,
        hp.sigma_g,
    )
    with torch.no_grad():
        m = as_tensor(m, "m").detach()
        c_G = as_tensor(c_G, "c_G", dtype=m.dtype).detach()
        P = as_tensor(n_sequences, "n_sequences", dtype=m.dtype)
        m, c_G, P = torch.broadcast_tensors(m, c_G, P)
        n_r, n_t = L - 1, L * L - L - 1
        tau = sigma_w**2 * P / (kappa * V)
        q_F0 = m**2 / L + c_G**2 * (1 - 1 / L)
        q_S = m / L + c_G * (1 - 1 / L)
        rho = torch.full_like(q_F0, sigma_g**2)
        v = torch.full_like(q_F0, sigma_g**2)
        # the loop-invariant factors, hoisted: each is the same expression, in the same order
        # of operations, as when it was evaluated inside the loop, so the iterates and the
        # step at which the loop stops are the same bit for bit (only faster)
        a_F = 0.5 * V * (V - 1) * tau
        b_F = P / (2 * kappa) * (V - 1) / V * tau**2 * q_S**2
        a_M = 0.5 * V * tau
        b_M = P / (2 * kappa) * tau**2 * m**2
        m_sq, prior = m**2, 1 / sigma_g**2
        for _ in range(max_iter):
            rho_r = n_r * rho
            q_F = q_F0 + (rho_r + n_t * v) / L**3
            m_2 = m_sq + rho_r / L**2
            den_F, den_M = 1 + tau * q_F, 1 + tau * m_2
            dF = a_F / den_F + b_F / den_F**2
            dM = a_M / den_M + b_M / (V * den_M**2)
            base = prior + 2 * dF / L**3
            v_new = 1 / base
            rho_new = 1 / (base + 2 * dM / L**2)
            change = torch.maximum(
                (v_new - v).abs() / v, (rho_new - rho).abs() / rho
            ).max()
            rho, v = rho_new, v_new
            if float(change) < tol:
                break
    return rho, v


def linear_action(
    m,
    c_G,
    *,
    n_sequences,
    fluctuations: bool = False,
    return_parts: bool = False,
    transverse_tol: float = 1e-10,
    **hyper,
):
    r"""Order-parameter action :math:`S(m, c_G)` of linear attention (batched, differentiable).

    ``fluctuations=False``: the saddle (transverse directions of ``G`` at zero, i.e. the MAP).
    ``fluctuations=True``: transverse directions at their large-deviation optimum
    (:func:`transverse_optimum`, held fixed under autograd: by the envelope theorem the
    gradient is still exact; :func:`linear_saddle` builds exact Hessians by a Schur complement).
    With ``return_parts`` also returns the statistics used. ``transverse_tol`` is the relative
    tolerance of the transverse fixed point (looser for coarse grid searches). ``hyper``:
    ``seq_len``, ``vocab_size`` (required), ``kappa``, ``sigma_w``, ``sigma_g``, ``sigma_b``
    (:class:`CopyHyper`).
    """
    hp = CopyHyper.from_keywords("linear_action", hyper)
    S, parts = _action(m, c_G, n_sequences, hp, fluctuations, transverse_tol)
    return (S, parts) if return_parts else S


def _action(m, c_G, n_sequences, hp: CopyHyper, fluctuations: bool, tol=1e-10):
    """:func:`linear_action` on validated hyper-parameters: ``(S, parts)``."""
    m = as_tensor(m, "m")
    c_G = as_tensor(c_G, "c_G", dtype=m.dtype, device=m.device)
    P = as_tensor(n_sequences, "n_sequences", dtype=m.dtype, device=m.device)
    if fluctuations:
        rho, v = _transverse(m, c_G, P, hp, tol, 400)
    else:
        rho = v = torch.zeros((), dtype=m.dtype, device=m.device)
    return _linear_full(m, c_G, rho, v, P, hp, fluctuations)


@dataclass
class LinearSaddle:
    """Minimiser of the linear-attention order-parameter action at each ``P`` (arrays over P)."""

    n_sequences: np.ndarray
    m: np.ndarray  #: mean row sum of A (pooling + copy)
    c_G: np.ndarray  #: copy coefficient
    c_1: np.ndarray  #: pooling coefficient c_1 = m − c_G (A = c_1 J/L + c_G S)
    action: np.ndarray
    explained: (
        np.ndarray
    )  #: τ q_S²/(1 + τ q_F): explained share of the non-constant target variance
    train_mse: np.ndarray  #: per-token training MSE of the posterior-mean readout
    var_m: np.ndarray  #: Laplace variance of m at the minimum (inverse Hessian)
    var_c_G: np.ndarray  #: Laplace variance of c_G at the minimum
    rho: np.ndarray
    v: np.ndarray
    fluctuations: bool


def _damped_newton(x, grad_hess, value, n_newton: int) -> torch.Tensor:
    """Polish the rows of ``x`` (one minimisation per sample size) by up to ``n_newton``
    Newton steps, each shifted to a positive definite Hessian and backtracked until it
    does not raise ``value``."""
    eye = torch.eye(2, dtype=torch.float64)
    for _ in range(n_newton):
        g, H = grad_hess(x)
        lam_min = torch.linalg.eigvalsh(H)[:, 0]
        shift = torch.clamp(-lam_min, min=0) * 1.1 + 1e-12 * H.abs().amax((-1, -2))
        step = torch.linalg.solve(H + shift[:, None, None] * eye, g[..., None])[..., 0]
        f0 = value(x)
        t = torch.ones(len(x), dtype=torch.float64)
        for _ in range(30):  # backtracking
            ok = value(x - t[:, None] * step) <= f0
            if bool(ok.all()):
                break
            t = torch.where(ok, t, t / 2)
        x_new = x - t[:, None] * step
        x = torch.where((value(x_new) <= f0)[:, None], x_new, x)
        if float((t[:, None] * step).abs().max()) < 1e-13:
            break
    return x


def linear_saddle(
    n_sequences, *, fluctuations: bool = False, n_newton: int = 30, **hyper
) -> LinearSaddle:
    """Global minimum of :func:`linear_action` over ``(m ≥ 0, c_G)`` for each sample size.

    A grid search (vectorised over P) finds the basin, damped Newton steps polish it. With
    fluctuations the Hessian of the effective action is the Schur complement of the joint
    Hessian in ``(m, c_G, ρ, v)``. The action is even under ``(m, c_G) → −(m, c_G)``; we report
    the ``m ≥ 0`` branch. ``hyper``: the keywords of :func:`linear_action`.
    """
    P = p_grid(n_sequences)
    hp = CopyHyper.from_keywords("linear_saddle", hyper)
    m_grid = torch.linspace(0, 1.6, 65, dtype=torch.float64)
    c_grid = torch.cat(
        [
            -torch.logspace(-5, np.log10(0.3), 16, dtype=torch.float64).flip(0),
            torch.zeros(1, dtype=torch.float64),
            torch.logspace(-5, np.log10(1.3), 40, dtype=torch.float64),
        ]
    )
    mm, cc = torch.meshgrid(m_grid, c_grid, indexing="ij")
    S_grid, _ = _action(mm[None], cc[None], P[:, None, None], hp, fluctuations, 1e-5)
    best = S_grid.reshape(len(P), -1).argmin(-1)
    x = torch.stack([mm.reshape(-1)[best], cc.reshape(-1)[best]], -1)  # (nP, 2)

    def full_action(z):
        return _linear_full(z[:, 0], z[:, 1], z[:, 2], z[:, 3], P, hp, fluctuations)[0]

    def joint(x):
        if fluctuations:
            rho, v = _transverse(x[:, 0], x[:, 1], P, hp, 1e-10, 400)
        else:
            rho = v = torch.zeros(len(P), dtype=torch.float64)
        return torch.cat([x, rho[:, None], v[:, None]], -1)

    def grad_hess(x):
        z = joint(x)
        g, H = grad_and_hessian(full_action, z)
        g, Hxx = g[:, :2], H[:, :2, :2]
        if fluctuations:  # minimise out (ρ, v): Schur complement
            Hxy, Hyy = H[:, :2, 2:], H[:, 2:, 2:]
            Hxx = Hxx - Hxy @ torch.linalg.solve(Hyy, Hxy.transpose(-1, -2))
        return g, Hxx

    def value(x):
        return _action(x[:, 0], x[:, 1], P, hp, fluctuations)[0]

    x = _damped_newton(x, grad_hess, value, n_newton)
    x = x * torch.where(x[:, :1] < 0, -1.0, 1.0)
    S, parts = _action(x[:, 0], x[:, 1], P, hp, fluctuations)
    _, H = grad_hess(x)
    cov = torch.linalg.inv(H)
    tau = hp.sigma_w**2 * P / (hp.kappa * hp.vocab_size)
    explained = tau * parts["q_S"] ** 2 / (1 + tau * parts["q_F"])
    stats = (parts["q_F"], parts["q_S"], parts["m_1"], parts["m_2"])
    mse = train_mse_theory(
        *stats, n_sequences=P, **hp.keywords("vocab_size", "kappa", "sigma_w")
    )
    rho, v = (parts["rho"].expand_as(P), parts["v"].expand_as(P))
    arrays = (P, x[:, 0], x[:, 1], x[:, 0] - x[:, 1], S, explained, mse)
    arrays += (cov[:, 0, 0], cov[:, 1, 1], rho, v)
    return LinearSaddle(*(t.detach().cpu().numpy() for t in arrays), fluctuations)


def pooling_curvature(n_sequences, *, h: float = 1e-3, **action_kw) -> float:
    r"""The pooling curvature :math:`K_m = \partial_m^2 S|_{m = c_G = 0}` at one sample size, by a
    central difference of step ``h`` (with ``fluctuations=True`` the effective action is
    minimised over the transverse variances at each ``m``). ``action_kw`` are
    :func:`linear_action`'s keywords (``seq_len``, ``vocab_size``, hyper-parameters,
    ``fluctuations``)."""
    h = check_positive(h, "h")
    m = torch.tensor([-h, 0.0, h], dtype=torch.float64)
    S = linear_action(
        m,
        torch.zeros(3, dtype=torch.float64),
        n_sequences=float(n_sequences),
        **action_kw,
    )
    return float((S[0] - 2 * S[1] + S[2]) / h**2)


def linear_onset_p(*, fluctuations: bool = False, **hyper) -> float:
    r"""Sample size where the pooling curvature :math:`K_m = \partial_m^2 S|_{0}` changes sign.

    Saddle (closed form, the positive root of :func:`derive_linear_onset`):
    :math:`K_m(P) = 1/\sigma_m^2 + aP - bP^2` with
    :math:`a = \sigma_w^2(V-1)/(\kappa L)+\sigma_w^2/\kappa` and
    :math:`b = \sigma_w^2[(V-1)/L^2+1]/(\kappa^2V^2)`. With ``fluctuations=True`` the curvature of
    the fluctuation-corrected action is found by autograd and its zero by bisection.
    ``hyper``: the keywords of :func:`linear_action`.
    """
    hp = CopyHyper.from_keywords("linear_onset_p", hyper)
    L, V, kappa, sigma_w = hp.seq_len, hp.vocab_size, hp.kappa, hp.sigma_w
    sigma_m2 = hp.sigma_b**2 + hp.sigma_g**2 / L**2
    a = sigma_w**2 * (V - 1) / (kappa * L) + sigma_w**2 / kappa
    b = sigma_w**2 * ((V - 1) / L**2 + 1) / (kappa**2 * V**2)
    p_saddle = float((a + np.sqrt(a * a + 4 * b / sigma_m2)) / (2 * b))
    if not fluctuations:
        return p_saddle
    return _onset_with_fluctuations(p_saddle, tuple(hp.keywords().items()))


@functools.lru_cache(maxsize=256)  # as _crossover: seconds each, asked for repeatedly
def _onset_with_fluctuations(p_saddle: float, hyper_items) -> float:
    def minus_curvature(p):
        return -pooling_curvature(p, fluctuations=True, **dict(hyper_items))

    return bisect_log(minus_curvature, p_saddle / 20, p_saddle * 20)


def linear_crossover_p(
    *,
    fluctuations: bool = False,
    level: float = 0.5,
    p_range=(1.0, 1e9),
    n_grid: int = 16,
    **hyper,
) -> float:
    """Sample size where the explained share of the non-constant target variance reaches ``level``.

    The saddle is evaluated on a log-spaced grid of ``P`` (one vectorised call), the crossing is
    bracketed, and a second, finer grid inside the bracket is interpolated linearly in ``log P``.
    ``hyper``: the keywords of :func:`linear_action`.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    hp = CopyHyper.from_keywords("linear_crossover_p", hyper)
    p_range = tuple(float(x) for x in p_range)
    n_grid = check_positive_int(n_grid, "n_grid", minimum=2)
    return _crossover(
        bool(fluctuations), float(level), p_range, n_grid, tuple(hp.keywords().items())
    )


# a chapter asks for the same crossovers several times (a grid, its theory line, a claim), and
# with fluctuations each takes seconds: the value of a pure function of numbers, remembered
@functools.lru_cache(maxsize=256)
def _crossover(fluctuations, level, p_range, n_grid, hyper_items) -> float:
    kw = dict(fluctuations=fluctuations, **dict(hyper_items))
    lo, hi = np.log(p_range[0]), np.log(p_range[1])
    for _ in range(2):
        logp = np.linspace(lo, hi, n_grid)
        expl = linear_saddle(np.exp(logp), **kw).explained
        above = np.nonzero(expl >= level)[0]
        if len(above) == 0 or above[0] == 0:
            raise ValueError(
                f"the explained share does not cross {level} inside p_range={p_range}"
            )
        i = above[0]
        lo, hi = logp[i - 1], logp[i]
    t = (level - expl[i - 1]) / (expl[i] - expl[i - 1])
    return float(np.exp(logp[i - 1] + t * (logp[i] - logp[i - 1])))


def linear_pooling_moments(
    n_sequences,
    *,
    fluctuations: bool = True,
    m_max: float | None = None,
    n_grid: int = 1201,
    **hyper,
):
    r"""Susceptibility of pooling without the Gaussian (Laplace) approximation.

    The one-dimensional integral over the pooling order parameter,
    :math:`\langle m^2\rangle = \int m^2 e^{-S(m, 0)}\,dm / \int e^{-S(m, 0)}\,dm`, with the copy
    coefficient held at 0 (it stays ≈ 0 through the onset when :math:`L\gtrsim V`) and the
    transverse variances at their optimum when ``fluctuations``. At the onset the curvature
    :math:`K_m` vanishes and the Laplace variance :math:`1/K_m` diverges, but the quartic term keeps
    :math:`\langle m^2\rangle` finite: the precursor of a *finite* head is rounded, and this
    integral says by how much. The grid is ``[-m_max, m_max]``; by default ``m_max`` is chosen per
    ``P`` from a coarse scan as the point where the action has risen by 40 (relative weight
    :math:`e^{-40}`). Returns ``(mean_abs_m, second_moment)`` as arrays over ``P`` (the
    distribution is even in ``m``, so ``⟨m²⟩`` is its variance). ``hyper``: the keywords of
    :func:`linear_action`.
    """
    P = p_grid(n_sequences)
    n_grid = check_positive_int(n_grid, "n_grid", minimum=101)
    hp = CopyHyper.from_keywords("linear_pooling_moments", hyper)

    def pooling_action(m, n_seq):  # S(m, c_G = 0)
        return _action(m, torch.zeros_like(m), n_seq, hp, fluctuations)[0]

    if m_max is None:
        coarse = torch.logspace(-3, 1.5, 200, dtype=torch.float64)
        Sc = pooling_action(coarse[None], P[:, None])
        S0 = pooling_action(torch.zeros(1, dtype=torch.float64), P)
        high = (Sc - torch.minimum(Sc.min(-1).values, S0)[:, None]) > 40
        if not bool(high.any(-1).all()):
            raise ValueError(
                "the pooling action does not rise by 40 within |m| < 30; pass m_max"
            )
        edge = coarse[high.to(torch.int64).argmax(-1)]
    else:
        edge = torch.full_like(P, check_positive(m_max, "m_max"))
    m = edge[:, None] * torch.linspace(-1, 1, n_grid, dtype=torch.float64)[None]
    S = pooling_action(m, P[:, None])
    check_finite(S, "the pooling action")
    mean_abs, _, w = quadrature_moments(S, m.abs())
    if bool((w[:, [0, -1]] > 1e-8 * w.max(-1, keepdim=True).values).any()):
        raise ValueError(
            "the pooling distribution is not negligible at ±m_max; increase m_max"
        )
    return mean_abs.numpy(), (w * m**2).sum(-1).numpy()
