"""The exercise checkers (attnbook.exercises): every reference solution of the book and the
package's reference implementation pass; wrong answers, None, stubs and wrong types fail with
a message that names the exercise, the input and a hint.

The helpers (``solution_cells``, ``check_*``, ``BAD_ANSWERS``) are shared with the other parts'
exercise tests (``tests/test_exercises_pde.py``), which ``import test_exercises``.
"""

import math
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import torch

from attnbook import attention as att
from attnbook import exercises, pde
from attnbook.claims import student_t_interval
from attnbook.exercises.core import references_allowed
from attnbook.linalg import psd_sqrt
from attnbook.pde import closed_forms as cf
from tools import colab


@pytest.fixture(autouse=True)
def _package_answers_allowed():
    """REFERENCE and WRONG build answers from the package's own functions, which a checker
    refuses inside a student's function (tests/test_exercises_references.py)."""
    with references_allowed():
        yield


ROOT = Path(__file__).resolve().parents[1]

#: the package's tested implementation of each exercise's answer
REFERENCE = {
    "ex-l2-weights": lambda q, k: att.attention_weights(q, k, kind="l2"),
    "ex-row-entropy": att.row_entropy,
    "ex-howto-interval": student_t_interval,
    "ex-howto-scaled-scores": lambda q, k: att.scores(q, k, scale=q.shape[-1] ** -0.5),
}


def _normal_interval(v):
    half = 1.96 * float(v.std()) / math.sqrt(v.numel())
    return float(v.mean()) - half, float(v.mean()) + half


def _naive_l2(q, k):
    w = torch.exp(-(torch.cdist(q, k) ** 2))
    return w / w.sum(-1, keepdim=True)


#: label → (a wrong answer, a fragment its message must contain)
WRONG = {
    "ex-l2-weights": [
        (lambda q, k: torch.softmax(q @ k.T, -1), "plain softmax"),
        (_naive_l2, "underflows"),
        (lambda q, k: torch.exp(2 * q @ k.T - (k**2).sum(-1)), "sum to 1"),
        (lambda q, k: att.attention_weights(k, q, kind="l2"), "wrong shape"),
    ],
    "ex-row-entropy": [
        (lambda P: -(P * P.log()).sum(-1), "0·log 0"),
        (lambda P: torch.special.xlogy(P, P).sum(-1), "the sign"),
        (lambda P: -torch.special.xlogy(P, P).sum(-1) / math.log(2), "natural log"),
        (lambda P: -torch.special.xlogy(P, P).sum(), "wrong shape"),
    ],
    "ex-howto-interval": [
        (_normal_interval, "normal quantile"),
        (lambda v: (float(v.mean()), float(v.mean()) + 1), "centred on the mean"),
        (lambda v: float(v.mean()), "two numbers"),
        (lambda v: "low, high", "expected (low, high)"),
    ],
    "ex-howto-scaled-scores": [
        (lambda q, k: q @ k.mT, "divide by √d"),
        (lambda q, k: q @ k.mT / q.shape[-1], "not by d"),
        (lambda q, k: k @ q.mT / math.sqrt(q.shape[-1]), "rows are queries"),
        (lambda q, k: q @ k, "raised RuntimeError"),
    ],
}


def _exercise_labels():
    """label → path of every ``exercise`` directive of the book."""
    out = {}
    for md in sorted((ROOT / "book").rglob("*.md")):
        for label in re.findall(
            r"```\{exercise\}[^\n]*\n:label: (\S+)", md.read_text()
        ):
            out[label] = md
    return out


def solution_cells(labels=None):
    """(label, source) of every code cell of a solution that holds ``# BEGIN SOLUTION``.

    ``labels``: keep only those exercises (default: every one of the book).
    """
    out = []
    for md in sorted((ROOT / "book").rglob("*.md")):
        text = md.read_text(encoding="utf-8")
        pattern = r"```\{solution-start\} (\S+)\n(.*?)```\{solution-end\}"
        for label, body in re.findall(pattern, text, flags=re.S):
            for cell in re.findall(
                r"```\{code-cell\} ipython3\n(.*?)\n```", body, re.S
            ):
                if colab.BEGIN_SOLUTION in cell and (labels is None or label in labels):
                    out.append((label, cell))
    return out


SOLUTIONS = solution_cells(set(REFERENCE))


def _namespace():
    """What a chapter's set-up cell has imported when a solution cell runs."""
    return {
        "torch": torch,
        "math": math,
        "scipy": scipy,
        "att": att,
        "np": np,
        "pde": pde,
        "cf": cf,
        "psd_sqrt": psd_sqrt,
    }


