"""Part II's exercise checkers (attnbook.exercises.copyhead): every reference solution of the
copy-head chapters and the package's reference implementation pass; wrong answers (the usual
mistakes), None, stubs and wrong types fail with a message naming the exercise and a hint.

The machinery (parsing the chapters' solution cells, the stubs) is that of
``tests/test_exercises.py``, imported from it."""

import math
import re

import numpy as np
import pytest
import torch
from test_exercises import (
    ROOT,
    _namespace,
    _stub_raise,
    part_labels,
    solution_cells,
)
from test_exercises import (
    test_wrong_answers_fail_with_what_where_and_a_hint as _fails_with_what_where_and_a_hint,
)

from attnbook import exercises, sgld, train
from attnbook.claims import reads_ledger
from attnbook.copyhead import action as A
from attnbook.copyhead import order_parameters
from attnbook.exercises.copyhead import (
    _data_action_tau,
    _group_best,
    _head_loss_reference,
    _plain_rhat,
    _rhat_ddof0,
)
from attnbook.exercises.core import references_allowed


@pytest.fixture(autouse=True)
def _package_answers_allowed():
    """REFERENCE and WRONG build answers from the package's own functions, which a checker
    refuses inside a student's function (tests/test_exercises_references.py)."""
    with references_allowed():
        yield


CHAPTERS = sorted((ROOT / "book" / "copyhead").glob("*.md"))


def _copy_data(tokens, vocab_size):
    X = torch.nn.functional.one_hot(tokens, vocab_size).to(torch.float64)
    return X, torch.roll(X, 1, dims=-2)


def _data_action(qF, qS, m1, m2, P, V):
    return A.data_action(qF, qS, m1, m2, n_sequences=P, vocab_size=V)


#: the package's tested implementation of each exercise's answer
REFERENCE = {
    "ex-copy-data": _copy_data,
    "ex-copy-pooling-loss": _head_loss_reference,
    "ex-bayes-order-parameters": order_parameters,
    "ex-bayes-data-action": _data_action,
    "ex-linear-action": lambda m, c, P, L, V: A.linear_action(
        m, c, n_sequences=P, seq_len=L, vocab_size=V
    ),
    "ex-linear-onset-p": lambda L, V: A.linear_onset_p(seq_len=L, vocab_size=V),
    "ex-softmax-order": A.softmax_order_parameters,
    "ex-softmax-action": lambda g, P, L, V: A.softmax_action(
        g, n_sequences=P, seq_len=L, vocab_size=V
    ),
    "ex-tve-split-rhat": lambda x: float(sgld.split_rhat(x)),
    "ex-tve-reached-minimum": lambda f, g, r: (
        train.reached_minimum(f, g, rtol=r, atol=0.0).keep
    ),
}


def _next_token(tokens, V):
    X = torch.nn.functional.one_hot(tokens, V).double()
    return X, torch.roll(X, -1, dims=1)


def _no_wrap(tokens, V):
    X = torch.nn.functional.one_hot(tokens, V).double()
    Y = torch.zeros_like(X)
    Y[:, 1:] = X[:, :-1]
    return X, Y


def _naive_projection(Am):
    L = Am.shape[-1]
    idx = torch.arange(L)
    return Am.sum((-1, -2)) / L, Am[..., idx, (idx - 1) % L].sum(-1) / L


def _transposed_shift(Am):
    return order_parameters(Am.transpose(-1, -2))


def _no_prior(m, c, P, L, V):
    S = A.linear_action(m, c, n_sequences=P, seq_len=L, vocab_size=V)
    return S - m**2 / (2 * (1 + 1 / L**2)) - L**2 * (L - 1) * c**2 / 2


def _unit_sigma_m(m, c, P, L, V):
    S = A.linear_action(m, c, n_sequences=P, seq_len=L, vocab_size=V)
    return S - m**2 / (2 * (1 + 1 / L**2)) + m**2 / 2


