r"""SymPy derivations of the copy head's effective action (functions returning expressions).

See :mod:`attnbook.copyhead.action` for the formulas. Each function is cached and returns SymPy
expressions; the tests compare them with independent numeric computations (quadrature, dense
Gaussian log-densities, finite differences).
"""

from __future__ import annotations

from functools import cache

import sympy as sp

__all__ = [
    "symbols",
    "derive_readout_integral",
    "derive_data_action",
    "brief_data_action",
    "derive_linear_action",
    "derive_linear_onset",
    "derive_softmax_order_parameters",
]

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
