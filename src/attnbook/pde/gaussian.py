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
time (by the blow-up index of the log-rate between two crossings, see :func:`gaussian_flow`),
for the whole state and for :math:`\Sigma` alone (``cov_fate``: with ℓ² and
``K = -Q`` the mean grows like :math:`e^{rt}` while the covariance clusters; with a
rank-deficient key map drawn independently of the queries the covariance itself grows).

:func:`covariance_flow` integrates many zero-mean softmax covariance flows at once in torch
(for pictures in the PSD cone and limiting-rank histograms).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..attention import resolve_kind
from ..errors import BlowUpError, FlowDiverged
from ..flows import check_adaptive_method, check_times, odeint
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
    "frozen_batch_flow",
    "moment_field",
]

GAUSSIAN_FLOW_KINDS = ("softmax", "l2", "sinkhorn", "linear", "multihead")
#: After crossing ``blowup_threshold`` M the flow is continued to ``M * _CONTINUE_FACTOR``.
_CONTINUE_FACTOR = 1e4
#: The blow-up index is measured between the crossings of M / 10**_INDEX_DECADES and M.
_INDEX_DECADES = 2
#: A blow-up index at most this is exponential growth: a singularity (T* − t)^-p has index
#: 1/p, so this tells every singularity up to p = 10 from growth; exponential growth with a
#: polynomial prefactor t^k has an index of order k/(r t)², far below it at the threshold.
_GROWTH_INDEX = 0.1
#: Right-hand-side evaluations allowed per decade of the continuation past the threshold.
#: Near a singularity a decade takes tens of adaptive steps (the step shrinks with the
#: distance to T*), and exponential growth a few hundred; a flow whose small directions
#: turn stiff at large entries can instead stall, the step held near 1/(|A||V||Σ|) while
#: |Σ| no longer grows (seen at 3.7e9 for a 2-d softmax draw), and would take ~10⁶ steps
#: per decade. 30 000 evaluations (~4 300 DOPRI5 steps) is 50× the most any decade takes
#: in the test suite and the Part III chapters (589, measured at this change).
_DECADE_EVALS = 30_000


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
    #: rate r of the growth (``|y| ~ e^{rt}``) when ``"growth"``: ``Δlog|y|/Δt`` between the
    #: crossings of M/100 and M, or from those of M and 10⁴ M (see :func:`gaussian_flow`)
    growth_rate: float | None = None
    threshold_time: float | None = None  #: first crossing of the threshold, else None
    message: str = ""


@dataclass(frozen=True)
class GaussianFlow:
    r"""Solution of the moment ODEs at the requested times reached before the threshold.

    The state :math:`(\alpha, \Sigma)` has exactly one of three fates: finite on the whole
    interval (``blowup_time`` and ``growth_rate`` None); a finite-time singularity
    (``blowup_time`` its time); or unbounded growth that takes infinite time (``blowup_time``
    None, ``growth_rate`` its exponential rate where it crossed the threshold, see
    :func:`gaussian_flow`). ``threshold_time``: when an entry first exceeded
    ``blowup_threshold`` (None if never). The mean can grow while the covariance clusters,
    so ``cov_fate`` is the fate of :math:`\Sigma` alone (its own ODE, which for every kind
    but linear does not involve :math:`\alpha`; for linear attention, that of the coupled
    state).
    """

    t: np.ndarray  #: (m,) times (a prefix of the requested ones)
    mean: np.ndarray  #: (m, d)
    cov: np.ndarray  #: (m, d, d)
    blowup_time: float | None  #: time of a finite-time singularity, else None
    kind: str
    message: str = ""
    #: rate r of the growth (``|state| ~ e^{rt}`` where it crossed the threshold), else None
    growth_rate: float | None = None
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


def _log_rate(rhs, t: float, y: torch.Tensor) -> float:
    r""":math:`g = \langle y, \dot y\rangle / \lVert y\rVert^2`, the log-rate of ``|y|``."""
    v = y.reshape(-1)
    return float(v @ rhs(t, y).reshape(-1)) / float(v @ v)


