"""Escalating hints (attnbook.exercises.hint): every checker states a ladder of two or more
further hints; ``hint(label)`` gives them in order, then says there are no more; every failure
message names the call; and no hint states the result (a heuristic guard)."""

import inspect
import re

import numpy as np
import pytest
import test_exercises
import test_exercises_copyhead
import test_exercises_focus
import test_exercises_pde
import test_exercises_pde_figures
import torch

from attnbook import exercises
from attnbook.exercises import core


@pytest.fixture(autouse=True)
def _fresh_ladders():
    """Every test starts each ladder at its first rung, and leaves no state behind."""
    exercises.reset_hints()
    yield
    exercises.reset_hints()


LABELS = exercises.labels()


def test_hint_is_public():
    assert "hint" in exercises.__all__ and "reset_hints" in exercises.__all__
    assert exercises.hint is core.hint


@pytest.mark.parametrize("label", LABELS)
def test_every_checker_states_a_ladder_of_two_or_more_hints(label):
    ladder = exercises.CHECKERS[label].hints
    assert isinstance(ladder, tuple) and len(ladder) >= 2, label
    assert all(isinstance(h, str) and h.strip() for h in ladder), label
    assert len(set(ladder)) == len(ladder), f"{label}: a hint repeats"


@pytest.mark.parametrize("label", LABELS)
def test_hint_escalates_in_order_then_says_there_are_no_more(label, capsys):
    ladder = exercises.CHECKERS[label].hints
    for rung, text in enumerate(ladder, 1):
        got = exercises.hint(label)
        assert got == text
        out = capsys.readouterr().out
        assert text in out and f"hint {rung} of {len(ladder)}" in out and label in out
    last = [exercises.hint(label) for _ in range(3)]
    out = capsys.readouterr().out
    assert len(set(last)) == 1 and "no further hints" in last[0] and label in last[0]
    assert all(w in last[0] for w in ("solution", "instructor", "ask in class"))
    assert out.count("no further hints") == 3


def test_ladders_are_per_label_and_reset():
    a, b = "ex-l2-weights", "ex-focus-stationary"
    first_a = exercises.hint(a)
    exercises.hint(a)
    assert exercises.hint(b) == exercises.CHECKERS[b].hints[0]  # b: its own first rung
    exercises.reset_hints(a)
    assert exercises.hint(a) == first_a
    assert exercises.hint(b) == exercises.CHECKERS[b].hints[1]  # b was not reset
    exercises.reset_hints()
    assert exercises.hint(b) == exercises.CHECKERS[b].hints[0]


def test_an_unknown_label_lists_the_known_ones():
    with pytest.raises(KeyError, match="ex-nope") as err:
        exercises.hint("ex-nope")
    assert "ex-l2-weights" in str(err.value) and "ex-focus-stationary" in str(err.value)
    with pytest.raises(KeyError, match="ex-nope"):
        exercises.reset_hints("ex-nope")


@pytest.mark.parametrize("label", [3, None, ("ex-l2-weights",), ["ex-l2-weights"]])
def test_a_label_that_is_not_a_str_is_a_type_error(label):
    with pytest.raises(TypeError, match="label must be a str"):
        exercises.hint(label)


@pytest.mark.parametrize("label", LABELS)
def test_a_failure_message_ends_with_the_hint_call(label):
    with pytest.raises(AssertionError) as err:
        exercises.check(label, None)
    last = str(err.value).splitlines()[-1]
    assert f'attnbook.exercises.hint("{label}")' in last and "further hint" in last


def test_a_wrong_value_names_the_hint_call_after_its_hint():
    def plain_softmax(q, k):
        return torch.softmax(q @ k.T, -1)

    with pytest.raises(AssertionError) as err:
        exercises.check("ex-l2-weights", plain_softmax)
    lines = str(err.value).splitlines()
    assert lines[-2].strip().startswith("hint:") and "plain softmax" in lines[-2]
    call = 'attnbook.exercises.hint("ex-l2-weights")'
    assert lines[-1] == f"  {call} gives a further hint"


def test_a_checker_without_a_ladder_adds_no_line():
    with pytest.raises(AssertionError) as err:
        core.fail("ex-not-registered", "wrong", hint="look again")
    assert str(err.value).splitlines()[-1] == "  hint: look again"


def test_a_ladder_must_hold_non_empty_strings():
    with pytest.raises(ValueError, match="hints"):
        core.checker("ex-hints-bad", what="x", hints=("fine", ""))
    assert "ex-hints-bad" not in exercises.CHECKERS


#: an assignment in code (`x = …`, `y += …`), not a comparison (`==`, `<=`, `>=`, `!=`)
_ASSIGNMENT = re.compile(r"(?<![<>=!])=(?!=)")


def _reference_names(label) -> list[str]:
    """The dotted reference names of a checker and the `.name` a call to each would show."""
    names = []
    for dotted in exercises.CHECKERS[label].reference:
        names += [dotted, "." + dotted.rsplit(".", 1)[1]]
    return names


@pytest.mark.parametrize("label", LABELS)
def test_no_hint_states_the_result(label):
    """A heuristic guard: no `return`, no `=` (an assignment or a formula for the answer), no
    reference function of the exercise by its dotted name."""
    for text in exercises.CHECKERS[label].hints:
        assert not re.search(r"\breturn\b", text), (label, text)
        assert not _ASSIGNMENT.search(text), (label, text)
        for name in _reference_names(label):
            assert name not in text, (label, name, text)


