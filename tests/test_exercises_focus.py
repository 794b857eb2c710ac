"""Part I's exercise checkers (attnbook.exercises.focus): the reference solutions of
``book/focus`` and the package's implementations pass; the usual mistakes fail with a message
that names them; None, stubs and wrong types fail helpfully. The machinery (parsing the
solutions from the chapters, the stubs of the student notebooks) is that of
``tests/test_exercises.py``."""

import math
import re

import numpy as np
import pytest
import torch
from test_exercises import (
    ROOT,
    _exercise_labels,
    _namespace,
    part_labels,
    solution_cells,
)

from attnbook import exercises, markov
from attnbook.claims import reads_ledger
from attnbook.exercises.core import references_allowed
from attnbook.focus import metrics, theory
from attnbook.focus.population import attention_mixture
from tools import colab


@pytest.fixture(autouse=True)
def _package_answers_allowed():
    """REFERENCE and WRONG build answers from the package's own functions, which a checker
    refuses inside a student's function (tests/test_exercises_references.py)."""
    with references_allowed():
        yield


FOCUS = ROOT / "book" / "focus"
SOLUTIONS = [
    (label, src) for label, src in solution_cells() if label in part_labels("focus")
]


def _zipf(d, s):
    k = torch.arange(1, d + 1, dtype=torch.float64)
    return k**-s / (k**-s).sum()


def _b(pi):
    return pi - 1 / len(pi)


def _entropies(w, pi):
    H = torch.as_tensor(metrics.attention_entropy(w))
    return H.mean(), pi @ H


#: the package's tested implementation of each exercise's answer
REFERENCE = {
    "ex-focus-stationary": markov.stationary,
    "ex-focus-entropy-rate": markov.entropy_rate,
    "ex-focus-grad-m-origin": lambda P: torch.outer(
        markov.stationary(P), 1 / P.shape[-1] - markov.stationary(P)
    ),
    "ex-focus-condensation-rate": theory.condensation_rate,
    "ex-focus-type-attention": attention_mixture,
    "ex-focus-rate-hand": theory.attention_growth_rate,
    "ex-focus-average-entropies": _entropies,
    "ex-focus-position-entropy": metrics.position_entropy,
    "ex-focus-perturbed-pi": markov.perturbed_stationary,
    "ex-focus-stable-rank": metrics.stable_rank,
    "ex-focus-zipf": _zipf,
    "ex-focus-bigram": lambda tokens, d: markov.estimate_chain(tokens, d)[0],
}


def _power_iteration(P):
    pi = torch.zeros(P.shape[0], dtype=P.dtype)
    pi[0] = 1.0  # from token 0: on a periodic chain the iteration cycles for ever
    for _ in range(200):
        pi = pi @ P
    return pi


def _xlogy_rows(P):
    return -torch.special.xlogy(P, P).sum(-1)


def _flat_bigram(tokens, d):
    return markov.estimate_chain(tokens.reshape(-1), d)[0]


def _bigram_nan(tokens, d):
    pairs = (tokens[..., :-1] * d + tokens[..., 1:]).reshape(-1)
    counts = torch.bincount(pairs, minlength=d * d).reshape(d, d).double()
    return counts / counts.sum(-1, keepdim=True)


def _kl(w, pi):
    return (torch.special.xlogy(w, w) - w * torch.log(pi)).sum(-1)


def _growth_rate_log_pi(pi, rho):
    lp = torch.log(pi)
    s2 = (pi**2).sum()
    S3 = (pi**3).sum() - s2**2
    T = (pi**2 * (lp - (pi * lp).sum())).sum()
    return rho * lp.norm() * S3 * T / s2**2.5


