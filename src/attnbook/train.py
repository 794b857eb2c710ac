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
    "descend",
    "Descent",
    "SGD",
    "Adam",
    "OPTIMIZERS",
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


def _per_model(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A 0-d or ``(n_models,)`` tensor shaped to broadcast over ``like``'s model axis."""
    return x.reshape(-1, *([1] * (like.dim() - 1))) if x.dim() else x


class SGD:
    r"""Plain gradient descent, :math:`\theta \leftarrow \theta - \eta g` (the Euler scheme of
    the gradient flow), with one learning rate or one per model."""

    def __init__(self, lr: torch.Tensor):
        self.lr = lr

    def update(self, params, grads, step: int, alive=None) -> None:
        """Update ``params`` in place (``step`` counts from 1; frozen models do not move)."""
        if (
            alive is None and not self.lr.dim()
        ):  # one rate: two kernel calls for the lot
            torch._foreach_sub_(params, torch._foreach_mul(grads, self.lr))
            return
        for x, g in zip(params, grads):
            dx = _per_model(self.lr, x) * g
            if alive is not None:
                dx = torch.where(_per_model(alive, dx), dx, torch.zeros_like(dx))
            x.sub_(dx)


class Adam:
    """Adam's update of the module docstring, elementwise, so batched models stay independent;
    one learning rate or one per model."""

    def __init__(self, lr: torch.Tensor, betas=(0.9, 0.999), eps: float = 1e-8):
        b1, b2 = betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"betas must lie in [0, 1), got {betas}")
        self.lr, self.b1, self.b2 = lr, b1, b2
        self.eps = check_positive(eps, "eps")
        self.m = self.s = None

    def update(self, params, grads, step: int, alive=None) -> None:
        """Update ``params`` in place (``step`` counts from 1; frozen models do not move)."""
        if self.m is None:
            self.m = [torch.zeros_like(x) for x in params]
            self.s = [torch.zeros_like(x) for x in params]
        b1, b2 = self.b1, self.b2
        bc1, bc2 = 1 - b1**step, 1 - b2**step
        for x, g, m, s in zip(params, grads, self.m, self.s):
            if alive is not None:
                g = torch.where(_per_model(alive, g), g, torch.zeros_like(g))
            m.mul_(b1).add_((1 - b1) * g)
            s.mul_(b2).add_((1 - b2) * g * g)
            dx = _per_model(self.lr, x) * (m / bc1) / (torch.sqrt(s / bc2) + self.eps)
            if alive is not None:
                dx = torch.where(_per_model(alive, dx), dx, torch.zeros_like(dx))
            x.sub_(dx)


OPTIMIZERS = {"sgd": SGD, "adam": Adam}


@dataclass
class Descent:
    """What :func:`descend` returns: the recorded steps, losses and (optionally) parameters."""

    steps: np.ndarray  #: (n_records,) the recorded steps
    loss: torch.Tensor  #: (n_records, n_models) losses (``inf`` for a frozen model)
    params: (
        list  #: per record, clones of the parameters (``keep_params=True``), else []
    )
    final_loss: torch.Tensor  #: (n_models,) the loss at step ``n_steps``
    alive: torch.Tensor  #: (n_models,) bool: not frozen by a divergence
    wall_s: float
    all_alive: bool = True  #: no model frozen (the update then needs no mask)


def _any_bad(losses, grads, flat_params, max_abs) -> bool:
    """Whether any model may have diverged, in one host sync and a few kernels whatever the
    number of tensors (the models are told apart, by :func:`_bad_models`, only then).

    A non-finite loss makes its entry times 0 NaN, a non-finite gradient its sum times 0,
    and NaN fails ``<= max_abs`` as does a parameter above it (a NaN one included). A
    gradient sum that overflows on finite entries flags too; harmless: :func:`_check` then
    finds no model. ``flat_params``: the parameters as 1-d tensors."""
    parts = [losses * 0]  # NaN where a loss is not finite
    if grads:
        parts.append(torch.cat([g.reshape(-1) for g in grads]).sum().reshape(1) * 0)
    if max_abs is None:
        return not math.isfinite(float(torch.cat(parts).sum()))
    parts += flat_params  # (see _flat_views)
    return not float(torch.cat(parts).abs_().amax()) <= max_abs


def _flat_views(params) -> list | None:
    """1-d views of the parameters, made once per run: they follow the in-place updates.
    ``None`` if one is not contiguous (its reshape, a copy, would not follow them)."""
    if not all(x.is_contiguous() for x in params):
        return None
    return [x.view(-1) for x in params]


def _update(opt, params, grads, step: int, alive) -> None:
    """One optimiser step, kept out of autograd's graph where a parameter requires grad."""
    if any(x.requires_grad for x in params):
        with torch.no_grad():
            opt.update(params, grads, step, alive)
    else:  # no graph to keep the step out of: spare the context's cost
        opt.update(params, grads, step, alive)


