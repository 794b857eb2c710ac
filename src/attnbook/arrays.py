"""The package's array policy: NumPy in → NumPy out, tensors stay tensors.

A public function takes NumPy arrays, nested sequences or torch tensors. Internally it computes
with torch; :func:`to_tensor` turns a non-tensor input into a float64 CPU tensor (a tensor
keeps its dtype and device), and :func:`numpy_in_numpy_out` gives the result back in the kind
of the named input: NumPy arrays for NumPy (or sequence) input, a NumPy scalar for a 0-d
result, tensors unchanged. One home, in the manner of POT's backends, instead of the same
three lines in every module.
"""

from __future__ import annotations

import functools
import inspect

import torch

from .validation import as_tensor, check_finite

__all__ = ["to_tensor", "to_input_kind", "numpy_in_numpy_out"]


def to_tensor(x, name: str, *, finite: bool = True) -> tuple[torch.Tensor, bool]:
    """``(tensor, was_numpy)``: a tensor input as it is, anything else (NumPy, sequences,
    numbers) as a float64 CPU tensor; non-finite entries raise ``ValueError`` naming ``name``
    unless ``finite=False``."""
    was_numpy = not isinstance(x, torch.Tensor)
    t = as_tensor(x, name)
    if was_numpy:
        t = t.to(torch.float64)
    return (check_finite(t, name) if finite else t), was_numpy


def _numpy(value):
    if isinstance(value, torch.Tensor):
        out = value.detach().cpu().numpy()
        return out[()] if out.ndim == 0 else out
    if isinstance(value, tuple):
        items = [_numpy(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_numpy(v) for v in value]
    if isinstance(value, dict):
        return {k: _numpy(v) for k, v in value.items()}
    return value


def to_input_kind(value, was_numpy: bool):
    """``value`` (a tensor, or a tuple, list or dict of them) as NumPy when ``was_numpy``."""
    return _numpy(value) if was_numpy else value


def numpy_in_numpy_out(arg: str):
    """Decorator: the result comes back as NumPy when the argument ``arg`` was not a tensor.

    The wrapped function computes with tensors (converting its inputs with :func:`to_tensor`
    or :func:`attnbook.validation.as_tensor`); tensors in the result — alone, or in a tuple,
    named tuple, list or dict — become NumPy arrays (0-d ones NumPy scalars).
    """

    def wrap(func):
        sig = inspect.signature(func)
        if arg not in sig.parameters:
            raise TypeError(f"{func.__qualname__} has no argument {arg!r}")

        @functools.wraps(func)
        def inner(*args, **kwargs):
            bound = sig.bind_partial(*args, **kwargs)
            was_numpy = not isinstance(bound.arguments.get(arg), torch.Tensor)
            return to_input_kind(func(*args, **kwargs), was_numpy)

        return inner

    return wrap
