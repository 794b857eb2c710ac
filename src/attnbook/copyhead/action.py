r"""The effective action of the attention matrix: the readout integrated out (SymPy + numerics).

Integrating the readout :math:`W` out of the posterior of model E* (:mod:`attnbook.copyhead.model`)
leaves a posterior over the attention scores, :math:`p(G\mid\mathcal D)\propto e^{-S(G)}`.

**Exact.** Each output row :math:`w_i` of :math:`W` is a Bayesian linear regression of the targets
:math:`y_i` on the attended features :math:`H` with noise variance :math:`\kappa L` and prior
:math:`\sigma_w^2 I`. With :math:`\lambda = \sigma_w^2/(\kappa L)`, :math:`K = H^\top H`,
:math:`B = H^\top Y` (Woodbury, constants dropped)

.. math::
    S_\text{data}^\text{exact}(A) = \frac V2\log\det(I+\lambda K)
      + \frac{1}{2\kappa L}\Big[\|Y\|^2 - \lambda\operatorname{Tr} B^\top (I+\lambda K)^{-1} B\Big].

**Large P.** Replacing :math:`K, B` by their expectations (i.i.d. uniform tokens) makes the action
depend on :math:`A` only through :math:`q_F=\|A\|_F^2/L`, :math:`q_S=\operatorname{Tr}(AS^\top)/L`,
the mean row sum :math:`m_1` and the mean squared row sum :math:`m_2`. With
:math:`\tau = \sigma_w^2 P/(\kappa V)`:

.. math::
    S_\text{data} = \tfrac12 V(V-1)\ln(1+\tau q_F) + \tfrac12 V\ln(1+\tau m_2)
      + \frac{P}{2\kappa}\Big[1 - \frac{V-1}{V}\frac{\tau q_S^2}{1+\tau q_F}
      - \frac1V\frac{\tau m_1^2}{1+\tau m_2}\Big].

:func:`derive_data_action` derives this with SymPy from the one-dimensional Gaussian integral
over one readout coordinate (:func:`derive_readout_integral`); tests compare it with the exact
evidence on sampled data (Monte Carlo over data sets) and with dense Gaussian log-densities.

**Order parameters.** Linear attention ``A = mJ/L + c_G (S − J/L) + (transverse)``; the prior of
``G = LA − bJ`` gives :math:`m^2/2\sigma_m^2 + L^2(L-1)c_G^2/2\sigma_g^2`,
:math:`\sigma_m^2=\sigma_b^2+\sigma_g^2/L^2`. The *saddle* puts the transverse part at zero (the MAP
of ``G``); the *fluctuation-corrected* action keeps the :math:`L^2-L-1` row-sum-free transverse
directions (variance ``v`` per entry of ``G``) and the :math:`L-1` row-sum directions (variance
:math:`\rho`) at their large-deviation optimum,
:math:`+\tfrac{n}{2}(x/\sigma_g^2 - \ln(x/\sigma_g^2) - 1)` each. Softmax attention with the
symmetric logit ansatz (logit ``g`` on the previous token, 0 elsewhere) has
:math:`a_G = (e^g-1)/(e^g+L-1)`, row sums 1, and prior :math:`(L-1)g^2/2\sigma_g^2` (the minimal-norm
``G``; the row-constant direction is flat under the softmax and integrates to a constant).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import sympy as sp
import torch

from attnbook.copyhead.model import ACTIVATIONS, attention_matrix, data_terms
from attnbook.copyhead.task import CopyStats, copy_statistics, copy_task
from attnbook.validation import (
    as_tensor,
    check_choice,
    check_finite,
    check_positive,
    check_positive_int,
    check_square,
)

__all__ = [
    # SymPy derivations
    "derive_readout_integral",
    "derive_data_action",
    "brief_data_action",
    "derive_linear_action",
    "derive_softmax_order_parameters",
    "derive_linear_onset",
    # numerics
    "attention_statistics",
    "data_action",
    "exact_data_action",
    "exact_action",
    "posterior_mean_readout",
    "monte_carlo_data_action",
    "train_mse_theory",
    "linear_action",
    "transverse_optimum",
    "LinearSaddle",
    "linear_saddle",
    "linear_onset_p",
    "linear_crossover_p",
    "softmax_order_parameters",
    "softmax_action",
    "SoftmaxSaddle",
    "softmax_saddle",
    "softmax_critical_p",
    "softmax_coexistence",
    "pack",
    "unpack",
    "marginal_potential",
    "symbols",
    "linear_pooling_moments",
    "softmax_copy_moments",
]

# --------------------------------------------------------------------------------------------
# SymPy: the derivation
# --------------------------------------------------------------------------------------------
_sym = dict(
    P=sp.Symbol("P", positive=True),
    L=sp.Symbol("L", positive=True, integer=True),
    V=sp.Symbol("V", positive=True, integer=True),
    kappa=sp.Symbol("kappa", positive=True),
    sigma_w=sp.Symbol("sigma_w", positive=True),
    sigma_g=sp.Symbol("sigma_g", positive=True),
    sigma_b=sp.Symbol("sigma_b", positive=True),
    q_F=sp.Symbol("q_F", nonnegative=True),
    q_S=sp.Symbol("q_S", real=True),
    m_1=sp.Symbol("m_1", real=True),
    m_2=sp.Symbol("m_2", nonnegative=True),
    m=sp.Symbol("m", real=True),
    c_G=sp.Symbol("c_G", real=True),
    g=sp.Symbol("g", real=True),
)


def symbols() -> dict:
    """The SymPy symbols used by the derivations (a fresh dict: names → symbols)."""
    return dict(_sym)


@cache
def derive_readout_integral():
    r"""Minus the log of one readout coordinate's Gaussian integral.

    For one eigen-direction of :math:`K` (eigenvalue :math:`\lambda`) and one output with overlap
    :math:`\beta`, :math:`F(\lambda,\beta) = -\ln\int dw\,\mathcal N(w;0,s^2)\,
    e^{-(\lambda w^2-2\beta w)/(2k)}`. Returns ``(F, (w, s, k, lam, beta))``; SymPy finds
    :math:`F = \tfrac12\ln(1+s^2\lambda/k) - s^2\beta^2/(2k(k+s^2\lambda))`.
    """
    w = sp.Symbol("w", real=True)
    s, k, lam = sp.symbols("s k lambda", positive=True)
    beta = sp.Symbol("beta", real=True)
    integrand = sp.exp(
        -(w**2) / (2 * s**2) - (lam * w**2 - 2 * beta * w) / (2 * k)
    ) / sp.sqrt(2 * sp.pi * s**2)
    Z = sp.simplify(sp.integrate(integrand, (w, -sp.oo, sp.oo), conds="none"))
    # expand the log term by term (simplify would fold it back into log(x**huge), which
    # overflows when lambdified)
    F = sp.expand(sp.expand_log(-sp.log(Z), force=True))
    return F, (w, s, k, lam, beta)


@cache
def derive_data_action():
    r"""The large-P data action :math:`S_\text{data}(q_F, q_S, m_1, m_2)` derived with SymPy.

    Expected statistics: :math:`E[K] = PL[q_F(I/V-J/V^2) + m_2 J/V^2]`, and
    :math:`E[B] = PL[q_S(I/V-J/V^2)+m_1J/V^2]` share eigenvectors: ``V−1`` directions orthogonal
    to :math:`\mathbf 1` (eigenvalue :math:`PLq_F/V`, squared overlaps summed over outputs
    :math:`(PLq_S/V)^2`) and :math:`\mathbf 1/\sqrt V` (:math:`PLm_2/V`, :math:`(PLm_1/V)^2`).
    Each of the ``V`` outputs integrates each direction once (:func:`derive_readout_integral`),
    and :math:`\|Y\|^2/(2\kappa L) = P/(2\kappa)`.
    """
    F, (w, s, k, lam, beta) = derive_readout_integral()
    S_ = _sym
    P, L, V, kappa, sw = S_["P"], S_["L"], S_["V"], S_["kappa"], S_["sigma_w"]
    F0 = sp.expand_log(sp.logcombine(F.subs(beta, 0), force=True), force=True)
    F2 = sp.simplify(sp.diff(F, beta, 2) / 2)  # F is quadratic in beta
    assert sp.simplify(F - F0 - F2 * beta**2) == 0
    sub = {s: sw, k: kappa * L}
    lam_c, lam_1 = P * L * S_["q_F"] / V, P * L * S_["m_2"] / V
    b2_c, b2_1 = (P * L * S_["q_S"] / V) ** 2, (P * L * S_["m_1"] / V) ** 2
    expr = (
        V * (V - 1) * F0.subs(sub).subs(lam, lam_c)
        + (V - 1) * b2_c * F2.subs(sub).subs(lam, lam_c)
        + V * F0.subs(sub).subs(lam, lam_1)
        + b2_1 * F2.subs(sub).subs(lam, lam_1)
        + P * L / (2 * kappa * L)
    )
    return sp.expand_log(expr, force=True)


def brief_data_action():
    """The data action as written in the theory brief (with τ = σ_w² P/(κV)), for comparison."""
    S_ = _sym
    P, V, kappa = S_["P"], S_["V"], S_["kappa"]
    tau = S_["sigma_w"] ** 2 * P / (kappa * V)
    qF, qS, m1, m2 = S_["q_F"], S_["q_S"], S_["m_1"], S_["m_2"]
    return (
        V * (V - 1) / 2 * sp.log(1 + tau * qF)
        + V / 2 * sp.log(1 + tau * m2)
        + P
        / (2 * kappa)
        * (
            1
            - (V - 1) / V * tau * qS**2 / (1 + tau * qF)
            - tau * m1**2 / (V * (1 + tau * m2))
        )
    )


@cache
def derive_linear_action():
    r"""The saddle action :math:`S(m, c_G)` of linear attention on ``A = mJ/L + c_G(S − J/L)``.

    The statistics follow from the Frobenius products of the templates,
    :math:`\langle J,J\rangle = L^2`, :math:`\langle J,S\rangle = L`, :math:`\langle S,S\rangle = L`:
    :math:`q_F = m^2/L + c_G^2(1-1/L)`, :math:`q_S = m/L + c_G(1-1/L)`, :math:`m_1=m`, :math:`m_2=m^2`.
    """
    S_ = _sym
    L, m, cG = S_["L"], S_["m"], S_["c_G"]
    # A = a J + c S with a = (m - cG)/L, c = cG; <A, A>, <A, S>, row sum = a L + c
    a, c = (m - cG) / L, cG
    JJ, JS, SS = L**2, L, L
    qF = sp.expand((a**2 * JJ + 2 * a * c * JS + c**2 * SS) / L)
    qS = sp.expand((a * JS + c * SS) / L)
    rowsum = sp.expand(a * L + c)
    data = derive_data_action().subs(
        {S_["q_F"]: qF, S_["q_S"]: qS, S_["m_1"]: rowsum, S_["m_2"]: rowsum**2},
        simultaneous=True,
    )
    sigma_m2 = S_["sigma_b"] ** 2 + S_["sigma_g"] ** 2 / L**2
    prior = m**2 / (2 * sigma_m2) + L**2 * (L - 1) * cG**2 / (2 * S_["sigma_g"] ** 2)
    return prior + data, {"q_F": qF, "q_S": qS, "m_1": rowsum, "m_2": rowsum**2}


@cache
def derive_linear_onset():
    r"""Where the symmetric point stops being a minimum along pooling: :math:`\partial_m^2 S|_0 = 0`.

    Returns ``(K_m, P_on)``: the curvature as a SymPy expression in ``P`` and the positive root
    (exact in ``L``; for large ``L`` it tends to :math:`\kappa V^2[1+\sqrt{1+4/(\sigma_w^2\sigma_m^2V^2)}]/2`).
    """
    S_ = _sym
    action, _ = derive_linear_action()
    K = sp.simplify(sp.diff(action, S_["m"], 2).subs({S_["m"]: 0, S_["c_G"]: 0}))
    P = S_["P"]
    num = sp.numer(sp.together(K))
    roots = sp.solve(sp.Eq(num, 0), P)
    return K, roots


@cache
def derive_softmax_order_parameters():
    r"""``(a_1, a_G)`` of ``rowsoftmax(g S)`` projected on ``(J/L, S)``: entries :math:`1/Z` off the
    target and :math:`e^g/Z` on it, :math:`Z = e^g + L - 1`, so :math:`a_1/L = 1/Z` and
    :math:`a_1/L + a_G = e^g/Z`."""
    g, L = _sym["g"], _sym["L"]
    Z = sp.exp(g) + L - 1
    a1, aG = sp.symbols("a_1 a_G")
    sol = sp.solve(
        [sp.Eq(a1 / L, 1 / Z), sp.Eq(a1 / L + aG, sp.exp(g) / Z)], [a1, aG], dict=True
    )[0]
    return sp.simplify(sol[a1]), sp.simplify(sol[aG])


# --------------------------------------------------------------------------------------------
# Numerics (torch, batched, differentiable)
# --------------------------------------------------------------------------------------------
def _hyper(kappa, sigma_w, sigma_g=1.0, sigma_b=1.0):
    return (
        check_positive(kappa, "kappa"),
        check_positive(sigma_w, "sigma_w"),
        check_positive(sigma_g, "sigma_g"),
        check_positive(sigma_b, "sigma_b"),
    )


def attention_statistics(A):
    """``(q_F, q_S, m_1, m_2)`` of attention matrices ``A (..., L, L)`` (see module docstring)."""
    A = as_tensor(A, "A")
    check_square(A, "A")
    L = A.shape[-1]
    idx = torch.arange(L, device=A.device)
    rows = A.sum(-1)
    return (
        (A * A).sum((-1, -2)) / L,
        A[..., idx, (idx - 1) % L].sum(-1) / L,
        rows.mean(-1),
        (rows**2).mean(-1),
    )


def _order_stats(vocab_size, kappa, sigma_w, n_sequences, q_F, q_S, m_1, m_2):
    """Validated hyper-parameters and the order statistics as tensors of one dtype and device."""
    V = check_positive_int(vocab_size, "vocab_size", minimum=2)
    kappa, sigma_w, _, _ = _hyper(kappa, sigma_w)
    q_F = as_tensor(q_F, "q_F")
    P = as_tensor(n_sequences, "n_sequences", dtype=q_F.dtype, device=q_F.device)
    q_S, m_1, m_2 = (
        as_tensor(t, n, dtype=q_F.dtype, device=q_F.device)
        for t, n in ((q_S, "q_S"), (m_1, "m_1"), (m_2, "m_2"))
    )
    return V, kappa, sigma_w, P, q_F, q_S, m_1, m_2


def data_action(
    q_F,
    q_S,
    m_1,
    m_2,
    *,
    n_sequences,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
) -> torch.Tensor:
    """The large-P data action (module docstring), batched over broadcastable inputs."""
    V, kappa, sigma_w, P, q_F, q_S, m_1, m_2 = _order_stats(
        vocab_size, kappa, sigma_w, n_sequences, q_F, q_S, m_1, m_2
    )
    tau = sigma_w**2 * P / (kappa * V)
    return (
        0.5 * V * (V - 1) * torch.log1p(tau * q_F)
        + 0.5 * V * torch.log1p(tau * m_2)
        + P
        / (2 * kappa)
        * (
            1
            - (V - 1) / V * tau * q_S**2 / (1 + tau * q_F)
            - tau * m_1**2 / (V * (1 + tau * m_2))
        )
    )


def train_mse_theory(
    q_F,
    q_S,
    m_1,
    m_2,
    *,
    n_sequences,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
) -> torch.Tensor:
    r"""Per-token training MSE of the posterior-mean readout at given statistics (large P):
    :math:`1 - \frac{V-1}{V}\frac{q_S^2(q_F+2/\tau)}{(q_F+1/\tau)^2} - \frac1V\frac{m_1^2(m_2+2/\tau)}{(m_2+1/\tau)^2}`."""
    V, kappa, sigma_w, P, q_F, q_S, m_1, m_2 = _order_stats(
        vocab_size, kappa, sigma_w, n_sequences, q_F, q_S, m_1, m_2
    )
    it = kappa * V / (sigma_w**2 * P)  # 1/τ
    return (
        1
        - (V - 1) / V * q_S**2 * (q_F + 2 * it) / (q_F + it) ** 2
        - m_1**2 * (m_2 + 2 * it) / (V * (m_2 + it) ** 2)
    )


def _check_stats(A: torch.Tensor, stats: CopyStats):
    if not isinstance(stats, CopyStats):
        raise TypeError(
            f"stats must be a CopyStats (see copy_statistics), got {type(stats).__name__}"
        )
    if stats.seq_len != A.shape[-1]:
        raise ValueError(
            f"stats are for L={stats.seq_len}, the attention matrix is {A.shape[-1]}x{A.shape[-1]}"
        )


def exact_data_action(
    A, stats: CopyStats, *, kappa: float = 1.0, sigma_w: float = 1.0
) -> torch.Tensor:
    """Exact −log evidence of the targets given attention ``A (..., L, L)``, readout integrated out."""
    A = as_tensor(A, "A")
    check_square(A, "A")
    _check_stats(A, stats)
    kappa, sigma_w, _, _ = _hyper(kappa, sigma_w)
    L, V = stats.seq_len, stats.vocab_size
    lam = sigma_w**2 / (kappa * L)
    HH, HY = data_terms(A, stats.to(dtype=A.dtype))
    M = torch.eye(V, dtype=A.dtype, device=A.device) + lam * HH
    chol, info = torch.linalg.cholesky_ex(M)
    if bool((info != 0).any()):
        raise FloatingPointError(
            "I + λHᵀH is not positive definite (non-finite attention?)"
        )
    logdet = 2 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    quad = (HY * torch.cholesky_solve(HY, chol)).sum((-1, -2))
    return 0.5 * V * logdet + (stats.yy.to(A.dtype) - lam * quad) / (2 * kappa * L)


def exact_action(
    G,
    stats: CopyStats,
    *,
    activation: str = "linear",
    b=None,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
    sigma_b: float = 1.0,
) -> torch.Tensor:
    r"""Exact :math:`S(G) = -\ln p(G, b\mid\mathcal D)` up to a constant: the readout integrated out,
    plus the priors :math:`\|G\|^2/2\sigma_g^2` (+ :math:`b^2/2\sigma_b^2` for linear attention).
    Batched over ``G (..., L, L)``; ``stats`` broadcast against the batch (one data set per model allowed)."""
    check_choice(activation, "activation", ACTIVATIONS)
    kappa, sigma_w, sigma_g, sigma_b = _hyper(kappa, sigma_w, sigma_g, sigma_b)
    G = as_tensor(G, "G")
    A = attention_matrix(
        G, b if activation == "linear" else None, activation=activation
    )
    S = exact_data_action(A, stats, kappa=kappa, sigma_w=sigma_w) + (G**2).sum(
        (-1, -2)
    ) / (2 * sigma_g**2)
    if activation == "linear" and b is not None:
        S = S + as_tensor(b, "b", dtype=G.dtype, device=G.device) ** 2 / (
            2 * sigma_b**2
        )
    return S


def posterior_mean_readout(
    A, stats: CopyStats, *, kappa: float = 1.0, sigma_w: float = 1.0
):
    r"""The readout's posterior mean given ``A``: :math:`\bar W = B^\top(K + \kappa L/\sigma_w^2)^{-1}`."""
    A = as_tensor(A, "A")
    _check_stats(A, stats)
    kappa, sigma_w, _, _ = _hyper(kappa, sigma_w)
    L, V = stats.seq_len, stats.vocab_size
    HH, HY = data_terms(A, stats.to(dtype=A.dtype))
    M = HH + (kappa * L / sigma_w**2) * torch.eye(V, dtype=A.dtype, device=A.device)
    return torch.linalg.solve(M, HY).transpose(-1, -2)