def _restart(rhs, t: float, y: torch.Tensor, method: str, opts) -> dict:
    """Options to restart an adaptive flow at ``(t, y)``: DOPRI5's first step on the time
    scale ``1/g`` of the state (its default 0.01 overshoots near a singularity, where trial
    stages overflow before the step is rejected)."""
    if method != "dopri5":
        return opts
    g = abs(_log_rate(rhs, t, y))
    return {**opts, "first_step": 0.01 / max(g, 1.0)}


def _resume(rhs, err, times, M, method, opts):
    """Continue a flow stopped by ``err`` (at its crossing state) towards the bound ``M``.

    Returns ``(Y, None)`` with the outputs at all requested times when ``M`` is not reached,
    else ``(Y, err2)`` with the outputs before the crossing of ``M`` and its error.
    """
    Ya, t_a = err.partial, err.time
    rest = times[len(Ya) :]
    here = [err.state[None]] if rest.size and rest[0] <= t_a else []
    ahead = rest[rest > t_a]
    if ahead.size == 0:
        return torch.cat([Ya, *here]), None
    try:
        Yb = odeint(
            rhs,
            err.state,
            np.r_[t_a, ahead],
            method=method,
            max_abs=M,
            **_restart(rhs, t_a, err.state, method, opts),
        )
        return torch.cat([Ya, *here, Yb[1:]]), None
    except BlowUpError as err2:
        return torch.cat([Ya, *here, err2.partial[1:]]), err2


def _crossing(rhs, t: float, y: torch.Tensor) -> tuple[float, float, float]:
    """``(t, |y|, g)`` at a crossing state."""
    return t, float(y.norm()), _log_rate(rhs, t, y)


def _index(a, b) -> float:
    """Blow-up index ``Δlog g / Δlog |y|`` between crossings ``a = (t, |y|, g)`` and ``b``."""
    if min(a[2], b[2]) <= 0 or b[1] <= a[1]:
        return math.inf
    return math.log(b[2] / a[2]) / math.log(b[1] / a[1])


def _growth_message(a, b, q, M_a, M_b) -> tuple[float, str]:
    rate = math.log(b[1] / a[1]) / (b[0] - a[0])
    return rate, (
        f"unbounded growth, no finite-time singularity: |entries| crossed "
        f"{M_a:.1e} at t = {a[0]:.6g} and {M_b:.1e} at t = {b[0]:.6g} (mean "
        f"rate {rate:.4g}); the log-rate ⟨y, y'⟩/|y|² went from {a[2]:.4g} to "
        f"{b[2]:.4g} (blow-up index {q:.3g}: a singularity (T* − t)^-p has 1/p)"
    )


class _Stalled(Exception):
    """The continuation past the threshold spent its evaluation budget on one decade."""


def _budgeted(rhs, n_evals: int, t_k: float, M_k: float, M_next: float):
    """``rhs`` that raises :class:`_Stalled` after ``n_evals`` evaluations (a step budget
    for every method, SciPy's included: an exception in the right-hand side ends the solve)."""
    count = 0

    def f(t, y):
        nonlocal count
        count += 1
        if count > n_evals:
            raise _Stalled(
                f"continuing from |entries| = {M_k:.1e} at t = {t_k:.10g} towards "
                f"{M_next:.1e}, {n_evals} evaluations of the field reached t = {t:.10g} "
                f"with |y| = {float(y.norm()):.4g}: the step is held down by stiffness, "
                "not by a singularity"
            )
        return rhs(t, y)

    return f


