r"""The exact population loss of the long-context limit, its gradient, and the gradient flow.

Model (one layer, one head, no value matrix, no LayerNorm, no residual): embedding
:math:`W_0\in\mathbb R^{d\times m}`, output :math:`W_1\in\mathbb R^{m\times d}`, attention
:math:`W_Q, W_K\in\mathbb R^{m\times m}`, and the two token-space matrices

.. math::  M = W_0 W_1, \qquad \Phi = W_0 W_Q W_K^\top W_0^\top \qquad (d\times d).

The query is the last token :math:`q = x_s`; the logits are
:math:`f = \sum_j a_{sj} M_{x_j,:}` with :math:`a_{sj} = \mathrm{softmax}_j \Phi_{q, x_j}`.
When the context length :math:`s\to\infty` its empirical token law tends to :math:`\pi`, so the
attention of query :math:`q` puts mass

.. math::  w_q(k) = \frac{\pi_k e^{\Phi_{qk}}}{\sum_l \pi_l e^{\Phi_{ql}}}

on token type :math:`k`, the logits tend to :math:`z_q = M^\top w_q`, and the cross-entropy of the
next token tends to the **population loss** (a reconstruction; see the Part I brief)

.. math::  L(\theta) = \sum_q \pi_q\Big[-P_q^\top M^\top w_q + \log\sum_j e^{(M^\top w_q)_j}\Big].

With :math:`r_q = \mathrm{softmax}(z_q) - P_q` its gradient is

.. math::
   \partial_M L = \sum_q \pi_q\, w_q r_q^\top, \qquad
   G_{qk} := \partial_{\Phi_{qk}} L = \pi_q w_q(k)\,(e_k - w_q)^\top M r_q,

   \partial_{W_0} L = (\partial_M L) W_1^\top + G W_0 W_{QK}^\top + G^\top W_0 W_{QK},\quad
   \partial_{W_1} L = W_0^\top \partial_M L,

   \partial_{W_Q} L = W_0^\top G W_0 W_K,\qquad \partial_{W_K} L = W_0^\top G^\top W_0 W_Q,

with :math:`W_{QK} = W_Q W_K^\top`. The map :math:`w_q` is a softmax over key *types* weighted
by their masses :math:`\pi_k` (a prior on the keys), not the plain softmax attention of
:mod:`attnbook.attention` over positions, which the finite model of
:mod:`attnbook.focus.model` calls. Everything here is batched over leading dimensions (an
ensemble of parameter sets shares one call) and is plain torch, so autograd checks the closed
form (``tests/test_focus_population.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from ..attention import masked_softmax
from ..device import as_generator, default_dtype, resolve_device
from ..errors import FlowDiverged
from ..flows import odeint
from ..markov import as_stochastic_matrix, stationary
from ..results import load_fields, save_fields
from ..train import descend
from ..validation import (
    as_tensor,
    check_choice,
    check_finite,
    check_ndim,
    check_positive,
    check_positive_int,
)

__all__ = [
    "time_grid",
    "Params",
    "init_params",
    "check_params",
    "attention_mixture",
    "population_loss",
    "population_gradient",
    "population_hessian",
    "pack",
    "unpack",
    "population_flow",
    "FlowResult",
    "gradient_descent",
    "FlowDiverged",
]


class Params(NamedTuple):
    """The four weight matrices (each possibly batched over leading dimensions)."""

    W0: torch.Tensor  # (..., d, m) embedding, row k = token k
    W1: torch.Tensor  # (..., m, d) output projection
    WQ: torch.Tensor  # (..., m, m)
    WK: torch.Tensor  # (..., m, m)


def check_params(W0, W1, WQ, WK, *, dtype=None) -> Params:
    """Convert and validate the four matrices; shapes must be consistent (batch dims broadcast)."""
    W0 = check_finite(as_tensor(W0, "W0", dtype=dtype), "W0")
    dtype = W0.dtype
    W1 = check_finite(as_tensor(W1, "W1", dtype=dtype, device=W0.device), "W1")
    WQ = check_finite(as_tensor(WQ, "WQ", dtype=dtype, device=W0.device), "WQ")
    WK = check_finite(as_tensor(WK, "WK", dtype=dtype, device=W0.device), "WK")
    for t, name in ((W0, "W0"), (W1, "W1"), (WQ, "WQ"), (WK, "WK")):
        check_ndim(t, name, 2, at_least=True)
    d, m = W0.shape[-2:]
    if W1.shape[-2:] != (m, d):
        raise ValueError(
            f"W1 must have shape (..., m, d) = (..., {m}, {d}) to match W0 "
            f"{tuple(W0.shape)}, got {tuple(W1.shape)}"
        )
    for t, name in ((WQ, "WQ"), (WK, "WK")):
        if t.shape[-2:] != (m, m):
            raise ValueError(
                f"{name} must have shape (..., m, m) = (..., {m}, {m}), got {tuple(t.shape)}"
            )
    return Params(W0, W1, WQ, WK)


def init_params(
    d: int,
    m: int,
    *,
    eps: float = 1e-3,
    n_models: int | None = None,
    seed: int | torch.Generator | None = None,
    dtype=None,
    device=None,
) -> Params:
    r"""Small Gaussian initialisation :math:`\mathcal N(0, \varepsilon^2)` of all four matrices.

    With ``n_models`` the tensors get a leading ensemble dimension (each member its own draw).
    ``seed`` is an int, a ``torch.Generator`` or ``None`` (torch's global generator).
    """
    d = check_positive_int(d, "d", minimum=2)
    m = check_positive_int(m, "m")
    eps = check_positive(eps, "eps")
    dev, dtype = resolve_device(device), default_dtype(dtype)
    # without a device the draws are made on the CPU (a generator's own device), then
    # moved: a seed gives the same weights on every machine, GPU or not
    draw = dev if device is not None else torch.device("cpu")
    if device is None and isinstance(seed, torch.Generator):
        draw = seed.device
    gen = as_generator(seed, draw)
    lead = () if n_models is None else (check_positive_int(n_models, "n_models"),)
    shapes = [(d, m), (m, d), (m, m), (m, m)]
    return Params(
        *(
            eps
            * torch.randn(*lead, *s, generator=gen, dtype=dtype, device=draw).to(dev)
            for s in shapes
        )
    )


def _chain(P, dtype, device):
    # validate and solve for pi in float64 (float32 rows sum to 1 only to ~1e-7), then cast
    P = as_stochastic_matrix(P, "P").to(device)
    return P.to(dtype), stationary(P).to(dtype)


def _check_masked(masked_keys, d, device=None):
    if masked_keys is None:
        return None
    mk = torch.as_tensor(masked_keys, device=device)
    if mk.dtype != torch.bool:
        raise TypeError(f"masked_keys must be a boolean vector, got dtype {mk.dtype}")
    if mk.shape != (d,):
        raise ValueError(f"masked_keys must have shape ({d},), got {tuple(mk.shape)}")
    if bool(mk.all()):
        raise ValueError("masked_keys masks every token: no key is left to attend to")
    return mk


def _log_key_weights(pi, masked_keys):
    lp = torch.log(pi)
    if masked_keys is not None:
        lp = lp.masked_fill(masked_keys, float("-inf"))
    return lp


def attention_mixture(Phi, pi, masked_keys=None) -> torch.Tensor:
    r"""Row :math:`q` = the long-context attention law :math:`w_q(k) \propto \pi_k e^{\Phi_{qk}}`.

    ``masked_keys`` (boolean, (d,)) removes token types from the keys (:math:`w_q(k) = 0`), e.g.
    the catch-all OTHER token of real text.
    """
    Phi = as_tensor(Phi, "Phi")
    pi = as_tensor(pi, "pi", dtype=Phi.dtype, device=Phi.device)
    mk = _check_masked(masked_keys, Phi.shape[-1], Phi.device)
    return masked_softmax(_log_key_weights(pi, mk)[..., None, :] + Phi)


def _forward(p: Params, P: torch.Tensor, pi: torch.Tensor, mk=None):
    WQK = p.WQ @ p.WK.transpose(-1, -2)
    M = p.W0 @ p.W1
    Phi = p.W0 @ WQK @ p.W0.transpose(-1, -2)
    w = masked_softmax(_log_key_weights(pi, mk)[..., None, :] + Phi)  # row q is w_q
    z = w @ M  # row q is (M^T w_q)^T
    lse = torch.logsumexp(z, dim=-1)
    loss = (pi * (lse - (P * z).sum(-1))).sum(-1)
    return loss, M, Phi, WQK, w, z


def population_loss(W0, W1, WQ, WK, P, *, masked_keys=None) -> torch.Tensor:
    r"""The exact long-context population loss :math:`L(\theta)` (see the module docstring).

    ``P`` is the chain (its stationary law is used as :math:`\pi`). Inputs may be NumPy arrays
    or tensors, batched over leading dimensions; the result has the batch shape (a 0-d tensor
    for a single parameter set). Differentiable with autograd. ``masked_keys``: see
    :func:`attention_mixture`.
    """
    p = check_params(W0, W1, WQ, WK)
    P, pi = _chain(P, p.W0.dtype, p.W0.device)
    if P.shape[-1] != p.W0.shape[-2]:
        raise ValueError(
            f"P must be {p.W0.shape[-2]}x{p.W0.shape[-2]} (d from W0), got {tuple(P.shape)}"
        )
    return _forward(p, P, pi, _check_masked(masked_keys, P.shape[-1], P.device))[0]


def _gradient(p: Params, P, pi, mk=None):
    loss, M, Phi, WQK, w, z = _forward(p, P, pi, mk)
    r = masked_softmax(z) - P  # r_q = softmax(M^T w_q) - P_q
    dM = w.transpose(-1, -2) @ (pi[..., :, None] * r)  # sum_q pi_q w_q r_q^T
    v = r @ M.transpose(-1, -2)  # v[q, k] = (M r_q)_k
    G = pi[..., :, None] * w * (v - (w * v).sum(-1, keepdim=True))
    W0t = p.W0.transpose(-1, -2)
    GW0 = G @ p.W0
    GtW0 = G.transpose(-1, -2) @ p.W0
    dW0 = dM @ p.W1.transpose(-1, -2) + GW0 @ WQK.transpose(-1, -2) + GtW0 @ WQK
    dW1 = W0t @ dM
    dWQ = W0t @ GW0 @ p.WK
    dWK = W0t @ GtW0 @ p.WQ
    return loss, Params(dW0, dW1, dWQ, dWK), G, dM


def _tr(a):
    return np.swapaxes(a, -1, -2)


def _gradient_np(W0, W1, WQ, WK, P, pi, log_keys):
    """NumPy twin of :func:`_gradient` for the ODE right-hand side (tiny matrices: NumPy's
    per-call overhead is ~10x lower than torch's). Tested equal to the torch version."""
    WQK = WQ @ _tr(WK)
    M = W0 @ W1
    Phi = W0 @ WQK @ _tr(W0)
    w = masked_softmax(log_keys[..., None, :] + Phi)
    z = w @ M
    r = masked_softmax(z) - P
    dM = _tr(w) @ (pi[..., :, None] * r)
    v = r @ _tr(M)
    G = pi[..., :, None] * w * (v - (w * v).sum(-1, keepdims=True))
    GW0, GtW0 = G @ W0, _tr(G) @ W0
    return (
        dM @ _tr(W1) + GW0 @ _tr(WQK) + GtW0 @ WQK,
        _tr(W0) @ dM,
        _tr(W0) @ GW0 @ WK,
        _tr(W0) @ GtW0 @ WQ,
    )


def population_gradient(
    W0, W1, WQ, WK, P, *, masked_keys=None, return_loss: bool = False
):
    """Closed-form gradient of :func:`population_loss` as a :class:`Params` (batched).

    With ``return_loss`` returns ``(loss, grads)``.
    """
    p = check_params(W0, W1, WQ, WK)
    P, pi = _chain(P, p.W0.dtype, p.W0.device)
    if P.shape[-1] != p.W0.shape[-2]:
        raise ValueError(
            f"P must be {p.W0.shape[-2]}x{p.W0.shape[-2]} (d from W0), got {tuple(P.shape)}"
        )
    loss, g, _, _ = _gradient(
        p, P, pi, _check_masked(masked_keys, P.shape[-1], P.device)
    )
    return (loss, g) if return_loss else g


def pack(p: Params) -> torch.Tensor:
    """Flatten the four matrices into one vector per batch element: shape (..., 2dm + 2m²)."""
    lead = p.W0.shape[:-2]
    return torch.cat([t.reshape(*lead, -1) for t in p], dim=-1)


def unpack(theta: torch.Tensor, d: int, m: int) -> Params:
    """Inverse of :func:`pack`."""
    theta = as_tensor(theta, "theta")
    n = 2 * d * m + 2 * m * m
    if theta.shape[-1] != n:
        raise ValueError(
            f"theta must have last dimension 2dm + 2m^2 = {n}, got {theta.shape[-1]}"
        )
    lead = theta.shape[:-1]
    sizes = [d * m, m * d, m * m, m * m]
    shapes = [(d, m), (m, d), (m, m), (m, m)]
    parts = torch.split(theta, sizes, dim=-1)
    return Params(*(x.reshape(*lead, *s) for x, s in zip(parts, shapes)))


def population_hessian(W0, W1, WQ, WK, P, *, masked_keys=None) -> torch.Tensor:
    """Hessian of the population loss in the packed coordinates (autograd of the closed-form
    gradient); its negative is the Jacobian of the gradient flow. Batched: (..., n, n)."""
    p = check_params(W0, W1, WQ, WK)
    P, pi = _chain(P, p.W0.dtype, p.W0.device)
    d, m = p.W0.shape[-2:]
    mk = _check_masked(masked_keys, d, P.device)

    def grad_flat(theta, P1, pi1):
        return pack(_gradient(unpack(theta, d, m), P1, pi1, mk)[1])

    theta = pack(p)
    lead = torch.broadcast_shapes(theta.shape[:-1], P.shape[:-2])
    theta = theta.expand(*lead, theta.shape[-1])
    flat = theta.reshape(-1, theta.shape[-1])
    Pf = P.expand(*lead, d, d).reshape(-1, d, d)
    pif = pi.expand(*lead, d).reshape(-1, d)
    # one vmapped forward-mode Jacobian for every (parameters, chain) pair of the batch
    H = torch.func.vmap(torch.func.jacfwd(grad_flat))(flat, Pf, pif)
    return H.reshape(*theta.shape, theta.shape[-1])


@dataclass
class FlowResult:
    """A recorded trajectory: parameters at times ``t`` (batched over models if the input was)."""

    t: np.ndarray  # (T,)
    W0: np.ndarray  # (T, ..., d, m)
    W1: np.ndarray  # (T, ..., m, d)
    WQ: np.ndarray  # (T, ..., m, m)
    WK: np.ndarray  # (T, ..., m, m)
    loss: np.ndarray  # (T, ...)
    P: np.ndarray  # (d, d), or (..., d, d) for one chain per model
    pi: np.ndarray  # (d,) or (..., d)
    wall_s: float = 0.0
    n_fev: int = 0
    info: dict = field(default_factory=dict)

    def params(self, i: int | slice = slice(None)) -> Params:
        """Parameters at time index ``i`` as tensors."""
        return Params(
            *(
                torch.from_numpy(np.ascontiguousarray(getattr(self, k)[i]))
                for k in ("W0", "W1", "WQ", "WK")
            )
        )

    def save(self, path) -> Path:
        """Write every array to an ``.npz`` file (no pickle)."""
        return save_fields(self, path)

    @classmethod
    def load(cls, path) -> FlowResult:
        kw, info = load_fields(cls, path)
        kw["wall_s"] = float(kw.get("wall_s", 0.0))
        kw["n_fev"] = int(kw.get("n_fev", 0))
        return cls(info=info, **kw)


def time_grid(
    t_end: float, *, dense_until: float = 300.0, n_dense: int = 601, n_log: int = 300
) -> np.ndarray:
    """Recording times for a flow: uniform on [0, dense_until] (to resolve stages I–III and fit
    growth rates), then log-spaced up to ``t_end`` (the long plateaus of stage IV)."""
    t_end = check_positive(t_end, "t_end")
    dense_until = min(check_positive(dense_until, "dense_until"), t_end)
    grid = np.linspace(
        0.0, dense_until, check_positive_int(n_dense, "n_dense", minimum=2)
    )
    if t_end > dense_until:
        grid = np.concatenate(
            [
                grid,
                np.logspace(
                    np.log10(dense_until),
                    np.log10(t_end),
                    check_positive_int(n_log, "n_log", minimum=2),
                )[1:],
            ]
        )
    grid[-1] = t_end
    return grid


def _as_start(params, dtype=torch.float64) -> Params:
    if isinstance(params, Params) or (
        isinstance(params, (tuple, list)) and len(params) == 4
    ):
        return check_params(*params, dtype=dtype)
    raise TypeError("params must be a Params tuple (W0, W1, WQ, WK)")


def _broadcast_chains(p: Params, P, pi):
    """One chain per model: parameters and chains broadcast to a common batch."""
    d = P.shape[-1]
    try:
        lead = torch.broadcast_shapes(p.W0.shape[:-2], P.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch shape of P {tuple(P.shape[:-2])} does not broadcast with "
            f"that of the parameters {tuple(p.W0.shape[:-2])}"
        ) from None
    p = Params(*(x.expand(*lead, *x.shape[-2:]).clone() for x in p))
    return p, P.expand(*lead, d, d), pi.expand(*lead, d)


def _flow_times(t_eval, n_eval, t_end) -> np.ndarray:
    """The recorded times: ``t_eval`` checked, or 0 then ``n_eval - 1`` log-spaced ones."""
    if t_eval is None:
        n_eval = check_positive_int(n_eval, "n_eval", minimum=2)
        t_eval = np.concatenate([[0.0], np.logspace(-2, np.log10(t_end), n_eval - 1)])
        t_eval[-1] = t_end
    t_eval = np.asarray(t_eval, dtype=float)
    if (
        t_eval.ndim != 1
        or np.any(np.diff(t_eval) < 0)
        or t_eval[0] < 0
        or t_eval[-1] > t_end * (1 + 1e-12)
    ):
        raise ValueError("t_eval must be an increasing 1-D array within [0, t_end]")
    return np.minimum(t_eval, float(t_end))  # forgive round-off at the end point


def _flow_rhs_and_jac(P, pi, mk, nb: int, d: int, m: int, n_fev: list):
    r"""The flow's NumPy right-hand side :math:`-\nabla L` on the packed state of ``nb``
    models, and its exact Jacobian :math:`-\nabla^2 L` (block diagonal, sparse, for a
    batch); ``n_fev[0]`` counts the evaluations."""
    import scipy.sparse

    batched_P = P.dim() > 2
    Pb = P.reshape(-1, d, d) if batched_P else P
    pib = pi.reshape(-1, d) if batched_P else pi
    P_np, log_keys = Pb.numpy(), _log_key_weights(pib, mk).numpy()
    pi_np = pib.numpy()
    cuts = np.cumsum([d * m, m * d, m * m])
    n = d * m + m * d + 2 * m * m

    def rhs(t, y):
        n_fev[0] += 1
        a, b, c, e = np.split(y.reshape(nb, n), cuts, axis=-1)
        g = _gradient_np(
            a.reshape(nb, d, m),
            b.reshape(nb, m, d),
            c.reshape(nb, m, m),
            e.reshape(nb, m, m),
            P_np,
            pi_np,
            log_keys,
        )
        return -np.concatenate([x.reshape(nb, -1) for x in g], axis=-1).reshape(-1)

    def jac(t, y):
        th = torch.from_numpy(y).reshape(nb, n)
        H = population_hessian(*unpack(th, d, m), Pb, masked_keys=mk).numpy()
        if nb == 1:
            return -H[0]
        return scipy.sparse.block_diag([-h for h in H], format="csc")

    return rhs, jac


def _advancing(rhs, bar):
    """``rhs`` that advances the progress ``bar`` to the largest time it is called at."""
    last = [0.0]

    def wrapped(t, y):
        if t > last[0]:
            bar.update(t - last[0])
            last[0] = t
        return rhs(t, y)

    return wrapped


def population_flow(
    params,
    P,
    t_end: float,
    *,
    t_eval=None,
    n_eval: int = 400,
    method: str = "bdf",
    rtol: float = 1e-8,
    atol: float = 1e-11,
    max_norm: float = 1e6,
    masked_keys=None,
    progress: bool = False,
) -> FlowResult:
    r"""Integrate the gradient flow :math:`\dot\theta = -\nabla L(\theta)` of the population loss.

    The package's ODE front-end (:func:`attnbook.flows.odeint`) with one of SciPy's stiff
    integrators (``method`` = ``"bdf"`` (default: the flow is stiff on its long plateaus),
    ``"radau"`` or ``"lsoda"``; SciPy's capitalised names are accepted) and the exact
    Jacobian :math:`-\nabla^2 L` from :func:`population_hessian`. A batch
    of parameter sets (leading ensemble dimension) is integrated as one ODE whose Jacobian is
    block diagonal (sparse), so seeds share one vectorised run. ``P`` may be batched too (one
    chain per model, e.g. a sweep over δ); parameters and chains broadcast to a common batch.

    ``t_eval`` (default: ``n_eval`` points, 0 then log-spaced up to ``t_end``) are the recorded
    times. Raises :class:`attnbook.errors.BlowUpError` (a :class:`FlowDiverged`), as every
    flow of the package does, if the state stops being finite or exceeds ``max_norm``.
    """
    p = _as_start(params)
    t_end = check_positive(t_end, "t_end")
    if not isinstance(method, str):
        raise TypeError(f"method must be a string, got {type(method).__name__}")
    method = check_choice(method.lower(), "method", ("bdf", "radau", "lsoda"))
    P, pi = _chain(P, torch.float64, torch.device("cpu"))
    p = Params(*(x.detach().to("cpu", torch.float64) for x in p))
    d, m = p.W0.shape[-2:]
    if P.shape[-1] != d:
        raise ValueError(f"P must be {d}x{d} (d from W0), got {tuple(P.shape)}")
    if P.dim() > 2:
        p, P, pi = _broadcast_chains(p, P, pi)
    lead = p.W0.shape[:-2]
    theta0 = pack(p)
    n = theta0.shape[-1]
    nb = int(np.prod(lead)) if len(lead) else 1
    t_eval = _flow_times(t_eval, n_eval, t_end)
    n_fev = [0]

    mk = _check_masked(masked_keys, d)
    rhs, jac = _flow_rhs_and_jac(P, pi, mk, nb, d, m, n_fev)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=float(t_end), desc="population flow", unit="t")
        rhs = _advancing(rhs, bar)

    # the integration runs on [0, t_end]: the grid holds both ends whatever t_eval is
    grid = np.unique(np.concatenate([[0.0], t_eval, [float(t_end)]]))
    t0 = time.perf_counter()
    try:
        flat = odeint(
            rhs,
            theta0.reshape(-1),
            grid,
            method=method,
            rtol=rtol,
            atol=atol,
            max_abs=max_norm,
            jac=jac,
            numpy_rhs=True,
        )
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - t0
    # laid out as SciPy's sol.y.T (a transposed view): the loss's reductions then run in the
    # order the archived flows were made with, so their re-check stays bit for bit
    Y = np.ascontiguousarray(flat.numpy()[np.searchsorted(grid, t_eval)].T).T
    Y = Y.reshape(len(t_eval), *lead, n)
    if not np.all(np.isfinite(Y)):
        raise FlowDiverged(
            "population flow produced non-finite parameters", partial=Y, times=t_eval
        )
    traj = unpack(torch.from_numpy(Y), d, m)
    with torch.no_grad():
        loss = _forward(traj, P, pi, mk)[0].numpy()
    return FlowResult(
        t=t_eval,
        W0=traj.W0.numpy(),
        W1=traj.W1.numpy(),
        WQ=traj.WQ.numpy(),
        WK=traj.WK.numpy(),
        loss=loss,
        P=P.numpy(),
        pi=pi.numpy(),
        wall_s=wall,
        n_fev=n_fev[0],
        info={
            "method": method,
            "rtol": rtol,
            "atol": atol,
            **({"masked_keys": mk.numpy()} if mk is not None else {}),
        },
    )


def gradient_descent(
    params,
    P,
    *,
    lr: float,
    n_steps: int,
    record_every: int = 1,
    masked_keys=None,
    max_norm: float = 1e6,
    optimizer: str = "gd",
    progress: bool = False,
) -> FlowResult:
    r"""Full-batch gradient descent :math:`\theta_{k+1} = \theta_k - \eta\nabla L(\theta_k)` on the
    population loss (the Euler discretisation of the flow; time :math:`t = k\eta`). Batched.

    ``optimizer="adam"`` takes Adam's steps (torch's defaults :math:`\beta = (0.9, 0.999)`,
    :math:`10^{-8}`) on the exact gradient instead: the deterministic counterpart of Adam on
    sampled windows (:func:`attnbook.focus.train` with ``optimizer="adam"``)."""
    p = _as_start(params)
    lr = check_positive(lr, "lr")
    optimizer = check_choice(optimizer, "optimizer", ("gd", "adam"))
    n_steps = check_positive_int(n_steps, "n_steps")
    record_every = check_positive_int(record_every, "record_every")
    P, pi = _chain(P, p.W0.dtype, p.W0.device)
    mk = _check_masked(masked_keys, P.shape[-1], P.device)
    lead = p.W0.shape[:-2]
    # the package's one training loop wants the models on dim 0: flatten the batch
    flat = [x.detach().reshape(-1, *x.shape[-2:]).clone() for x in p]
    one_axis = len(lead) == 1  # already (n_models, ...): no reshapes in the loop

    def loss_and_grads(k, xs):
        q = Params(*(xs if one_axis else (x.reshape(*lead, *x.shape[-2:]) for x in xs)))
        loss, g, _, _ = _gradient(q, P, pi, mk)  # closed form, under descend's no_grad
        if one_axis:
            return loss, list(g)
        return loss.reshape(-1), [x.reshape(-1, *x.shape[-2:]) for x in g]

    def diverged(k, bad, run):
        return FlowDiverged(
            f"gradient descent diverged at step {k}: non-finite loss or "
            f"parameters above max_norm = {max_norm:g} (lr = {lr} too large?)",
            time=k * lr,
            partial=[[x.reshape(*lead, *x.shape[-2:]) for x in r] for r in run.params],
            times=run.steps * lr,
        )

    record = sorted(set(range(0, n_steps + 1, record_every)) | {n_steps})
    with torch.no_grad():  # the gradient is exact: autograd has nothing to record
        run = descend(
            loss_and_grads,
            flat,
            n_steps=n_steps,
            optimizer="sgd" if optimizer == "gd" else "adam",
            lr=lr,
            record_steps=record,
            check_grads=False,  # the exact gradient is finite where loss and weights are
            max_abs=max_norm,
            diverged=diverged,
            keep_params=True,
            progress=progress,
            desc="gradient descent",
        )
    rec_p = [[x.reshape(*lead, *x.shape[-2:]) for x in r] for r in run.params]
    rec_t = list(run.steps * lr)
    rec_l = [x.reshape(lead) for x in run.loss]
    wall = run.wall_s
    stack = [torch.stack([r[i] for r in rec_p]).cpu().numpy() for i in range(4)]
    return FlowResult(
        t=np.array(rec_t),
        W0=stack[0],
        W1=stack[1],
        WQ=stack[2],
        WK=stack[3],
        loss=torch.stack(rec_l).cpu().numpy(),
        P=P.cpu().numpy(),
        pi=pi.cpu().numpy(),
        wall_s=wall,
        n_fev=n_steps + 1,
        info={
            "method": optimizer,
            "lr": lr,
            **({"masked_keys": mk.cpu().numpy()} if mk is not None else {}),
        },
    )