def test_the_guard_catches_what_it_should():
    assert _ASSIGNMENT.search("p = torch.softmax(s, -1)")
    assert _ASSIGNMENT.search("H_i = −Σ_j P_ij log P_ij")
    assert not _ASSIGNMENT.search("compare with ==, <= and >=")
    assert ".stationary" in _reference_names("ex-focus-stationary")


# --- failure hints: a wrong answer's `hint:` line names the mistake, never the result ---------

#: each part's tests: REFERENCE (a stand-in for a correct answer) and WRONG (the usual mistakes)
_PARTS = (
    test_exercises,
    test_exercises_focus,
    test_exercises_copyhead,
    test_exercises_pde,
    test_exercises_pde_figures,
)

#: (label, a wrong answer, a fragment of its message): every part's known mistakes
KNOWN_WRONG = [
    (label, fn, fragment)
    for part in _PARTS
    for label, rows in part.WRONG.items()
    for fn, fragment in rows
]

#: label → the package's stand-in for a correct answer
PACKAGE_ANSWERS = {label: fn for part in _PARTS for label, fn in part.REFERENCE.items()}

#: a library call or a matrix product written out as code (`torch.roll(`, `x @ V.T`)
_CODE = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\(|\s@\s")

#: the machinery's own hints (an answer of the wrong type, a stub): they say what form the
#: answer takes ("return a torch.Tensor …"), never what it is; only `return` is allowed there
_CORE_SOURCE = inspect.getsource(core)


@pytest.fixture
def _package_answers_allowed():
    """The wrong answers are built from the package's own functions, which a checker refuses
    inside a student's function (tests/test_exercises_references.py)."""
    with core.references_allowed():
        yield


def _off(value):
    """A wrong answer of the right shape and type: a correct one scaled and shifted (a mask
    negated, a count plus one), so that the checker falls back on its general hint."""
    if isinstance(value, (tuple, list)):
        return type(value)(_off(v) for v in value)
    if isinstance(value, (bool, np.bool_)) or getattr(value, "dtype", None) in (
        bool,
        np.bool_,
        torch.bool,
    ):
        return ~value
    if isinstance(value, (int, np.integer)):
        return value + 1
    return value * 1.37 + 0.1


def _hint_line(message: str) -> str:
    """The text after `hint:` of a failure message (its one hint line)."""
    lines = [
        ln.strip() for ln in message.splitlines() if ln.strip().startswith("hint:")
    ]
    assert len(lines) == 1, message
    return lines[0].removeprefix("hint:").strip()


def _assert_names_a_mistake(label: str, message: str) -> None:
    """The failure's hint states no result: no `=` (a formula or an assignment for the answer),
    no `return` (a code line), no library call written out as code, and no reference function
    of the exercise."""
    text = _hint_line(message)
    assert not _ASSIGNMENT.search(text), (label, text)
    assert not _CODE.search(text), (label, text)
    if text not in _CORE_SOURCE:
        assert not re.search(r"\breturn\b", text), (label, text)
    for name in _reference_names(label):
        assert name not in text, (label, name, text)


def _failure(label: str, answer) -> str:
    with pytest.raises(AssertionError) as err:
        exercises.check(label, answer)
    return str(err.value)


@pytest.mark.usefixtures("_package_answers_allowed")
@pytest.mark.parametrize(
    "label,fn,fragment",
    KNOWN_WRONG,
    ids=[f"{label}:{fragment}" for label, _, fragment in KNOWN_WRONG],
)
def test_a_known_mistake_is_named_not_answered(label, fn, fragment):
    message = _failure(label, fn)
    assert fragment in message, message
    _assert_names_a_mistake(label, message)


@pytest.mark.usefixtures("_package_answers_allowed")
@pytest.mark.parametrize("label", LABELS)
def test_a_wrong_value_gets_a_general_hint_that_states_no_result(label):
    """An answer that is off in no recognised way gets the checker's general hint, which is
    where a formula of the result most easily creeps in."""
    correct = PACKAGE_ANSWERS[label]

    def off(*args):
        return _off(correct(*args))

    _assert_names_a_mistake(label, _failure(label, off))


def test_every_part_has_known_mistakes_and_a_stand_in_for_each_checker():
    assert set(PACKAGE_ANSWERS) == set(LABELS)
    assert {label for label, _, _ in KNOWN_WRONG} == set(LABELS)


def test_the_failure_hint_guard_catches_what_it_should():
    formula = "  hint: π_k = k^(−s) / Σ_j j^(−s) for ranks k = 1, …, d"
    code = "  hint: that is the NEXT token: torch.roll(X, 1, dims=1) is the target"
    product = "  hint: the scores are queries @ keys.mT / √d"
    call = "  hint: when the flow never blows up, return math.inf, not None"
    reference = "  hint: compare with attnbook.markov.stationary"
    for message, label in (
        (formula, "ex-focus-zipf"),
        (code, "ex-copy-data"),
        (product, "ex-howto-scaled-scores"),
        (call, "ex-blowup-time"),
        (reference, "ex-focus-stationary"),
    ):
        with pytest.raises(AssertionError):
            _assert_names_a_mistake(label, f"{label}: wrong\n{message}")
    fine = "  hint: the sign: an entropy is never negative, and yours is (use ddof 1, e.g. ≤ 0)"
    _assert_names_a_mistake("ex-row-entropy", f"ex-row-entropy: wrong\n{fine}")
    assert (
        _hint_line("x\n  on input: a = 1\n  hint: look again\n  more") == "look again"
    )
