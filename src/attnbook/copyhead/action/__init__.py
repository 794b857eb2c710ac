r"""The effective action of the attention matrix: the readout integrated out (SymPy + numerics).

Split by concern: :mod:`~.derivation` (SymPy), :mod:`~.evidence` (exact evidence, Monte Carlo
over data sets, the marginal over ``(G, b)`` with ``pack``/``unpack`` and readouts),
:mod:`~.linear` and :mod:`~.softmax` (the two analyses) and :mod:`~.numerics` (the one grid of
sample sizes and of logits, autograd Hessians, bisection). Every public name is importable
from here.

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

:func:`~.derivation.derive_data_action` derives this with SymPy from the one-dimensional Gaussian integral
over one readout coordinate (:func:`~.derivation.derive_readout_integral`); tests compare it with the exact
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

# every public name of the four concerns, listed once in its module's ``__all__``
from attnbook.copyhead.action import derivation, evidence, linear, softmax
from attnbook.copyhead.action.derivation import *  # noqa: F403
from attnbook.copyhead.action.evidence import *  # noqa: F403
from attnbook.copyhead.action.linear import *  # noqa: F403
from attnbook.copyhead.action.numerics import CopyHyper
from attnbook.copyhead.action.softmax import *  # noqa: F403

__all__ = [
    "CopyHyper",
    *derivation.__all__,
    *evidence.__all__,
    *linear.__all__,
    *softmax.__all__,
]
