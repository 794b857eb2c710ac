r"""SGLD you can trust on the copy head's marginal posterior: several chains per target, a stated
step-size rule, and diagnostics on sign-invariant observables.

* **Targets and chains.** A *target* is one posterior: one data set at one sample size ``P``.
  :func:`sgld_targets` runs ``n_chains`` chains on every target (all in one batched run,
  chain ``j`` of target ``i`` at batch index ``j · n_targets + i``), so :math:`\hat R` compares
  chains that sample the same distribution.
* **Step-size rule** (:func:`block_step_sizes`). The marginal's Hessian is very anisotropic: the
  attention bias ``b`` of linear attention carries the data term's stiffness
  (:math:`\lambda\approx 2P`) while the scores ``G`` sit near their prior curvature
  (:math:`\lambda\approx 1`–2). Each block gets ``fraction / λ_max(block)``, with ``λ_max``
  estimated by power iteration (:func:`attnbook.sgld.hessian_lambda_max`) at the chain's start and
  at the mode a short Adam run reaches from it, whichever is larger — a constant diagonal
  preconditioner, which leaves the target unchanged. Langevin's Euler step biases a direction's
  variance by :math:`\eta\lambda/4`: ``fraction = 0.25`` keeps that under 7 % in the stiffest
  direction and far less elsewhere; the step-halving check of the chapters measures it.
* **Observables.** ``|m|`` (absolute mean row sum) and ``c_G`` aligned with the sign of ``m``:
  invariant under the mirror symmetry :math:`(G, b, W)\to-(G, b, W)` of linear attention, so
  chains in mirror halves agree (:func:`attnbook.copyhead.action.readouts`). For softmax ``m = 1``
  and ``c_G`` is ``a_G``.
* **Diagnostics.** Rank-normalised split :math:`\hat R`, multi-chain ESS (Vehtari et al. 2021) and
  the Monte Carlo standard error ``sd/√ESS`` of the mean and of the variance, per target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnbook import sgld, train
from attnbook.copyhead.action import marginal_potential, readouts
from attnbook.copyhead.model import resolve_copy_kind
from attnbook.copyhead.task import CopyStats, _check_stats
from attnbook.device import as_generator
from attnbook.validation import as_tensor, check_positive, check_positive_int

__all__ = [
    "block_step_sizes",
    "TargetChains",
    "sgld_targets",
    "step_halving",
    "observable_summary",
]


def block_step_sizes(
    stats: CopyStats,
    theta,
    *,
    kind: str = "linear",
    fraction: float = 0.25,
    n_mode_steps: int = 300,
    lr: float = 0.03,
    seed=None,
) -> tuple[torch.Tensor, dict]:
    """Per-coordinate SGLD steps ``fraction / λ_max(block)`` for packed ``theta (n, L² [+1])``.

    Blocks: the scores ``G`` and (linear attention) the bias ``b``. ``λ_max`` of each block is
    the larger of its value at ``theta`` and at the mode an ``n_mode_steps`` Adam run reaches
    from ``theta`` (``n_mode_steps = 0``: at ``theta`` only). Returns the step tensor (the shape
    of ``theta``) and ``{"G": λ_G, "b": λ_b}`` (``(n,)`` each; ``b`` absent for softmax)."""
    kind = resolve_copy_kind(kind)
    stats = _check_stats(stats)
    theta = as_tensor(theta, "theta", dtype=torch.float64).detach()
    L, n = stats.seq_len, stats.n_sequences.shape[0]
    d = L * L + (kind == "linear")
    if theta.shape != (n, d):
        raise ValueError(f"theta must have shape ({n}, {d}), got {tuple(theta.shape)}")
    frac = check_positive(fraction, "fraction")
    if frac >= 4:
        raise ValueError(f"fraction must be below 4 for a stable step, got {fraction}")
    n_mode_steps = check_positive_int(n_mode_steps, "n_mode_steps", minimum=0)
    pot = marginal_potential(stats, kind=kind)
    points = [theta]
    if n_mode_steps:
        hist = train.adam(
            lambda p: pot(p["theta"]),
            {"theta": theta.clone()},
            n_steps=n_mode_steps,
            lr=check_positive(lr, "lr"),
        )
        points.append(hist.params["theta"].detach())
    gen = as_generator(seed)
    blocks = {"G": torch.arange(d) < L * L}
    if kind == "linear":
        blocks["b"] = ~blocks["G"]
    lam = {}
    for name, mask in blocks.items():
        vals = [
            sgld.hessian_lambda_max(pot, x, mask=mask, seed=gen).abs() for x in points
        ]
        lam[name] = torch.stack(vals).max(0).values
    eta = torch.empty_like(theta)
    for name, mask in blocks.items():
        # the mask stays on the CPU for hessian_lambda_max; index eta on its own device
        eta[:, mask.to(eta.device)] = sgld.step_size_rule(lam[name], fraction=frac)[
            :, None
        ]
    return eta, lam


def observable_summary(x) -> dict:
    """Per-target diagnostics of draws ``x (n_draws, n_chains, n_targets, n_obs)``: ``mean``,
    ``mcse`` (of the mean), ``var`` and ``var_mcse`` (of the variance, from the squared
    deviations), ``rhat`` (rank-normalised split), ``ess`` — each ``(n_targets, n_obs)``."""
    x = as_tensor(x, "x", dtype=torch.float64)
    if x.dim() != 4:
        raise ValueError(
            f"x must be (n_draws, n_chains, n_targets, n_obs), got {tuple(x.shape)}"
        )
    mean = x.mean((0, 1))
    dev2 = (x - mean) ** 2
    out = {
        "mean": mean,
        "mcse": sgld.monte_carlo_se(x),
        "var": dev2.mean((0, 1)),
        "var_mcse": sgld.monte_carlo_se(dev2),
        "rhat": sgld.rank_normalized_rhat(x),
        "ess": sgld.effective_sample_size(x),
    }
    return {k: v.numpy() for k, v in out.items()}


@dataclass(frozen=True)
class TargetChains:
    """Chains grouped by target. ``obs`` is ``(n_draws, n_chains, n_targets, 2)`` (``|m|``,
    aligned ``c_G``); ``summary`` holds :func:`observable_summary` of it; ``samples`` the packed
    draws ``(n_draws, n_chains · n_targets, d)``; ``step_size`` the per-coordinate steps;
    ``lambda_max`` the block curvatures; ``final`` the last kept draw of every chain."""

    obs: np.ndarray
    summary: dict
    samples: torch.Tensor
    step_size: torch.Tensor
    lambda_max: dict
    final: torch.Tensor
    wall_s: float

    def __getitem__(self, key: str) -> np.ndarray:
        return self.summary[key]

    def targets(self, index) -> TargetChains:
        """The chains of the targets ``index`` (a slice or integer indices), as if run alone:
        their draws, diagnostics, steps, curvatures and final states."""
        n_t = self.obs.shape[2]
        keep = np.arange(n_t)[index]
        keep = np.atleast_1d(keep)
        n_chains = self.obs.shape[1]
        # chain j of target i sits at batch index j · n_targets + i
        rows = torch.as_tensor(
            (np.arange(n_chains)[:, None] * n_t + keep[None, :]).reshape(-1)
        )
        obs = self.obs[:, :, keep]
        dev = self.samples.device
        return TargetChains(
            obs=obs,
            summary=observable_summary(obs),
            samples=self.samples[:, rows.to(dev)],
            step_size=self.step_size[rows.to(self.step_size.device)],
            lambda_max={k: v[rows.to(v.device)] for k, v in self.lambda_max.items()},
            final=self.final[rows.to(self.final.device)],
            wall_s=self.wall_s,
        )


def _batched_run(stats, kind, n_chains, seed):
    """The checked arguments of a batched SGLD run on every target of ``stats``:
    ``(kind, stats, n_chains, n_targets, d, generator)``, ``d`` the packed size."""
    kind = resolve_copy_kind(kind)
    stats = _check_stats(stats)
    n_chains = check_positive_int(n_chains, "n_chains")
    n_t, L = stats.n_sequences.shape[0], stats.seq_len
    return kind, stats, n_chains, n_t, L * L + (kind == "linear"), as_generator(seed)


def sgld_targets(
    stats: CopyStats,
    *,
    n_chains: int = 4,
    kind: str = "linear",
    fraction: float = 0.25,
    n_steps: int = 4000,
    burn_in: int = 1000,
    thin: int = 5,
    init_scale: float = 1.0,
    init=None,
    step_size=None,
    seed=None,
) -> TargetChains:
    """``n_chains`` SGLD chains on each data set of ``stats`` (one target per row), one batched
    run, with the step rule of :func:`block_step_sizes` (or the given per-coordinate
    ``step_size``, e.g. half of an earlier run's for a step-halving check).

    Starting points are drawn from the prior scale (``init_scale · N(0, 1)``, the transverse
    directions' stationary width) unless ``init`` ``(n_chains · n_targets, d)`` is given."""
    kind, stats, n_chains, n_t, d, gen = _batched_run(stats, kind, n_chains, seed)
    every = stats.repeat(n_chains)
    if init is None:
        scale = check_positive(init_scale, "init_scale")
        init = scale * torch.randn(
            n_chains * n_t, d, generator=gen, dtype=torch.float64
        )
    device = stats.n_sequences.device  # chains run where the statistics are
    init = as_tensor(init, "init", dtype=torch.float64, device=device)
    if init.shape != (n_chains * n_t, d):
        raise ValueError(
            f"init must have shape ({n_chains * n_t}, {d}), got {tuple(init.shape)}"
        )
    lam = {}
    if step_size is None:
        step_size, lam = block_step_sizes(
            every, init, kind=kind, fraction=fraction, seed=gen
        )
    step_size = as_tensor(step_size, "step_size", dtype=torch.float64, device=device)
    if step_size.shape != init.shape:
        raise ValueError(
            f"step_size must have the shape of init {tuple(init.shape)}, "
            f"got {tuple(step_size.shape)}"
        )
    res = sgld.sample(
        marginal_potential(every, kind=kind),
        init,
        step_size=step_size,
        n_steps=n_steps,
        burn_in=burn_in,
        thin=thin,
        seed=gen,
    )
    r = readouts(res.samples, kind=kind)
    obs = np.stack([r["m"], r["c_G"]], -1).reshape(-1, n_chains, n_t, 2)
    return TargetChains(
        obs=obs,
        summary=observable_summary(obs),
        samples=res.samples,
        step_size=step_size,
        lambda_max=lam,
        final=res.samples[-1].clone(),
        wall_s=res.diagnostics["wall_s"],
    )


def step_halving(
    stats: CopyStats,
    *,
    n_chains: int = 4,
    kind: str = "linear",
    fraction: float = 0.25,
    n_steps: int = 4000,
    burn_in: int = 1000,
    thin: int = 5,
    init_scale: float = 1.0,
    seed=None,
) -> tuple[TargetChains, TargetChains]:
    """The step-halving check as one batched run: ``n_chains`` chains on every target of
    ``stats`` at the step rule of :func:`block_step_sizes`, and ``n_chains`` fresh chains on
    each at half of it. Returns ``(at_eta, at_half_eta)``, each as :func:`sgld_targets` returns
    it. A statistic biased by the step moves by about half its bias between the two.

    One run instead of two back to back: the sampler's cost per step grows far less than the
    number of chains at these sizes, so both halves cost little more than one."""
    kind, stats, n_chains, n_t, d, gen = _batched_run(stats, kind, n_chains, seed)
    both = stats.repeat(2)  # targets [s0 … s_{n-1}] at η, then the same at η/2
    scale = check_positive(init_scale, "init_scale")
    init = scale * torch.randn(
        2 * n_t * n_chains, d, generator=gen, dtype=torch.float64
    )
    device = stats.n_sequences.device
    init = init.to(device)
    step, lam = block_step_sizes(
        both.repeat(n_chains), init, kind=kind, fraction=fraction, seed=gen
    )
    halved = torch.as_tensor(np.arange(2 * n_t * n_chains) % (2 * n_t) >= n_t)
    step[halved.to(step.device)] /= 2
    run = sgld_targets(
        both,
        n_chains=n_chains,
        kind=kind,
        n_steps=n_steps,
        burn_in=burn_in,
        thin=thin,
        init=init,
        step_size=step,
        seed=gen,
    )
    run = TargetChains(**{**run.__dict__, "lambda_max": lam})
    return run.targets(slice(0, n_t)), run.targets(slice(n_t, 2 * n_t))
