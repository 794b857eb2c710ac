"""Argument checks shared by every public function.

Each helper raises ``TypeError`` (wrong kind of object) or ``ValueError`` (right kind, bad
value) with a message that names the offending argument, so a reader who passes a
non-square matrix or a NaN sees *which* argument is wrong, not a stack of shape errors.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import numpy as np
import torch

__all__ = [
    "as_tensor",
    "check_finite",
    "check_ndim",
    "check_square",
    "check_positive_int",
    "check_positive",
    "check_probability_vector",
    "check_stochastic_matrix",
    "check_choice",
    "check_same_last_dim",
    "as_float64_array",
    "per_model_positive",
]


def as_tensor(
    x,
    name: str,
    *,
    dtype: torch.dtype | None = None,
    device=None,
    allow_int: bool = False,
) -> torch.Tensor:
    """Convert a NumPy array, a tensor or a nested sequence of numbers to a tensor.

    Floating tensors keep their dtype unless ``dtype`` is given; NumPy float64 stays float64.
    Integer input — a tensor, an array or a list — is promoted to float64, the package's one
    default float dtype, unless ``allow_int``.
    """
    if isinstance(x, torch.Tensor):
        t = x
    elif isinstance(x, np.ndarray):
        if x.dtype == object:
            raise TypeError(f"{name} must be a numeric array, got an object array")
        t = torch.from_numpy(np.ascontiguousarray(x))
    elif isinstance(x, (numbers.Number, Sequence)) and not isinstance(x, (str, bytes)):
        try:
            t = torch.as_tensor(np.asarray(x, dtype=float))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be an array of numbers: {exc}") from None
    else:
        raise TypeError(
            f"{name} must be a torch.Tensor or a NumPy array, got {type(x).__name__}"
        )
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"{name} must be real-valued, got dtype {t.dtype}")
    if not t.is_floating_point() and not allow_int:
        t = t.to(torch.float64)
    if dtype is not None or device is not None:
        t = t.to(
            dtype=dtype or t.dtype, device=device if device is not None else t.device
        )
    return t


def check_finite(t: torch.Tensor, name: str) -> torch.Tensor:
    """Raise ``ValueError`` if ``t`` holds NaN or infinite entries."""
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        n_bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"{name} contains {n_bad} non-finite value(s) (NaN or inf)")
    return t


def check_ndim(
    t: torch.Tensor, name: str, ndim: int | Iterable[int], *, at_least: bool = False
) -> torch.Tensor:
    """Check the number of dimensions (exactly, one of several, or ``at_least``)."""
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    ok = t.dim() >= min(allowed) if at_least else t.dim() in allowed
    if not ok:
        want = (
            f"at least {min(allowed)}" if at_least else " or ".join(map(str, allowed))
        )
        raise ValueError(
            f"{name} must have {want} dimensions, got shape {tuple(t.shape)}"
        )
    return t


def check_square(t: torch.Tensor, name: str, size: int | None = None) -> torch.Tensor:
    """Check that the last two dimensions are equal (and equal ``size`` when given)."""
    if t.dim() < 2 or t.shape[-1] != t.shape[-2]:
        raise ValueError(f"{name} must be a square matrix, got shape {tuple(t.shape)}")
    if size is not None and t.shape[-1] != size:
        raise ValueError(f"{name} must be {size}x{size}, got shape {tuple(t.shape)}")
    return t


def check_positive_int(value, name: str, *, minimum: int = 1) -> int:
    """Check an integer size (``bool`` is refused, floats with integral value are not)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_positive(value, name: str, *, allow_zero: bool = False) -> float:
    """Check a positive (or non-negative) finite real number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(
            f"{name} must be {'non-negative' if allow_zero else 'positive'} and finite, got {value}"
        )
    return v


def check_probability_vector(
    p: torch.Tensor, name: str, *, atol: float = 1e-8
) -> torch.Tensor:
    """Check a non-negative vector (or batch of vectors) that sums to one along the last axis."""
    check_finite(p, name)
    if p.dim() < 1:
        raise ValueError(f"{name} must be a vector, got a scalar")
    if bool((p < 0).any()):
        raise ValueError(
            f"{name} must be non-negative, found minimum {float(p.min()):.3g}"
        )
    s = p.sum(-1)
    if not bool(torch.allclose(s, torch.ones_like(s), atol=atol, rtol=0)):
        raise ValueError(f"{name} must sum to 1, sums to {float(s.flatten()[0]):.6g}")
    return p


def check_stochastic_matrix(
    P: torch.Tensor, name: str, *, atol: float = 1e-8
) -> torch.Tensor:
    """Check a square, non-negative matrix whose rows sum to one."""
    check_square(P, name)
    check_finite(P, name)
    if bool((P < 0).any()):
        raise ValueError(
            f"{name} must be non-negative, found minimum {float(P.min()):.3g}"
        )
    rows = P.sum(-1)
    bad = (rows - 1).abs() > atol
    if bool(bad.any()):
        i = int(bad.flatten().nonzero()[0])
        raise ValueError(
            f"{name} must be row-stochastic (rows sum to 1); row {i} sums to "
            f"{float(rows.flatten()[i]):.6g}"
        )
    return P


def check_choice(value, name: str, choices: Iterable[str]) -> str:
    """Check that ``value`` is one of the known names."""
    choices = tuple(choices)
    if not isinstance(value, str):
        raise TypeError(
            f"{name} must be a string, one of {choices}, got {type(value).__name__}"
        )
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; expected one of {choices}")
    return value


def check_same_last_dim(
    a: torch.Tensor, a_name: str, b: torch.Tensor, b_name: str
) -> None:
    """Check that two tensors share their last dimension (e.g. queries and keys)."""
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"{a_name} and {b_name} must have the same last dimension, got "
            f"{tuple(a.shape)} and {tuple(b.shape)}"
        )


def as_float64_array(
    x, name: str, *, what: str = "an array of numbers", finite: bool = True
) -> np.ndarray:
    """A float64 NumPy array from a tensor, an array or a nested sequence of numbers.

    ``TypeError`` "``name`` must be ``what``" when ``x`` is not numeric; with ``finite`` (the
    default) ``ValueError`` when an entry is NaN or infinite."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be {what}, got {type(x).__name__}") from None
    if finite and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values")
    return arr


def per_model_positive(
    value, name: str, n_models: int, like: torch.Tensor
) -> torch.Tensor:
    """A positive step size (or learning rate): one number, or one per model of an ensemble.

    Returns a 0-d tensor or a ``(n_models,)`` tensor with ``like``'s dtype and device.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        check_positive(value, name)
        return torch.tensor(float(value), dtype=like.dtype, device=like.device)
    t = check_finite(as_tensor(value, name, dtype=like.dtype, device=like.device), name)
    if t.dim() != 0 and t.shape != (n_models,):
        raise ValueError(
            f"{name} must be a number or have shape ({n_models},), got {tuple(t.shape)}"
        )
    if bool((t <= 0).any()):
        raise ValueError(f"{name} must be positive")
    return t