def _crossing_test(rhs, y_M, t_M, t0, M, crossings, method, opts):
    """Continue from the crossing of ``M`` one decade at a time, up to ``10⁴ M``.

    ``crossings``: ``[(t, |y|, g), ...]`` at the bounds crossed so far, ``(bound, ...)``
    pairs. At each new decade the blow-up index against the crossing two or more decades
    below it decides growth when it is at most :data:`_GROWTH_INDEX` (a growth whose rate
    is still settling, e.g. rotating growing directions); a singularity keeps its index
    ``1/p``. At ``10⁴ M`` converging crossing times mean a singularity. Returns
    ``(outcome, blowup_time, growth_rate, message)``.
    """
    horizon = t_M + 2 * (t_M - t0) + 1
    M2 = M * _CONTINUE_FACTOR
    y, t_k, M_k = y_M, t_M, M
    while M_k < M2:
        M_next = M_k * 10
        try:
            Y = odeint(
                _budgeted(rhs, _DECADE_EVALS, t_k, M_k, M_next),
                y,
                [t_k, horizon],
                method=method,
                max_abs=M_next,
                **_restart(rhs, t_k, y, method, opts),
            )
        except BlowUpError as err:
            if err.state is None:  # the step size underflowed: a singularity
                t2 = err.time
                break
            y, t_k, M_k = err.state, err.time, M_next
            here = _crossing(rhs, t_k, y)
            below = [c for b, c in crossings if b <= M_k / 10**_INDEX_DECADES]
            crossings.append((M_k, here))
            if below:
                q = _index(below[-1], here)
                if q <= _GROWTH_INDEX:
                    M_b = max(b for b, _ in crossings if b <= M_k / 10**_INDEX_DECADES)
                    rate, message = _growth_message(below[-1], here, q, M_b, M_k)
                    return "growth", None, rate, message
            continue
        # below the next decade at the horizon: growth that slow takes infinite time
        n_h = float(Y[-1].norm())
        rate = math.log(n_h / float(y_M.norm())) / (horizon - t_M)
        return (
            "growth",
            None,
            rate,
            (
                f"unbounded growth: |entries| > {M:.1e} at t = {t_M:.6g}, not "
                f"{M_next:.1e} by t = {horizon:.6g} (mean rate {rate:.4g} since {M:.1e})"
            ),
        )
    else:
        t2 = t_k
    if abs(t2 - t_M) <= 1e-3 * (t_M - t0):
        return (
            "blowup",
            t2,
            None,
            (
                f"finite-time singularity at t = {t2:.10g} (|entries| crossed "
                f"{M:.1e} at t = {t_M:.10g}, {M2:.1e} at t = {t2:.10g})"
            ),
        )
    rate = math.log(_CONTINUE_FACTOR) / (t2 - t_M)
    return (
        "growth",
        None,
        rate,
        (
            f"unbounded growth, no finite-time singularity: |entries| crossed "
            f"{M:.1e} at t = {t_M:.6g} and {M2:.1e} at t = {t2:.6g} (rate {rate:.4g})"
        ),
    )


def _to_bound(rhs, first: BlowUpError, times, M_a: float, M: float, method, opts):
    """``(Y, err_M)``: the states (torch) up to the crossing of ``M`` and the error
    raised there, resuming from the crossing of ``M_a`` when its state is known
    (``err_M`` None: the flow stays below ``M`` on the whole interval)."""
    Y, err_M = (first.partial, first) if first.state is None else (None, None)
    if Y is None:  # resume at the crossing of M / 100 towards M
        try:
            Y, err_M = _resume(rhs, first, times, M, method, opts)
        except ValueError as err2:
            raise _lost_psd(
                err2, first.time, M_a, M, first.partial.numpy(), times
            ) from None
    return Y, err_M


def _crossings(rhs, first: BlowUpError, err_M: BlowUpError, M_a: float, M: float):
    """``[(bound, (t, |y|, g))]`` at each crossing of ``M_a`` and ``M`` whose state is
    known (once only when the first error is the crossing of ``M`` itself)."""
    crossings = []
    for bound, e in ((M_a, first), (M, err_M)):
        if e.state is not None and not (bound == M and e is first):
            crossings.append((bound, _crossing(rhs, e.time, e.state)))
    return crossings


