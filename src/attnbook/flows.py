r"""Integrating :math:`\dot y = f(t, y)` for batched torch tensors, with blow-up detection.

Two integrators, both vectorised over whatever batch ``y`` carries (many particle systems, many
seeds — never a Python loop over them):

* :func:`odeint_rk4` — classical Runge–Kutta of order 4 with a fixed maximal step ``step``;
  between two requested output times it takes ``ceil(Δt / step)`` equal steps.
* :func:`odeint_dopri5` — Dormand–Prince 5(4) with adaptive steps (the method of
  ``scipy.integrate.solve_ivp(method="RK45")``), error norm taken over the whole batch.
* :func:`odeint_stiff` — SciPy's implicit methods (BDF, Radau) and LSODA, for flows whose
  time scales separate (a covariance decaying like 1/t beside modes of rate 1): an explicit
  method's step is then capped by the fast modes long after they have died out.

**One blow-up convention.** Both stop as soon as the state stops being finite, its largest
entry exceeds ``max_abs``, or (DOPRI5) the step size underflows, and raise
:class:`attnbook.errors.BlowUpError` (``flows.BlowUpError`` is the same class) whose ``time``
is where the bound was left, ``partial`` the solution at the requested times reached before
(shape ``(k, *y0.shape)``) and ``times`` those times — never returning NaN silently. Leaving a
bound is not yet a finite-time singularity: a solver that must tell the two apart (e.g.
:func:`attnbook.pde.gaussian_flow`) continues past ``max_abs`` and checks whether the crossing
time converges. The bound is checked once per step on the device (``check_every`` steps for
RK4), so a run makes few host synchronisations.

Every pde solver integrates through this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from .errors import BlowUpError, FlowDiverged
from .validation import (
    as_float64_array,
    as_tensor,
    check_finite,
    check_positive,
    check_positive_int,
)

__all__ = [
    "BlowUpError",
    "check_times",
    "odeint_rk4",
    "odeint_dopri5",
    "odeint_stiff",
    "odeint",
    "ODE_METHODS",
    "check_adaptive_method",
]

#: The method names :func:`odeint` takes; the last three go to :func:`odeint_stiff`.
ODE_METHODS = ("rk4", "dopri5", "bdf", "radau", "lsoda")
_SCIPY_METHODS = {"bdf": "BDF", "radau": "Radau", "lsoda": "LSODA"}


def _blowup(
    message: str,
    time: float,
    out: list,
    times: np.ndarray,
    state=None,
    underflow: bool = False,
) -> BlowUpError:
    return BlowUpError(
        message,
        time=float(time),
        partial=torch.stack(out),
        times=torch.as_tensor(times[: len(out)]),
        state=state,
        underflow=underflow,
    )


def check_times(t, name: str = "t") -> np.ndarray:
    """A 1-D float64 array of at least two finite, strictly increasing times."""
    arr = as_float64_array(t, name, what="a 1-D array of times", finite=False)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(
            f"{name} must be a 1-D array of at least two times, got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    if not np.all(np.diff(arr) > 0):
        raise ValueError(f"{name} must be strictly increasing")
    return arr


def check_adaptive_method(method, name: str = "method") -> str:
    """``method`` when it is one of :data:`ODE_METHODS` with an adaptive step (all but
    ``"rk4"``: a fixed step cannot locate a blow-up or follow a stiff flow), else ValueError."""
    adaptive = tuple(m for m in ODE_METHODS if m != "rk4")
    if not isinstance(method, str) or method not in adaptive:
        raise ValueError(f"{name} must be one of {adaptive}, got {method!r}")
    return method


def _progress(total: int, progress: bool | None, desc: str):
    show = (total >= 2000) if progress is None else bool(progress)
    if not show:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=False)


def _blown(y: torch.Tensor, max_abs: float) -> bool:
    # one host sync: NaN fails "<= max_abs", so non-finite and too large are caught together
    if y.numel() == 0:
        return False
    return not bool((y.abs() <= max_abs).all())


def odeint_rk4(
    f: Callable[[float, torch.Tensor], torch.Tensor],
    y0: torch.Tensor,
    t,
    *,
    step_size: float = 0.01,
    max_abs: float = 1e8,
    check_every: int = 1,
    progress: bool | None = None,
) -> torch.Tensor:
    r"""Solve :math:`\dot y = f(t, y)` with RK4 and return ``y`` at the times ``t``.

    One step of size :math:`h`: :math:`k_1 = f(t, y)`, :math:`k_2 = f(t + h/2, y + h k_1/2)`,
    :math:`k_3 = f(t + h/2, y + h k_2/2)`, :math:`k_4 = f(t + h, y + h k_3)`,
    :math:`y \leftarrow y + h (k_1 + 2k_2 + 2k_3 + k_4)/6` (global error :math:`O(h^4)`).

    The step is at most ``step_size``. Returns a tensor ``(len(t), *y0.shape)`` whose first
    entry is ``y0``. Raises :class:`BlowUpError` when the state leaves ``[-max_abs, max_abs]``
    or stops being finite, checked every ``check_every`` steps and at every output time.
    """
    times = check_times(t)
    step_size = check_positive(step_size, "step_size")
    check_every = check_positive_int(check_every, "check_every")
    check_finite(y0, "y0")
    n_sub = np.maximum(1, np.ceil(np.diff(times) / step_size - 1e-9)).astype(int)
    bar = _progress(int(n_sub.sum()), progress, "RK4")
    out = [y0]
    y = y0
    try:
        for k in range(len(times) - 1):
            h = (times[k + 1] - times[k]) / n_sub[k]
            for s in range(n_sub[k]):
                tk = times[k] + s * h
                k1 = f(tk, y)
                k2 = f(tk + h / 2, y + (h / 2) * k1)
                k3 = f(tk + h / 2, y + (h / 2) * k2)
                k4 = f(tk + h, y + h * k3)
                y = y + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
                last = s == n_sub[k] - 1
                if (last or (s + 1) % check_every == 0) and _blown(y, max_abs):
                    raise _blowup(
                        f"the solution left the bound (|y| > {max_abs:.3g} or non-finite) "
                        f"at t ≈ {tk + h:.6g}",
                        tk + h,
                        out,
                        times,
                        state=y,
                    )
            if bar is not None:
                bar.update(int(n_sub[k]))
            out.append(y)
    finally:
        if bar is not None:
            bar.close()
    return torch.stack(out)


# Dormand–Prince 5(4) tableau (Hairer, Nørsett & Wanner, 1993).
_DP_C = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_DP_A = (
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
)
_DP_B5 = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
_DP_B4 = (
    5179 / 57600,
    0.0,
    7571 / 16695,
    393 / 640,
    -92097 / 339200,
    187 / 2100,
    1 / 40,
)


def _check_step(h, tc, y, n_steps: int, max_steps: int, out: list, times) -> None:
    """Raise when DOPRI5 cannot go on: the step size underflowed (a singularity,
    :class:`BlowUpError` with ``underflow``), or ``max_steps`` were spent (a stiff stall,
    :class:`~attnbook.errors.FlowDiverged`)."""
    if h < 1e-12 * max(1.0, abs(tc)):
        raise _blowup(
            f"step size underflow at t ≈ {tc:.6g}: the solution is singular there",
            tc,
            out,
            times,
            state=y,
            underflow=True,
        )
    if n_steps > max_steps:  # not a singularity: the step is held down
        raise FlowDiverged(
            f"more than max_steps = {max_steps} steps by t ≈ {tc:.6g} (step {h:.3g}): "
            "the problem is stiff there; try a stiff method",
            time=tc,
            partial=torch.stack(out),
            times=torch.as_tensor(times[: len(out)]),
        )


def odeint_dopri5(
    f: Callable[[float, torch.Tensor], torch.Tensor],
    y0: torch.Tensor,
    t,
    *,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    max_abs: float = 1e8,
    first_step: float | None = None,
    max_steps: int = 1_000_000,
    progress: bool | None = None,
) -> torch.Tensor:
    r"""Solve :math:`\dot y = f(t, y)` with adaptive Dormand–Prince 5(4); ``y`` at the times ``t``.

    A step is accepted when the RMS over all entries of the error estimate scaled by
    ``atol + rtol·|y|`` is at most 1; the next step is :math:`h \cdot 0.9\,\text{err}^{-1/5}`
    (clipped to [0.2, 5]). Output times are hit exactly (the step is shortened to land on them).
    Raises :class:`BlowUpError` on blow-up, or when the step size underflows (a finite-time
    singularity, as in the softmax Riccati flow; ``underflow`` set), and
    :class:`~attnbook.errors.FlowDiverged` after ``max_steps`` steps (a stiff stall).
    """
    times = check_times(t)
    rtol = check_positive(rtol, "rtol")
    atol = check_positive(atol, "atol")
    check_finite(y0, "y0")
    out = [y0]
    y, tc = y0, float(times[0])
    h = (
        first_step
        if first_step is not None
        else min(0.01, (times[-1] - times[0]) / 100)
    )
    k1 = f(tc, y)
    n_steps = 0
    bar = _progress(len(times) - 1, progress, "DOPRI5") if progress else None
    try:
        for t_next in times[1:]:
            while tc < t_next:
                h = min(h, t_next - tc)
                ks = [k1]
                for i in range(1, 7):
                    yi = y + h * sum(a * k for a, k in zip(_DP_A[i], ks) if a != 0.0)
                    ks.append(f(tc + _DP_C[i] * h, yi))
                y5 = y + h * sum(b * k for b, k in zip(_DP_B5, ks) if b != 0.0)
                y4 = y + h * sum(b * k for b, k in zip(_DP_B4, ks) if b != 0.0)
                scale = atol + rtol * torch.maximum(y.abs(), y5.abs())
                err = (
                    float(torch.sqrt(torch.mean(((y5 - y4) / scale) ** 2)))
                    if y.numel()
                    else 0.0
                )
                n_steps += 1
                if not math.isfinite(err) or _blown(y5, max_abs):
                    if err <= 1.0:
                        raise _blowup(
                            f"the solution left the bound (|y| > {max_abs:.3g}) "
                            f"at t ≈ {tc + h:.6g}",
                            tc + h,
                            out,
                            times,
                            state=y5,
                        )
                    h *= 0.2
                elif err <= 1.0:
                    tc, y, k1 = (
                        tc + h,
                        y5,
                        ks[6],
                    )  # FSAL: the last stage is f at the new point
                    h *= min(5.0, max(0.2, 0.9 * err**-0.2 if err > 0 else 5.0))
                else:
                    h *= max(0.2, 0.9 * err**-0.2)
                _check_step(h, tc, y, n_steps, max_steps, out, times)
            out.append(y)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return torch.stack(out)


def _jacobian_options(method: str, jac, jac_sparsity) -> dict:
    """The Jacobian keywords of ``solve_ivp``: ``jac`` or ``jac_sparsity`` (not both,
    and no sparsity pattern for LSODA)."""
    if jac is not None and jac_sparsity is not None:
        raise ValueError("give jac or jac_sparsity, not both")
    if jac is not None and not callable(jac):
        raise TypeError(f"jac must be callable, got {type(jac).__name__}")
    opts = {} if jac_sparsity is None else {"jac_sparsity": jac_sparsity}
    if method.lower() == "lsoda" and opts:
        raise ValueError("jac_sparsity is not supported by method 'lsoda'")
    if jac is not None:
        opts["jac"] = jac
    return opts


def odeint_stiff(
    f: Callable[[float, torch.Tensor], torch.Tensor],
    y0: torch.Tensor,
    t,
    *,
    method: str = "bdf",
    rtol: float = 1e-6,
    atol: float = 1e-9,
    max_abs: float = 1e8,
    jac=None,
    jac_sparsity=None,
    numpy_rhs: bool = False,
) -> torch.Tensor:
    r"""Solve :math:`\dot y = f(t, y)` with SciPy's BDF, Radau or LSODA; ``y`` at the times ``t``.

    The same contract as :func:`odeint_dopri5`: ``f`` maps ``(t, tensor)`` to a tensor of
    ``y0``'s shape, the result is ``(len(t), *y0.shape)`` in ``y0``'s dtype and device, and a
    state that leaves ``[-max_abs, max_abs]`` (a terminal event of the solver, located to its
    tolerance) or a step that underflows raises :class:`BlowUpError` with the outputs reached
    before. The state travels through NumPy float64 on the CPU. ``jac_sparsity`` (a
    ``(N, N)`` 0/1 array over the flattened state) lets SciPy estimate the Jacobian of a batch
    of independent systems with as many evaluations as one system has entries, not all of them.
    ``jac(t, y)`` (``y`` the flattened float64 state, a NumPy array) returns the exact Jacobian
    of the flattened right-hand side, dense or (BDF, Radau) SciPy-sparse; it replaces the
    finite-difference estimate. With ``numpy_rhs=True`` ``f`` takes and returns the flattened
    float64 state as NumPy arrays (a NumPy right-hand side then skips a tensor round trip per
    evaluation).
    """
    from scipy.integrate import solve_ivp

    if not isinstance(method, str) or method.lower() not in _SCIPY_METHODS:
        raise ValueError(
            f"method must be one of {tuple(_SCIPY_METHODS)} for odeint_stiff, got {method!r}"
        )
    times = check_times(t)
    rtol = check_positive(rtol, "rtol")
    atol = check_positive(atol, "atol")
    max_abs = check_positive(max_abs, "max_abs")
    check_finite(y0, "y0")
    shape, dtype, device = y0.shape, y0.dtype, y0.device

    def fun(tc, y):
        dy = f(tc, torch.from_numpy(y).reshape(shape).to(device=device, dtype=dtype))
        return dy.detach().reshape(-1).to("cpu", torch.float64).numpy()

    if not isinstance(numpy_rhs, bool):
        raise TypeError(f"numpy_rhs must be a bool, got {type(numpy_rhs).__name__}")
    if numpy_rhs:
        fun = f  # noqa: F811 - the caller's NumPy right-hand side, as SciPy calls it

    def leaves_bound(_tc, y):  # crosses zero where the largest entry reaches max_abs
        return max_abs - float(np.max(np.abs(y))) if np.all(np.isfinite(y)) else -1.0

    leaves_bound.terminal = True
    opts = _jacobian_options(method, jac, jac_sparsity)
    sol = solve_ivp(
        fun,
        (float(times[0]), float(times[-1])),
        y0.detach().reshape(-1).to("cpu", torch.float64).numpy(),
        method=_SCIPY_METHODS[method.lower()],
        t_eval=times,
        rtol=rtol,
        atol=atol,
        events=leaves_bound,
        **opts,
    )
    out = [
        torch.from_numpy(np.ascontiguousarray(col)).reshape(shape).to(device, dtype)
        for col in sol.y.T
    ]
    if sol.status == 1:  # the bound was left
        t_hit = float(sol.t_events[0][0])
        raise _blowup(
            f"the solution left the bound (|y| > {max_abs:.3g}) at t ≈ {t_hit:.6g}",
            t_hit,
            out or [y0],
            times,
            state=torch.from_numpy(np.ascontiguousarray(sol.y_events[0][0]))
            .reshape(shape)
            .to(device, dtype),
        )
    if sol.status != 0:  # SciPy's step size underflowed: a singularity, as for DOPRI5
        t_fail = float(sol.t[-1]) if sol.t.size else float(times[0])
        raise _blowup(
            f"step size underflow at t ≈ {t_fail:.6g} ({sol.message}): the solution is "
            "singular there",
            t_fail,
            out or [y0],
            times,
            underflow=True,
        )
    return torch.stack(out)


def odeint(f, y0, t, *, method: str = "rk4", **options) -> torch.Tensor:
    """Dispatch by ``method`` (one of :data:`ODE_METHODS`): :func:`odeint_rk4` (``"rk4"``),
    :func:`odeint_dopri5` (``"dopri5"``) or :func:`odeint_stiff` (``"bdf"``, ``"radau"``,
    ``"lsoda"``), all with one blow-up convention and one result type."""
    y0 = as_tensor(y0, "y0")
    if method == "rk4":
        return odeint_rk4(f, y0, t, **options)
    if method == "dopri5":
        return odeint_dopri5(f, y0, t, **options)
    if method in _SCIPY_METHODS:
        return odeint_stiff(f, y0, t, method=method, **options)
    raise ValueError(f"unknown method {method!r}; expected one of {ODE_METHODS}")
