"""Checkers of the authors'-figures chapter (attnbook.exercises.pde_figures): the package's
reference answers pass, the usual mistakes fail with a message naming the input and a hint."""

import math

import numpy as np
import pytest

from attnbook import exercises, pde
from attnbook.exercises.core import references_allowed
from attnbook.linalg import psd_sqrt


@pytest.fixture(autouse=True)
def _package_answers_allowed():
    """REFERENCE and WRONG build answers from the package's own functions, which a checker
    refuses inside a student's function (tests/test_exercises_references.py)."""
    with references_allowed():
        yield


def _direction(S0, A):
    R = psd_sqrt(np.asarray(S0, float))
    w = np.linalg.eigh(R @ (A + A.T) @ R)[1][:, -1]
    return R @ w / np.linalg.norm(R @ w)


def _count(covs):
    d = covs.shape[-1]
    return int((pde.numerical_rank(covs, rtol=1e-2) > math.ceil(d / 2)).sum())


REFERENCE = {
    "ex-af-blowup-direction": _direction,
    "ex-af-count-above": _count,
}


def _w_only(S0, A):
    R = psd_sqrt(np.asarray(S0, float))
    return np.linalg.eigh(R @ (A + A.T) @ R)[1][:, -1]


WRONG = {
    "ex-af-blowup-direction": [
        (_w_only, "map it back"),
        (lambda S0, A: np.linalg.eigh(A + A.T)[1][:, -1], "top eigenvector of A + Aᵀ"),
        (lambda S0, A: 2 * _direction(S0, A), "unit vector"),
        (lambda S0, A: np.outer(_direction(S0, A), _direction(S0, A)), "shape"),
    ],
    "ex-af-count-above": [
        (
            lambda c: int((pde.numerical_rank(c, rtol=1e-2) > c.shape[-1] // 2).sum()),
            "rounds d/2 down",
        ),
        (
            lambda c: int(
                (
                    (np.linalg.eigvalsh(c) > 1e-2).sum(-1) > math.ceil(c.shape[-1] / 2)
                ).sum()
            ),
            "relative",
        ),
        (lambda c: pde.numerical_rank(c, rtol=1e-2), "wrong count"),
    ],
}


def test_registered():
    assert set(REFERENCE) <= set(exercises.CHECKERS)
    assert set(REFERENCE) == set(WRONG)


@pytest.mark.parametrize("label", sorted(REFERENCE))
def test_reference_passes(label, capsys):
    exercises.check(label, REFERENCE[label])
    assert capsys.readouterr().out.startswith(f"✔ {label}")


def test_each_usual_mistake_is_named():
    """Every wrong answer fails with the label, the input, a hint and its own fragment."""
    for label, rows in WRONG.items():
        for fn, fragment in rows:
            with pytest.raises(AssertionError) as err:
                exercises.check(label, fn)
            text = str(err.value)
            assert text.startswith(f"{label}: "), text
            assert fragment in text and "on input:" in text and "hint:" in text, text