def monte_carlo_data_action(
    A,
    n_sequences: int,
    *,
    vocab_size: int,
    n_datasets: int = 64,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    seed: int | None = None,
    generator: torch.Generator | None = None,
):
    """Monte Carlo over data sets: mean and standard error of :func:`exact_data_action` of ``A``
    over ``n_datasets`` independent copy-task data sets (drawn in one batch)."""
    A = as_tensor(A, "A")
    check_square(A, "A")
    n_ds = check_positive_int(n_datasets, "n_datasets", minimum=2)
    X, Y = copy_task(
        n_sequences,
        A.shape[-1],
        vocab_size,
        batch_shape=(n_ds,),
        seed=seed,
        generator=generator,
        dtype=A.dtype,
    )
    vals = exact_data_action(
        A.expand(n_ds, *A.shape[-2:]) if A.dim() == 2 else A,
        copy_statistics(X, Y),
        kappa=kappa,
        sigma_w=sigma_w,
    )
    return vals.mean(0), vals.std(0) / np.sqrt(n_ds)


# ---- linear attention: order parameters ------------------------------------------------------
def _linear_full(
    m, c_G, rho, v, P, L, V, kappa, sigma_w, sigma_g, sigma_b, entropy: bool
):
    """Explicit linear-attention action of ``(m, c_G, ρ, v)``; returns ``(S, parts)``."""
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
        q_F, q_S, m, m_2, n_sequences=P, vocab_size=V, kappa=kappa, sigma_w=sigma_w
    )
    return S, dict(q_F=q_F, q_S=q_S, m_1=m, m_2=m_2, rho=rho, v=v)


