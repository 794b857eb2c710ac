"""One family of exceptions for computations that leave the finite numbers.

Every solver, trainer and sampler of the package raises a subclass of
:class:`DivergenceError` when its state becomes non-finite or leaves a stated bound, and
attaches what it had computed before (``partial``) so a chapter can still plot the part of
the trajectory that exists and say what happened:

* :class:`TrainingDiverged` — a loss or a parameter of a trained network became non-finite;
* :class:`SamplerDiverged` — a Markov chain (SGLD) produced non-finite values;
* :class:`FlowDiverged` — an ODE / gradient-flow integration failed or became non-finite;
* :class:`BlowUpError` — a flow reached a *finite-time singularity* (a kind of
  :class:`FlowDiverged`; unbounded growth that takes infinite time is not a blow-up);
* :class:`NotConverged` — an iterative solver (Sinkhorn's scaling) stopped before its
  tolerance;
* :class:`NotPositiveDefinite` — a matrix that must be positive definite (a Cholesky factor
  of the copy head's evidence) is not, numerically.

All are ``FloatingPointError`` s, so code that guards numerics with
``except FloatingPointError`` keeps working.
"""

from __future__ import annotations

__all__ = [
    "DivergenceError",
    "TrainingDiverged",
    "SamplerDiverged",
    "FlowDiverged",
    "BlowUpError",
    "NotConverged",
    "NotPositiveDefinite",
]


class DivergenceError(FloatingPointError):
    """A computation left the finite numbers (or a stated bound).

    Attributes
    ----------
    time:
        The time (flows) or the step index (trainers, samplers) where it happened, or None.
    partial:
        What was computed before, in the solver's own result type, or None.
    times:
        The times / steps of ``partial`` when it is a trajectory, or None.
    """

    def __init__(self, message: str, *, time=None, partial=None, times=None):
        super().__init__(message)
        self.time = time
        self.partial = partial
        self.times = times


class TrainingDiverged(DivergenceError):
    """A network's loss or parameters became non-finite."""


class SamplerDiverged(DivergenceError):
    """A sampler's chain produced non-finite values (the step size is too large)."""


class FlowDiverged(DivergenceError):
    """A flow became non-finite or its integrator failed."""


class BlowUpError(FlowDiverged):
    """A flow reached a finite-time singularity at ``time``, or left a stated bound there.

    ``state``: the solver's state where it stopped (just past the bound, or the last accepted
    one when the step size underflowed), or None. ``underflow``: the step size underflowed
    (the state did not leave the bound).
    """

    def __init__(self, message: str, *, state=None, underflow: bool = False, **kwargs):
        super().__init__(message, **kwargs)
        self.state = state
        self.underflow = underflow


class NotConverged(DivergenceError):
    """An iterative solver stopped before reaching its tolerance (``time``: the iterations
    used)."""


class NotPositiveDefinite(DivergenceError):
    """A matrix that is positive definite in exact arithmetic failed its Cholesky factorisation
    (a sign of non-finite or overflowing inputs)."""
