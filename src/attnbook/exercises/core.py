"""The machinery shared by every part's checkers: the registry and helpful failures.

A part's module defines each checker as a function of the student's answer, decorated with
:func:`checker`. Inside, :func:`call` runs the student's function on one input and turns every
way it can fail (an unfinished stub, an exception, ``None``) into an :class:`AssertionError`
that names the input; :func:`as_array` and :func:`assert_close` compare a result with the
expected one and say where they differ.

Hints escalate. A failure's ``hint:`` line names the mistake the checker saw; every checker also
states a ladder of further hints (``checker(..., hints=(...))``), from the idea or building block
to the structure of the computation and a small input to test it on. :func:`hint` gives the next
rung of an exercise's ladder on each call; no rung states the result.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import numbers
import sys
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
    "references_allowed",
    "precision_of",
    "hint",
    "reset_hints",
]

#: exercise label → checker (filled by the part modules when :mod:`attnbook.exercises` loads)
CHECKERS: dict = {}

STUB_HINT = (
    "replace `raise NotImplementedError` (or `...`) in the exercise's cell with your code, "
    "run the cell again"
)


def checker(
    label: str,
    *,
    what: str,
    reference: tuple[str, ...] = (),
    hints: tuple[str, ...] = (),
):
    """Register the decorated function as the checker of exercise ``label``.

    ``what`` names the expected answer in messages (``"a function l2_weights(q, k)"``).
    ``reference`` names the package functions that compute the answer
    (``"attnbook.markov.stationary"``): while the student's function runs (:func:`call`) they
    refuse to run, so a one-line call to the book's own function does not pass for the work.
    ``hints`` is the exercise's ladder of further hints, which :func:`hint` gives one per call:
    two or three sentences that go from the idea or building block to the structure of the
    computation (which intermediate to check, on what small input). None states the result: no
    formula or code line that is the answer, no number it should give, no reference function.
    """
    reference = tuple(reference)
    for name in reference:
        if not isinstance(name, str) or "." not in name:
            raise ValueError(f"reference must hold dotted names, got {name!r}")
    hints = (hints,) if isinstance(hints, str) else tuple(hints)
    for text in hints:
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"hints must be non-empty strings, got {text!r}")

    def register(fn):
        if label in CHECKERS:
            raise ValueError(f"exercise {label!r} has two checkers")

        @functools.wraps(fn)
        def run(answer):
            _ANSWER_EPS.pop(
                label, None
            )  # set afresh by each call of the student's function
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
        run.reference = reference
        run.hints = hints
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
    """Raise the :class:`AssertionError` of a wrong answer: what, on which input, a hint.

    When the exercise has a ladder of hints, a last line says that :func:`hint` gives more."""
    text = f"{label}: {message}"
    if on is not None:
        text += f"\n  on input: {on}"
    if hint:
        text += f"\n  hint: {hint}"
    if getattr(CHECKERS.get(label), "hints", ()):
        text += f"\n  {HINT_CALL.format(label=label)} gives a further hint"
    raise AssertionError(text)


#: how a failure message and the book name the call that gives the next hint
HINT_CALL = 'attnbook.exercises.hint("{label}")'

NO_MORE_HINTS = (
    "no further hints for {label}: read the exercise's solution in the instructor's edition "
    "of the book, or ask in class"
)

#: exercise label → how many rungs of its ladder :func:`hint` has given
_HINTS_GIVEN: dict[str, int] = {}


class _Hint(str):
    """The text :func:`hint` returns; already printed, so a notebook does not echo it."""

    def _ipython_display_(self) -> None:
        pass


def _known(label) -> None:
    """Raise the TypeError or KeyError of a label that names no registered exercise."""
    if not isinstance(label, str):
        raise TypeError(
            f"label must be a str, an exercise label such as 'ex-l2-weights', "
            f"got {type(label).__name__} {_short(label)}"
        )
    if label not in CHECKERS:
        raise KeyError(
            f"no checker for exercise {label!r}; known exercises: "
            f"{', '.join(sorted(CHECKERS))}"
        )


def hint(label: str) -> str:
    """Print and return the next hint of exercise ``label``'s ladder.

    The first call gives the first rung, the next call the second, and so on; after the last
    rung every call says that there are no further hints and points to the exercise's solution
    (the instructor's edition) or to asking in class. :func:`reset_hints` starts over.
    """
    _known(label)
    ladder = CHECKERS[label].hints
    given = _HINTS_GIVEN.get(label, 0)
    if given < len(ladder):
        _HINTS_GIVEN[label] = given + 1
        text = ladder[given]
        print(f"hint {given + 1} of {len(ladder)} ({label}): {text}")
    else:
        text = NO_MORE_HINTS.format(label=label)
        print(text)
    return _Hint(text)


def reset_hints(label: str | None = None) -> None:
    """Start exercise ``label``'s ladder of hints over (every exercise's when ``None``)."""
    if label is None:
        _HINTS_GIVEN.clear()
        return
    _known(label)
    _HINTS_GIVEN.pop(label, None)


def success(label: str) -> None:
    print(f"✔ {label}: correct — well done.")


def require_function(label: str, answer, what: str) -> None:
    if not callable(answer):
        fail(
            label,
            f"expected {what}, got {type(answer).__name__} {_short(answer)}",
            hint="pass the function itself (its name, without parentheses)",
        )


class _ReferenceCalled(Exception):
    """Raised by a reference function called while the student's function runs."""


