"""attnbook.markov: chains, stationary laws, sampling, entropy rate, validation."""

import numpy as np
import pytest
import torch

from attnbook.markov import (
    entropy,
    entropy_rate,
    estimate_chain,
    lazy_chain,
    perturbed_chain,
    perturbed_stationary,
    sample_sequences,
    stationary,
)

torch.set_num_threads(1)
PI = np.array([0.75, 0.19, 0.05, 0.01])


def test_lazy_chain_formula_and_stationarity():
    P = lazy_chain(PI, 0.3)
    expected = 0.3 * np.eye(4) + 0.7 * np.outer(np.ones(4), PI)
    np.testing.assert_allclose(P.numpy(), expected, atol=1e-15)
    np.testing.assert_allclose(stationary(P).numpy(), PI, atol=1e-12)


def test_lazy_chain_batched_pi_and_lam_and_torch_input():
    pis = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]], dtype=torch.float32)
    lams = np.array([0.0, 0.9])
    P = lazy_chain(pis, lams)
    assert P.shape == (2, 3, 3)
    np.testing.assert_allclose(
        P[1].numpy(),
        0.9 * np.eye(3) + 0.1 * np.outer(np.ones(3), pis[1].numpy()),
        atol=1e-7,
    )
    np.testing.assert_allclose(stationary(P).numpy(), pis.numpy(), atol=1e-6)


@pytest.mark.parametrize("lam", [-0.1, 1.0, 1.5, float("nan")])
def test_lazy_chain_rejects_bad_lam(lam):
    with pytest.raises(ValueError, match="lam"):
        lazy_chain(PI, lam)


@pytest.mark.parametrize("pi", [[0.5, 0.6], [1.2, -0.2], [0.5, float("nan"), 0.5]])
def test_lazy_chain_rejects_bad_pi(pi):
    with pytest.raises(ValueError, match="pi"):
        lazy_chain(pi, 0.5)


def test_lazy_chain_rejects_non_numeric():
    with pytest.raises(TypeError, match="pi"):
        lazy_chain("abc", 0.5)


def test_stationary_random_chains_batched():
    g = torch.Generator().manual_seed(0)
    A = torch.rand(5, 6, 6, generator=g, dtype=torch.float64) + 0.01
    P = A / A.sum(-1, keepdim=True)
    pi = stationary(P)
    np.testing.assert_allclose(
        (pi[:, None, :] @ P)[:, 0].numpy(), pi.numpy(), atol=1e-12
    )
    np.testing.assert_allclose(pi.sum(-1).numpy(), 1.0, atol=1e-12)
    # against the leading left eigenvector
    w, V = np.linalg.eig(P[0].numpy().T)
    v = np.real(V[:, np.argmax(np.real(w))])
    np.testing.assert_allclose(pi[0].numpy(), v / v.sum(), atol=1e-10)


