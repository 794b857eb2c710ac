"""The machinery shared by every part's checkers: the registry and helpful failures.

A part's module defines each checker as a function of the student's answer, decorated with
:func:`checker`. Inside, :func:`call` runs the student's function on one input and turns every
way it can fail (an unfinished stub, an exception, ``None``) into an :class:`AssertionError`
that names the input; :func:`as_array` and :func:`assert_close` compare a result with the
expected one and say where they differ.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import traceback

import numpy as np
import torch

__all__ = [
    "CHECKERS",
    "checker",
    "fail",
    "require_function",
    "call",
    "as_array",
    "assert_close",
    "success",
    "generator",
    "randn",
]

#: exercise label → checker (filled by the part modules when :mod:`attnbook.exercises` loads)
CHECKERS: dict = {}

STUB_HINT = (
    "replace `raise NotImplementedError` (or `...`) in the exercise's cell with your code, "
    "run the cell again"
)


def checker(label: str, *, what: str):
    """Register the decorated function as the checker of exercise ``label``.

    ``what`` names the expected answer in messages (``"a function l2_weights(q, k)"``).
    """

    def register(fn):
        if label in CHECKERS:
            raise ValueError(f"exercise {label!r} has two checkers")

        @functools.wraps(fn)
        def run(answer):
            if answer is None:
                fail(
                    label,
                    f"expected {what}, got None",
                    hint="did you pass the result of a call, or forget `return`?",
                )
            if answer is Ellipsis or _is_unfinished(answer):
                fail(label, f"{what} is not written yet", hint=STUB_HINT)
            fn(answer)
            success(label)

        run.label = label
        run.what = what
        CHECKERS[label] = run
        return run

    return register


def _is_unfinished(answer) -> bool:
    """A function whose body is only a docstring, ``...``, ``pass`` or a NotImplementedError."""
    if not callable(answer):
        return False
    try:
        source = inspect.getsource(answer)
    except (OSError, TypeError):
        return False
    body = [
        line.strip()
        for line in source.splitlines()[1:]
        if line.strip() and not line.strip().startswith("#")
    ]
    stub_lines = {"...", "pass", "raise NotImplementedError", "return None"}
    return bool(body) and all(
        line in stub_lines
        or line.startswith("raise NotImplementedError")
        or line.startswith(('"""', "'''"))
        for line in body
    )


def fail(label: str, message: str, *, on=None, hint: str | None = None):
    """Raise the :class:`AssertionError` of a wrong answer: what, on which input, a hint."""
    text = f"{label}: {message}"
    if on is not None:
        text += f"\n  on input: {on}"
    if hint:
        text += f"\n  hint: {hint}"
    raise AssertionError(text)


def success(label: str) -> None:
    print(f"✔ {label}: correct — well done.")


def require_function(label: str, answer, what: str) -> None:
    if not callable(answer):
        fail(
            label,
            f"expected {what}, got {type(answer).__name__} {_short(answer)}",
            hint="pass the function itself (its name, without parentheses)",
        )


def call(label: str, fn, *args, on: str = "", **kwargs):
    """``fn(*args, **kwargs)``, with every failure turned into a helpful AssertionError."""
    try:
        out = fn(*args, **kwargs)
    except NotImplementedError:
        fail(
            label,
            "your function is not written yet (NotImplementedError)",
            hint=STUB_HINT,
        )
    except AssertionError:
        raise
    except Exception as exc:  # the student's code failed: say where, on which input
        last = traceback.extract_tb(exc.__traceback__)[-1]
        where = f" (line {last.lineno}: {last.line})" if last.line else ""
        fail(
            label,
            f"your function raised {type(exc).__name__}: {exc}{where}",
            on=on,
            hint="run it on this input by hand and look at the shapes of the intermediates",
        )
    if out is None or out is Ellipsis:
        fail(
            label,
            f"your function returned {out!r}",
            on=on,
            hint="end it with `return <result>`",
        )
    return out


def as_array(label: str, value, *, on: str = "", what: str = "an array") -> np.ndarray:
    """``value`` (a tensor, NumPy array, number or nested list) as a float64 NumPy array."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.is_complex() or value.dtype == torch.bool:
            fail(
                label,
                f"expected {what} of real numbers, got a {value.dtype} tensor",
                on=on,
            )
        return value.to(torch.float64).numpy()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return np.asarray(float(value))
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        fail(
            label,
            f"expected {what}, got a {type(value).__name__}: {_short(value)}",
            on=on,
            hint="return a torch.Tensor (or a NumPy array) of numbers",
        )
    return arr


def assert_close(
    label: str,
    got,
    expected,
    *,
    on: str,
    hint: str,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    what: str = "the result",
    shape_hint: str = "check which axis you reduce over (rows are the last axis)",
) -> None:
    """Fail unless ``got`` has the shape of ``expected`` and agrees with it entry by entry."""
    g = as_array(label, got, on=on, what=what)
    e = as_array(label, expected, on=on, what=what)
    if g.shape != e.shape:
        fail(
            label,
            f"wrong shape of {what}: got {tuple(g.shape)}, expected {tuple(e.shape)}",
            on=on,
            hint=shape_hint,
        )
    if not np.all(np.isfinite(g)):
        fail(label, f"NaN or inf in {what}: {_short(g)}", on=on, hint=hint)
    diff = np.abs(g - e)
    bad = diff > atol + rtol * np.abs(e)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        at = f" at index {idx}" if idx else ""
        fail(
            label,
            f"wrong value of {what}{at}: got {g[idx]:.6g}, expected {e[idx]:.6g} "
            f"(largest difference {diff.max():.3g})",
            on=on,
            hint=hint,
        )


def _short(value, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def generator(seed: int) -> torch.Generator:
    """A fresh CPU generator: every checker draws its test inputs from fixed seeds."""
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed: int) -> torch.Tensor:
    """Standard normal float64 test input of ``shape`` from :func:`generator` ``(seed)``."""
    return torch.randn(*shape, generator=generator(seed), dtype=torch.float64)
