"""Part III's exercise checkers (attnbook.exercises.pde): every reference solution of book/pde
and the package's implementation pass; wrong answers, None, stubs and wrong types fail with a
message that names the exercise, the input and a hint. The machinery is test_exercises.py's."""

import math

import numpy as np
import pytest
import scipy.stats
import test_exercises as base
import torch

from attnbook import flows, linalg, pde
from attnbook.exercises.core import references_allowed
from attnbook.exercises.pde import _blowup_direction
from attnbook.pde import closed_forms as cf


@pytest.fixture(autouse=True)
def _package_answers_allowed():
    """REFERENCE and WRONG build answers from the package's own functions, which a checker
    refuses inside a student's function (tests/test_exercises_references.py)."""
    with references_allowed():
        yield


def _rk4(x, field, h):
    def rhs(_t, y):
        return torch.as_tensor(np.asarray(field(y.numpy()), dtype=float))

    return flows.odeint_rk4(rhs, torch.as_tensor(x), [0.0, h], step_size=h)[-1].numpy()


#: the package's tested implementation of each exercise's answer
REFERENCE = {
    "ex-pde-velocity": lambda x, A, V: pde.velocity(x, kind="softmax", A=A, V=V),
    "ex-pde-rk4-step": _rk4,
    "ex-mf-w2-1d": lambda x, y: pde.w2_particles(x[:, None], y[:, None]),
    "ex-mf-rate": lambda n, e: pde.fit_rate(n, e).slope,
    "ex-gauss-moment-rhs": cf.softmax_moment_rhs,
    "ex-gauss-bures": linalg.bures_wasserstein,
    "ex-blowup-time": cf.identity_value_blowup_time,
    "ex-blowup-direction": _blowup_direction,
    "ex-gf-energy": lambda x, A: pde.interaction_energy(x, A=A),
    "ex-gf-energy-rate": lambda x, v, A: pde.energy_rate(x, v, A=A),
}


def _softmax(S, axis=-1):
    E = np.exp(S - S.max(axis, keepdims=True))
    return E / E.sum(axis, keepdims=True)


def _naive_velocity(x, A, V):
    E = np.exp(x @ A.T @ x.T)
    return E / E.sum(1, keepdims=True) @ x @ V.T


def _rk4_token_by_token(x, f, h):
    """RK4 on each token in turn, the others already moved: a wrong step for interacting tokens."""
    y = x.copy()
    for i in range(len(x)):

        def f_i(row, i=i):
            z = y.copy()
            z[i] = row
            return f(z)[i]

        k1 = f_i(y[i])
        k2 = f_i(y[i] + h / 2 * k1)
        k3 = f_i(y[i] + h / 2 * k2)
        k4 = f_i(y[i] + h * k3)
        y[i] = y[i] + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y


def _euler(x, field, h):
    return x + h * field(x)


def _rk4_equal_weights(x, field, h):
    k1 = field(x)
    k2 = field(x + h / 2 * k1)
    k3 = field(x + h / 2 * k2)
    return x + h * (k1 + k2 + k3 + field(x + h * k3)) / 4


def _bures_commuting(m1, S1, m2, S2):
    cross = linalg.psd_sqrt(S1) @ linalg.psd_sqrt(S2)
    return math.sqrt(max(np.sum((m1 - m2) ** 2) + np.trace(S1 + S2 - 2 * cross), 0))


def _bures_unclipped(m1, S1, m2, S2):
    R = linalg.psd_sqrt(S1)
    w2sq = np.sum((m1 - m2) ** 2) + np.trace(S1 + S2 - 2 * linalg.psd_sqrt(R @ S2 @ R))
    return math.sqrt(w2sq) if w2sq >= 0 else math.nan


def _blowup_time_no_inf(S0, A):
    R = linalg.psd_sqrt(S0)
    return 1 / np.linalg.eigvalsh(R @ (A + A.T) @ R).max()


def _energy_rate_half(x, v, A):
    n = len(x)
    K = np.exp(x @ A.T @ x.T)
    return float(((K @ x) @ A / (2 * n * n) * v).sum())