#: label → [(a wrong answer, a fragment its message must contain)]
WRONG = {
    "ex-focus-stationary": [
        (
            lambda P: torch.ones(P.shape[0], dtype=P.dtype) / P.shape[0],
            "right eigenvector",
        ),
        (lambda P: 2 * markov.stationary(P), "normalise"),
        (_power_iteration, "periodic"),
        (lambda P: markov.stationary(P)[:-1], "wrong shape"),
    ],
    "ex-focus-entropy-rate": [
        (lambda P: markov.entropy(markov.stationary(P)), "H(π)"),
        (lambda P: _xlogy_rows(P).mean(), "stationary weights"),
        (lambda P: -(markov.stationary(P) @ (P * P.log()).sum(-1)), "0·log 0"),
        (lambda P: markov.entropy_rate(P) / math.log(2), "natural log"),
        (lambda P: _xlogy_rows(P), "one number"),
    ],
    "ex-focus-grad-m-origin": [
        (lambda P: -REFERENCE["ex-focus-grad-m-origin"](P), "the sign"),
        (lambda P: REFERENCE["ex-focus-grad-m-origin"](P).T, "transpose of ∂L/∂M"),
        (
            lambda P: torch.outer(
                torch.full((P.shape[0],), 1 / P.shape[0], dtype=P.dtype),
                1 / P.shape[0] - markov.stationary(P),
            ),
            "not uniformly",
        ),
    ],
    "ex-focus-condensation-rate": [
        (lambda pi: (pi**2).sum(), "centre π first"),
        (lambda pi: (pi - 1 / len(pi)).norm(), "a factor is missing"),
        (
            lambda pi: pi.norm() * _b(pi).norm() ** 2 / _b(pi).norm(),
            "do not divide by ‖b‖",
        ),
        (
            lambda pi: (pi**2).sum() * ((pi - 1 / len(pi)) ** 2).sum(),
            "squared where it should not be",
        ),
    ],
    "ex-focus-type-attention": [
        (lambda Phi, pi: torch.softmax(Phi, -1), "ignores the frequencies"),
        (lambda Phi, pi: attention_mixture(Phi, pi).T, "rows are queries"),
        (
            lambda Phi, pi: pi * Phi.exp() / (pi * Phi.exp()).sum(-1, keepdim=True),
            "overflows",
        ),
        (lambda Phi, pi: pi * Phi.exp(), "sum to 1"),
        (
            lambda Phi, pi: torch.softmax(Phi + pi.log()[None], 0),
            "normalised over the wrong axis",
        ),
    ],
    "ex-focus-rate-hand": [
        (lambda pi, rho: 2 * theory.attention_growth_rate(pi, 0.5), "multiply by rho"),
        (_growth_rate_log_pi, "centre the logits"),
        (
            lambda pi, rho: theory.attention_growth_rate(pi, rho) * (pi**2).sum(),
            "power of ‖π‖ in the denominator",
        ),
    ],
    "ex-focus-average-entropies": [
        (lambda w, pi: _entropies(w, pi)[::-1], "the order"),
        (lambda w, pi: (_entropies(w, pi)[0], markov.entropy(pi @ w)), "averaged law"),
        (
            lambda w, pi: (-(w * w.log()).sum(-1).mean(), pi @ -(w * w.log()).sum(-1)),
            "0·log 0",
        ),
        (lambda w, pi: _entropies(w, pi)[0], "two numbers"),
    ],
    "ex-focus-position-entropy": [
        (lambda w, pi, s: torch.as_tensor(metrics.attention_entropy(w)), "type-level"),
        (lambda w, pi, s: math.log(s) + _kl(w, pi), "the sign"),
        (lambda w, pi, s: math.log(s) - _kl(pi.expand_as(w), w), "wrong way round"),
        (lambda w, pi, s: math.log(s) - (w * (w / pi).log()).sum(-1), "0·log 0"),
        (lambda w, pi, s: (math.log(s) - _kl(w, pi)) / math.log(2), "in nats"),
    ],
    "ex-focus-perturbed-pi": [
        (
            lambda d, top, delta: markov.perturbed_stationary(d, top, 0.0) + delta,
            "sum to zero",
        ),
        (
            lambda d, top, delta: torch.cat(
                [
                    torch.tensor([top], dtype=torch.float64),
                    markov.perturbed_stationary(d, top, delta)[1:].flip(0),
                ]
            ),
            "+1 down to −1",
        ),
    ],
    "ex-focus-stable-rank": [
        (lambda A: (s := torch.linalg.svdvals(A)).sum() / s[0], "square the singular"),
        (lambda A: math.sqrt(metrics.stable_rank(A)), "SQUARED norms"),
        (lambda A: torch.linalg.svdvals(A), "one number"),
    ],
    "ex-focus-zipf": [
        (lambda d, s: torch.arange(d, dtype=torch.float64) ** -s, "ranks start at 1"),
        (lambda d, s: torch.arange(1, d + 1, dtype=torch.float64) ** -s, "normalise"),
        (lambda d, s: _zipf(d, -s), "sign of the exponent"),
    ],
    "ex-focus-bigram": [
        (_flat_bigram, "within each sequence"),
        (_bigram_nan, "never occurs"),
        (lambda tokens, d: markov.estimate_chain(tokens, d)[0].T, "normalise each row"),
    ],
}