def _classify(rhs, y0: torch.Tensor, times: np.ndarray, M: float, method: str, opts):
    """Integrate to the bound ``M``; past it, tell a singularity from growth.

    The flow stops at ``M / 100`` and at ``M``; the log-rate ``g`` at both crossing states
    gives the blow-up index ``q = Δlog g / Δlog |y|`` (``1/p`` for a singularity
    :math:`(T^*-t)^{-p}`, 0 for exponential growth). ``q ≤`` :data:`_GROWTH_INDEX` is growth
    at the mean rate ``Δlog|y|/Δt`` between them, with no integration past ``M`` (where the
    field of a growing covariance is stiff and its small directions are lost to round-off);
    otherwise :func:`_crossing_test`.
    Returns ``(Y, outcome, blowup_time, growth_rate, threshold_time, message)`` with ``Y``
    the states at the requested times before the threshold (NumPy).
    """
    M_a = M / 10**_INDEX_DECADES
    try:
        Y = odeint(rhs, y0, times, method=method, max_abs=M_a, **opts)
        return Y.numpy(), "finite", None, None, None, "finite on the whole interval"
    except BlowUpError as err:
        first = err
    except ValueError as err:  # round-off broke PSD before the first crossing
        raise FlowDiverged(
            f"lost positive semi-definiteness through round-off before |entries| reached "
            f"{M_a:.1e} ({err}). Lower blowup_threshold."
        ) from None
    Y, err_M = _to_bound(rhs, first, times, M_a, M, method, opts)
    if err_M is None:
        return Y.numpy(), "finite", None, None, None, "finite on the whole interval"
    t_M = err_M.time
    Y = Y.numpy()
    crossings = _crossings(rhs, first, err_M, M_a, M)
    if len(crossings) == 2:
        q = _index(crossings[0][1], crossings[1][1])
        if q <= _GROWTH_INDEX:
            # the mean log-rate over the two decades: g itself can oscillate when the
            # growing directions rotate
            rate, message = _growth_message(crossings[0][1], crossings[1][1], q, M_a, M)
            return Y, "growth", None, rate, t_M, message
    y_M = err_M.state if err_M.state is not None else torch.from_numpy(Y[-1])
    t_start = t_M if err_M.state is not None else float(times[len(Y) - 1])
    try:
        outcome, blow_t, rate, message = _crossing_test(
            rhs, y_M, t_start, float(times[0]), M, crossings, method, opts
        )
    except ValueError as err2:
        raise _lost_psd(err2, t_M, M, M * _CONTINUE_FACTOR, Y, times) from None
    except _Stalled as err2:
        raise FlowDiverged(
            f"|entries| crossed {M:.1e} at t = {t_M:.6g}; the continuation that tells a "
            f"singularity from growth stalled ({err2}). The fate past the threshold is "
            "undecided; a lower blowup_threshold may decide it before the stiffness sets in.",
            time=t_M,
            partial=Y,
            times=np.asarray(times[: len(Y)]),
        ) from None
    return Y, outcome, blow_t, rate, t_M, message