def _bad_models(losses, grads, params, max_abs) -> torch.Tensor:
    """Per model: a non-finite loss or gradient, or a parameter above ``max_abs``."""
    n = losses.shape[0]
    bad = ~torch.isfinite(losses)
    if grads:  # one flat view per model: a few kernels per step, however many tensors
        bad |= ~torch.isfinite(torch.cat([g.reshape(n, -1) for g in grads], 1)).all(-1)
    if max_abs is not None:
        flat = torch.cat([x.reshape(n, -1) for x in params], 1)
        bad |= flat.abs().amax(-1) > max_abs
    return bad


def descend(
    loss_and_grads: Callable,
    params: list,
    *,
    n_steps: int,
    optimizer: str = "adam",
    lr=1e-2,
    betas=(0.9, 0.999),
    eps: float = 1e-8,
    record_steps=None,
    average: bool = False,
    check: str = "every",
    check_grads: bool = True,
    max_abs: float | None = None,
    on_divergence: str = "raise",
    diverged: Callable | None = None,
    keep_params: bool = False,
    monitor: Callable | None = None,
    progress: bool = False,
    desc: str = "training",
) -> Descent:
    """The package's one training loop: ``n_steps`` updates of a batch of models at once.

    ``loss_and_grads(k, params) -> (losses (n_models,), grads)`` at step ``k`` (from 0 to
    ``n_steps``; ``grads`` may be ``None`` at ``k = n_steps``, where no update follows), by
    autograd (:func:`adam`), in closed form (:func:`attnbook.focus.train`) or on the exact loss
    (:func:`attnbook.focus.gradient_descent`). ``params``: tensors with the models on dim 0,
    updated in place by ``optimizer`` (:data:`OPTIMIZERS`: ``"sgd"`` or ``"adam"``; ``lr`` one
    number or one per model). At ``record_steps`` (default: every step) the loss is recorded —
    with ``average``, the mean since the previous record — with ``monitor(params)`` and, with
    ``keep_params``, clones of the parameters.

    Divergence — a non-finite loss or gradient, or a parameter above ``max_abs`` — is checked
    at every step (``check="every"``) or only at the recorded ones (``"recorded"``: the only
    host synchronisation of a GPU run; non-finite losses in between still show in the average);
    ``check_grads=False`` skips the gradient where it is finite whenever the loss and the
    parameters are (a closed form).
    ``on_divergence="raise"`` raises ``diverged(k, bad_models, descent_so_far)`` (default a
    :class:`TrainingDiverged`); ``"freeze"`` stops the diverged models where they are.
    """
    if not callable(loss_and_grads):
        raise TypeError("loss_and_grads must be callable")
    _check_param_list(params)
    n_steps = check_positive_int(n_steps, "n_steps")
    check_choice(optimizer, "optimizer", tuple(OPTIMIZERS))
    check_choice(check, "check", ("every", "recorded"))
    check_choice(on_divergence, "on_divergence", ("raise", "freeze"))
    n_models = params[0].shape[0]
    lr_t = _lr_tensor(lr, n_models, params[0])
    opt = SGD(lr_t) if optimizer == "sgd" else Adam(lr_t, betas, eps)
    record = _record_set(record_steps, n_steps)
    alive = torch.ones(n_models, dtype=torch.bool, device=params[0].device)
    out = Descent(np.zeros(0, int), None, [], None, alive, 0.0)
    rec_steps, rec_loss, extra = [], [], {}
    running, n_run = None, 0
    it = range(n_steps + 1)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=desc, leave=False)
    flat = _flat_views(params)
    t0 = time.perf_counter()
    for k in it:
        losses, grads = loss_and_grads(k, params)
        losses = losses.detach()
        running, n_run = _accumulate(running, n_run, losses, average)
        if check == "every" or k in record:
            g = grads if check_grads else None
            flat_now = flat or [x.reshape(-1) for x in params]
            if _any_bad(
                running, g, flat_now, max_abs
            ):  # one host sync when all is well
                out.steps, out.wall_s = np.asarray(rec_steps), time.perf_counter() - t0
                _check(
                    k, running, g, params, max_abs, alive, on_divergence, diverged, out
                )
        if k in record:
            mean = running / n_run if average else running
            rec_steps.append(k)
            rec_loss.append(torch.where(alive, mean, torch.full_like(mean, math.inf)))
            if keep_params:
                out.params.append([x.detach().clone() for x in params])
            if monitor is not None:
                _record_monitor(monitor, params, extra)
            running, n_run = None, 0
        if k < n_steps:  # frozen models (if any) stay where they are
            _update(opt, params, grads, k + 1, None if out.all_alive else alive)
    out.steps, out.wall_s = np.asarray(rec_steps), time.perf_counter() - t0
    out.loss = torch.stack(rec_loss)
    out.final_loss = torch.where(
        alive & torch.isfinite(losses), losses, torch.full_like(losses, math.inf)
    )
    out.extra = {key: torch.stack(v).numpy() for key, v in extra.items()}
    return out