def transverse_optimum(
    m,
    c_G,
    *,
    n_sequences,
    seq_len: int,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
    tol: float = 1e-10,
    max_iter: int = 400,
):
    r"""Large-deviation optimum of the transverse variances ``(ρ, v)`` (per entry of ``G``).

    ``ρ``: the :math:`L-1` directions that change row sums; ``v``: the :math:`L^2-L-1` row-sum-free
    directions orthogonal to the copy template. Stationarity of
    :math:`\tfrac n2(x/\sigma_g^2-\ln x) + S_\text{data}` gives the fixed point
    :math:`1/v = 1/\sigma_g^2 + 2\,\partial_{q_F}S/L^3`,
    :math:`1/\rho = 1/\sigma_g^2 + 2\,\partial_{q_F}S/L^3 + 2\,\partial_{m_2}S/L^2`; both
    derivatives are positive, so iterating from the prior value converges monotonically.
    """
    L, V = seq_len, vocab_size
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
        for _ in range(max_iter):
            q_F = q_F0 + (n_r * rho + n_t * v) / L**3
            m_2 = m**2 + n_r * rho / L**2
            dF = (
                0.5 * V * (V - 1) * tau / (1 + tau * q_F)
                + P / (2 * kappa) * (V - 1) / V * tau**2 * q_S**2 / (1 + tau * q_F) ** 2
            )
            dM = 0.5 * V * tau / (1 + tau * m_2) + P / (2 * kappa) * tau**2 * m**2 / (
                V * (1 + tau * m_2) ** 2
            )
            v_new = 1 / (1 / sigma_g**2 + 2 * dF / L**3)
            rho_new = 1 / (1 / sigma_g**2 + 2 * dF / L**3 + 2 * dM / L**2)
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
    seq_len: int,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
    sigma_b: float = 1.0,
    fluctuations: bool = False,
    return_parts: bool = False,
):
    r"""Order-parameter action :math:`S(m, c_G)` of linear attention (batched, differentiable).

    ``fluctuations=False``: the saddle (transverse directions of ``G`` at zero, i.e. the MAP).
    ``fluctuations=True``: transverse directions at their large-deviation optimum
    (:func:`transverse_optimum`, held fixed under autograd: by the envelope theorem the
    gradient is still exact; :func:`linear_saddle` builds exact Hessians by a Schur complement).
    With ``return_parts`` also returns the statistics used.
    """
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    V = check_positive_int(vocab_size, "vocab_size", minimum=2)
    kappa, sigma_w, sigma_g, sigma_b = _hyper(kappa, sigma_w, sigma_g, sigma_b)
    m = as_tensor(m, "m")
    c_G = as_tensor(c_G, "c_G", dtype=m.dtype, device=m.device)
    P = as_tensor(n_sequences, "n_sequences", dtype=m.dtype, device=m.device)
    if fluctuations:
        rho, v = transverse_optimum(
            m,
            c_G,
            n_sequences=P,
            seq_len=L,
            vocab_size=V,
            kappa=kappa,
            sigma_w=sigma_w,
            sigma_g=sigma_g,
        )
    else:
        rho = v = torch.zeros((), dtype=m.dtype, device=m.device)
    S, parts = _linear_full(
        m, c_G, rho, v, P, L, V, kappa, sigma_w, sigma_g, sigma_b, fluctuations
    )
    return (S, parts) if return_parts else S


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


