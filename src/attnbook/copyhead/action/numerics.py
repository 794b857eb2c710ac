"""Numerical building blocks shared by the linear and softmax analyses: the one
hyper-parameter object (:class:`CopyHyper`, validated once), the one grid of sample sizes and the one grid of softmax logits, per-row gradients and
Hessians by autograd, bisection in log P and quadrature moments."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import numpy as np
import torch

from attnbook.validation import (
    as_tensor,
    check_finite,
    check_positive,
    check_positive_int,
)

__all__ = [
    "CopyHyper",
    "p_grid",
    "logit_grid",
    "grad_and_hessian",
    "bisect_log",
    "quadrature_moments",
]


_SCALES = ("kappa", "sigma_w", "sigma_g", "sigma_b")


@dataclasses.dataclass(frozen=True)
class CopyHyper:
    r"""The sizes and scales of the copy-head action, validated once.

    ``seq_len`` :math:`L` (≥ 2) and ``vocab_size`` :math:`V` (≥ 2); the noise variance
    ``kappa`` :math:`\kappa` and the prior scales ``sigma_w`` (readout), ``sigma_g`` (scores)
    and ``sigma_b`` (row bias of linear attention), each positive. ``None`` for a size a
    function does not use. The analyses take these as keywords (``seq_len=..., vocab_size=...,
    kappa=...``) and build one object with :meth:`from_keywords`; ``**h.keywords()`` passes
    them on.
    """

    seq_len: int | None = None
    vocab_size: int | None = None
    kappa: float = 1.0
    sigma_w: float = 1.0
    sigma_g: float = 1.0
    sigma_b: float = 1.0

    def __post_init__(self):
        for size in ("seq_len", "vocab_size"):
            if getattr(self, size) is not None:
                value = check_positive_int(getattr(self, size), size, minimum=2)
                object.__setattr__(self, size, value)
        for scale in _SCALES:
            object.__setattr__(self, scale, check_positive(getattr(self, scale), scale))

    @classmethod
    def from_keywords(
        cls,
        function: str,
        keywords: dict,
        *,
        required: Iterable[str] = ("seq_len", "vocab_size"),
        optional: Iterable[str] = _SCALES,
    ) -> CopyHyper:
        """The validated hyper-parameters of ``function`` from its keyword arguments: the
        ``required`` sizes must be given, only ``required`` and ``optional`` names are accepted
        (``TypeError`` otherwise, as Python raises for a keyword a function does not take)."""
        required = tuple(required)
        accepted = set(required) | set(optional)
        for key in keywords:
            if key not in accepted:
                raise TypeError(
                    f"{function}() got an unexpected keyword argument {key!r}"
                )
        for key in required:
            if key not in keywords:
                raise TypeError(
                    f"{function}() missing required keyword argument {key!r}"
                )
        return cls(**keywords)

    def keywords(self, *names: str) -> dict:
        """The named fields (default: every field that is set) as keyword arguments."""
        fields = names or [f.name for f in dataclasses.fields(self)]
        return {k: getattr(self, k) for k in fields if getattr(self, k) is not None}


def p_grid(n_sequences) -> torch.Tensor:
    """Sample sizes as a positive, finite 1-d float64 tensor (a number gives one entry)."""
    P = as_tensor(n_sequences, "n_sequences", dtype=torch.float64).reshape(-1)
    check_finite(P, "n_sequences")
    if P.numel() == 0 or bool((P <= 0).any()):
        raise ValueError("n_sequences must be positive")
    return P


def logit_grid(seq_len: int, *, n_grid: int = 4001) -> torch.Tensor:
    """The grid of the softmax copy logit ``g``: ``[-2, 2 ln L + 6]`` (float64).

    Both minima of the symmetric-logit action lie inside (the unstructured one near 0, the
    copy one near ``½ ln L + O(1)``), and the weight ``e^{-S}`` is negligible at both ends."""
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    n = check_positive_int(n_grid, "n_grid", minimum=101)
    return torch.linspace(-2.0, 2 * np.log(L) + 6, n, dtype=torch.float64)


def grad_and_hessian(fun: Callable, x: torch.Tensor):
    """Per-row gradient ``(n, d)`` and Hessian ``(n, d, d)`` of a row-separable ``fun(x) -> (n,)``
    at ``x (n, d)``: one backward pass for the gradient and ``d`` for the Hessian."""
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(fun(x).sum(), x, create_graph=True)
    rows = [
        torch.autograd.grad(g[:, i].sum(), x, retain_graph=i < x.shape[1] - 1)[0]
        for i in range(x.shape[1])
    ]
    return g.detach(), torch.stack(rows, 1).detach()


def bisect_log(fun: Callable, lo: float, hi: float, *, n_iters: int = 40) -> float:
    """Root of an increasing ``fun`` (sign change from − to +) on ``[lo, hi]``, bisecting in
    ``log P``; ``ValueError`` when there is no sign change or ``fun`` is NaN at an end."""
    flo, fhi = fun(lo), fun(hi)
    for p_end, value in ((lo, flo), (hi, fhi)):
        if np.isnan(value):
            raise ValueError(
                f"the action gap is undefined (NaN) at P = {p_end:.3g}: the saddle search "
                f"failed there; choose a narrower p_range"
            )
    if not (flo < 0 < fhi):
        raise ValueError(
            f"no crossing in [{lo:.3g}, {hi:.3g}] (values {flo:.3g}, {fhi:.3g}); "
            f"widen the range"
        )
    for _ in range(n_iters):
        mid = float(np.sqrt(lo * hi))
        if fun(mid) < 0:
            lo = mid
        else:
            hi = mid
    return float(np.sqrt(lo * hi))


def quadrature_moments(S: torch.Tensor, f: torch.Tensor):
    """Mean and variance of ``f`` under ``p ∝ exp(−S)`` on a uniform grid (last dim), and the
    normalised weights."""
    w = torch.exp(-(S - S.min(-1, keepdim=True).values))
    w = w / w.sum(-1, keepdim=True)
    mean = (w * f).sum(-1)
    return mean, (w * (f - mean[..., None]) ** 2).sum(-1), w
