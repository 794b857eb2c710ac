r"""Vectorised multi-chain stochastic-gradient Langevin dynamics (SGLD) with diagnostics.

To sample :math:`p(\theta)\propto e^{-U(\theta)}`, every chain takes the Welling–Teh step

.. math::
    \theta_{t+1} = \theta_t - \frac{\eta}{2}\nabla U(\theta_t) + \sqrt{\eta}\,\xi_t,
    \qquad \xi_t\sim\mathcal N(0, I),

where :math:`\nabla U` may be a minibatch estimate (unbiased for the full-data gradient). All chains
advance together: ``theta`` has shape ``(n_chains, ...)`` and ``potential(theta)`` returns one
value per chain, so a single backward pass of ``potential(theta).sum()`` gives every chain's
gradient (chains do not interact). The discretisation bias is :math:`O(\eta)`: shrink the step
to check it (the tests do).

Diagnostics follow Vehtari et al. (2021): split :math:`\hat R` (within- vs between-chain variance
of half-chains, ≈ 1 when the chains agree), its rank-normalised and folded version
(:func:`rank_normalized_rhat`, robust to heavy tails and to chains that differ in scale) and the
effective sample size from the multi-chain autocorrelation with Geyer's initial-positive-sequence
truncation. Compute them on observables that respect the posterior's symmetries (e.g. ``|m|``
rather than ``m`` when the posterior is even), and over chains that sample the *same* target.

The bookkeeping pairs each kept state with its own potential: the sample at step ``t`` is
:math:`\theta_t` (after ``t`` updates) and ``potential[k]`` is :math:`U(\theta_t)`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from attnbook.device import as_generator
from attnbook.errors import SamplerDiverged
from attnbook.validation import (
    as_tensor,
    check_finite,
    check_positive_int,
    per_model_positive,
)

__all__ = [
    "sample",
    "SGLDResult",
    "SamplerDiverged",
    "SGLDDivergence",
    "split_rhat",
    "rank_normalized_rhat",
    "effective_sample_size",
    "hessian_lambda_max",
    "step_size_rule",
    "monte_carlo_se",
]


#: Former name of :class:`attnbook.errors.SamplerDiverged` (kept for old code).
SGLDDivergence = SamplerDiverged


class _Diagnostics(dict):
    """The diagnostics dict of :func:`sample`: the per-coordinate ``rhat`` and ``ess`` (and
    ``max_rhat``, ``min_ess``) are computed on first use — an FFT over every coordinate of
    every draw, which for many small chains can cost more than the sampling itself."""

    _LAZY = ("rhat", "ess", "max_rhat", "min_ess")

    def __init__(self, samples: torch.Tensor, values: dict):
        super().__init__(values)
        self._samples = samples

    def __missing__(self, key):
        if key not in self._LAZY:
            raise KeyError(key)
        if self._samples.shape[0] >= 4:
            rhat = _per_coordinate(split_rhat, self._samples)
            ess = _per_coordinate(effective_sample_size, self._samples)
            self.update(
                rhat=rhat, ess=ess, max_rhat=float(rhat.max()), min_ess=float(ess.min())
            )
        else:
            self.update(rhat=None, ess=None, max_rhat=math.nan, min_ess=math.nan)
        return self[key]

    def get(self, key, default=None):
        return self[key] if key in self or key in self._LAZY else default


class SGLDResult(NamedTuple):
    """``(samples, diagnostics)``: kept samples ``(n_kept, n_chains, ...)`` and a dict with
    ``rhat`` and ``ess`` (per coordinate), ``max_rhat``, ``min_ess``, ``potential``
    ``(n_kept, n_chains)`` (``U`` of each kept sample), ``steps`` (the number of updates before
    each kept sample) and ``wall_s`` (also under the old key ``seconds``). ``rhat``, ``ess``,
    ``max_rhat`` and ``min_ess`` are computed when first read."""

    samples: torch.Tensor
    diagnostics: dict

    @property
    def rhat(self) -> torch.Tensor:
        return self.diagnostics["rhat"]

    @property
    def ess(self) -> torch.Tensor:
        return self.diagnostics["ess"]


def _step_tensor(step_size, n_chains: int, like: torch.Tensor) -> torch.Tensor:
    if (
        isinstance(step_size, torch.Tensor | np.ndarray)
        and tuple(step_size.shape) == tuple(like.shape)
        and like.dim() > 1
    ):
        # one step per coordinate: a constant diagonal preconditioner
        eta = check_finite(
            as_tensor(step_size, "step_size", dtype=like.dtype, device=like.device),
            "step_size",
        )
        if bool((eta <= 0).any()):
            raise ValueError("step_size must be positive")
        return eta
    eta = per_model_positive(step_size, "step_size", n_chains, like)
    # one step per chain broadcasts over the chain's parameter dimensions
    return eta.reshape(-1, *([1] * (like.dim() - 1))) if eta.dim() else eta


def _check_callables(potential, minibatch) -> None:
    """Refuse a potential, or a minibatch sampler, that cannot be called."""
    if not callable(potential):
        raise TypeError(f"potential must be callable, got {type(potential).__name__}")
    if minibatch is not None and not callable(minibatch):
        raise TypeError(
            f"minibatch must be callable or None, got {type(minibatch).__name__}"
        )


def _schedule(n_steps, burn_in, thin) -> tuple[int, int, int, int]:
    """The checked ``(n_steps, burn_in, thin)`` and the number of samples kept."""
    n_steps = check_positive_int(n_steps, "n_steps")
    burn_in = check_positive_int(burn_in, "burn_in", minimum=0)
    thin = check_positive_int(thin, "thin")
    if burn_in >= n_steps:
        raise ValueError(
            f"burn_in ({burn_in}) must be smaller than n_steps ({n_steps})"
        )
    n_kept = (n_steps - burn_in) // thin
    if n_kept < 1:
        raise ValueError("no samples kept: increase n_steps or reduce burn_in/thin")
    return n_steps, burn_in, thin, n_kept


def _chain_potentials(potential, minibatch, theta, t: int, gen, n_chains: int):
    """``U(θ)`` of every chain at step ``t`` (on that step's minibatch, if any)."""
    U = potential(theta) if minibatch is None else potential(theta, minibatch(t, gen))
    if not isinstance(U, torch.Tensor) or U.shape != (n_chains,):
        raise ValueError(
            f"potential must return a tensor of shape (n_chains,)=({n_chains},), "
            f"got {getattr(U, 'shape', type(U).__name__)}"
        )
    return U


def _diverged(
    bad_since, t: int, check_every: int, eta, samples, steps, k_checked: int
) -> SamplerDiverged:
    """The error for the chains ``bad_since`` found non-finite at step ``t`` (checked
    every ``check_every`` steps), with the ``k_checked`` samples kept before."""
    chains = bad_since.nonzero().flatten().tolist()
    first = max(t + 1 - check_every, 0)
    when = f"step {t}" if check_every == 1 else f"steps {first}–{t}"
    return SamplerDiverged(
        f"SGLD diverged at {when}: chain(s) {chains[:10]}"
        f"{'…' if len(chains) > 10 else ''} became non-finite (step_size "
        f"max {float(eta.max()):.3g}); try a smaller step_size",
        time=t,
        partial=samples[:k_checked].clone(),
        times=steps[:k_checked].clone(),
    )


def sample(
    potential: Callable,
    init,
    *,
    step_size,
    n_steps: int,
    burn_in: int = 0,
    thin: int = 1,
    seed=None,
    minibatch: Callable | None = None,
    progress: bool = False,
) -> SGLDResult:
    """Run ``n_chains`` SGLD chains at once.

    Parameters
    ----------
    potential:
        ``potential(theta) -> (n_chains,)``: the negative log-density of each chain (up to a
        constant), differentiable in ``theta``. With ``minibatch`` it is called as
        ``potential(theta, batch)`` and must be an unbiased estimate of the full potential
        (e.g. the minibatch loss rescaled by ``N / batch_size``).
    init:
        Starting points, shape ``(n_chains, ...)`` (NumPy or torch; not modified).
    step_size:
        The step ``η`` (a number, or one per chain, shape ``(n_chains,)``, or one per
        coordinate, the shape of ``init``: a constant diagonal preconditioner, which keeps the
        target and lets soft coordinates move faster than stiff ones).
    n_steps, burn_in, thin:
        Total steps; the states ``θ_t`` with ``t < burn_in`` are discarded and every
        ``thin``-th after is kept.
    seed:
        Randomness of the noise (and of ``minibatch``): an int, a ``torch.Generator`` or
        ``None`` (torch's global generator), normalised by
        :func:`attnbook.device.as_generator`.
    minibatch:
        ``minibatch(step, generator) -> batch`` draws the data of one step.
    progress:
        Show a ``tqdm`` bar.

    Returns
    -------
    SGLDResult
        ``(samples, diagnostics)``, samples of shape ``(n_kept, n_chains, ...)``.

    Raises
    ------
    attnbook.errors.SamplerDiverged
        When any chain becomes non-finite; the message names the chains and the step, and
        ``partial`` holds the samples kept before.
    """
    _check_callables(potential, minibatch)
    theta = as_tensor(init, "init").detach().clone()
    if theta.dim() < 1:
        raise ValueError("init must have shape (n_chains, ...), got a scalar")
    check_finite(theta, "init")
    n_chains = theta.shape[0]
    n_steps, burn_in, thin, n_kept = _schedule(n_steps, burn_in, thin)
    gen = as_generator(seed, theta.device)
    eta = _step_tensor(step_size, n_chains, theta)
    noise_scale = torch.sqrt(eta)
    half_eta = 0.5 * eta
    noise = torch.empty_like(theta)

    samples = torch.empty(n_kept, *theta.shape, dtype=theta.dtype, device=theta.device)
    energies = torch.empty(n_kept, n_chains, dtype=theta.dtype, device=theta.device)
    steps = torch.empty(n_kept, dtype=torch.long)
    iterator = range(n_steps)
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc="SGLD", leave=False)
    check_every = 1 if theta.device.type == "cpu" else 32
    bad_since = torch.zeros(n_chains, dtype=torch.bool, device=theta.device)
    t0 = time.perf_counter()
    k = k_checked = 0
    for t in iterator:
        theta.requires_grad_(True)
        U = _chain_potentials(potential, minibatch, theta, t, gen, n_chains)
        (grad,) = torch.autograd.grad(U.sum(), theta)  # no side effect on other leaves
        with torch.no_grad():
            theta = theta.detach()
            # one pass each: a sum is non-finite where any term is (or at ~1e308, diverged too)
            flat = theta.reshape(n_chains, -1).sum(-1) + grad.reshape(n_chains, -1).sum(
                -1
            )
            bad = ~torch.isfinite(U + flat)
            # reading `bad` waits for the device: on a GPU look every `check_every` steps
            # (a non-finite chain stays non-finite, so it is still caught), on the CPU each step
            bad_since |= bad
            if (t + 1) % check_every == 0 or t + 1 == n_steps:
                if bool(bad_since.any()):
                    raise _diverged(
                        bad_since, t, check_every, eta, samples, steps, k_checked
                    )
                k_checked = k
            if t >= burn_in and (t - burn_in) % thin == 0 and k < n_kept:
                samples[k] = theta  # θ_t, paired with U(θ_t)
                energies[k] = U.detach()
                steps[k] = t
                k += 1
            # θ ← θ − (η/2)∇U + √η ξ, in place, with the rounding of the written-out formula
            torch.randn(theta.shape, generator=gen, dtype=theta.dtype, out=noise)
            theta.sub_(half_eta * grad).add_(noise.mul_(noise_scale))
    wall_s = time.perf_counter() - t0
    diagnostics = {
        "potential": energies,
        "steps": steps,
        "wall_s": wall_s,
        "seconds": wall_s,
        "steps_per_second": n_steps / wall_s if wall_s > 0 else math.inf,
    }
    return SGLDResult(samples, _Diagnostics(samples, diagnostics))