def _as_p_grid(n_sequences) -> torch.Tensor:
    P = as_tensor(n_sequences, "n_sequences", dtype=torch.float64).reshape(-1)
    check_finite(P, "n_sequences")
    if P.numel() == 0 or bool((P <= 0).any()):
        raise ValueError("n_sequences must be positive")
    return P


def linear_saddle(
    n_sequences,
    *,
    seq_len: int,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
    sigma_b: float = 1.0,
    fluctuations: bool = False,
    n_newton: int = 30,
) -> LinearSaddle:
    """Global minimum of :func:`linear_action` over ``(m ≥ 0, c_G)`` for each sample size.

    A grid search (vectorised over P) finds the basin, damped Newton steps polish it. With
    fluctuations the Hessian of the effective action is the Schur complement of the joint
    Hessian in ``(m, c_G, ρ, v)``. The action is even under ``(m, c_G) → −(m, c_G)``; we report
    the ``m ≥ 0`` branch.
    """
    P = _as_p_grid(n_sequences)
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    V = check_positive_int(vocab_size, "vocab_size", minimum=2)
    kappa, sigma_w, sigma_g, sigma_b = _hyper(kappa, sigma_w, sigma_g, sigma_b)
    kw = dict(
        seq_len=L,
        vocab_size=V,
        kappa=kappa,
        sigma_w=sigma_w,
        sigma_g=sigma_g,
        sigma_b=sigma_b,
        fluctuations=fluctuations,
    )
    m_grid = torch.linspace(0, 1.6, 65, dtype=torch.float64)
    c_grid = torch.cat(
        [
            -torch.logspace(-5, np.log10(0.3), 16, dtype=torch.float64).flip(0),
            torch.zeros(1, dtype=torch.float64),
            torch.logspace(-5, np.log10(1.3), 40, dtype=torch.float64),
        ]
    )
    mm, cc = torch.meshgrid(m_grid, c_grid, indexing="ij")
    S_grid = linear_action(mm[None], cc[None], n_sequences=P[:, None, None], **kw)
    best = S_grid.reshape(len(P), -1).argmin(-1)
    x = torch.stack([mm.reshape(-1)[best], cc.reshape(-1)[best]], -1)  # (nP, 2)

    def grad_full_hess(z):
        """Per-row gradient and Hessian of the (row-separable) action: 1 + d backward passes."""
        z = z.detach().requires_grad_(True)
        S = _linear_full(
            z[:, 0],
            z[:, 1],
            z[:, 2],
            z[:, 3],
            P,
            L,
            V,
            kappa,
            sigma_w,
            sigma_g,
            sigma_b,
            fluctuations,
        )[0]
        (g,) = torch.autograd.grad(S.sum(), z, create_graph=True)
        rows = [
            torch.autograd.grad(g[:, i].sum(), z, retain_graph=True)[0]
            for i in range(z.shape[1])
        ]
        return g.detach(), torch.stack(rows, 1)

    def joint(x):
        if fluctuations:
            rho, v = transverse_optimum(
                x[:, 0],
                x[:, 1],
                n_sequences=P,
                seq_len=L,
                vocab_size=V,
                kappa=kappa,
                sigma_w=sigma_w,
                sigma_g=sigma_g,
            )
        else:
            rho = v = torch.zeros(len(P), dtype=torch.float64)
        return torch.cat([x, rho[:, None], v[:, None]], -1)

    def grad_hess(x):
        z = joint(x)
        g, H = grad_full_hess(z)
        g, Hxx = g[:, :2], H[:, :2, :2]
        if fluctuations:  # minimise out (ρ, v): Schur complement
            Hxy, Hyy = H[:, :2, 2:], H[:, 2:, 2:]
            Hxx = Hxx - Hxy @ torch.linalg.solve(Hyy, Hxy.transpose(-1, -2))
        return g, Hxx

    def value(x):
        return linear_action(x[:, 0], x[:, 1], n_sequences=P, **kw)

    eye = torch.eye(2, dtype=torch.float64)
    for _ in range(n_newton):
        g, H = grad_hess(x)
        lam_min = torch.linalg.eigvalsh(H)[:, 0]
        shift = torch.clamp(-lam_min, min=0) * 1.1 + 1e-12 * H.abs().amax((-1, -2))
        step = torch.linalg.solve(H + shift[:, None, None] * eye, g[..., None])[..., 0]
        f0 = value(x)
        t = torch.ones(len(P), dtype=torch.float64)
        for _ in range(30):  # backtracking
            ok = value(x - t[:, None] * step) <= f0
            if bool(ok.all()):
                break
            t = torch.where(ok, t, t / 2)
        x_new = x - t[:, None] * step
        x = torch.where((value(x_new) <= f0)[:, None], x_new, x)
        if float((t[:, None] * step).abs().max()) < 1e-13:
            break
    x = x * torch.where(x[:, :1] < 0, -1.0, 1.0)
    S, parts = linear_action(x[:, 0], x[:, 1], n_sequences=P, return_parts=True, **kw)
    _, H = grad_hess(x)
    cov = torch.linalg.inv(H)
    tau = sigma_w**2 * P / (kappa * V)
    explained = tau * parts["q_S"] ** 2 / (1 + tau * parts["q_F"])
    mse = train_mse_theory(
        parts["q_F"],
        parts["q_S"],
        parts["m_1"],
        parts["m_2"],
        n_sequences=P,
        vocab_size=V,
        kappa=kappa,
        sigma_w=sigma_w,
    )
    n = lambda t: t.detach().cpu().numpy()  # noqa: E731
    rho, v = (parts["rho"].expand_as(P), parts["v"].expand_as(P))
    return LinearSaddle(
        n(P),
        n(x[:, 0]),
        n(x[:, 1]),
        n(x[:, 0] - x[:, 1]),
        n(S),
        n(explained),
        n(mse),
        n(cov[:, 0, 0]),
        n(cov[:, 1, 1]),
        n(rho),
        n(v),
        fluctuations,
    )


