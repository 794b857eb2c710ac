import numpy as np
import pytest
import torch

from attnbook.copyhead import (
    attention_matrix,
    circulant_coverage,
    copy_statistics,
    copy_task,
    coverage,
    forward,
    init_params,
    loss,
    order_parameters,
    pooling_matrix,
    shift_matrix,
    token_mse,
)
from attnbook.copyhead.model import prior_energy
from attnbook.copyhead.order import template_matrix

torch.set_num_threads(1)


def test_shift_matrix_copies_previous_token():
    S = shift_matrix(5)
    assert S[0, 4] == 1 and S[3, 2] == 1 and S.sum() == 5
    X, Y = copy_task(3, 5, 4, seed=0)
    assert torch.equal(torch.einsum("la,pav->plv", S, X), Y)


def test_order_parameters_recover_templates_batched_numpy_and_torch():
    rng = np.random.default_rng(0)
    c1 = rng.normal(size=(3, 4))
    cG = rng.normal(size=(3, 4))
    G = template_matrix(torch.tensor(c1), torch.tensor(cG), 7).numpy()
    assert G.shape == (3, 4, 7, 7)
    a, b = order_parameters(G)
    assert np.allclose(a.numpy(), c1) and np.allclose(b.numpy(), cG)
    a2, b2 = order_parameters(torch.tensor(G))
    assert torch.allclose(a2, a)
    assert torch.allclose(coverage(G), torch.ones(3, 4, dtype=torch.float64))
    # the defining property: the residual is orthogonal to both templates
    L = 7
    R = torch.tensor(G[0, 0]) + torch.randn(L, L, dtype=torch.float64)
    c1r, cGr = order_parameters(R)
    res = R - template_matrix(c1r, cGr, L)
    assert abs(float((res * pooling_matrix(L, dtype=torch.float64)).sum())) < 1e-12
    assert abs(float((res * shift_matrix(L, dtype=torch.float64)).sum())) < 1e-12
    cov = float(coverage(R))
    assert cov == pytest.approx(1 - float((res**2).sum() / (R**2).sum()), abs=1e-12)


def test_coverage_random_and_circulant():
    g = torch.Generator().manual_seed(0)
    R = torch.randn(200, 16, 16, generator=g)
    cov = coverage(R)
    # a random matrix puts ~2/L² of its norm on two fixed directions
    assert float(cov.mean()) == pytest.approx(2 / 256, rel=0.3)
    circ = circulant_coverage(R)
    assert torch.all(circ >= cov - 1e-6)
    assert float(circ.mean()) == pytest.approx(16 / 256, rel=0.2)
    # a circulant matrix is covered entirely by circulants, not by the two templates
    c = torch.randn(16, generator=g)
    idx = torch.arange(16)
    C = c[(idx[:, None] - idx[None, :]) % 16]
    assert float(circulant_coverage(C)) == pytest.approx(1.0, abs=1e-6)
    assert float(coverage(C)) < 0.9
    assert float(coverage(torch.zeros(4, 4))) == 1.0


def test_order_parameters_validation():
    with pytest.raises(ValueError, match="G"):
        order_parameters(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="G"):
        order_parameters(np.full((3, 3), np.nan))
    with pytest.raises(TypeError, match="G"):
        order_parameters("abc")
    with pytest.raises(ValueError, match="G"):
        order_parameters(np.zeros((1, 1)))


def test_copy_task_shapes_reproducible_and_validated():
    X, Y = copy_task(10, 6, 5, batch_shape=(2, 3), seed=4)
    assert X.shape == Y.shape == (2, 3, 10, 6, 5)
    assert torch.all(X.sum(-1) == 1)
    assert torch.equal(Y[..., 1:, :], X[..., :-1, :]) and torch.equal(
        Y[..., 0, :], X[..., -1, :]
    )
    X2, _ = copy_task(10, 6, 5, batch_shape=(2, 3), seed=4)
    assert torch.equal(X, X2)
    X3, _ = copy_task(10, 6, 5, batch_shape=(2, 3), seed=5)
    assert not torch.equal(X, X3)
    with pytest.raises(ValueError, match="seq_len"):
        copy_task(10, 1, 5)
    with pytest.raises(TypeError, match="n_sequences"):
        copy_task(2.5, 4, 5)
    with pytest.raises(ValueError, match="vocab_size"):
        copy_task(3, 4, 0)


@pytest.mark.parametrize("kind", ["linear", "softmax"])
def test_loss_from_statistics_equals_literal_network(kind):
    L, V, P = 5, 3, 40
    params = init_params(4, L, V, b_scale=0.5, seed=1, dtype=torch.float64)
    X, Y = copy_task(P, L, V, batch_shape=(4,), seed=2, dtype=torch.float64)
    f = forward(params, X, kind=kind)
    literal = ((f - Y) ** 2).sum((1, 2, 3)) / (2 * 0.7 * L)
    fast = loss(params, copy_statistics(X, Y), kind=kind, kappa=0.7)
    assert torch.allclose(fast, literal, rtol=1e-10)
    # shared data set for all models (X of shape (P, L, V))
    f1 = forward(params, X[0], kind=kind)
    assert torch.allclose(
        f1[1],
        forward({k: v[1:2] for k, v in params.items()}, X[0], kind=kind)[0],
    )


def test_attention_matrix_and_simple_networks():
    G = torch.randn(3, 6, 6, dtype=torch.float64)
    A = attention_matrix(G, kind="softmax")
    assert torch.allclose(A.sum(-1), torch.ones(3, 6, dtype=torch.float64))
    b = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    assert torch.allclose(attention_matrix(G, b), (G + b[:, None, None]) / 6)
    X, Y = copy_task(20, 6, 4, seed=0, dtype=torch.float64)
    st = copy_statistics(X, Y)
    zero = {
        "G": torch.zeros(1, 6, 6, dtype=torch.float64),
        "W": torch.zeros(1, 4, 4, dtype=torch.float64),
    }
    assert float(token_mse(zero, st)) == pytest.approx(1.0)
    copy = {
        "G": 6 * shift_matrix(6, dtype=torch.float64)[None],
        "W": torch.eye(4, dtype=torch.float64)[None],
    }
    assert float(token_mse(copy, st)) == pytest.approx(0.0, abs=1e-12)
    assert float(prior_energy(copy, sigma_g=2.0)) == pytest.approx(36 * 6 / 8 + 4 / 2)
    with pytest.raises(ValueError, match="kind"):
        attention_matrix(G, kind="relu")
    with pytest.raises(TypeError, match="params"):
        loss({"G": G}, st)
    with pytest.raises(ValueError, match="b"):
        attention_matrix(G, torch.zeros(2))