def _lost_psd(err, t_from, M_from, M_to, Y, times) -> FlowDiverged:
    # the moment field needs a PSD covariance; at large entries round-off can break it
    return FlowDiverged(
        f"|entries| crossed {M_from:.1e} at t = {t_from:.6g}; continuing towards "
        f"{M_to:.1e} to tell a singularity from growth lost positive semi-definiteness "
        f"through round-off ({err}). Lower blowup_threshold.",
        time=t_from,
        partial=Y,
        times=np.asarray(times[: len(Y)]),
    )


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
    fate is decided in two steps. First the blow-up index: the log-rate
    :math:`g = \langle y, \dot y\rangle / \lvert y\rvert^2` of the state :math:`y` at the
    crossings of :math:`M/100` and :math:`M` gives
    :math:`q = \Delta\log g / \Delta\log\lvert y\rvert`, which is :math:`1/p` for a
    singularity like :math:`(T^*-t)^{-p}` and 0 for exponential growth. If
    :math:`q \le 0.1` the growth takes infinite time: ``blowup_time`` is None,
    ``growth_rate`` is the mean rate :math:`\Delta\log\lvert y\rvert / \Delta t` between
    the two crossings, and nothing is integrated past
    :math:`M` (a growing covariance's field is stiff there, and its small directions are
    lost to round-off). Otherwise the flow is continued to :math:`M' = 10^4 M`: converging
    crossing times (:math:`T^* - T_M = O(M^{-1/p})`), :math:`|T_{M'} - T_M| \le
    10^{-3}(T_M - t_0)`, make ``blowup_time`` :math:`T_{M'}` (or where the step size
    underflows); else the growth takes infinite time with ``growth_rate``
    :math:`r = \ln 10^4 / (T_{M'} - T_M)` (a lower bound when :math:`M'` is not reached
    within :math:`2(T_M - t_0) + 1`). The arrays hold the requested times before
    :math:`T_M`. The same test on :math:`\Sigma` alone gives ``cov_fate`` (the mean can grow
    like :math:`e^{rt}` while the covariance clusters). A continuation that stalls (more
    than 30 000 evaluations of the field for one decade: small directions turned stiff at
    large entries) raises :class:`~attnbook.errors.FlowDiverged`, the fate undecided; so
    does round-off that breaks the covariance's positive semi-definiteness on the way.
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
    check_adaptive_method(method)
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
    if kind in _COV_AUTONOMOUS and a0.any():
        res = _classify(rhs_cov, torch.from_numpy(S0), times, M, method, opts)
        S_alone = (res[0] + res[0].transpose(0, 2, 1)) / 2
    else:  # linear attention, or α₀ = 0: α' is linear in α, so α stays 0 and the
        # state's fate is that of Σ alone
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


def _member_log_rates(field, t: float, S: torch.Tensor) -> torch.Tensor:
    r""":math:`\langle S_b, \dot S_b\rangle / \lVert S_b\rVert^2` for each member ``b``."""
    f = field(t, S)
    return (S * f).sum((-2, -1)) / (S * S).sum((-2, -1)).clamp_min(1e-300)


def _block_jacobian(method: str, S: torch.Tensor) -> dict:
    """BDF and Radau are told that the members of a ``(B, d, d)`` batch are independent
    (one dense d² × d² Jacobian block each), for the members being integrated."""
    if method not in ("bdf", "radau"):
        return {}
    from scipy.sparse import block_diag

    n = S.shape[-1] ** 2
    return {"jac_sparsity": block_diag([np.ones((n, n))] * S.shape[0], "csr")}


def _stopped(err, field, S0, live, max_trace, method, max_abs) -> torch.Tensor:
    """Which of the ``live`` members stopped the batch's solve with ``err`` (a bool mask)."""
    state = err.state
    if state is None:
        raise FlowDiverged(
            f"{err} (method {method!r} reports no state there, so the member "
            "that stopped it cannot be frozen; use method='dopri5')",
            time=float(err.time),
        ) from None
    if err.underflow:  # the fastest member below max_trace
        full = S0.clone()
        full[live] = state
        g = _member_log_rates(field, float(err.time), full)[live]
        g[state.diagonal(dim1=-2, dim2=-1).sum(-1) > max_trace] = -math.inf
        stop = torch.zeros(live.numel(), dtype=torch.bool, device=S0.device)
        stop[int(torch.argmax(g))] = True
    else:  # members below max_trace have entries ≤ max_trace ≤ max_abs / 10, so
        # entries past max_abs / 2 belong to the ones that left the bound (SciPy stops
        # *on* it, DOPRI5 past it)
        stop = state.abs().amax((-2, -1)) >= max_abs / 2
    if not bool(stop.any()):
        raise err
    return stop