def _check_param_list(params) -> None:
    if not isinstance(params, (list, tuple)) or not params:
        raise TypeError("params must be a non-empty list of tensors (models on dim 0)")
    for i, x in enumerate(params):
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            raise TypeError(f"params[{i}] must be a tensor with the models on dim 0")
        if x.shape[0] != params[0].shape[0]:
            raise ValueError(
                f"params[{i}] has {x.shape[0]} models on dim 0, params[0] has "
                f"{params[0].shape[0]}"
            )


def _accumulate(running, n_run: int, losses, average: bool):
    """The losses to record: the latest, or with ``average`` their running sum (in float64
    whatever the models' dtype) and count."""
    if not average:
        return losses, 1
    if n_run == 0:
        return losses.to(torch.float64, copy=True), 1
    return running.add_(losses), n_run + 1


def _record_set(record_steps, n_steps: int) -> set:
    if record_steps is None:
        return set(range(n_steps + 1))
    record = {int(s) for s in np.asarray(record_steps).ravel()}
    if not record or min(record) < 0 or max(record) > n_steps:
        raise ValueError(f"record_steps must lie in [0, {n_steps}]")
    return record


def _check(k, losses, grads, params, max_abs, alive, on_divergence, diverged, out):
    """Find the models that diverged at step ``k``; raise, or freeze them in ``alive``."""
    newly_bad = alive & _bad_models(losses, grads, params, max_abs)
    if not bool(newly_bad.any()):
        return
    bad = newly_bad.nonzero().flatten().tolist()
    if on_divergence == "raise":
        if diverged is not None:
            raise diverged(k, bad, out)
        raise TrainingDiverged(
            f"loss or gradient of network(s) {bad[:10]} became non-finite "
            f"at step {k}; lower lr or check the initialisation",
            time=k,
        )
    alive &= ~newly_bad
    out.all_alive = False


def _record_monitor(monitor, params, extra: dict) -> None:
    with torch.no_grad():
        for key, val in monitor([x.detach() for x in params]).items():
            extra.setdefault(key, []).append(torch.as_tensor(val).detach().cpu())


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
    """Train ``n_models`` networks at once with Adam, gradients by autograd (:func:`descend`).

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
    theta = _model_params(params)
    names = list(theta)
    n_models = theta[names[0]].shape[0]
    check_choice(on_divergence, "on_divergence", ("raise", "freeze"))
    n_steps = check_positive_int(n_steps, "n_steps")
    record_every = check_positive_int(record_every, "record_every")
    wd = (
        weight_decay
        if isinstance(weight_decay, dict)
        else dict.fromkeys(theta, weight_decay)
    )
    for k in theta:
        check_positive(wd.get(k, 0.0), f"weight_decay[{k!r}]", allow_zero=True)
    record = [k for k in range(n_steps) if k % record_every == 0] + [n_steps - 1]

    def loss_and_grads(k, xs):
        p = dict(zip(names, xs))
        if k == n_steps:  # the final loss: no update follows
            with torch.no_grad():
                return _checked_loss(loss_fn(p), n_models), None
        for v in xs:
            v.requires_grad_(True)
        L = _checked_loss(loss_fn(p), n_models)
        reg = sum(
            0.5 * wd.get(name, 0.0) * (v**2).reshape(n_models, -1).sum(-1)
            for name, v in p.items()
        )
        grads = torch.autograd.grad((L + reg).sum(), xs)
        for v in xs:
            v.requires_grad_(False)
        return L, grads

    def diverged(k, bad, _):
        return TrainingDiverged(
            f"loss or gradient of network(s) {bad[:10]} became non-finite "
            f"at step {k + 1}; lower lr or check the initialisation",
            time=k + 1,
            partial={n: v.detach().clone() for n, v in theta.items()},
        )

    run = descend(
        loss_and_grads,
        list(theta.values()),
        n_steps=n_steps,
        lr=lr,
        betas=betas,
        eps=eps,
        record_steps=record,
        on_divergence=on_divergence,
        diverged=diverged,
        monitor=None if monitor is None else (lambda xs: monitor(dict(zip(names, xs)))),
        progress=progress,
        desc="Adam",
    )
    return TrainHistory(
        params={n: v.detach() for n, v in theta.items()},
        steps=run.steps,
        loss=run.loss.cpu().numpy(),
        final_loss=run.final_loss.cpu().numpy(),
        diverged=(~run.alive).cpu().numpy(),
        wall_s=run.wall_s,
        extra=run.extra,
    )


def _model_params(params) -> dict:
    """Detached float copies of a dict of tensors sharing the models' dim 0, checked."""
    if not isinstance(params, dict) or not params:
        raise TypeError(
            "params must be a non-empty dict of tensors with the models on dim 0"
        )
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
    return theta


def _checked_loss(L, n_models: int) -> torch.Tensor:
    if not isinstance(L, torch.Tensor) or L.shape != (n_models,):
        raise ValueError(
            f"loss_fn must return shape (n_models,)=({n_models},), got {getattr(L, 'shape', None)}"
        )
    return L


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