def test_stationary_validation():
    with pytest.raises(ValueError, match="row-stochastic"):
        stationary(np.array([[0.5, 0.6], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="non-negative"):
        stationary(np.array([[1.5, -0.5], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="square"):
        stationary(np.ones((2, 3)) / 3)
    with pytest.raises(ValueError, match="reducible"):
        stationary(np.eye(3))


def test_perturbed_family():
    pi = perturbed_stationary(4, 0.7, 0.02)
    np.testing.assert_allclose(pi.numpy(), [0.7, 0.12, 0.10, 0.08], atol=1e-15)
    np.testing.assert_allclose(
        perturbed_stationary(4, 0.7, 0.0).numpy(), [0.7, 0.1, 0.1, 0.1], atol=1e-15
    )
    P = perturbed_chain(5, 0.6, 0.01, 0.5, c=[1, 1, -1, -1])
    np.testing.assert_allclose(
        stationary(P).numpy(), [0.6, 0.11, 0.11, 0.09, 0.09], atol=1e-12
    )
    with pytest.raises(ValueError, match="delta"):
        perturbed_stationary(4, 0.7, 0.2)
    with pytest.raises(ValueError, match="c must sum to zero"):
        perturbed_stationary(4, 0.7, 0.01, c=[1, 1, 1])
    with pytest.raises(ValueError, match="pi_top"):
        perturbed_stationary(4, 1.2, 0.0)


def test_sampling_reproducible_and_correct_statistics():
    P = lazy_chain(PI, 0.5)
    x1 = sample_sequences(P, 4000, 50, seed=3)
    x2 = sample_sequences(P, 4000, 50, seed=3)
    x3 = sample_sequences(P, 4000, 50, seed=4)
    assert x1.dtype == torch.long and x1.shape == (4000, 50)
    assert torch.equal(x1, x2) and not torch.equal(x1, x3)
    emp, _ = estimate_chain(x1, 4)
    pairs = torch.stack([x1[:, :-1].reshape(-1), x1[:, 1:].reshape(-1)])
    counts = torch.zeros(4, 4, dtype=torch.float64).index_put_(
        (pairs[0], pairs[1]),
        torch.ones(pairs.shape[1], dtype=torch.float64),
        accumulate=True,
    )
    n_rows = counts.sum(-1, keepdim=True)
    se = torch.sqrt(P * (1 - P) / n_rows)
    assert bool(((emp - P).abs() <= 5 * se + 1e-12).all())
    # stationary start: the first column is distributed as pi
    f0 = torch.bincount(x1[:, 0], minlength=4).double() / 4000
    assert float((f0 - torch.as_tensor(PI)).abs().max()) < 5 * np.sqrt(0.25 / 4000)


def test_sampling_batched_chains_and_init():
    P = torch.stack(
        [lazy_chain(PI, 0.0), torch.eye(4, dtype=torch.float64)[[1, 2, 3, 0]]]
    )
    x = sample_sequences(P, 10, 6, seed=0, init=[1.0, 0, 0, 0])
    assert x.shape == (2, 10, 6)
    # the second chain is a deterministic cycle 0 -> 1 -> 2 -> 3 -> 0
    np.testing.assert_array_equal(x[1, 0].numpy(), [0, 1, 2, 3, 0, 1])
    with pytest.raises(ValueError, match="n_seq"):
        sample_sequences(P, 0, 5)
    with pytest.raises(TypeError, match="length"):
        sample_sequences(P, 2, 2.5)
    with pytest.raises(ValueError, match="init"):
        sample_sequences(P, 2, 3, init=[0.5, 0.5])


def test_entropy_rate():
    P = lazy_chain(PI, 0.5)
    Pn = P.numpy()
    expected = -(PI[:, None] * Pn * np.log(Pn)).sum()
    assert float(entropy_rate(P)) == pytest.approx(expected, rel=1e-12)
    # lam = 0: i.i.d. tokens, entropy rate = H(pi)
    assert float(entropy_rate(lazy_chain(PI, 0.0))) == pytest.approx(
        float(entropy(PI)), rel=1e-12
    )
    # a deterministic cycle has zero entropy rate
    assert float(entropy_rate(torch.eye(3, dtype=torch.float64)[[1, 2, 0]])) == 0.0
    # empirical check: mean -log P[x_t, x_{t+1}] over a long sample
    x = sample_sequences(P, 2000, 40, seed=1)
    nll = -torch.log(P[x[:, :-1], x[:, 1:]]).mean()
    assert abs(float(nll) - expected) < 0.02


def test_estimate_chain_recovers_P():
    P = lazy_chain([0.4, 0.3, 0.2, 0.1], 0.6)
    x = sample_sequences(P, 2000, 100, seed=2)
    P_hat, pi_hat = estimate_chain(x, 4)
    assert float((P_hat - P).abs().max()) < 0.01
    assert float((pi_hat - stationary(P)).abs().max()) < 0.01
    # counts within rows only, against an independent NumPy count; the flat stream also
    # counts the 1999 transitions across rows, so its estimate differs
    xn = x.numpy()
    n = np.zeros((4, 4))
    np.add.at(n, (xn[:, :-1].ravel(), xn[:, 1:].ravel()), 1)
    np.testing.assert_allclose(P_hat.numpy(), n / n.sum(1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(
        pi_hat.numpy(), np.bincount(xn.ravel(), minlength=4) / xn.size
    )
    P_flat, _ = estimate_chain(x.reshape(-1), 4)
    flat = xn.ravel()
    np.add.at(n, (flat[99:-1:100], flat[100::100]), 1)  # add the cross-row pairs
    np.testing.assert_allclose(P_flat.numpy(), n / n.sum(1, keepdims=True), rtol=1e-12)
    assert not torch.equal(P_flat, P_hat)
    with pytest.raises(ValueError, match="tokens"):
        estimate_chain(torch.tensor([0, 5]), 4)
    with pytest.raises(TypeError, match="tokens"):
        estimate_chain(torch.tensor([0.5, 1.0]), 4)
