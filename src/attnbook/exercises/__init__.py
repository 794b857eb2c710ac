"""Checkers for the book's coding exercises.

Each coding exercise of a chapter has one checker, registered in :data:`CHECKERS` under the
label of its ``exercise`` directive (``ex-l2-weights``…). A checker takes the student's answer
(a function or a value). When the answer is wrong it raises :class:`AssertionError` with a
message saying what was expected, on which input, and a hint; when it is right it prints one
success line. An unfinished stub (``raise NotImplementedError``, ``...``, a body that returns
``None``), ``None`` or an object of the wrong type get the same kind of message, never an
unrelated traceback.

In a chapter (and in its student notebook) an exercise ends with::

    from attnbook import exercises

    exercises.check("ex-l2-weights", l2_weights)

Hints escalate: a failure's ``hint:`` line names the mistake, and its last line says that
``attnbook.exercises.hint("ex-l2-weights")`` gives a further hint. Each call of :func:`hint`
prints the next rung of that exercise's ladder (the checker states it, ``checker(...,
hints=(...))``), from the idea to the structure of the computation; none states the result.
After the last rung it points to the solution in the instructor's edition, or to asking in
class. :func:`reset_hints` starts a ladder (or every ladder) over.

One module per part registers its checkers when imported: :mod:`.foundations`,
:mod:`.focus` (Part I), :mod:`.copyhead` (Part II), :mod:`.pde` and :mod:`.pde_figures` (Part III); a new chapter's
checkers go into its part's module, written with :func:`~attnbook.exercises.core.checker`.
"""

from __future__ import annotations

# one module per part: importing it registers its checkers
from . import copyhead, focus, foundations, pde, pde_figures  # noqa: E402,F401  (registers)
from .core import CHECKERS, checker, hint, reset_hints

__all__ = ["CHECKERS", "check", "checker", "hint", "labels", "reset_hints"]


def labels() -> list[str]:
    """The labels of every registered exercise, sorted."""
    return sorted(CHECKERS)


def check(label: str, answer) -> None:
    """Run the checker of exercise ``label`` on ``answer`` (a function or a value)."""
    if label not in CHECKERS:
        raise KeyError(
            f"no checker for exercise {label!r}; known exercises: {', '.join(labels())}"
        )
    CHECKERS[label](answer)
