r"""Gaussians stay Gaussian: the mean and covariance ODEs of the Transformer PDE, integrated.

For softmax, ℓ², Sinkhorn, linear and multi-head softmax attention the velocity field on
:math:`\mu = N(\alpha, \Sigma)` is affine, so the solution of the PDE started at a Gaussian stays
Gaussian, with :math:`\dot\alpha = \Gamma_\mu(\alpha)` and :math:`\dot\Sigma = J\Sigma + \Sigma J^\top`
(derivations: :mod:`attnbook.pde.symbolic`). For softmax this is the matrix Riccati equation

.. math:: \dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top,

which can blow up in finite time. :func:`gaussian_flow` integrates the lambdified SymPy
right-hand side with :func:`scipy.integrate.solve_ivp` and stops at a blow-up (an entry of
:math:`\alpha` or :math:`\Sigma` above ``blowup_threshold``), reporting its time instead of
returning NaN. :func:`covariance_flow` integrates many zero-mean softmax covariance flows at
once in torch (for pictures in the PSD cone and limiting-rank histograms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.integrate import solve_ivp

from ..flows import check_times, odeint_dopri5
from ..validation import as_float64_array, check_choice
from .particles import _ALIASES, resolve_params  # one table of kind aliases
from .symbolic import moment_rhs

__all__ = [
    "GAUSSIAN_FLOW_KINDS",
    "GaussianFlow",
    "gaussian_flow",
    "check_covariance",
    "CovarianceFlow",
    "covariance_flow",
    "moment_field",
]

GAUSSIAN_FLOW_KINDS = ("softmax", "l2", "sinkhorn", "linear", "multihead")


@dataclass
class GaussianFlow:
    """Solution of the moment ODEs at the requested times reached before any blow-up."""

    t: np.ndarray  #: (m,) times (a prefix of the requested ones)
    mean: np.ndarray  #: (m, d)
    cov: np.ndarray  #: (m, d, d)
    blowup_time: float | None  #: None if finite on the whole interval
    kind: str
    message: str = ""

    @property
    def blew_up(self) -> bool:
        return self.blowup_time is not None


_to_numpy = as_float64_array  # tensors, arrays or lists → finite float64 arrays


def check_covariance(
    cov, name: str = "cov0", d: int | None = None, *, tol: float = 1e-9
) -> np.ndarray:
    """A symmetric positive semi-definite ``(d, d)`` float64 matrix, or a ``ValueError`` naming ``name``."""
    S = _to_numpy(cov, name)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {S.shape}")
    if d is not None and S.shape[0] != d:
        raise ValueError(
            f"{name} must be {d}x{d} to match the mean, got shape {S.shape}"
        )
    scale = max(1.0, float(np.abs(S).max()))
    if not np.allclose(S, S.T, atol=tol * scale, rtol=0):
        raise ValueError(
            f"{name} must be symmetric (max asymmetry {np.abs(S - S.T).max():.3g})"
        )
    lam = float(np.linalg.eigvalsh(S).min())
    if lam < -tol * scale:
        raise ValueError(
            f"{name} must be positive semi-definite, smallest eigenvalue {lam:.3g}"
        )
    return (S + S.T) / 2


def _heads(kind, d, A, V, Q, K, heads):
    """Per-head parameter dicts for :func:`attnbook.pde.symbolic.moment_rhs`."""
    p = resolve_params(
        d, kind=kind, A=A, V=V, Q=Q, K=K, heads=heads
    )  # validates every shape
    Vs = p.V.numpy()
    if p.kind != "l2":
        return [dict(A=p.A[h].numpy(), V=Vs[h]) for h in range(p.heads)]
    # ℓ² needs Q_h, K_h themselves: A only -> Q = A, K = I; nothing -> Q = K = I.
    if Q is None:
        As = p.A.numpy()
        return [dict(Q=As[h], K=np.eye(d), V=Vs[h]) for h in range(p.heads)]
    Qn, Kn = _to_numpy(Q, "Q"), _to_numpy(K, "K")
    if Qn.ndim == 2:
        Qn = Qn.reshape(p.heads, -1, d)
        Kn = Kn.reshape(p.heads, -1, d)
    return [dict(Q=Qn[h], K=Kn[h], V=Vs[h]) for h in range(p.heads)]


def moment_field(kind: str, d: int, *, A=None, V=None, Q=None, K=None, heads=None):
    r"""The right-hand side ``f(mean, cov) -> (mean', cov')`` summed over heads (NumPy)."""
    kind = _ALIASES.get(kind, kind) if isinstance(kind, str) else kind
    check_choice(kind, "kind", GAUSSIAN_FLOW_KINDS)
    base = "softmax" if kind == "multihead" else kind
    hs = _heads(kind, d, A, V, Q, K, heads)

    def f(mean, cov):
        dm, dS = np.zeros(d), np.zeros((d, d))
        for h in hs:
            a, S = moment_rhs(base, mean, cov, **h)
            dm += a
            dS += S
        return dm, (dS + dS.T) / 2

    return f


def gaussian_flow(
    mean0,
    cov0,
    t,
    *,
    kind: str,
    A=None,
    V=None,
    Q=None,
    K=None,
    heads=None,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    blowup_threshold: float = 1e8,
    method: str = "DOP853",
) -> GaussianFlow:
    r"""Mean and covariance of the Gaussian solution of the Transformer PDE at the times ``t``.

    ``kind``: softmax, l2, sinkhorn, linear or multihead (softmax heads); the parameters are
    those of :func:`attnbook.pde.velocity` (defaults ``A = V = I``). ``t`` strictly increasing,
    ``t[0]`` the time of ``(mean0, cov0)``. The solver stops at the first time an entry of
    :math:`\alpha` or :math:`\Sigma` exceeds ``blowup_threshold`` (in absolute value);
    ``blowup_time`` is that time (within :math:`O(1/\text{threshold})` of the true singularity of
    the Riccati flow) and the arrays hold only the requested times before it.
    """
    a0 = _to_numpy(mean0, "mean0")
    if a0.ndim != 1:
        raise ValueError(f"mean0 must be a vector (d,), got shape {a0.shape}")
    d = a0.shape[0]
    S0 = check_covariance(cov0, "cov0", d)
    times = check_times(t)
    if kind == "sigmoid":
        raise ValueError(
            "kind 'sigmoid' has no Gaussian closure (its velocity is not affine on a "
            "Gaussian); simulate particles instead"
        )
    field = moment_field(kind, d, A=A, V=V, Q=Q, K=K, heads=heads)

    def rhs(_t, yv):
        dm, dS = field(yv[:d], yv[d:].reshape(d, d))
        return np.concatenate([dm, dS.ravel()])

    def blowup(_t, yv):
        return blowup_threshold - np.abs(yv).max()

    blowup.terminal = True

    y0 = np.concatenate([a0, S0.ravel()])
    sol = solve_ivp(
        rhs,
        (times[0], times[-1]),
        y0,
        method=method,
        t_eval=times,
        rtol=rtol,
        atol=atol,
        events=blowup,
    )
    blow_t, message = None, "finite on the whole interval"
    if sol.status == 1 and len(sol.t_events[0]):
        blow_t = float(sol.t_events[0][0])
        message = f"blew up: |entries| > {blowup_threshold:.1e} at t = {blow_t:.8g}"
    elif sol.status == -1:
        blow_t = float(sol.t[-1]) if len(sol.t) else float(times[0])
        message = f"solver stopped ({sol.message}); treated as a blow-up near t = {blow_t:.6g}"
    Y = sol.y.T
    keep = np.all(np.isfinite(Y), axis=1)
    if not keep.all():  # never hand back NaN
        first_bad = int(np.argmin(keep))
        Y, tt = Y[:first_bad], sol.t[:first_bad]
        blow_t = (
            blow_t
            if blow_t is not None
            else float(tt[-1])
            if len(tt)
            else float(times[0])
        )
    else:
        tt = sol.t
    cov = Y[:, d:].reshape(-1, d, d)
    return GaussianFlow(
        t=np.asarray(tt),
        mean=Y[:, :d].copy(),
        cov=(cov + cov.transpose(0, 2, 1)) / 2,
        blowup_time=blow_t,
        kind=kind,
        message=message,
    )


@dataclass
class CovarianceFlow:
    """Many zero-mean softmax covariance flows integrated together."""

    t: np.ndarray  #: (m,)
    cov: np.ndarray  #: (m, B, d, d); frozen after a member explodes
    exploded: np.ndarray  #: (B,) bool: trace exceeded ``max_trace``
    explode_time: (
        np.ndarray
    )  #: (B,) first output time with trace > max_trace (inf if never)


def covariance_flow(
    cov0,
    t,
    *,
    A,
    V=None,
    max_trace: float = 1e3,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    device=None,
) -> CovarianceFlow:
    r"""Batched :math:`\dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top` for ``B`` systems.

    ``cov0``: ``(B, d, d)`` (or ``(d, d)``); ``A``, ``V``: ``(d, d)`` shared or ``(B, d, d)``.
    A member whose trace passes ``max_trace`` is frozen (its right-hand side set to zero) and
    flagged ``exploded`` — the convention of the figures of Castin et al. (2025). Adaptive
    Dormand–Prince in torch float64, vectorised over the batch.
    """
    S0 = torch.as_tensor(_to_numpy(cov0, "cov0"))
    if S0.ndim == 2:
        S0 = S0[None]
    if S0.ndim != 3 or S0.shape[-1] != S0.shape[-2]:
        raise ValueError(
            f"cov0 must be (B, d, d) or (d, d), got shape {tuple(S0.shape)}"
        )
    for i in range(S0.shape[0]):
        check_covariance(S0[i].numpy(), f"cov0[{i}]")
    d = S0.shape[-1]
    Am = torch.as_tensor(_to_numpy(A, "A"))
    Vm = (
        torch.eye(d, dtype=torch.float64)
        if V is None
        else torch.as_tensor(_to_numpy(V, "V"))
    )
    for M, name in ((Am, "A"), (Vm, "V")):
        if (
            M.shape[-2:] != (d, d)
            or M.ndim not in (2, 3)
            or (M.ndim == 3 and M.shape[0] != S0.shape[0])
        ):
            raise ValueError(
                f"{name} must be ({d}, {d}) or ({S0.shape[0]}, {d}, {d}), got {tuple(M.shape)}"
            )
    times = check_times(t)
    dev = device if device is not None else "cpu"
    S0, Am, Vm = S0.to(dev), Am.to(dev), Vm.to(dev)

    def rhs(_t, S):
        alive = (S.diagonal(dim1=-2, dim2=-1).sum(-1) <= max_trace).to(S.dtype)[
            :, None, None
        ]
        R = Vm @ S @ Am @ S
        return (R + R.mT) * alive

    traj = odeint_dopri5(
        rhs, S0, times, rtol=rtol, atol=atol, max_abs=max(1e8, 10 * max_trace)
    )
    cov = traj.cpu().numpy()
    tr = np.trace(cov, axis1=-2, axis2=-1)  # (m, B)
    exploded = (tr > max_trace).any(0)
    first = np.where(exploded, np.argmax(tr > max_trace, axis=0), -1)
    explode_time = np.where(exploded, times[np.clip(first, 0, None)], math.inf)
    return CovarianceFlow(
        t=times, cov=cov, exploded=exploded, explode_time=explode_time
    )
