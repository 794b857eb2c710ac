"""A checker makes the student do the work: while their function runs, the package functions
that compute the answer refuse to run (however they were imported), and are back afterwards;
an answer computed in float32 is compared at float32's precision, and a failure never prints
two equal numbers."""

import math

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
OWN_FORMULA = {"ex-af-blowup-direction", "ex-focus-grad-m-origin", "ex-focus-zipf"}


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


def _to_float32(value):
    """``value`` with every float in it (tensors, arrays, numbers, in tuples) in float32."""
    if isinstance(value, torch.Tensor):
        return value.float()
    if isinstance(value, np.ndarray):
        return value.astype(np.float32)
    if isinstance(value, (tuple, list)):
        return type(value)(_to_float32(v) for v in value)
    return np.float32(value)


def _softmax_order32(g, L):
    Z = g.float().exp() + L - 1
    return L / Z, 1 - L / Z  # a_G = (e^g − 1) / Z


def _moments32(mean, cov, A, V):
    m, S, A, V = (z.astype(np.float32) for z in (mean, cov, A, V))
    return V @ m + V @ S @ A @ m, V @ S @ A @ S + S @ A.T @ S @ V.T


def _order_params32(attn):  # least squares on J/L and S, solved in float32
    A = attn.float()
    L = A.shape[-1]
    J = torch.ones(L, L) / L
    S = torch.roll(torch.eye(L), -1, dims=-1)  # S[l, l - 1] = 1, wrap-around
    G = torch.tensor([[(J * J).sum(), (J * S).sum()], [(S * J).sum(), (S * S).sum()]])
    r = torch.stack([(A * J).sum((-1, -2)), (A * S).sum((-1, -2))], -1)
    c = torch.linalg.solve(G, r.unsqueeze(-1)).squeeze(-1)
    return c[..., 0], c[..., 1]


def _average_entropies32(w, pi):
    w = w.float()
    H = -torch.special.xlogy(w, w).sum(-1)
    return H.mean(), pi.float() @ H  # a tuple of 0-d float32 tensors


def _interval32(values):
    import scipy.stats

    v = values.numpy().astype(np.float32)
    half = scipy.stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return np.float32(v.mean() - half), np.float32(v.mean() + half)


#: right answers computed in float32 and returned as a pair (the student pass's)
FLOAT32_PAIRS = {
    "ex-softmax-order": _softmax_order32,
    "ex-gauss-moment-rhs": _moments32,
    "ex-bayes-order-parameters": _order_params32,
    "ex-focus-average-entropies": _average_entropies32,
    "ex-howto-interval": _interval32,
}


@pytest.mark.parametrize("label", sorted(FLOAT32_PAIRS))
def test_a_float32_pair_passes_at_float32_precision_and_says_so(label, capsys):
    exercises.check(label, FLOAT32_PAIRS[label])
    out = capsys.readouterr().out
    assert "float32" in out and f"✔ {label}" in out, out


def test_the_precision_of_a_pair_is_its_coarsest_element():
    f32 = float(np.finfo(np.float32).eps)
    assert core.precision_of((torch.ones(2, dtype=torch.float64), torch.ones(2))) == f32
    assert core.precision_of([np.float64(1.0), {"a": np.ones(2, np.float32)}]) == f32
    assert core.precision_of((1.0, 2.0)) == float(np.finfo(np.float64).eps)


def test_a_float32_pair_with_a_real_mistake_still_fails():
    import scipy.stats

    def normal_quantile32(values):  # 1.96 in place of Student's t quantile
        v = values.numpy().astype(np.float32)
        half = np.float32(1.959964) * v.std(ddof=1) / np.sqrt(np.float32(len(v)))
        return v.mean() - half, v.mean() + half

    with pytest.raises(AssertionError) as exc:
        exercises.check("ex-howto-interval", normal_quantile32)
    assert "normal quantile" in str(exc.value) and "centred" not in str(exc.value)

    def ddof0_32(values):
        v = values.numpy().astype(np.float32)
        half = scipy.stats.t.ppf(0.975, len(v) - 1) * v.std() / np.sqrt(len(v))
        return np.float32(v.mean() - half), np.float32(v.mean() + half)

    with pytest.raises(AssertionError, match="ddof"):
        exercises.check("ex-howto-interval", ddof0_32)

    def whole_weight32(g, L):  # a_G as the whole weight of the previous token
        Z = g.float().exp() + L - 1
        return L / Z, g.float().exp() / Z

    with pytest.raises(AssertionError, match="whole weight"):
        exercises.check("ex-softmax-order", whole_weight32)


def _sym_rhs(m, S, A, V):
    from attnbook.pde.symbolic import moment_rhs

    a, Sd = moment_rhs("softmax", m, S, A=A, V=V)
    return np.asarray(a).reshape(-1), np.asarray(Sd)


def _w2_batch(x, y):
    from attnbook.pde.meanfield import w2_particles_batch

    return float(w2_particles_batch(x[None, :, None], y[None, :, None])[0])


def _population_gradient_origin(P):
    from attnbook.focus.population import population_gradient

    d = P.shape[0]
    zeros = torch.zeros(d, d, dtype=torch.float64)
    return population_gradient(
        torch.eye(d, dtype=torch.float64), zeros, zeros, zeros, P
    ).W1


def _zipf_law(d, s):
    from attnbook.experiments.focus import zipf_law

    return zipf_law(d, s)


def _average_entropies(w, pi):
    from attnbook.focus.metrics import attention_entropy

    H = torch.as_tensor(attention_entropy(w))
    return H.mean(), torch.as_tensor(pi, dtype=H.dtype) @ H


def _position_kl(w, pi, s):
    from attnbook.focus.metrics import attention_kl

    return math.log(s) - torch.as_tensor(attention_kl(w, pi))


#: one-line answers through another package function than the checker's first reference
SHORTCUTS = {
    "ex-row-entropy": ("attnbook.markov.entropy", lambda P: markov.entropy(P)),
    "ex-focus-grad-m-origin": (
        "attnbook.focus.population.population_gradient",
        _population_gradient_origin,
    ),
    "ex-focus-zipf": ("attnbook.experiments.focus.zipf_law", _zipf_law),
    "ex-gauss-moment-rhs": ("attnbook.pde.symbolic.moment_rhs", _sym_rhs),
    "ex-mf-w2-1d": ("attnbook.pde.meanfield.w2_particles_batch", _w2_batch),
    "ex-focus-average-entropies": (
        "attnbook.focus.metrics.attention_entropy",
        _average_entropies,
    ),
    "ex-focus-position-entropy": ("attnbook.focus.metrics.attention_kl", _position_kl),
}


@pytest.mark.parametrize("label", sorted(SHORTCUTS))
def test_a_shortcut_through_another_package_function_is_refused(label):
    name, answer = SHORTCUTS[label]
    assert name in exercises.CHECKERS[label].reference
    with pytest.raises(AssertionError, match=f"calls the book's {name}"):
        exercises.check(label, answer)
    with core.references_allowed():  # the shortcut computes the right answer
        exercises.check(label, answer)
