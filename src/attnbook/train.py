r"""Batched (ensemble) training: Adam over many networks at once, and an explicit filter for runs
that reached the global minimum.

Parameters are a dict of tensors whose **first dimension indexes the networks** (seeds × sample
sizes × anything). The loss function returns one loss per network, shape ``(n_models,)``. Because
networks do not interact, one backward pass of the summed loss gives each network its own
gradient, and Adam's update is elementwise — so a batched run is *exactly* ``n_models``
independent Adam runs (tested against a loop), at the cost of one:

.. math::
    m \leftarrow \beta_1 m + (1-\beta_1)g,\quad v \leftarrow \beta_2 v + (1-\beta_2)g^2,\quad
    \theta \leftarrow \theta - \eta\,\frac{m/(1-\beta_1^t)}{\sqrt{v/(1-\beta_2^t)}+\epsilon},

with :math:`g = \nabla_\theta[\mathcal L + \tfrac{\lambda}{2}\|\theta\|^2]` (L2 weight decay, i.e.
a Gaussian prior: Adam with weight decay finds a MAP). The learning rate may differ per network.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from attnbook.errors import TrainingDiverged
from attnbook.validation import (
    as_tensor,
    check_choice,
    check_finite,
    check_positive,
    check_positive_int,
    per_model_positive,
)

__all__ = [
    "TrainHistory",
    "TrainingDiverged",
    "adam",
    "MinimumFilter",
    "reached_minimum",
]


@dataclass
class TrainHistory:
    """What :func:`adam` returns. ``loss[i, n]`` is network ``n``'s loss at ``steps[i]``;
    ``wall_s`` the wall-clock seconds (``seconds`` is its old name, kept as a property)."""

    params: dict
    steps: np.ndarray
    loss: np.ndarray
    final_loss: np.ndarray
    diverged: (
        np.ndarray
    )  #: networks frozen after a non-finite loss (``on_divergence="freeze"``)
    wall_s: float
    extra: dict = field(
        default_factory=dict
    )  #: recorded ``monitor`` values, each ``(n_records, n_models, ...)``

    @property
    def seconds(self) -> float:
        """Old name of :attr:`wall_s`."""
        return self.wall_s


def _lr_tensor(lr, n_models: int, like: torch.Tensor) -> torch.Tensor:
    return per_model_positive(lr, "lr", n_models, like)


def adam(
    loss_fn: Callable[[dict], torch.Tensor],
    params: dict,
    *,
    n_steps: int,
    lr=1e-2,
    betas=(0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float | dict = 0.0,
    record_every: int = 1,
    monitor: Callable[[dict], dict] | None = None,
    on_divergence: str = "raise",
    progress: bool = False,
) -> TrainHistory:
    """Train ``n_models`` networks at once with Adam.

    Parameters
    ----------
    loss_fn:
        ``loss_fn(params) -> (n_models,)``.
    params:
        Dict of tensors with the models on dim 0 (copied, not modified).
    n_steps, lr, betas, eps:
        Adam's settings; ``lr`` a number or one per model ``(n_models,)``.
    weight_decay:
        L2 coefficient ``λ`` (a number, or a dict giving one per parameter name).
    record_every:
        Record the losses (and ``monitor(params)``, a dict of per-model tensors) every so many steps.
    on_divergence:
        ``"raise"`` (default) raises :class:`attnbook.errors.TrainingDiverged` (``partial``: the
        parameters before the failing step, ``time``: the step); ``"freeze"`` stops updating the
        diverged networks, keeps their last finite parameters and reports them in ``diverged``.
    """
    if not callable(loss_fn):
        raise TypeError("loss_fn must be callable")
    if not isinstance(params, dict) or not params:
        raise TypeError(
            "params must be a non-empty dict of tensors with the models on dim 0"
        )
    check_choice(on_divergence, "on_divergence", ("raise", "freeze"))
    n_steps = check_positive_int(n_steps, "n_steps")
    record_every = check_positive_int(record_every, "record_every")
    b1, b2 = betas
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ValueError(f"betas must lie in [0, 1), got {betas}")
    check_positive(eps, "eps")
    theta = {}
    for k, v in params.items():
        t = as_tensor(v, f"params[{k!r}]").detach().clone()
        check_finite(t, f"params[{k!r}]")
        theta[k] = t
    n_models = next(iter(theta.values())).shape[0]
    for k, v in theta.items():
        if v.dim() == 0 or v.shape[0] != n_models:
            raise ValueError(
                f"params[{k!r}] must have the models on dim 0 (n_models={n_models}), got {tuple(v.shape)}"
            )
    wd = (
        weight_decay
        if isinstance(weight_decay, dict)
        else {k: weight_decay for k in theta}
    )
    for k in theta:
        check_positive(wd.get(k, 0.0), f"weight_decay[{k!r}]", allow_zero=True)
    any_p = next(iter(theta.values()))
    lr_t = _lr_tensor(lr, n_models, any_p)
    m = {k: torch.zeros_like(v) for k, v in theta.items()}
    s = {k: torch.zeros_like(v) for k, v in theta.items()}
    alive = torch.ones(n_models, dtype=torch.bool, device=any_p.device)
    rec_steps, rec_loss, rec_extra = [], [], {}
    iterator = range(1, n_steps + 1)
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc="Adam", leave=False)
    t0 = time.perf_counter()

    def bcast(x, like):
        return x.reshape(-1, *([1] * (like.dim() - 1))) if x.dim() else x

    for step in iterator:
        for v in theta.values():
            v.requires_grad_(True)
        L = loss_fn(theta)
        if not isinstance(L, torch.Tensor) or L.shape != (n_models,):
            raise ValueError(
                f"loss_fn must return shape (n_models,)=({n_models},), got {getattr(L, 'shape', None)}"
            )
        reg = sum(
            0.5 * wd.get(k, 0.0) * (v**2).reshape(n_models, -1).sum(-1)
            for k, v in theta.items()
        )
        grads = torch.autograd.grad((L + reg).sum(), list(theta.values()))
        with torch.no_grad():
            finite = torch.isfinite(L.detach())
            for g in grads:
                finite &= torch.isfinite(g.reshape(n_models, -1)).all(-1)
            newly_bad = alive & ~finite
            if bool(newly_bad.any()):
                if on_divergence == "raise":
                    bad = newly_bad.nonzero().flatten().tolist()
                    raise TrainingDiverged(
                        f"loss or gradient of network(s) {bad[:10]} became non-finite "
                        f"at step {step}; lower lr or check the initialisation",
                        time=step,
                        partial={k: v.detach().clone() for k, v in theta.items()},
                    )
                alive &= finite
            if (step - 1) % record_every == 0 or step == n_steps:
                rec_steps.append(step - 1)
                rec_loss.append(
                    torch.where(alive, L.detach(), torch.full_like(L, math.inf)).cpu()
                )
                if monitor is not None:
                    for key, val in monitor(
                        {k: v.detach() for k, v in theta.items()}
                    ).items():
                        rec_extra.setdefault(key, []).append(
                            torch.as_tensor(val).detach().cpu()
                        )
            bc1, bc2 = 1 - b1**step, 1 - b2**step
            for (k, v), g in zip(theta.items(), grads):
                g = torch.where(bcast(alive, g), g, torch.zeros_like(g))
                m[k].mul_(b1).add_((1 - b1) * g)
                s[k].mul_(b2).add_((1 - b2) * g * g)
                update = bcast(lr_t, v) * (m[k] / bc1) / (torch.sqrt(s[k] / bc2) + eps)
                theta[k] = (
                    v
                    - torch.where(
                        bcast(alive, update), update, torch.zeros_like(update)
                    )
                ).detach()
    with torch.no_grad():
        final = loss_fn(theta).detach()
    final = torch.where(
        alive & torch.isfinite(final), final, torch.full_like(final, math.inf)
    )
    return TrainHistory(
        params=theta,
        steps=np.asarray(rec_steps),
        loss=torch.stack(rec_loss).numpy(),
        final_loss=final.cpu().numpy(),
        diverged=(~alive).cpu().numpy(),
        wall_s=time.perf_counter() - t0,
        extra={k: torch.stack(v).numpy() for k, v in rec_extra.items()},
    )


@dataclass
class MinimumFilter:
    """Which runs reached their group's best (global-minimum) value, and how many per group."""

    keep: np.ndarray  #: (n_models,) bool
    best: np.ndarray  #: (n_groups,) best value per group
    groups: np.ndarray  #: the sorted group labels
    n_kept: np.ndarray  #: (n_groups,)
    n_total: np.ndarray  #: (n_groups,)

    def summary(self) -> str:
        parts = [
            f"{g}: {k}/{t}" for g, k, t in zip(self.groups, self.n_kept, self.n_total)
        ]
        return (
            f"reached the global minimum: {int(self.keep.sum())}/{len(self.keep)} runs "
            f"(per group {', '.join(parts)})"
        )


