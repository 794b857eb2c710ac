r"""What a first-order transition looks like to a sampler: the hysteresis loop.

:func:`hysteresis_loop` sweeps the sample size ``P`` up and then down on nested data sets (growing
``P`` adds sequences to the same data set), running SGLD at every ``P`` from the end state of the
previous ``P`` — the way an annealing experiment or a growing training set would. Going up, the
chains start cold (small random scores) and stay in the unstructured basin until it stops being
one or a fluctuation carries them over the barrier; going down they start from the copy state
reached at the largest ``P``. Where the two branches differ the chains have not mixed: each
remembers where it came from. The steps follow the rule of :mod:`attnbook.copyhead.diagnostics`
(``fraction / λ_max`` per block, re-estimated at the start of every stage).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnbook import sgld
from attnbook.copyhead.action import marginal_potential, readouts
from attnbook.copyhead.diagnostics import block_step_sizes
from attnbook.copyhead.model import resolve_copy_kind
from attnbook.copyhead.task import nested_statistics
from attnbook.device import as_generator
from attnbook.validation import check_positive, check_positive_int

__all__ = ["HysteresisLoop", "hysteresis_loop"]


@dataclass(frozen=True)
class HysteresisLoop:
    """``up`` and ``down``: the copy order parameter (``a_G`` for softmax, aligned ``c_G`` for
    linear) averaged over the second half of each stage, ``(n_P, n_datasets)``, for the sweeps
    up and down; ``up_se``/``down_se`` their Monte Carlo standard errors (per chain, from its
    own ESS)."""

    n_sequences: np.ndarray
    up: np.ndarray
    down: np.ndarray
    up_se: np.ndarray
    down_se: np.ndarray
    wall_s: float


def hysteresis_loop(
    n_sequences,
    seq_len: int,
    vocab_size: int,
    *,
    kind: str = "softmax",
    n_datasets: int = 4,
    n_steps: int = 500,
    thin: int = 5,
    fraction: float = 0.25,
    init_scale: float = 0.1,
    seed=None,
) -> HysteresisLoop:
    """Sweep ``P`` over ``n_sequences`` (sorted) up, then down, one SGLD chain per data set,
    each stage ``n_steps`` long and started from the previous stage's last draw; the first
    ``n_steps // 2`` of a stage are burn-in."""
    kind = resolve_copy_kind(kind)
    P = np.sort(np.asarray(n_sequences, dtype=float).reshape(-1))
    if P.size < 2:
        raise ValueError("n_sequences needs at least two sample sizes")
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    nd = check_positive_int(n_datasets, "n_datasets")
    n_steps = check_positive_int(n_steps, "n_steps", minimum=8 * thin)
    gen = as_generator(seed)
    stats = nested_statistics(P.astype(int), L, vocab_size, n_datasets=nd, seed=gen)
    d = L * L + (kind == "linear")
    theta = check_positive(init_scale, "init_scale") * torch.randn(
        nd, d, generator=gen, dtype=torch.float64
    )
    out = {"up": [], "down": [], "up_se": [], "down_se": []}
    wall = 0.0
    order = {"up": range(P.size), "down": range(P.size - 1, -1, -1)}
    for direction, indices in order.items():
        for i in indices:
            st = stats[i * nd : (i + 1) * nd]
            eta, _ = block_step_sizes(
                st, theta, kind=kind, fraction=fraction, n_mode_steps=0, seed=gen
            )
            res = sgld.sample(
                marginal_potential(st, kind=kind),
                theta,
                step_size=eta,
                n_steps=n_steps,
                burn_in=n_steps // 2,
                thin=thin,
                seed=gen,
            )
            wall += res.diagnostics["wall_s"]
            theta = res.samples[-1].clone()
            c = torch.as_tensor(readouts(res.samples, kind=kind)["c_G"])
            out[direction].append(c.mean(0).numpy())
            se = sgld.monte_carlo_se(c[:, None, :])  # one chain per data set
            out[direction + "_se"].append(se.numpy().reshape(-1))
    down = np.array(out["down"][::-1])
    down_se = np.array(out["down_se"][::-1])
    return HysteresisLoop(
        P, np.array(out["up"]), down, np.array(out["up_se"]), down_se, wall
    )
