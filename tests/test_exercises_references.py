"""A checker makes the student do the work: while their function runs, the package functions
that compute the answer refuse to run (however they were imported), and are back afterwards;
an answer computed in float32 is compared at float32's precision, and a failure never prints
two equal numbers."""

import numpy as np
import pytest
import test_exercises
import test_exercises_copyhead
import test_exercises_focus
import test_exercises_pde
import test_exercises_pde_figures
import torch

from attnbook import exercises, markov
from attnbook.exercises import core

#: each part's tested stand-in for a correct answer, built on the package's own functions
PACKAGE_ANSWERS = {
    **test_exercises.REFERENCE,
    **test_exercises_focus.REFERENCE,
    **test_exercises_copyhead.REFERENCE,
    **test_exercises_pde.REFERENCE,
    **test_exercises_pde_figures.REFERENCE,
}
WITH_REFERENCE = sorted(label for label, c in exercises.CHECKERS.items() if c.reference)


#: stand-ins that are the tests' own formulas (no package function returns this answer)
OWN_FORMULA = {"ex-af-blowup-direction"}


def test_most_checkers_name_their_reference():
    # the five without one compute their answer inline (no package function does it)
    assert len(WITH_REFERENCE) >= 33


@pytest.mark.parametrize("label", sorted(set(WITH_REFERENCE) - OWN_FORMULA))
def test_a_call_to_the_books_function_is_refused(label):
    answer = PACKAGE_ANSWERS[label]
    try:
        exercises.check(label, answer)
    except AssertionError as exc:
        assert "calls the book's attnbook." in str(
            exc
        ) and "write this one yourself" in str(exc), str(exc)
    else:
        pytest.fail(
            f"{label}: the package's own function passed as the student's answer"
        )
    with (
        core.references_allowed()
    ):  # the same answer passes where the package is allowed
        exercises.check(label, answer)


def test_a_name_imported_from_the_package_is_refused_too_and_restored():
    namespace = {
        "stationary": markov.stationary
    }  # `from attnbook.markov import stationary`
    exec("def my_stationary(P):\n    return stationary(P)\n", namespace)
    with pytest.raises(
        AssertionError, match="calls the book's attnbook.markov.stationary"
    ):
        exercises.check("ex-focus-stationary", namespace["my_stationary"])
    assert namespace["stationary"] is markov.stationary  # restored, and it runs
    P = torch.tensor([[0.5, 0.5], [0.2, 0.8]], dtype=torch.float64)
    assert torch.allclose(markov.stationary(P) @ P, markov.stationary(P))


def _velocity(x, A, V, dtype):
    x, A, V = (np.asarray(a, dtype=dtype) for a in (x, A, V))
    S = x @ A.T @ x.T
    E = np.exp(S - S.max(1, keepdims=True))
    return (E / E.sum(1, keepdims=True)) @ x @ V.T


def test_a_float32_answer_passes_at_float32_precision_and_says_so(capsys):
    exercises.check("ex-pde-velocity", lambda x, A, V: _velocity(x, A, V, np.float32))
    out = capsys.readouterr().out
    assert "float32" in out and "✔ ex-pde-velocity" in out
    # ... while a wrong formula in float32 still fails (V left out)
    with pytest.raises(AssertionError, match="wrong value"):
        exercises.check(
            "ex-pde-velocity",
            lambda x, A, V: _velocity(x, A, np.eye(len(V)), np.float32),
        )


def test_a_failure_prints_the_digits_that_differ():
    def almost(x, A, V):
        return _velocity(x, A, V, np.float64) * (1 + 3e-7)

    with pytest.raises(AssertionError) as exc:
        exercises.check("ex-pde-velocity", almost)
    line = next(ln for ln in str(exc.value).splitlines() if "got" in ln)
    got, expected = line.split("got ")[1].split(", expected ")
    assert got != expected.split(" (")[0], line


def test_no_blow_up_as_none_is_told_to_return_infinity():
    from attnbook.pde import closed_forms as cf

    def none_when_clustering(S0, A):
        with core.references_allowed():
            t = cf.identity_value_blowup_time(S0, A)
        return None if np.isinf(t) else t

    with core.references_allowed(), pytest.raises(AssertionError, match="math.inf"):
        exercises.check("ex-blowup-time", none_when_clustering)


def test_power_iteration_fails_the_stationary_law_on_a_period_two_chain():
    def power_iteration(P):
        pi = torch.full((P.shape[0],), 1.0 / P.shape[0], dtype=P.dtype)
        for _ in range(200):  # an even number of steps from the uniform law
            pi = pi @ P
        return pi

    with pytest.raises(AssertionError, match="period 2") as exc:
        exercises.check("ex-focus-stationary", power_iteration)
    assert "periodic chain" in str(exc.value)
