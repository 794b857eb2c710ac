r"""SymPy derivations of linear attention's two crossover formulas (model E*).

The crossover is where the head explains half of the non-constant target variance,
:math:`\tau q_S^2/(1+\tau q_F)=1/2` with :math:`\tau=\sigma_w^2P/(\kappa V)`. Near it the pooling
amplitude is small (:math:`m\to0` as :math:`L` grows), so at leading order in :math:`1/L`
:math:`q_S=c_G` and :math:`q_F=c_G^2+\delta`, with :math:`\delta` the transverse part of
:math:`q_F`.

* **Saddle** (:func:`derive_saddle_crossover`): :math:`\delta=0`. With :math:`x=\tau c_G^2` the
  action is :math:`L^3x/(2\sigma_g^2\tau)+\tfrac12V(V-1)\ln(1+x)-\tfrac{P(V-1)}{2\kappa V}\tfrac{x}{1+x}`;
  the crossover is :math:`x=1`, and stationarity there is a quadratic in :math:`P` whose large-``L``
  root is :math:`P_X=2\kappa VL^{3/2}/(\sigma_w\sigma_g\sqrt{V-1})`.
* **Fluctuations** (:func:`derive_fluctuation_crossover`): the :math:`\sim L^2` transverse
  entries of ``G`` keep variance ``v`` each, so :math:`\delta=v/L`, and :math:`\tau q_F\gg1`. Three
  conditions at leading order: the crossover :math:`c_G^2=\delta`; stationarity in
  :math:`c_G^2`, :math:`L^3/2\sigma_g^2=P(V-1)/(8\kappa V\delta)`; the transverse fixed point
  :math:`1/v=1/\sigma_g^2+2\,\partial_{q_F}S/L^3` with
  :math:`\partial_{q_F}S\approx\tfrac{P(V-1)}{2\kappa V}q_S^2/q_F^2`. Their solution is
  :math:`v=\sigma_g^2/2` and :math:`P_X=2\kappa L^2V/(V-1)` — independent of
  :math:`\sigma_w,\sigma_g`.
"""

from __future__ import annotations

import sympy as sp

__all__ = ["derive_saddle_crossover", "derive_fluctuation_crossover"]


def _symbols():
    return sp.symbols("P L V kappa sigma_w sigma_g", positive=True)


def derive_saddle_crossover():
    """``(P_exact, P_leading, symbols)``: the crossover of the saddle at leading order in
    ``1/L`` for the copy coefficient (the positive root of the stationarity condition at
    ``x = τ c_G² = 1``, keeping the ``V(V−1)/2`` log-determinant term) and its large-``L``
    limit :math:`2\\kappa VL^{3/2}/(\\sigma_w\\sigma_g\\sqrt{V-1})` (the same root without the
    log-determinant, which is O(V²) against P ≫ V²). ``symbols`` maps names to the
    SymPy symbols ``P, L, V, kappa, sigma_w, sigma_g``."""
    P, L, V, kappa, sw, sg = _symbols()
    x = sp.symbols("x", positive=True)
    tau = sw**2 * P / (kappa * V)
    S = (
        L**3 * x / (2 * sg**2 * tau)
        + V * (V - 1) / 2 * sp.log(1 + x)
        - P * (V - 1) / (2 * kappa * V) * x / (1 + x)
    )
    log_det = V * (V - 1) / 2 * sp.log(1 + x)

    def root(action):
        stationary = sp.together(sp.diff(action, x).subs(x, 1))
        roots = sp.solve(sp.numer(stationary), P)
        test = {L: 64, V: 4, kappa: 1, sw: 1, sg: 1}
        return [r for r in roots if r.subs(test) > 0][0]

    P_exact = root(S)
    P_leading = root(S - log_det)  # the log-determinant is O(V²) against P ≫ V²
    names = dict(P=P, L=L, V=V, kappa=kappa, sigma_w=sw, sigma_g=sg)
    return P_exact, sp.factor(P_leading), names


def derive_fluctuation_crossover():
    """``(P_X, v, symbols)``: the fluctuation-corrected crossover :math:`2\\kappa L^2V/(V-1)`
    and the transverse variance :math:`v=\\sigma_g^2/2` there, solved by SymPy from the three
    leading-order conditions of the module docstring."""
    P, L, V, kappa, sw, sg = _symbols()
    v, c2 = sp.symbols("v c2", positive=True)
    delta = v / L
    q_F = c2 + delta
    q_S2 = c2
    crossover = sp.Eq(c2, delta)  # τ q_S²/(1 + τ q_F) → q_S²/q_F = 1/2
    data_gain = P * (V - 1) / (2 * kappa * V) * q_S2 / q_F  # the copy term at τ q_F ≫ 1
    stationary_c = sp.Eq(L**3 / (2 * sg**2), sp.diff(data_gain, c2))
    dS_dqF = P * (V - 1) / (2 * kappa * V) * q_S2 / q_F**2
    transverse = sp.Eq(1 / v, 1 / sg**2 + 2 * dS_dqF / L**3)
    sol = sp.solve([crossover, stationary_c, transverse], [P, v, c2], dict=True)
    sol = [s for s in sol if all(val.is_positive is not False for val in s.values())][0]
    names = dict(P=P, L=L, V=V, kappa=kappa, sigma_w=sw, sigma_g=sg)
    return sp.simplify(sol[P]), sp.simplify(sol[v]), names