def frozen_batch_flow(
    field, S0: torch.Tensor, times: np.ndarray, *, max_trace: float, method: str, opts
) -> CovarianceFlow:
    r"""Integrate ``B`` independent flows :math:`\dot S_b = F(S)_b` together, each frozen (its
    right-hand side set to zero) once its trace passes ``max_trace`` and flagged exploded.

    ``field(t, S)``: the batched right-hand side, ``(B, d, d) -> (B, d, d)``. One adaptive step
    size serves the batch, so a member that passes ``max_trace`` within a step it cannot
    resolve (a singularity much faster than the others, or the jump of its right-hand side to
    zero at the freeze) stops the whole solve: where the step leaves the bound ``max_abs`` the
    members past it, and where the step size underflows the member with the largest log-rate
    :math:`\langle S_b,\dot S_b\rangle/\lVert S_b\rVert^2`, are frozen at that state and
    flagged exploded there, and the rest are integrated on from it. Each such event removes
    one member at least, so there are at most ``B``. A stiff method's underflow, which
    reports no state, raises :class:`~attnbook.errors.FlowDiverged`. BDF and Radau get the
    batch's block-diagonal Jacobian pattern (``opts`` must not carry one).
    """
    B = S0.shape[0]
    out = torch.empty((len(times), *S0.shape), dtype=S0.dtype, device=S0.device)
    live = torch.arange(B, device=S0.device)
    event_time = np.full(B, math.inf)
    y, t_a, filled = S0, float(times[0]), 0
    while live.numel():
        skip = int(filled > 0)  # a restart's first row is its starting state
        grid = times if filled == 0 else np.r_[t_a, times[filled:]]

        def rhs(t, S, live=live):
            full = S0.clone()  # the frozen members' places hold their (finite) start
            full[live] = S
            alive = S.diagonal(dim1=-2, dim2=-1).sum(-1) <= max_trace
            return field(t, full)[live] * alive.to(S.dtype)[:, None, None]

        try:
            Y = odeint(
                rhs, y, grid, method=method, **opts, **_block_jacobian(method, y)
            )
            out[filled:, live] = Y[skip:]
            break
        except BlowUpError as err:
            P = err.partial
            out[filled : filled + len(P) - skip, live] = P[skip:]
            filled += len(P) - skip
            state, t_a = err.state, float(err.time)
            stop = _stopped(err, field, S0, live, max_trace, method, opts["max_abs"])
        if filled < len(times) and times[filled] <= t_a:  # an event on an output time
            out[filled, live] = state
            filled += 1
        gone = live[stop]
        event_time[gone.cpu().numpy()] = t_a
        out[filled:, gone] = state[stop]
        y, live = state[~stop], live[~stop]
        if filled == len(times):
            break
    cov = out.cpu().numpy()
    tr = np.trace(cov, axis1=-2, axis2=-1)  # (m, B)
    by_trace = (tr > max_trace).any(0)
    first = np.where(by_trace, times[np.argmax(tr > max_trace, axis=0)], math.inf)
    at_event = np.searchsorted(times, event_time)  # the first output time at or after
    ev = np.where(
        np.isfinite(event_time), times[np.clip(at_event, 0, len(times) - 1)], math.inf
    )
    explode_time = np.minimum(first, ev)
    return CovarianceFlow(
        t=times, cov=cov, exploded=np.isfinite(explode_time), explode_time=explode_time
    )


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
    flagged ``exploded`` — the convention of the figures of Castin et al. (2025); one that
    explodes within a step the batch cannot resolve is frozen where it stopped the solve
    (:func:`frozen_batch_flow`). ``method``:
    adaptive Dormand–Prince in torch float64, vectorised over the batch (``"dopri5"``), or a
    stiff method of :func:`attnbook.flows.odeint` (``"bdf"``, ``"radau"``, ``"lsoda"``) for long
    horizons, where a clustering covariance decays like 1/t beside modes of rate one; BDF and
    Radau are told that the ``B`` systems are independent (a block-diagonal Jacobian).
    """
    check_adaptive_method(method)
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

    def field(_t, S):
        R = Vm @ S @ Am @ S
        return R + R.mT

    opts = dict(rtol=rtol, atol=atol, max_abs=max(1e8, 10 * max_trace))
    return frozen_batch_flow(
        field, S0, times, max_trace=max_trace, method=method, opts=opts
    )