def _onset_formula(L, V, *, sign=1, sigma_m2=None):
    a = (V - 1) / L + 1
    b = ((V - 1) / L**2 + 1) / V**2
    s2 = 1 + 1 / L**2 if sigma_m2 is None else sigma_m2
    return (a + sign * math.sqrt(a * a + 4 * b / s2)) / (2 * b)


def _prev_weight(g, L):
    eg = torch.exp(g)
    return L / (eg + L - 1), eg / (eg + L - 1)


def _softmax_no_prior(g, P, L, V):
    return A.softmax_action(g, n_sequences=P, seq_len=L, vocab_size=V) - (
        (L - 1) * g**2 / 2
    )


def _softmax_prior_L(g, P, L, V):
    return _softmax_no_prior(g, P, L, V) + L * g**2 / 2


def _global_best(final, groups, rtol):
    best = np.nanmin(final)
    return final <= best + rtol * abs(best)


def _strict_less(final, groups, rtol):
    """A strict comparison: drops a run exactly at the tolerance, and a best of 0."""
    best = np.array([np.nanmin(final[groups == g]) for g in groups])
    return final - best < rtol * np.abs(best)


def _no_abs(final, groups, rtol):
    return final <= _group_best(final, groups) * (1 + rtol)


def _head_loss_parts(c1, cG, L):
    """Σ a_m, Σ a_m² and the weight on the target of the head A = c1 J/L + cG S."""
    return c1 + cG, c1**2 / L + 2 * c1 * cG / L + cG**2, c1 / L + cG


def _head_loss_orthogonal(c1, cG, L, V):  # tokens at different positions never agree
    s, sq, a = _head_loss_parts(c1, cG, L)
    return sq - 2 * a + 1


def _head_loss_target_apart(c1, cG, L, V):  # the target treated as independent of h
    s, sq, a = _head_loss_parts(c1, cG, L)
    return (1 - 1 / V) * sq + s**2 / V - 2 * s / V + 1


def _head_loss_target_cG(c1, cG, L, V):  # the target's weight without its pooled share
    s, sq, a = _head_loss_parts(c1, cG, L)
    return (1 - 1 / V) * (sq - 2 * cG + 1) + (s - 1) ** 2 / V


def _head_loss_no_cross(c1, cG, L, V):  # Σ a_m² without the cross term 2 c1 cG / L
    s, sq, a = _head_loss_parts(c1, cG, L)
    return (1 - 1 / V) * (c1**2 / L + cG**2 - 2 * a + 1) + (s - 1) ** 2 / V


#: label → [(a wrong answer, a fragment its message must contain)]
WRONG = {
    "ex-copy-data": [
        (_next_token, "NEXT token"),
        (_no_wrap, "wrap around"),
        (lambda t, V: _copy_data(t, int(t.max()) + 1), "num_classes"),
        (lambda t, V: (_copy_data(t, V)[0],) * 2, "Y equals X"),
        (lambda t, V: _copy_data(t, V)[0], "expected a pair"),
    ],
    "ex-copy-pooling-loss": [
        (lambda c1, cG, L, V: (1 - 1 / V) * (1 - 1 / L), "depends on c1 and c_G"),
        (_head_loss_orthogonal, "probability 1/V"),
        (_head_loss_target_apart, "one of the averaged tokens"),
        (_head_loss_target_cG, "not c_G alone"),
        (_head_loss_no_cross, "cross term"),
        (lambda c1, cG, L, V: [1.0, 2.0], "expected one number"),
    ],
    "ex-bayes-order-parameters": [
        (_naive_projection, "not orthogonal"),
        (_transposed_shift, "BELOW the diagonal"),
        (lambda Am: order_parameters(Am)[1], "expected a pair"),
    ],
    "ex-bayes-data-action": [
        (lambda *a: _data_action(*a) - a[4] / 2, "the constant P/(2κ)"),
        (lambda *a: _data_action_tau(a[:4], a[4], a[5], tau=a[4]), "τ is off"),
        (lambda *a: _data_action(*a).sum(), "wrong shape"),
    ],
    "ex-linear-action": [
        (_no_prior, "add the prior"),
        (_unit_sigma_m, "σ_m² is not 1"),
    ],
    "ex-linear-onset-p": [
        (lambda L, V: _onset_formula(L, V, sign=-1), "negative root"),
        (lambda L, V: _onset_formula(L, V, sigma_m2=1.0), "not 1"),
        (lambda L, V: float(V**2), "large-L scaling"),
    ],
    "ex-softmax-order": [
        (_prev_weight, "weight on the previous token"),
        (
            lambda g, L: (
                1 / (torch.exp(g) + L - 1),
                A.softmax_order_parameters(g, L)[1],
            ),
            "a_1 is off by a factor L",
        ),
        (lambda g, L: A.softmax_order_parameters(g, L)[0], "expected a pair"),
    ],
    "ex-softmax-action": [
        (_softmax_no_prior, "add the prior"),
        (_softmax_prior_L, "L − 1 free entries"),
    ],
    "ex-tve-split-rhat": [
        (_plain_rhat, "split each chain"),
        (_rhat_ddof0, "unbiased variances"),
        (lambda x: x.var(0), "expected one number"),
    ],
    "ex-tve-reached-minimum": [
        (_global_best, "ITS group"),
        (_no_abs, "use |best|"),
        (_strict_less, "exactly at the tolerance"),
        (lambda f, g, r: np.ones(3, dtype=bool), "wrong shape"),
    ],
}

