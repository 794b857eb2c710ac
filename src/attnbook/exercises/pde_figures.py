"""Checkers of the coding exercises of the chapter *The authors' figures, recomputed*.

Each checker runs the student's function on a few inputs and compares it with a computation
from the package (:mod:`attnbook.pde.closed_forms`, :func:`attnbook.pde.numerical_rank`);
before a plain "wrong value" it looks for the usual mistakes and names them in the hint.
"""

from __future__ import annotations

import math

import numpy as np

from ..linalg import psd_sqrt
from ..pde.closed_forms import identity_value_blowup_time, identity_value_covariance
from ..pde.clouds import numerical_rank
from .core import as_array, call, checker, fail, require_function

__all__ = ["check_blowup_direction", "check_count_above"]


def _blowup_cases():
    rng = np.random.default_rng(7)
    out = []
    for d in (2, 3, 4):
        W = rng.normal(size=(d, d))
        S0 = W @ W.T + 0.3 * np.eye(d)
        A = rng.normal(size=(d, d)) + 0.5 * np.eye(d)
        out.append((S0, A))
    return out


@checker(
    "ex-af-blowup-direction",
    what="a function blowup_direction(S0, A)",
    reference=("attnbook.pde.closed_forms.identity_value_covariance",),
    hints=(
        (
            "Use the factorisation the exercise gives: Σ(t) sandwiches (I − tC)⁻¹ between two "
            "factors Σ₀^{1/2}, so look at which eigenvalue of I − tC reaches zero first."
        ),
        (
            "Find the direction along which (I − tC)⁻¹ diverges first (mind the order in "
            "which np.linalg.eigh returns eigenvalues); then ask what the factors around "
            "(I − tC)⁻¹ do to that direction."
        ),
        (
            "Compare with Σ(t) itself at a t just below the blow-up time, computed from the "
            "formula in the statement: which of its eigenvectors should yours resemble, and "
            "up to what?"
        ),
    ),
)
def check_blowup_direction(fn) -> None:
    """Unit vector along which Σ(t) = (Σ₀⁻¹ − t(A + Aᵀ))⁻¹ explodes, up to sign."""
    label = "ex-af-blowup-direction"
    require_function(label, fn, "a function blowup_direction(S0, A)")
    for S0, A in _blowup_cases():
        d = len(S0)
        on = f"S0 and A of shape ({d}, {d})"
        got = as_array(label, call(label, fn, S0.copy(), A.copy(), on=on), on=on)
        if got.shape != (d,):
            fail(
                label,
                f"expected a vector of shape ({d},), got {got.shape}",
                on=on,
                hint="the answer is one direction, a 1-D array of length d",
            )
        if not np.all(np.isfinite(got)) or abs(np.linalg.norm(got) - 1) > 1e-6:
            fail(
                label,
                f"expected a unit vector, got norm {np.linalg.norm(got):.4g}",
                on=on,
                hint="the direction must have length one: normalise the vector at the end",
            )
        T = identity_value_blowup_time(S0, A)
        near = identity_value_covariance([(1 - 1e-9) * T], S0, A)[0]
        top = np.linalg.eigh(near)[1][:, -1]
        if abs(got @ top) < 1 - 1e-5:
            R = psd_sqrt(S0)
            w = np.linalg.eigh(R @ (A + A.T) @ R)[1][:, -1]
            hint = (
                "the direction is off: find the eigenvalue of I − tC that reaches zero "
                "first, and map its eigenvector back to the original coordinates"
            )
            if abs(got @ w) > 1 - 1e-6:
                hint = "you returned w itself: map it back with Σ₀^½ (then normalise)"
            elif abs(got @ np.linalg.eigh(A + A.T)[1][:, -1]) > 1 - 1e-6:
                hint = "that is the top eigenvector of A + Aᵀ: Σ₀ changes the direction"
            fail(
                label,
                f"wrong direction: |cos angle| with the true one is "
                f"{abs(got @ top):.4f}",
                on=on,
                hint=hint,
            )


def _rank_cases():
    rng = np.random.default_rng(11)
    out = []
    for d in (3, 4, 5):
        B = 30
        U = np.linalg.qr(rng.normal(size=(B, d, d)))[0]
        ev = np.exp(rng.uniform(-6, 0, size=(B, d)))  # spread over many scales
        ev[:, -1] = 1.0
        out.append((U * ev[:, None, :]) @ U.transpose(0, 2, 1) * 3.0)
    return out


@checker(
    "ex-af-count-above",
    what="a function count_above(covs)",
    reference=("attnbook.pde.clouds.numerical_rank",),
    hints=(
        (
            "Compute the numerical rank of every matrix of the batch, then count the matrices "
            "whose rank exceeds the threshold."
        ),
        (
            "np.linalg.eigvalsh works on the whole batch at once; compare each matrix's "
            "eigenvalues with 1 % of ITS OWN largest one, count per matrix, and round d/2 up "
            "(math.ceil)."
        ),
        (
            "Test on a batch of two diagonal 3 × 3 matrices whose eigenvalues you choose, and "
            "count by hand."
        ),
    ),
)
def check_count_above(fn) -> None:
    """Number of matrices of a batch (B, d, d) with numerical rank (rtol 1 %) above ⌈d/2⌉."""
    label = "ex-af-count-above"
    require_function(label, fn, "a function count_above(covs)")
    for covs in _rank_cases():
        d = covs.shape[-1]
        on = f"covs of shape {covs.shape}"
        got = as_array(label, call(label, fn, covs.copy(), on=on), on=on)
        rank = numerical_rank(covs, rtol=1e-2)
        expected = int((rank > math.ceil(d / 2)).sum())
        if got.shape != () or got != expected:
            hint = (
                "the count is off: check the numerical rank of each matrix (its eigenvalues "
                "against its own largest one) and the threshold ⌈d/2⌉"
            )
            if got.shape == () and got == int((rank > d // 2).sum()):
                hint = "your threshold rounds d/2 down: ⌈d/2⌉ rounds it up"
            elif got.shape == () and got == int(
                ((np.linalg.eigvalsh(covs) > 1e-2).sum(-1) > math.ceil(d / 2)).sum()
            ):
                hint = (
                    "the threshold is relative: 1 % of each matrix's largest eigenvalue"
                )
            fail(
                label, f"wrong count: got {got}, expected {expected}", on=on, hint=hint
            )
