"""Small numerical helpers shared by every part: PSD matrices, entropies, Bures distance.

One tolerance policy for positive semi-definiteness: a symmetric matrix ``S`` is PSD when its
smallest eigenvalue is at least ``-PSD_RTOL * max(1, max|S_ij|)``, and symmetric when
``max|S - S^T| <= PSD_RTOL * max(1, max|S_ij|)``. The scale makes the test independent of
units; the floor of 1 keeps tiny matrices from being judged on round-off alone.

Every function takes NumPy arrays or torch tensors, batched over leading dimensions, and
returns the same kind it was given (NumPy in, NumPy out).
"""

from __future__ import annotations

import numpy as np
import torch

from .arrays import numpy_in_numpy_out, to_input_kind, to_tensor

__all__ = [
    "PSD_RTOL",
    "psd_tolerance",
    "check_psd",
    "psd_sqrt",
    "entropy",
    "kl_divergence",
    "bures_wasserstein",
]

#: Relative tolerance of the PSD and symmetry checks (see the module docstring).
PSD_RTOL = 1e-10


@numpy_in_numpy_out("S")
def psd_tolerance(S) -> torch.Tensor | np.ndarray:
    """The absolute tolerance ``PSD_RTOL * max(1, max|S_ij|)`` per matrix, shape ``S.shape[:-2]``."""
    t, _ = to_tensor(S, "S")
    scale = t.abs().amax(dim=(-2, -1)).clamp(min=1.0)
    return PSD_RTOL * scale


def check_psd(S, name: str = "S", *, strict: bool = False):
    """Check that ``S`` is a (batch of) symmetric positive semi-definite matrices.

    Returns the symmetrised matrix (same kind as given). With ``strict`` the smallest
    eigenvalue must exceed the tolerance (positive definite). Raises ``ValueError`` naming
    ``name`` otherwise, and ``TypeError`` for non-numeric input.
    """
    t, was_numpy = to_tensor(S, name)  # name: the caller's, so the checks below name it
    if t.dim() < 2 or t.shape[-1] != t.shape[-2]:
        raise ValueError(
            f"{name} must be a square matrix (..., d, d), got shape {tuple(t.shape)}"
        )
    tol = PSD_RTOL * t.abs().amax(dim=(-2, -1)).clamp(min=1.0)
    asym = (t - t.mT).abs().amax(dim=(-2, -1))
    if bool((asym > tol).any()):
        raise ValueError(
            f"{name} must be symmetric (max |S - S^T| = {float(asym.max()):.3g})"
        )
    sym = (t + t.mT) / 2
    lam_min = torch.linalg.eigvalsh(sym)[..., 0]
    bad = lam_min <= tol if strict else lam_min < -tol
    if bool(bad.any()):
        what = "positive definite" if strict else "positive semi-definite"
        raise ValueError(
            f"{name} must be {what} (smallest eigenvalue {float(lam_min.min()):.3g})"
        )
    return to_input_kind(sym, was_numpy)


@numpy_in_numpy_out("S")
def psd_sqrt(S, *, check: bool = True):
    """Symmetric square root of a (batch of) symmetric PSD matrices.

    Eigenvalues within the tolerance below zero (round-off) are clipped to zero; a matrix
    that is not PSD by :func:`check_psd` raises ``ValueError``. ``check=False`` (a tensor
    the caller knows to be symmetric PSD, in an integrator's inner loop) skips the check
    and its host synchronisation, and uses ``S`` as it is rather than symmetrised.
    """
    t = torch.as_tensor(check_psd(S, "S") if check else S)
    w, U = torch.linalg.eigh(t)
    return (U * w.clamp(min=0).sqrt().unsqueeze(-2)) @ U.mT


@numpy_in_numpy_out("p")
def entropy(p, *, dim: int = -1):
    r"""Shannon entropy :math:`-\sum_k p_k \log p_k` in nats along ``dim``, with :math:`0\log 0 = 0`.

    ``p`` must be non-negative (it need not be normalised: the sum is taken as it is).
    """
    t, _ = to_tensor(p, "p")
    if bool((t < 0).any()):
        raise ValueError("p must be non-negative to have an entropy")
    return -torch.special.xlogy(t, t).sum(dim)


@numpy_in_numpy_out("p")
def kl_divergence(p, q, *, dim: int = -1):
    r""":math:`\mathrm{KL}(p\|q) = \sum_k p_k \log(p_k / q_k)` in nats along ``dim``.

    Terms with :math:`p_k = 0` contribute 0; :math:`q_k = 0 < p_k` gives ``inf``.
    """
    tp, _ = to_tensor(p, "p")
    tq, _ = to_tensor(q, "q")
    if bool((tp < 0).any()) or bool((tq < 0).any()):
        raise ValueError("p and q must be non-negative")
    tq = tq.to(tp.dtype)
    out = torch.special.xlogy(tp, tp) - torch.special.xlogy(tp, tq)
    return out.sum(dim)


@numpy_in_numpy_out("mean1")
def bures_wasserstein(mean1, cov1, mean2, cov2):
    r"""Closed-form :math:`W_2` between :math:`N(m_1, \Sigma_1)` and :math:`N(m_2, \Sigma_2)`.

    :math:`W_2^2 = |m_1 - m_2|^2 + \mathrm{tr}(\Sigma_1 + \Sigma_2
    - 2(\Sigma_1^{1/2}\Sigma_2\Sigma_1^{1/2})^{1/2})`. Batched over leading dimensions; a
    NumPy scalar for one pair of NumPy inputs.
    """
    m1, _ = to_tensor(mean1, "mean1")
    m2, _ = to_tensor(mean2, "mean2")
    S1 = torch.as_tensor(check_psd(cov1, "cov1"))
    S2 = torch.as_tensor(check_psd(cov2, "cov2"))
    d = m1.shape[-1]
    for M, name in ((S1, "cov1"), (S2, "cov2")):
        if M.shape[-1] != d:
            raise ValueError(
                f"{name} must be {d}x{d} to match the means, got shape {tuple(M.shape)}"
            )
    if m2.shape[-1] != d:
        raise ValueError(f"mean2 must have {d} entries, got shape {tuple(m2.shape)}")
    dtype = torch.promote_types(m1.dtype, S1.dtype)
    m1, m2, S1, S2 = (x.to(dtype) for x in (m1, m2, S1, S2))
    R = psd_sqrt(S1)
    cross = psd_sqrt(R @ S2 @ R)
    tr = torch.diagonal(S1 + S2 - 2 * cross, dim1=-2, dim2=-1).sum(-1)
    w2sq = ((m1 - m2) ** 2).sum(-1) + tr
    return w2sq.clamp(min=0).sqrt()