COPYHEAD_SOLUTIONS = [(lab, src) for lab, src in solution_cells(set(REFERENCE))]


def test_registry_matches_the_chapters():
    assert set(REFERENCE) == part_labels("copyhead") == set(WRONG)
    assert sorted({lab for lab, _ in COPYHEAD_SOLUTIONS}) == sorted(REFERENCE)


@pytest.mark.parametrize(
    "md",
    [
        c
        for c in CHAPTERS
        if c.stem != "index" and not reads_ledger(f"copyhead/{c.stem}")
    ],
    ids=lambda p: p.stem,
)
def test_each_chapter_has_three_exercises_two_checked_with_difficulty_and_time(md):
    text = md.read_text(encoding="utf-8")
    titles = re.findall(r"```\{exercise\} ([^\n]*)\n:label: (\S+)", text)
    assert len(titles) >= 3, md.name
    for title, label in titles:
        assert re.search(r"\((★{1,3}), \d+ min\)$", title), (label, title)
    checked = [lab for _, lab in titles if lab in exercises.CHECKERS]
    assert len(checked) >= 2, (md.name, checked)
    for lab in checked:
        assert f'exercises.check("{lab}",' in text


@pytest.mark.parametrize("label", sorted(REFERENCE))
def test_reference_implementation_passes(label, capsys):
    exercises.check(label, REFERENCE[label])
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"✔ {label}")


@pytest.mark.parametrize(
    "label,source", COPYHEAD_SOLUTIONS, ids=[s[0] for s in COPYHEAD_SOLUTIONS]
)
def test_reference_solution_of_the_chapter_passes(label, source, capsys):
    exec(compile(source, label, "exec"), _namespace())
    assert capsys.readouterr().out.startswith(f"✔ {label}")


def _cases():
    return [(lab, fn, frag) for lab, rows in WRONG.items() for fn, frag in rows]


@pytest.mark.parametrize("label,fn,fragment", _cases())
def test_wrong_answers_fail_with_what_where_and_a_hint(label, fn, fragment):
    _fails_with_what_where_and_a_hint(label, fn, fragment)


@pytest.mark.parametrize("label", sorted(REFERENCE))
@pytest.mark.parametrize(
    "answer,fragment",
    [
        (None, "got None"),
        (_stub_raise, "not written yet"),
        ("a string", "got str"),
        (torch.zeros(3), "got Tensor"),
    ],
)
def test_none_a_stub_and_a_wrong_type_fail_helpfully(label, answer, fragment):
    with pytest.raises(AssertionError) as err:
        exercises.check(label, answer)
    assert fragment in str(err.value) and "hint:" in str(err.value)