def _pooling_curvature(P: float, kw) -> float:
    """:math:`\\partial_m^2 S_\\text{eff}` at ``m = c_G = 0`` by a central difference (the
    effective action is minimised over the transverse variances at each ``m``)."""
    h = 1e-3
    m = torch.tensor([-h, 0.0, h], dtype=torch.float64)
    S = linear_action(m, torch.zeros(3, dtype=torch.float64), n_sequences=P, **kw)
    return float((S[0] - 2 * S[1] + S[2]) / h**2)


def linear_onset_p(
    *,
    seq_len: int,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
    sigma_b: float = 1.0,
    fluctuations: bool = False,
) -> float:
    r"""Sample size where the pooling curvature :math:`K_m = \partial_m^2 S|_{0}` changes sign.

    Saddle (closed form, the positive root of :func:`derive_linear_onset`):
    :math:`K_m(P) = 1/\sigma_m^2 + aP - bP^2` with
    :math:`a = \sigma_w^2(V-1)/(\kappa L)+\sigma_w^2/\kappa` and
    :math:`b = \sigma_w^2[(V-1)/L^2+1]/(\kappa^2V^2)`. With ``fluctuations=True`` the curvature of
    the fluctuation-corrected action is found by autograd and its zero by bisection.
    """
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    V = check_positive_int(vocab_size, "vocab_size", minimum=2)
    kappa, sigma_w, sigma_g, sigma_b = _hyper(kappa, sigma_w, sigma_g, sigma_b)
    sigma_m2 = sigma_b**2 + sigma_g**2 / L**2
    a = sigma_w**2 * (V - 1) / (kappa * L) + sigma_w**2 / kappa
    b = sigma_w**2 * ((V - 1) / L**2 + 1) / (kappa**2 * V**2)
    p_saddle = float((a + np.sqrt(a * a + 4 * b / sigma_m2)) / (2 * b))
    if not fluctuations:
        return p_saddle
    kw = dict(
        seq_len=L,
        vocab_size=V,
        kappa=kappa,
        sigma_w=sigma_w,
        sigma_g=sigma_g,
        sigma_b=sigma_b,
        fluctuations=True,
    )
    return _bisect_log(
        lambda p: -_pooling_curvature(p, kw), p_saddle / 20, p_saddle * 20, n_iter=40
    )