def _resolve(dotted: str):
    import importlib

    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


@contextlib.contextmanager
def _references_blocked(label: str, fn):
    """While the student's ``fn`` runs, every name bound to a reference function of exercise
    ``label`` (in the package's modules and in ``fn``'s globals, e.g. after ``from attnbook.markov
    import stationary``) refuses to run; restored afterwards, whatever happens."""
    names = getattr(CHECKERS.get(label), "reference", ()) if _BLOCKING[-1] else ()
    targets = {id(obj): (dotted, obj) for dotted in names for obj in [_resolve(dotted)]}
    if not targets:
        yield
        return
    # the answer may be the reference itself (`check(label, markov.stationary)`), or wrap it
    inner = fn
    while inner is not None:
        if id(inner) in targets and inner is targets[id(inner)][1]:
            raise _ReferenceCalled(targets[id(inner)][0])
        inner = getattr(inner, "__wrapped__", None) or getattr(inner, "func", None)
    namespaces = [
        vars(m)
        for name, m in list(sys.modules.items())
        if m is not None and (name == "attnbook" or name.startswith("attnbook."))
    ]
    namespaces.append(getattr(fn, "__globals__", {}))
    patched = []

    def refusing(dotted):
        def refuse(*args, **kwargs):
            raise _ReferenceCalled(dotted)

        return refuse

    for ns in namespaces:
        for key, value in list(ns.items()):
            if id(value) in targets and value is targets[id(value)][1]:
                patched.append((ns, key, value))
                ns[key] = refusing(targets[id(value)][0])
    try:
        yield
    finally:
        for ns, key, value in reversed(patched):
            ns[key] = value


def precision_of(value) -> float:
    """Machine epsilon of the dtype an answer was computed in (float64 for Python numbers).

    For a tuple, list or dict (e.g. a pair of float32 tensors) it is the coarsest precision
    among its elements, looked up recursively: the pair was computed at that precision."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            return float(torch.finfo(value.dtype).eps)
        return float(np.finfo(np.float64).eps)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return max(
            (precision_of(item) for item in value),
            default=float(np.finfo(np.float64).eps),
        )
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, np.dtype) and dtype.kind == "f":
        return float(np.finfo(dtype).eps)
    if isinstance(dtype, np.dtype) and dtype.kind == "O":
        return precision_of(list(np.asarray(value).ravel()))
    return float(np.finfo(np.float64).eps)


#: exercise label → machine epsilon of the student's last answer (read by assert_close)
_ANSWER_EPS: dict[str, float] = {}
_BLOCKING = [True]


@contextlib.contextmanager
def references_allowed():
    """Let the reference functions run inside the checked function: for tests that stand the
    package's own implementation in for a correct answer (a student's call is refused)."""
    _BLOCKING.append(False)
    try:
        yield
    finally:
        _BLOCKING.pop()


def call(label: str, fn, *args, on: str = "", none_hint: str | None = None, **kwargs):
    """``fn(*args, **kwargs)``, with every failure turned into a helpful AssertionError.

    The exercise's reference functions refuse to run meanwhile (see :func:`checker`).
    ``none_hint`` replaces the hint for an answer of ``None`` where ``None`` is a likely wrong
    value rather than a missing ``return`` (e.g. "no blow-up" is ``math.inf``)."""
    try:
        with _references_blocked(label, fn):
            out = fn(*args, **kwargs)
    except _ReferenceCalled as exc:
        fail(
            label,
            f"your function calls the book's {exc.args[0]}: write this one yourself; the "
            "book's function is the reference your answer is compared with",
            on=on,
            hint="use the building blocks the exercise names, not the function it asks for",
        )
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
            hint=none_hint or "end it with `return <result>`",
        )
    _ANSWER_EPS[label] = precision_of(out)
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
    eps = _ANSWER_EPS.get(label, precision_of(got))
    eps = max(eps, precision_of(got))
    if bad.any() and eps > np.finfo(np.float64).eps:
        # computed in float32 (or less): half its digits are what a correct computation keeps
        # through a softmax of large scores or an RK4 step, far below any wrong formula's error
        loose = float(np.sqrt(eps))
        scale = float(np.abs(e).max()) if e.size else 0.0
        if not (diff > max(atol, loose * scale) + loose * np.abs(e)).any():
            print(
                f"  note ({label}): your answer is in a {eps:.2g}-precision dtype (float32?); "
                f"it agrees with the float64 reference to that precision (largest difference "
                f"{diff.max():.3g}), so it passes. In float64 it would agree to {rtol:g}."
            )
            return
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        at = f" at index {idx}" if idx else ""
        digits = 6
        while digits < 17 and f"{g[idx]:.{digits}g}" == f"{e[idx]:.{digits}g}":
            digits += 2  # never "got 0.135824, expected 0.135824"
        fail(
            label,
            f"wrong value of {what}{at}: got {g[idx]:.{digits}g}, expected "
            f"{e[idx]:.{digits}g} (largest difference {diff.max():.3g})",
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
