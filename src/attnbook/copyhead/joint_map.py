r"""The joint MAP: a network trained over all its weights ``(G, W, b)``, for comparison with the
MAP of the marginal over ``G``.

"Adam MAP" elsewhere in Part II is the most likely attention matrix of the *marginal* posterior
:math:`p(G, b\mid\mathcal D)` — the readout ``W`` integrated out exactly. A network trained with
Adam and weight decay instead maximises the *joint* posterior

.. math::
    -\ln p(G, W, b\mid\mathcal D) = \mathcal L(G, W, b)
      + \frac{\|W\|^2}{2\sigma_w^2} + \frac{\|G\|^2}{2\sigma_g^2} + \frac{b^2}{2\sigma_b^2} + C,

with the loss :math:`\mathcal L` of :func:`attnbook.copyhead.loss`. The two differ by the
readout's log-determinant (the Occam factor :math:`\tfrac V2\ln\det(I+\lambda K)` of the
marginal), which is what holds linear attention's pooling back until :math:`P\sim V^2`: the
joint MAP has no such term and pools from a much smaller ``P``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnbook import train
from attnbook.copyhead.action import pack, readouts
from attnbook.copyhead.model import init_params, loss, prior_energy, resolve_copy_kind
from attnbook.copyhead.task import CopyStats, _check_stats
from attnbook.validation import check_positive, check_positive_int

__all__ = ["JointMap", "joint_map_heads"]


@dataclass(frozen=True)
class JointMap:
    """Joint-MAP heads, one per row of ``stats`` × restart (``[all data sets] × n_restarts``):
    ``m`` (absolute mean row sum of ``A``), ``c_G`` (aligned with the sign of ``m``),
    ``objective`` (the final negative log joint posterior), ``params`` (``G``, ``W``, ``b``)."""

    m: np.ndarray
    c_G: np.ndarray
    objective: np.ndarray
    params: dict
    wall_s: float


def joint_map_heads(
    stats: CopyStats,
    *,
    kind: str = "linear",
    n_restarts: int = 1,
    n_steps: int = 1500,
    lr: float = 0.02,
    init_scale: float = 0.3,
    seed=None,
    kappa: float = 1.0,
    **priors,
) -> JointMap:
    """Adam on the negative log joint posterior of ``(G, W, b)`` (loss + Gaussian priors), from
    ``n_restarts`` random starts (all weights ``init_scale · N(0, 1)``) per data set.
    ``priors``: ``sigma_w``, ``sigma_g``, ``sigma_b`` of
    :func:`attnbook.copyhead.model.prior_energy` (default 1)."""
    unknown = set(priors) - {"sigma_w", "sigma_g", "sigma_b"}
    if unknown:
        raise TypeError(f"unknown prior width(s) {sorted(unknown)}")
    kind = resolve_copy_kind(kind)
    stats = _check_stats(stats)
    n_restarts = check_positive_int(n_restarts, "n_restarts")
    scale = check_positive(init_scale, "init_scale")
    every = stats.repeat(n_restarts)
    n = every.n_sequences.shape[0]
    p0 = init_params(
        n,
        stats.seq_len,
        stats.vocab_size,
        g_scale=scale,
        w_scale=scale,
        b_scale=scale if kind == "linear" else 0.0,
        seed=seed,
    )
    if kind == "softmax":
        p0.pop("b")

    def objective(p):
        return loss(p, every, kind=kind, kappa=kappa) + prior_energy(p, **priors)

    hist = train.adam(objective, p0, n_steps=n_steps, lr=check_positive(lr, "lr"))
    r = readouts(pack(hist.params), kind=kind)
    return JointMap(
        m=r["m"],
        c_G=r["c_G"],
        objective=np.asarray(hist.final_loss),
        params={k: v.detach() for k, v in hist.params.items()},
        wall_s=hist.wall_s,
    )