def _bisect_log(fun, lo: float, hi: float, n_iter: int = 40) -> float:
    """Root of an increasing ``fun`` (sign change from − to +) on [lo, hi] by bisection in log P."""
    flo, fhi = fun(lo), fun(hi)
    for p_end, value in ((lo, flo), (hi, fhi)):
        if np.isnan(value):
            raise ValueError(
                f"the action gap is undefined (NaN) at P = {p_end:.3g}: the saddle search "
                f"failed there; choose a narrower p_range"
            )
    if not (flo < 0 < fhi):
        raise ValueError(
            f"no crossing in [{lo:.3g}, {hi:.3g}] (values {flo:.3g}, {fhi:.3g}); widen the range"
        )
    for _ in range(n_iter):
        mid = float(np.sqrt(lo * hi))
        if fun(mid) < 0:
            lo = mid
        else:
            hi = mid
    return float(np.sqrt(lo * hi))


def linear_crossover_p(
    *,
    seq_len: int,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
    sigma_b: float = 1.0,
    fluctuations: bool = False,
    level: float = 0.5,
    p_range=(1.0, 1e9),
    n_grid: int = 24,
) -> float:
    """Sample size where the explained share of the non-constant target variance reaches ``level``.

    The saddle is evaluated on a log-spaced grid of ``P`` (one vectorised call), the crossing is
    bracketed, and a second, finer grid inside the bracket is interpolated linearly in ``log P``.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    kw = dict(
        seq_len=seq_len,
        vocab_size=vocab_size,
        kappa=kappa,
        sigma_w=sigma_w,
        sigma_g=sigma_g,
        sigma_b=sigma_b,
        fluctuations=fluctuations,
    )
    lo, hi = np.log(p_range[0]), np.log(p_range[1])
    for _ in range(3):
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


# ---- softmax attention -----------------------------------------------------------------------
def softmax_order_parameters(g, seq_len: int):
    """``(a_1, a_G)`` of the symmetric-logit softmax attention ``rowsoftmax(g S)`` (batched)."""
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    g = as_tensor(g, "g")
    eg = torch.exp(g)
    return L / (eg + L - 1), (eg - 1) / (eg + L - 1)


def softmax_action(
    g,
    *,
    n_sequences,
    seq_len: int,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
):
    r""":math:`S(g) = (L-1)g^2/2\sigma_g^2 + S_\text{data}(m=1, c_G=a_G(g))` (batched)."""
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    V = check_positive_int(vocab_size, "vocab_size", minimum=2)
    kappa, sigma_w, sigma_g, _ = _hyper(kappa, sigma_w, sigma_g)
    g = as_tensor(g, "g")
    P = as_tensor(n_sequences, "n_sequences", dtype=g.dtype, device=g.device)
    _, aG = softmax_order_parameters(g, L)
    q_F = 1 / L + aG**2 * (1 - 1 / L)
    q_S = 1 / L + aG * (1 - 1 / L)
    one = torch.ones_like(aG)
    return (L - 1) * g**2 / (2 * sigma_g**2) + data_action(
        q_F, q_S, one, one, n_sequences=P, vocab_size=V, kappa=kappa, sigma_w=sigma_w
    )


@dataclass
class SoftmaxSaddle:
    """Minima of the softmax action over ``g`` at each ``P`` (arrays over P)."""

    n_sequences: np.ndarray
    g: np.ndarray  #: global minimiser
    a_G: np.ndarray  #: copy order parameter at the global minimum
    action: np.ndarray
    g_low: (
        np.ndarray
    )  #: the unstructured local minimum (g ≈ 0); −inf if absent (never NaN)
    g_high: np.ndarray  #: the copy local minimum; −inf if absent
    n_minima: np.ndarray  #: number of local minima (2 in the coexistence window)
    train_mse: np.ndarray
    susceptibility: np.ndarray  #: Laplace variance of a_G at the global minimum


def softmax_saddle(
    n_sequences,
    *,
    seq_len: int,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
    n_grid: int = 4001,
) -> SoftmaxSaddle:
    """Local and global minima of :func:`softmax_action` on a fine ``g`` grid (vectorised over P)."""
    P = _as_p_grid(n_sequences)
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    n_grid = check_positive_int(n_grid, "n_grid", minimum=101)
    kw = dict(
        seq_len=L, vocab_size=vocab_size, kappa=kappa, sigma_w=sigma_w, sigma_g=sigma_g
    )
    g = torch.linspace(-1.0, 2 * np.log(L) + 4, n_grid, dtype=torch.float64)
    S = softmax_action(g[None], n_sequences=P[:, None], **kw)  # (nP, n_grid)
    n_min, g_low, _, g_high, _ = _softmax_minima(S, g, L)
    best = S.argmin(-1)
    g_best = g[best].clone().requires_grad_(True)
    # polish with Newton steps in g (elementwise: the action is separable over P)
    for _ in range(20):
        s = softmax_action(g_best, n_sequences=P, **kw).sum()
        (d1,) = torch.autograd.grad(s, g_best, create_graph=True)
        (d2,) = torch.autograd.grad(d1.sum(), g_best)
        with torch.no_grad():
            g_best = (
                g_best - d1 / torch.where(d2 > 0, d2, torch.ones_like(d2))
            ).requires_grad_(True)
    g_best = g_best.detach()
    a1, aG = softmax_order_parameters(g_best, L)
    q_F = 1 / L + aG**2 * (1 - 1 / L)
    q_S = 1 / L + aG * (1 - 1 / L)
    one = torch.ones_like(aG)
    mse = train_mse_theory(
        q_F,
        q_S,
        one,
        one,
        n_sequences=P,
        vocab_size=vocab_size,
        kappa=kappa,
        sigma_w=sigma_w,
    )
    # Laplace variance of a_G: var(g) = 1/S''(g), then the delta method, (da_G/dg)² var(g)
    gg = g_best.clone().requires_grad_(True)
    s = softmax_action(gg, n_sequences=P, **kw).sum()
    (d1,) = torch.autograd.grad(s, gg, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), gg)
    daG = L * torch.exp(g_best) / (torch.exp(g_best) + L - 1) ** 2
    susc = daG**2 / d2
    n = lambda t: t.detach().cpu().numpy()  # noqa: E731
    return SoftmaxSaddle(
        n(P),
        n(g_best),
        n(aG),
        n(softmax_action(g_best, n_sequences=P, **kw)),
        n(g_low),
        n(g_high),
        n(n_min),
        n(mse),
        n(susc),
    )


def _softmax_minima(S: torch.Tensor, g: torch.Tensor, L: int):
    """Classify grid minima of ``S (..., n_grid)``: returns (n_min, g_low, S_low, g_high, S_high).

    With two or more local minima the lowest-g one is the unstructured minimum and the highest-g
    one the copy minimum; a single minimum is classified by ``g < ln(L)/2`` (unstructured)."""
    interior = (S[..., 1:-1] < S[..., :-2]) & (S[..., 1:-1] <= S[..., 2:])
    n_min = interior.sum(-1)
    gi = g[1:-1].expand_as(interior)
    Si = S[..., 1:-1]
    inf = torch.full_like(gi, np.inf)
    first = torch.where(interior, gi, inf).argmin(-1, keepdim=True)
    last = torch.where(interior, gi, -inf).argmax(-1, keepdim=True)
    g_first, g_last = gi.gather(-1, first)[..., 0], gi.gather(-1, last)[..., 0]
    S_first, S_last = Si.gather(-1, first)[..., 0], Si.gather(-1, last)[..., 0]
    single_low = (n_min == 1) & (g_first < np.log(L) / 2)
    has_low = (n_min >= 2) | single_low
    has_high = (n_min >= 2) | ((n_min == 1) & ~single_low)
    ninf = torch.full_like(g_first, -np.inf)
    pinf = torch.full_like(g_first, np.inf)
    return (
        n_min,
        torch.where(has_low, g_first, ninf),
        torch.where(has_low, S_first, pinf),
        torch.where(has_high, g_last, ninf),
        torch.where(has_high, S_last, pinf),
    )


def _softmax_gap(p: float, kw) -> float:
    """S(unstructured minimum) − S(copy minimum) at P = p: negative below the transition,
    positive above (±inf when one basin has no minimum)."""
    L = kw["seq_len"]
    g = torch.linspace(-1.0, 2 * np.log(L) + 4, 4001, dtype=torch.float64)
    S = softmax_action(g, n_sequences=p, **kw)
    _, _, S_low, _, S_high = _softmax_minima(S, g, L)
    return float(S_low - S_high)


def softmax_critical_p(
    *,
    seq_len: int,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
    p_range=(1.0, 1e9),
) -> float:
    """First-order transition: the ``P`` where the copy basin's minimum becomes the global one."""
    kw = dict(
        seq_len=seq_len,
        vocab_size=vocab_size,
        kappa=kappa,
        sigma_w=sigma_w,
        sigma_g=sigma_g,
    )
    return _bisect_log(lambda p: _softmax_gap(p, kw), *p_range, n_iter=40)