def _per_coordinate(fn, samples: torch.Tensor, budget: int = 2**25) -> torch.Tensor:
    """``fn(samples)`` for a per-coordinate diagnostic, over chunks of at most ``budget``
    elements of coordinates: the FFT of the ESS needs several copies of its input, which for
    every coordinate of a large model (L = 256: 65 537 per chain) would not fit in memory."""
    n, m = samples.shape[:2]
    flat = samples.reshape(n, m, -1)
    step = max(1, budget // (n * m))
    if step >= flat.shape[2]:
        return fn(samples)
    parts = [fn(flat[:, :, i : i + step]) for i in range(0, flat.shape[2], step)]
    return torch.cat(parts, -1).reshape(samples.shape[2:])


def _as_draws(samples, name="samples") -> torch.Tensor:
    x = as_tensor(samples, name)
    if x.dim() < 2:
        raise ValueError(
            f"{name} must have shape (n_draws, n_chains, ...), got {tuple(x.shape)}"
        )
    if x.shape[0] < 4:
        raise ValueError(f"{name} needs at least 4 draws per chain, got {x.shape[0]}")
    check_finite(x, name)
    return x


def split_rhat(samples) -> torch.Tensor:
    r"""Split-:math:`\hat R` per coordinate of ``samples (n_draws, n_chains, ...)``.

    Each chain is cut in two halves (so a drifting chain disagrees with itself), then
    :math:`\hat R = \sqrt{\big(\tfrac{n-1}{n}W + B/n\big)/W}` with ``W`` the mean within-half
    variance and ``B/n`` the variance of the half means.
    """
    x = _as_draws(samples)
    n = x.shape[0] // 2
    halves = torch.cat([x[:n], x[-n:]], 1)  # (n, 2 chains, ...)
    means = halves.mean(0)
    W = halves.var(0, unbiased=True).mean(0)
    B_over_n = means.var(0, unbiased=True)
    var_plus = (n - 1) / n * W + B_over_n
    return torch.sqrt(
        var_plus / torch.where(W > 0, W, torch.full_like(W, torch.finfo(W.dtype).tiny))
    )


def _rank_normalize(x: torch.Tensor) -> torch.Tensor:
    """Normal scores of the pooled ranks (Blom's offset), per coordinate, ties averaged."""
    n, m = x.shape[0], x.shape[1]
    flat = x.reshape(n * m, -1)
    order = flat.argsort(0)
    ranks = torch.empty_like(flat)
    ar = torch.arange(1, n * m + 1, dtype=flat.dtype, device=flat.device)
    ranks.scatter_(0, order, ar[:, None].expand_as(flat).contiguous())
    p = (ranks - 0.375) / (n * m + 0.25)
    z = torch.special.ndtri(p)
    return z.reshape(x.shape)


def rank_normalized_rhat(samples) -> torch.Tensor:
    r"""Rank-normalised split-:math:`\hat R` (Vehtari et al. 2021), per coordinate of
    ``samples (n_draws, n_chains, ...)``: the larger of the split-:math:`\hat R` of the
    rank-normalised draws (location) and of the rank-normalised folded draws
    :math:`|x - \mathrm{median}|` (scale). ≈ 1 when the chains agree; the usual threshold
    is 1.01."""
    x = _as_draws(samples)
    folded = (x - x.reshape(-1, *x.shape[2:]).median(0).values).abs()
    return torch.maximum(
        split_rhat(_rank_normalize(x)), split_rhat(_rank_normalize(folded))
    )


def effective_sample_size(samples) -> torch.Tensor:
    r"""Multi-chain effective sample size per coordinate (Geyer's initial positive sequence).

    With the autocovariance :math:`\gamma_t` of each chain (by FFT), the combined autocorrelation
    is :math:`\rho_t = 1 - (W - \bar\gamma_t)/\widehat{\mathrm{var}}^+`; pairs
    :math:`\Gamma_k=\rho_{2k}+\rho_{2k+1}` are summed while positive (and made monotone), and
    :math:`\mathrm{ESS} = mn/(-1 + 2\sum_k\Gamma_k)`.
    """
    x = _as_draws(samples)
    n, m = x.shape[0], x.shape[1]
    xc = x - x.mean(0, keepdim=True)
    nfft = 1 << (2 * n - 1).bit_length()
    f = torch.fft.rfft(xc, n=nfft, dim=0)
    acov = torch.fft.irfft(f * f.conj(), n=nfft, dim=0)[:n] / n  # (n, m, ...), biased
    chain_var = acov[0] * n / (n - 1)
    W = chain_var.mean(0)
    B_over_n = x.mean(0).var(0, unbiased=True) if m > 1 else torch.zeros_like(W)
    var_plus = (n - 1) / n * W + B_over_n
    safe = torch.where(var_plus > 0, var_plus, torch.ones_like(var_plus))
    rho = 1 - (W - acov.mean(1)) / safe  # (n, ...)
    n_pairs = n // 2
    Gam = rho[: 2 * n_pairs : 2] + rho[1 : 2 * n_pairs : 2]  # (n_pairs, ...)
    positive = torch.cumprod(
        (Gam > 0).to(x.dtype), 0
    )  # stop at the first negative pair
    Gam = torch.cummin(torch.where(positive > 0, Gam, torch.zeros_like(Gam)), 0).values
    tau = -1 + 2 * (Gam * positive).sum(0)
    tau = torch.clamp(tau, min=1.0 / math.log10(max(m * n, 10)))
    ess = m * n / tau
    return torch.where(var_plus > 0, ess, torch.full_like(ess, float(m * n)))


def hessian_lambda_max(
    potential: Callable, theta, *, n_iters: int = 30, mask=None, seed=None
) -> torch.Tensor:
    r"""Largest Hessian eigenvalue of each chain's potential at ``theta (n_chains, ...)``.

    Power iteration on Hessian–vector products (double backward through ``potential``), one
    independent iteration per chain, ``n_iters`` products in all. It returns the eigenvalue of
    largest *modulus* (positive where the potential is convex there, as at a minimum). Used for
    the step-size rule :func:`step_size_rule`: Langevin's Euler step is stable in a quadratic
    well only if :math:`\eta\lambda_\max/2 < 2`, and its bias on variances is
    :math:`O(\eta\lambda_\max)`. ``mask`` (boolean, broadcastable to one chain's parameters)
    restricts the iteration to a block of coordinates (the Hessian projected on them), e.g. to
    set one step per block.
    """
    if not callable(potential):
        raise TypeError(f"potential must be callable, got {type(potential).__name__}")
    x = as_tensor(theta, "theta").detach().clone()
    if x.dim() < 1:
        raise ValueError("theta must have shape (n_chains, ...), got a scalar")
    check_finite(x, "theta")
    n_iters = check_positive_int(n_iters, "n_iters")
    n = x.shape[0]
    gen = as_generator(seed, x.device)
    v = torch.randn(x.shape, generator=gen, dtype=x.dtype, device=x.device)
    dims = tuple(range(1, x.dim()))
    proj = torch.ones((), dtype=x.dtype, device=x.device)
    if mask is not None:
        mask_t = torch.as_tensor(np.asarray(mask), dtype=torch.bool, device=x.device)
        try:
            proj = torch.broadcast_to(mask_t, x.shape[1:]).to(x.dtype)
        except RuntimeError:
            raise ValueError(
                f"mask of shape {tuple(mask_t.shape)} does not broadcast to one chain's "
                f"parameters {tuple(x.shape[1:])}"
            ) from None
        if not bool(proj.any()):
            raise ValueError("mask selects no coordinate")
    v = v * proj
    v = v / v.pow(2).sum(dims, keepdim=True).sqrt()
    x.requires_grad_(True)
    (g,) = torch.autograd.grad(potential(x).sum(), x, create_graph=True)
    lam = torch.zeros(n, dtype=x.dtype, device=x.device)
    for _ in range(n_iters):
        (hv,) = torch.autograd.grad((g * v).sum(), x, retain_graph=True)
        hv = hv * proj
        lam = (hv * v).sum(dims).detach()
        norm = hv.detach().pow(2).sum(dims, keepdim=True).sqrt()
        v = hv.detach() / torch.where(norm > 0, norm, torch.ones_like(norm))
    return lam


def step_size_rule(lambda_max, *, fraction: float = 0.1) -> torch.Tensor:
    r"""The step rule of this book: :math:`\eta = \text{fraction}/\lambda_\max`, per chain.

    With ``fraction = 0.1`` the stiffest direction moves by 5 % of its distance to the mode per
    step and the Euler bias on its variance, :math:`\eta\lambda_\max/4`, is 2.5 %; softer
    directions are biased less."""
    lam = as_tensor(lambda_max, "lambda_max")
    check_finite(lam, "lambda_max")
    if bool((lam <= 0).any()):
        raise ValueError("lambda_max must be positive (estimate it near a minimum)")
    frac = float(fraction)
    if not 0 < frac < 4:
        raise ValueError(
            f"fraction must lie in (0, 4) for a stable step, got {fraction}"
        )
    return frac / lam


def monte_carlo_se(samples) -> torch.Tensor:
    r"""Monte Carlo standard error of the mean of each coordinate of ``samples (n_draws,
    n_chains, ...)``: the pooled standard deviation over :math:`\sqrt{\mathrm{ESS}}`
    (:func:`effective_sample_size`)."""
    x = _as_draws(samples)
    sd = x.reshape(-1, *x.shape[2:]).std(0)
    return sd / effective_sample_size(x).sqrt()