def part_labels(module: str) -> set:
    """Labels of the checkers registered by ``attnbook.exercises.<module>``."""
    name = f"attnbook.exercises.{module}"
    return {label for label, fn in exercises.CHECKERS.items() if fn.__module__ == name}


def check_reference(label, answer, capsys):
    """The package's implementation passes with one success line."""
    exercises.check(label, answer)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✔") and label in out


def check_solution(label, source, capsys):
    """The book's solution cell ends with its checker and passes it."""
    last = source.strip().splitlines()[-1]
    assert re.fullmatch(rf'exercises\.check\("{re.escape(label)}", \w+\)', last), last
    exec(compile(source, label, "exec"), _namespace())
    assert capsys.readouterr().out.startswith(f"✔ {label}")


def check_stub(label, source):
    """The student notebook's stub of the cell fails with "not written yet" and a hint."""
    stub = colab.stub_source(source)
    assert colab.BEGIN_SOLUTION not in stub and "NotImplementedError" in stub
    with pytest.raises(AssertionError, match=rf"^{label}: .*not written yet") as err:
        exec(compile(stub, label, "exec"), _namespace())
    assert "hint:" in str(err.value)


def check_wrong(label, fn, fragment):
    """A wrong answer fails with the label, the input, a hint and ``fragment``."""
    with pytest.raises(AssertionError) as err:
        exercises.check(label, fn)
    msg = str(err.value)
    assert msg.startswith(f"{label}: ") and fragment in msg, msg
    assert "on input:" in msg and "hint:" in msg, msg


def check_bad_answer(label, answer, fragment):
    """None, a stub or a wrong type fails with the label, ``fragment`` and a hint."""
    with pytest.raises(AssertionError) as err:
        exercises.check(label, answer)
    msg = str(err.value)
    assert msg.startswith(f"{label}: ") and fragment in msg and "hint:" in msg, msg
    assert err.value.__cause__ is None or "raised" in msg


def wrong_cases(wrong: dict) -> list:
    return [(label, fn, frag) for label, rows in wrong.items() for fn, frag in rows]


def test_registry_matches_the_book():
    labels = _exercise_labels()
    assert set(REFERENCE) == part_labels("foundations") == set(WRONG)
    assert set(exercises.CHECKERS) <= set(labels), "a checker without an exercise"
    assert sorted({label for label, _ in solution_cells()}) == exercises.labels()
    assert exercises.labels() == sorted(exercises.CHECKERS)


@pytest.mark.parametrize("label", sorted(REFERENCE))
def test_reference_implementation_passes(label, capsys):
    check_reference(label, REFERENCE[label], capsys)


@pytest.mark.parametrize("label,source", SOLUTIONS, ids=[s[0] for s in SOLUTIONS])
def test_reference_solution_of_the_book_passes_and_ends_with_its_checker(
    label, source, capsys
):
    check_solution(label, source, capsys)


@pytest.mark.parametrize("label,source", SOLUTIONS, ids=[s[0] for s in SOLUTIONS])
def test_the_stub_of_the_student_notebook_fails_helpfully(label, source):
    check_stub(label, source)


@pytest.mark.parametrize("label,fn,fragment", wrong_cases(WRONG))
def test_wrong_answers_fail_with_what_where_and_a_hint(label, fn, fragment):
    check_wrong(label, fn, fragment)


def _stub_raise(*args):
    raise NotImplementedError


def _stub_pass(*args):
    pass


def _stub_ellipsis(*args):
    """Write me."""
    ...


#: answers every checker must refuse helpfully, with a fragment of the message
BAD_ANSWERS = [
    (None, "got None"),
    (..., "not written yet"),
    (3, "got int"),
    ("l2_weights", "got str"),
    (torch.zeros(3), "got Tensor"),
    (_stub_raise, "not written yet"),
    (_stub_pass, "not written yet"),
    (_stub_ellipsis, "not written yet"),
    (lambda *args: None, "returned None"),
    (lambda *args: 1 / 0, "raised ZeroDivisionError"),
]


@pytest.mark.parametrize("label", sorted(REFERENCE))
@pytest.mark.parametrize("answer,fragment", BAD_ANSWERS)
def test_none_stubs_and_wrong_types_get_the_helpful_message(label, answer, fragment):
    check_bad_answer(label, answer, fragment)


def test_check_of_an_unknown_label_lists_the_known_ones():
    with pytest.raises(KeyError, match="ex-l2-weights"):
        exercises.check("ex-nope", None)


def test_a_label_is_registered_once():
    from attnbook.exercises.core import checker

    with pytest.raises(ValueError, match="two checkers"):
        checker("ex-l2-weights", what="x")(lambda a: None)