def softmax_coexistence(
    n_sequences,
    *,
    seq_len: int,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
):
    """``(P_low, P_high)``: first and last sample size of the grid ``n_sequences`` where both local
    minima exist (the metastability window of the first-order transition); ``None`` if never."""
    res = softmax_saddle(
        n_sequences,
        seq_len=seq_len,
        vocab_size=vocab_size,
        kappa=kappa,
        sigma_w=sigma_w,
        sigma_g=sigma_g,
    )
    both = res.n_minima >= 2
    if not both.any():
        return None
    return float(res.n_sequences[both].min()), float(res.n_sequences[both].max())


# ---- the posterior of G, for SGLD and Adam ---------------------------------------------------
def pack(G, b=None) -> torch.Tensor:
    """Flatten ``G (n, L, L)`` (and ``b (n,)``) into one vector per model, ``(n, L² [+ 1])``."""
    G = as_tensor(G, "G")
    flat = G.reshape(G.shape[0], -1)
    if b is None:
        return flat
    return torch.cat(
        [flat, as_tensor(b, "b", dtype=G.dtype, device=G.device).reshape(-1, 1)], -1
    )


def unpack(theta, seq_len: int):
    """Inverse of :func:`pack`: ``(G, b)`` with ``b = None`` when ``theta`` has ``L²`` columns."""
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    if theta.shape[-1] not in (L * L, L * L + 1):
        raise ValueError(
            f"theta must have L² = {L * L} or L² + 1 columns, got {theta.shape[-1]}"
        )
    G = theta[..., : L * L].reshape(*theta.shape[:-1], L, L)
    return G, (theta[..., L * L] if theta.shape[-1] == L * L + 1 else None)


