r"""Gaussians stay Gaussian: the mean and covariance ODEs of the Transformer PDE, integrated.

For softmax, ℓ², Sinkhorn, linear and multi-head softmax attention the velocity field on
:math:`\mu = N(\alpha, \Sigma)` is affine, so the solution of the PDE started at a Gaussian stays
Gaussian, with :math:`\dot\alpha = \Gamma_\mu(\alpha)` and :math:`\dot\Sigma = J\Sigma + \Sigma J^\top`
(derivations: :mod:`attnbook.pde.symbolic`). For softmax this is the matrix Riccati equation

.. math:: \dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top,

which can blow up in finite time. :func:`gaussian_flow` integrates the lambdified SymPy
right-hand side with :func:`attnbook.flows.odeint` and stops at a blow-up (an entry of
:math:`\alpha` or :math:`\Sigma` above ``blowup_threshold``), reporting its time instead of
returning NaN; it tells a finite-time singularity from unbounded growth that takes infinite
time, for the whole state and for :math:`\Sigma` alone (``cov_fate``: with ℓ² and
``K = -Q`` the mean grows like :math:`e^{rt}` while the covariance clusters; with a
rank-deficient key map drawn independently of the queries the covariance itself grows). :func:`covariance_flow` integrates many zero-mean softmax covariance flows at
once in torch (for pictures in the PSD cone and limiting-rank histograms).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..attention import resolve_kind
from ..errors import BlowUpError, FlowDiverged
from ..flows import ODE_METHODS, check_times, odeint
from ..linalg import check_psd
from ..validation import as_float64_array, check_positive
from .particles import resolve_params
from .symbolic import moment_rhs

__all__ = [
    "GAUSSIAN_FLOW_KINDS",
    "FATES",
    "Fate",
    "GaussianFlow",
    "gaussian_flow",
    "check_covariance",
    "CovarianceFlow",
    "covariance_flow",
    "moment_field",
]

GAUSSIAN_FLOW_KINDS = ("softmax", "l2", "sinkhorn", "linear", "multihead")
#: After crossing ``blowup_threshold`` M the flow is continued to ``M * _CONTINUE_FACTOR``.
_CONTINUE_FACTOR = 1e4


#: Kinds whose covariance equation does not involve the mean (Σ' is a function of Σ alone):
#: there the fate of Σ is that of its own ODE. For linear attention Σ' contains ααᵀ.
_COV_AUTONOMOUS = ("softmax", "l2", "sinkhorn", "multihead")
FATES = ("finite", "growth", "blowup")


@dataclass(frozen=True)
class Fate:
    """What became of one part of the state on the requested interval.

    ``outcome``: ``"finite"`` (below ``blowup_threshold`` throughout), ``"growth"``
    (unbounded growth taking infinite time, ``growth_rate`` its exponential rate) or
    ``"blowup"`` (a finite-time singularity at ``blowup_time``). ``t`` and ``values``: the
    part's trajectory at the requested times before ``threshold_time``.
    """

    outcome: str  #: one of :data:`FATES`
    t: np.ndarray  #: (m,) requested times reached before the threshold
    values: np.ndarray  #: (m, ...) the part at those times
    blowup_time: float | None = None  #: time of the singularity when ``"blowup"``
    #: rate r of the growth (largest absolute entry ~ e^{rt}) when ``"growth"``
    growth_rate: float | None = None
    threshold_time: float | None = None  #: first crossing of the threshold, else None
    message: str = ""


@dataclass(frozen=True)
class GaussianFlow:
    """Solution of the moment ODEs at the requested times reached before the threshold.

    The state :math:`(\alpha, \\Sigma)` has exactly one of three fates: finite on the whole
    interval (``blowup_time`` and ``growth_rate`` None); a finite-time singularity
    (``blowup_time`` its time); or unbounded growth that takes infinite time (``blowup_time``
    None, ``growth_rate`` the exponential rate of the largest entry when it crossed the
    threshold). ``threshold_time``: when an entry first exceeded ``blowup_threshold`` (None if
    never). The mean can grow while the covariance clusters, so ``cov_fate`` is the fate of
    :math:`\\Sigma` alone (its own ODE, which for every kind but linear does not involve
    :math:`\alpha`; for linear attention, that of the coupled state).
    """

    t: np.ndarray  #: (m,) times (a prefix of the requested ones)
    mean: np.ndarray  #: (m, d)
    cov: np.ndarray  #: (m, d, d)
    blowup_time: float | None  #: time of a finite-time singularity, else None
    kind: str
    message: str = ""
    growth_rate: float | None = (
        None  #: rate r of the growth (largest absolute entry ~ e^{rt}), else None
    )
    threshold_time: float | None = None  #: first crossing of the threshold, else None
    wall_s: float = 0.0  #: wall-clock seconds of the call
    cov_fate: Fate | None = None  #: the fate of Σ alone

    @property
    def blew_up(self) -> bool:
        """A finite-time singularity (not mere growth)."""
        return self.blowup_time is not None

    @property
    def grew(self) -> bool:
        """Unbounded growth taking infinite time (the threshold was crossed, no singularity)."""
        return self.growth_rate is not None

    @property
    def fate(self) -> str:
        """The outcome of the whole state: ``"finite"``, ``"growth"`` or ``"blowup"``."""
        return "blowup" if self.blew_up else "growth" if self.grew else "finite"


_to_numpy = as_float64_array  # tensors, arrays or lists → finite float64 arrays


def check_covariance(cov, name: str = "cov0", d: int | None = None) -> np.ndarray:
    """A symmetric PSD ``(d, d)`` float64 matrix (:func:`attnbook.linalg.check_psd`'s tolerance)."""
    S = _to_numpy(cov, name)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {S.shape}")
    if d is not None and S.shape[0] != d:
        raise ValueError(
            f"{name} must be {d}x{d} to match the mean, got shape {S.shape}"
        )
    return check_psd(S, name)


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
    kind = resolve_kind(kind, GAUSSIAN_FLOW_KINDS)  # the one alias table
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


def _check_method(method) -> None:
    # both solvers here need adaptive steps: a fixed-step RK4 cannot locate a blow-up
    if method not in ODE_METHODS or method == "rk4":
        raise ValueError(
            f"method must be one of {tuple(m for m in ODE_METHODS if m != 'rk4')}, "
            f"got {method!r}"
        )


def _classify(rhs, y0: torch.Tensor, times: np.ndarray, M: float, method: str, opts):
    """Integrate to the bound ``M``; past it, tell a singularity from growth.

    Returns ``(Y, outcome, blowup_time, growth_rate, threshold_time, message)`` with ``Y``
    the states at the requested times before the threshold (NumPy).
    """
    blow_t = rate = cross_t = None
    try:
        Y = odeint(rhs, y0, times, method=method, max_abs=M, **opts).numpy()
        return Y, "finite", None, None, None, "finite on the whole interval"
    except BlowUpError as err:
        Y, cross_t = err.partial.numpy(), err.time
        t_k = float(err.times[-1])
    horizon = t_k + 2 * (cross_t - times[0]) + 1
    M2 = M * _CONTINUE_FACTOR
    last = torch.from_numpy(Y[-1])
    try:
        odeint(rhs, last, [t_k, horizon], method=method, max_abs=M2, **opts)
        rate = math.log(_CONTINUE_FACTOR) / (horizon - cross_t)
        message = (
            f"unbounded growth: |entries| > {M:.1e} at t = {cross_t:.6g}, not "
            f"{M2:.1e} by t = {horizon:.6g} (rate ≥ {rate:.4g})"
        )
        return Y, "growth", None, rate, cross_t, message
    except ValueError as err2:
        # the moment field needs a PSD covariance; past the threshold round-off can break it
        raise FlowDiverged(
            f"|entries| crossed {M:.1e} at t = {cross_t:.6g}; continuing towards "
            f"{M2:.1e} to tell a singularity from growth lost positive "
            f"semi-definiteness through round-off ({err2}). Lower blowup_threshold.",
            time=cross_t,
            partial=Y,
            times=np.asarray(times[: len(Y)]),
        ) from None
    except BlowUpError as err2:
        t2 = err2.time
    if abs(t2 - cross_t) <= 1e-3 * (cross_t - times[0]):
        blow_t = t2
        message = (
            f"finite-time singularity at t = {t2:.10g} (|entries| crossed "
            f"{M:.1e} at t = {cross_t:.10g}, {M2:.1e} at t = {t2:.10g})"
        )
        return Y, "blowup", blow_t, None, cross_t, message
    rate = math.log(_CONTINUE_FACTOR) / (t2 - cross_t)
    message = (
        f"unbounded growth, no finite-time singularity: |entries| crossed "
        f"{M:.1e} at t = {cross_t:.6g} and {M2:.1e} at t = {t2:.6g} "
        f"(rate {rate:.4g})"
    )
    return Y, "growth", None, rate, cross_t, message


def gaussian_flow(
    mean0,
    cov0,
    t,
    *,
    kind: str,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    blowup_threshold: float = 1e8,
    method: str = "dopri5",
    **params,
) -> GaussianFlow:
    r"""Mean and covariance of the Gaussian solution of the Transformer PDE at the times ``t``.

    ``kind``: softmax, l2, sinkhorn, linear or multihead (softmax heads); ``params``: ``A, V,
    Q, K, heads`` as in :func:`attnbook.pde.velocity` (defaults ``A = V = I``). ``t`` strictly
    increasing, ``t[0]`` the time of ``(mean0, cov0)``. Integrated by
    :func:`attnbook.flows.odeint` with ``method`` (adaptive ``"dopri5"``, or a stiff
    ``"bdf"``, ``"radau"``, ``"lsoda"``).

    When an entry first exceeds ``blowup_threshold`` (:math:`M`, at time :math:`T_M`) the
    flow is continued to :math:`M' = 10^4 M`. A finite-time singularity has converging
    crossing times (:math:`T^* - T_M = O(M^{-1/p})` for a singularity like
    :math:`(T^*-t)^{-p}`): if :math:`|T_{M'} - T_M| \le 10^{-3}(T_M - t_0)`, ``blowup_time``
    is :math:`T_{M'}` (or where the step size underflows). Otherwise the growth takes
    infinite time (exponential growth has :math:`T_{M'} - T_M = \ln 10^4 / r`):
    ``blowup_time`` is None and ``growth_rate`` is :math:`r = \ln 10^4 / (T_{M'} - T_M)` (a
    lower bound when :math:`M'` is not reached within :math:`2(T_M - t_0) + 1`). The arrays
    hold the requested times before :math:`T_M`. The same test on :math:`\Sigma` alone gives
    ``cov_fate`` (the mean can grow like :math:`e^{rt}` while the covariance clusters).
    """
    start = time.perf_counter()
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
    _check_method(method)
    M = check_positive(blowup_threshold, "blowup_threshold")
    field = moment_field(kind, d, **params)
    kind = resolve_kind(kind, GAUSSIAN_FLOW_KINDS)

    def rhs(_t, y):
        yn = y.numpy()
        dm, dS = field(yn[:d], yn[d:].reshape(d, d))
        return torch.from_numpy(np.concatenate([dm, dS.ravel()]))

    zero = np.zeros(d)

    def rhs_cov(_t, S):  # Σ' alone, for the kinds where it does not involve α
        return torch.from_numpy(field(zero, S.numpy())[1])

    y0 = torch.from_numpy(np.concatenate([a0, S0.ravel()]))
    opts = dict(rtol=rtol, atol=atol)
    Y, outcome, blow_t, rate, cross_t, message = _classify(
        rhs, y0, times, M, method, opts
    )
    cov = Y[:, d:].reshape(-1, d, d)
    cov = (cov + cov.transpose(0, 2, 1)) / 2
    if kind in _COV_AUTONOMOUS:
        res = _classify(rhs_cov, torch.from_numpy(S0), times, M, method, opts)
        S_alone = (res[0] + res[0].transpose(0, 2, 1)) / 2
    else:
        res, S_alone = (Y, outcome, blow_t, rate, cross_t, message), cov
    cov_fate = Fate(
        outcome=res[1],
        t=np.asarray(times[: len(S_alone)]),
        values=S_alone,
        blowup_time=res[2],
        growth_rate=res[3],
        threshold_time=res[4],
        message=res[5],
    )
    return GaussianFlow(
        t=np.asarray(times[: len(Y)]),
        mean=Y[:, :d].copy(),
        cov=cov,
        blowup_time=blow_t,
        kind=kind,
        message=message,
        growth_rate=rate,
        threshold_time=cross_t,
        wall_s=time.perf_counter() - start,
        cov_fate=cov_fate,
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
    method: str = "dopri5",
    device=None,
) -> CovarianceFlow:
    r"""Batched :math:`\dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top` for ``B`` systems.

    ``cov0``: ``(B, d, d)`` (or ``(d, d)``); ``A``, ``V``: ``(d, d)`` shared or ``(B, d, d)``.
    A member whose trace passes ``max_trace`` is frozen (its right-hand side set to zero) and
    flagged ``exploded`` — the convention of the figures of Castin et al. (2025). ``method``:
    adaptive Dormand–Prince in torch float64, vectorised over the batch (``"dopri5"``), or a
    stiff method of :func:`attnbook.flows.odeint` (``"bdf"``, ``"radau"``, ``"lsoda"``) for long
    horizons, where a clustering covariance decays like 1/t beside modes of rate one; BDF and
    Radau are told that the ``B`` systems are independent (a block-diagonal Jacobian).
    """
    _check_method(method)
    S0 = torch.as_tensor(_to_numpy(cov0, "cov0"))
    if S0.ndim == 2:
        S0 = S0[None]
    if S0.ndim != 3 or S0.shape[-1] != S0.shape[-2]:
        raise ValueError(
            f"cov0 must be (B, d, d) or (d, d), got shape {tuple(S0.shape)}"
        )
    S0 = check_psd(S0, "cov0")
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

    opts = dict(rtol=rtol, atol=atol, max_abs=max(1e8, 10 * max_trace))
    if method in ("bdf", "radau"):
        B, dd = S0.shape[0], d * d
        opts["jac_sparsity"] = np.kron(np.eye(B), np.ones((dd, dd)))
    traj = odeint(rhs, S0, times, method=method, **opts)
    cov = traj.cpu().numpy()
    tr = np.trace(cov, axis1=-2, axis2=-1)  # (m, B)
    exploded = (tr > max_trace).any(0)
    first = np.where(exploded, np.argmax(tr > max_trace, axis=0), -1)
    explode_time = np.where(exploded, times[np.clip(first, 0, None)], math.inf)
    return CovarianceFlow(
        t=times, cov=cov, exploded=exploded, explode_time=explode_time
    )