def test_every_part_i_checker_has_a_reference_wrong_answers_and_a_solution():
    labels = _exercise_labels()
    assert set(REFERENCE) == set(WRONG) == part_labels("focus")
    assert all(labels[label].parent == FOCUS for label in REFERENCE)
    assert sorted(label for label, _ in SOLUTIONS) == sorted(REFERENCE)


def test_each_part_i_chapter_has_three_exercises_two_of_them_checked():
    for md in sorted(FOCUS.glob("*.md")):
        if md.stem == "index" or reads_ledger(f"focus/{md.stem}"):
            continue  # the part's index and its findings page hold no exercises
        text = md.read_text(encoding="utf-8")
        titles = re.findall(r"```\{exercise\} ([^\n]+)\n", text)
        checked = re.findall(r'exercises\.check\("(ex-[^"]+)"', text)
        assert len(titles) >= 3 and len(set(checked)) >= 2, md.name
        assert all(re.search(r"\(★{1,3}, \d+ min\)$", t) for t in titles), titles


@pytest.mark.parametrize("label", sorted(REFERENCE))
def test_reference_implementation_passes(label, capsys):
    exercises.check(label, REFERENCE[label])
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"✔ {label}")


@pytest.mark.parametrize("label,source", SOLUTIONS, ids=[s[0] for s in SOLUTIONS])
def test_reference_solution_of_the_chapter_passes(label, source, capsys):
    assert source.strip().splitlines()[-1].startswith(f'exercises.check("{label}", ')
    exec(compile(source, label, "exec"), _namespace())
    assert capsys.readouterr().out.startswith(f"✔ {label}")


@pytest.mark.parametrize("label,source", SOLUTIONS, ids=[s[0] for s in SOLUTIONS])
def test_student_stub_fails_helpfully(label, source):
    stub = colab.stub_source(source)
    assert colab.BEGIN_SOLUTION not in stub
    with pytest.raises(AssertionError, match=rf"^{label}: .*not written yet"):
        exec(compile(stub, label, "exec"), _namespace())


@pytest.mark.parametrize(
    "label,fn,fragment",
    [(label, fn, frag) for label, rows in WRONG.items() for fn, frag in rows],
)
def test_wrong_answers_name_the_mistake(label, fn, fragment):
    with pytest.raises(AssertionError) as err:
        exercises.check(label, fn)
    msg = str(err.value)
    assert msg.startswith(f"{label}: ") and fragment in msg, msg
    assert "on input:" in msg and "hint:" in msg, msg


def _stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("label", sorted(REFERENCE))
@pytest.mark.parametrize(
    "answer,fragment",
    [
        (None, "got None"),
        (_stub, "not written yet"),
        ("stationary", "got str"),
        (np.zeros(3), "got ndarray"),
        (lambda *args: "a string", "expected"),
    ],
)
def test_none_stubs_and_wrong_types(label, answer, fragment):
    with pytest.raises(AssertionError) as err:
        exercises.check(label, answer)
    assert fragment in str(err.value) and "hint:" in str(err.value), str(err.value)