def marginal_potential(
    stats: CopyStats,
    *,
    activation: str = "linear",
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
    sigma_b: float = 1.0,
):
    """``potential(theta) -> (n,)``: :func:`exact_action` of packed ``theta = (G, b)`` (one model
    per row; ``stats`` batched per row or shared) — the target of SGLD and Adam over ``G``."""
    check_choice(activation, "activation", ACTIVATIONS)
    if not isinstance(stats, CopyStats):
        raise TypeError("stats must be a CopyStats")
    L = stats.seq_len

    def potential(theta):
        G, b = unpack(theta, L)
        return exact_action(
            G,
            stats,
            activation=activation,
            b=b,
            kappa=kappa,
            sigma_w=sigma_w,
            sigma_g=sigma_g,
            sigma_b=sigma_b,
        )

    return potential


# ---- fluctuations of the order parameters beyond Laplace (finite-size susceptibility) ---------
def _quadrature_moments(S: torch.Tensor, x: torch.Tensor, f: torch.Tensor):
    """Mean and variance of ``f(x)`` under ``p(x) ∝ exp(−S(x))`` on a uniform grid (last dim)."""
    w = torch.exp(-(S - S.min(-1, keepdim=True).values))
    w = w / w.sum(-1, keepdim=True)
    mean = (w * f).sum(-1)
    return mean, (w * (f - mean[..., None]) ** 2).sum(-1), w


def linear_pooling_moments(
    n_sequences,
    *,
    seq_len: int,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
    sigma_b: float = 1.0,
    fluctuations: bool = True,
    m_max: float | None = None,
    n_grid: int = 1201,
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
    distribution is even in ``m``, so ``⟨m²⟩`` is its variance).
    """
    P = _as_p_grid(n_sequences)
    n_grid = check_positive_int(n_grid, "n_grid", minimum=101)
    kw = dict(
        seq_len=seq_len,
        vocab_size=vocab_size,
        kappa=kappa,
        sigma_w=sigma_w,
        sigma_g=sigma_g,
        sigma_b=sigma_b,
        fluctuations=fluctuations,
    )
    if m_max is None:
        coarse = torch.logspace(-3, 1.5, 200, dtype=torch.float64)
        Sc = linear_action(
            coarse[None],
            torch.zeros(1, 200, dtype=torch.float64),
            n_sequences=P[:, None],
            **kw,
        )
        S0 = linear_action(
            torch.zeros(1, dtype=torch.float64),
            torch.zeros(1, dtype=torch.float64),
            n_sequences=P,
            **kw,
        )
        high = (Sc - torch.minimum(Sc.min(-1).values, S0)[:, None]) > 40
        if not bool(high.any(-1).all()):
            raise ValueError(
                "the pooling action does not rise by 40 within |m| < 30; pass m_max"
            )
        edge = coarse[high.to(torch.int64).argmax(-1)]
    else:
        edge = torch.full_like(P, check_positive(m_max, "m_max"))
    m = edge[:, None] * torch.linspace(-1, 1, n_grid, dtype=torch.float64)[None]
    S = linear_action(m, torch.zeros_like(m), n_sequences=P[:, None], **kw)
    check_finite(S, "the pooling action")
    mean_abs, _, w = _quadrature_moments(S, m, m.abs())
    if bool((w[:, [0, -1]] > 1e-8 * w.max(-1, keepdim=True).values).any()):
        raise ValueError(
            "the pooling distribution is not negligible at ±m_max; increase m_max"
        )
    return mean_abs.numpy(), (w * m**2).sum(-1).numpy()


def softmax_copy_moments(
    n_sequences,
    *,
    seq_len: int,
    vocab_size: int,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
    n_grid: int = 4001,
):
    r"""Mean and variance of :math:`a_G` under :math:`p(g)\propto e^{-S(g)}` (symmetric-logit softmax
    action, :func:`softmax_action`), by quadrature over the logit ``g`` — the softmax counterpart of
    :func:`linear_pooling_moments`. Near :math:`P^\star` both minima carry weight and the variance
    peaks *at* the transition (coexistence), not before it. Returns ``(mean, var)`` over ``P``."""
    P = _as_p_grid(n_sequences)
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    n_grid = check_positive_int(n_grid, "n_grid", minimum=101)
    g = torch.linspace(-2.0, 2 * np.log(L) + 6, n_grid, dtype=torch.float64)
    S = softmax_action(
        g[None],
        n_sequences=P[:, None],
        seq_len=L,
        vocab_size=vocab_size,
        kappa=kappa,
        sigma_w=sigma_w,
        sigma_g=sigma_g,
    )
    check_finite(S, "the softmax action")
    _, aG = softmax_order_parameters(g, L)
    mean, var, _ = _quadrature_moments(S, g, aG.expand_as(S))
    return mean.numpy(), var.numpy()