def reached_minimum(
    final_values, groups=None, *, rtol: float = 1e-3, atol: float = 1e-6
) -> MinimumFilter:
    """Keep the runs whose final value is within ``atol + rtol·|best|`` of the best run of their group.

    ``final_values`` (e.g. the final action or loss) has shape ``(n_models,)``; ``groups`` labels
    runs that share a problem (e.g. the sample size) — the best run of a group stands in for the
    global minimum. Non-finite values never pass. Runs of the same group from different seeds that
    stay in a higher local minimum are filtered out here, explicitly, and counted.
    """
    vals = np.asarray(final_values, dtype=float).reshape(-1)
    grp = np.zeros(len(vals)) if groups is None else np.asarray(groups).reshape(-1)
    if grp.shape != vals.shape:
        raise ValueError(
            f"groups must have the shape of final_values {vals.shape}, got {grp.shape}"
        )
    check_positive(rtol, "rtol", allow_zero=True)
    check_positive(atol, "atol", allow_zero=True)
    labels, inv = np.unique(grp, return_inverse=True)
    finite = np.isfinite(vals)
    best = np.full(len(labels), np.inf)
    np.minimum.at(best, inv[finite], vals[finite])
    keep = finite & (vals <= best[inv] + atol + rtol * np.abs(best[inv]))
    n_kept = np.bincount(inv, weights=keep, minlength=len(labels)).astype(int)
    n_total = np.bincount(inv, minlength=len(labels))
    return MinimumFilter(keep, best, labels, n_kept, n_total)