#: label → (a wrong answer, a fragment its message must contain)
WRONG = {
    "ex-pde-velocity": [
        (lambda x, A, V: _softmax(x @ A.T @ x.T, 0) @ x @ V.T, "not each column"),
        (lambda x, A, V: _softmax(x @ A @ x.T) @ x @ V.T, "on which side A multiplies"),
        (lambda x, A, V: _softmax(x @ A.T @ x.T) @ x, "value matrix V"),
        (_naive_velocity, "overflows"),
    ],
    "ex-pde-rk4-step": [
        (_euler, "Euler"),
        (_rk4_equal_weights, "not weighted equally"),
        (lambda x, f, h: x + h * f(x + h / 2 * f(x)), "midpoint"),
        (_rk4_token_by_token, "one at a time"),
    ],
    "ex-mf-w2-1d": [
        (lambda x, y: math.sqrt(np.mean((x - y) ** 2)), "sort both"),
        (lambda x, y: np.mean((np.sort(x) - np.sort(y)) ** 2), "square root"),
        (lambda x, y: math.sqrt(np.sum((np.sort(x) - np.sort(y)) ** 2)), "mass 1/n"),
        (lambda x, y: np.sort(x) - np.sort(y), "one number"),
        (lambda x, y: scipy.stats.wasserstein_distance(x, y), "that is W₁"),
    ],
    "ex-mf-rate": [
        (lambda n, e: np.polyfit(np.log(e), np.log(n), 1)[0], "swapped"),
        (lambda n, e: np.polyfit(n, e, 1)[0], "log–log"),
        (lambda n, e: math.log(e[-1] / e[0]) / math.log(n[-1] / n[0]), "end points"),
        (lambda n, e: -np.polyfit(np.log(n), np.log(e), 1)[0], "the sign"),
    ],
    "ex-gauss-moment-rhs": [
        (lambda a, S, A, V: (V @ (a + S @ A @ a), V @ S @ A @ S), "symmetric"),
        (
            lambda a, S, A, V: (V @ S @ A @ a, cf.softmax_moment_rhs(a, S, A, V)[1]),
            "Vα",
        ),
        (lambda a, S, A, V: V @ (a + S @ A @ a), "a pair"),
    ],
    "ex-gauss-bures": [
        (lambda *g: float(linalg.bures_wasserstein(*g)) ** 2, "that is W₂²"),
        (_bures_commuting, "need not commute"),
        (_bures_unclipped, "clip"),
    ],
    "ex-blowup-time": [
        (lambda S0, A: 2 * cf.identity_value_blowup_time(S0, A), "A + Aᵀ"),
        (_blowup_time_no_inf, "math.inf"),
        (
            lambda S0, A: (
                1 / (np.linalg.eigvalsh(A + A.T).max() * np.linalg.eigvalsh(S0).max())
            ),
            "only a bound",
        ),
    ],
    "ex-blowup-direction": [
        (
            lambda S0, A: np.outer(*[np.linalg.eigh(A + A.T)[1][:, -1]] * 2),
            "Σ₀ matters",
        ),
        (lambda S0, A: np.outer(*[np.linalg.eigh(S0)[1][:, -1]] * 2), "ignores A"),
        (lambda S0, A: 3.0 * _blowup_direction(S0, A), "trace"),
        (
            lambda S0, A: np.linalg.eigh(_blowup_direction(S0, A))[1][:, -1],
            "not the vector",
        ),
    ],
    "ex-gf-energy": [
        (lambda x, A: 2 * pde.interaction_energy(x, A=A), "factor ½"),
        (lambda x, A: len(x) * pde.interaction_energy(x, A=A), "n²"),
        (lambda x, A: np.exp(x @ A.T @ x.T).sum() / 2 / len(x) ** 2 - 1, "wrong value"),
    ],
    "ex-gf-energy-rate": [
        (_energy_rate_half, "add both terms"),
        (lambda x, v, A: -pde.energy_rate(x, v, A=A), "the sign"),
    ],
}

SOLUTIONS = base.solution_cells(set(REFERENCE))


def test_every_pde_checker_has_a_reference_wrong_answers_and_a_solution():
    assert set(REFERENCE) == base.part_labels("pde") == set(WRONG)
    assert {label for label, _ in SOLUTIONS} == set(REFERENCE)
    assert all(len(rows) >= 2 for rows in WRONG.values())


@pytest.mark.parametrize("label", sorted(REFERENCE))
def test_reference_implementation_passes(label, capsys):
    base.check_reference(label, REFERENCE[label], capsys)


@pytest.mark.parametrize("label,source", SOLUTIONS, ids=[s[0] for s in SOLUTIONS])
def test_reference_solution_of_the_book_passes_and_ends_with_its_checker(
    label, source, capsys
):
    base.check_solution(label, source, capsys)


@pytest.mark.parametrize("label,source", SOLUTIONS, ids=[s[0] for s in SOLUTIONS])
def test_the_stub_of_the_student_notebook_fails_helpfully(label, source):
    base.check_stub(label, source)


@pytest.mark.parametrize("label,fn,fragment", base.wrong_cases(WRONG))
def test_wrong_answers_fail_with_what_where_and_a_hint(label, fn, fragment):
    base.check_wrong(label, fn, fragment)


@pytest.mark.parametrize("label", sorted(REFERENCE))
@pytest.mark.parametrize("answer,fragment", base.BAD_ANSWERS)
def test_none_stubs_and_wrong_types_get_the_helpful_message(label, answer, fragment):
    base.check_bad_answer(label, answer, fragment)


def test_blowup_direction_is_the_limit_of_the_closed_form_flow():
    S0 = np.array([[1.0, 0.3], [0.3, 0.5]])
    A = np.array([[1.0, 0.5], [-0.2, 0.8]])
    T = cf.identity_value_blowup_time(S0, A)
    near = cf.identity_value_covariance([T * (1 - 1e-7)], S0, A)[0]
    D = _blowup_direction(S0, A)
    assert np.allclose(near / np.trace(near), D, atol=1e-5)
    assert math.isclose(np.trace(D), 1.0) and np.linalg.matrix_rank(D) == 1
    with pytest.raises(ValueError, match="no blow-up"):
        _blowup_direction(S0, -np.eye(2))
