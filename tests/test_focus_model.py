"""attnbook.focus.model: finite-context forward pass, ensemble training, samplers."""

import numpy as np
import pytest
import torch

from attnbook.focus import (
    MarkovWindows,
    OneLayerTransformer,
    Params,
    TextWindows,
    finite_forward,
    init_params,
    population_flow,
    train,
)
from attnbook.focus.model import (
    TrainingDiverged,
    TrainResult,
    _loss_and_grads,
    _losses_from_counts,
    finite_loss,
    markov_context_loss,
)
from attnbook.markov import lazy_chain, perturbed_chain, sample_sequences
from attnbook.markov import stationary as markov_stationary

torch.set_num_threads(1)


def _naive_logits(p, ctx):
    """One context, written out with explicit loops (the definition)."""
    W0, W1, WQ, WK = (x.numpy() for x in p)
    e = W0[ctx]  # (s, m)
    q = e[-1]
    scores = np.array([q @ WQ @ WK.T @ e[j] for j in range(len(ctx))])
    a = np.exp(scores - scores.max())
    a /= a.sum()
    return (a @ e) @ W1, a


def test_forward_matches_definition_and_shapes():
    p = init_params(5, 4, eps=0.8, seed=0)
    ctx = torch.tensor([[0, 1, 2, 3, 4, 0], [4, 4, 1, 1, 2, 3]])
    logits, attn = finite_forward(p, ctx)
    assert logits.shape == (2, 5) and attn.shape == (2, 6)
    for b in range(2):
        f, a = _naive_logits(p, ctx[b].numpy())
        np.testing.assert_allclose(logits[b].numpy(), f, atol=1e-12)
        np.testing.assert_allclose(attn[b].numpy(), a, atol=1e-12)


def test_ensemble_forward_equals_each_model():
    pe = init_params(4, 3, eps=0.5, seed=1, n_models=3)
    ctx = sample_sequences(lazy_chain([0.4, 0.3, 0.2, 0.1], 0.5), 7, 9, seed=0)
    logits, _ = finite_forward(pe, ctx)  # shared contexts
    assert logits.shape == (3, 7, 4)
    for i in range(3):
        li, _ = finite_forward(Params(*(x[i] for x in pe)), ctx)
        np.testing.assert_allclose(logits[i].numpy(), li.numpy(), atol=1e-13)
    per = torch.stack([ctx, ctx.flip(0), ctx])  # per-model contexts
    lp, _ = finite_forward(pe, per)
    one = finite_forward(Params(*(x[1] for x in pe)), ctx.flip(0))[0]
    np.testing.assert_allclose(lp[1].numpy(), one.numpy(), atol=1e-13)


def test_masked_keys_in_finite_forward():
    p = init_params(4, 3, eps=0.5, seed=2)
    mask = torch.tensor([False, False, False, True])
    ctx = torch.tensor([[3, 0, 3, 1], [3, 3, 3, 3]])
    logits, attn = finite_forward(p, ctx, masked_keys=mask)
    assert float(attn[0, 0]) == 0.0 and float(attn[0, 2]) == 0.0
    assert float(attn[0].sum()) == pytest.approx(1.0)
    # every key masked: zero output, uniform prediction, no NaN
    assert torch.all(attn[1] == 0) and torch.all(logits[1] == 0)


def test_finite_validation():
    p = init_params(4, 3, eps=0.5, seed=2)
    with pytest.raises(ValueError, match="context"):
        finite_forward(p, torch.tensor([[0, 9]]))
    with pytest.raises(TypeError, match="context"):
        finite_forward(p, torch.tensor([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="context"):
        finite_forward(p, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="windows"):
        finite_loss(p, torch.tensor([[1]]))
    with pytest.raises(ValueError, match="masked_keys"):
        finite_forward(p, torch.tensor([[0, 1]]), masked_keys=torch.tensor([True]))


def test_ensemble_training_equals_separate_training():
    """One batched run of 3 models = 3 runs of one model each, with the same data and init."""
    P = perturbed_chain(4, 0.6, 0.05, 0.5)
    ens = OneLayerTransformer(
        4, 5, n_models=3, eps=0.1, seed=0, dtype=torch.float64, device="cpu"
    )
    init = ens.params()
    data = sample_sequences(P, 3 * 16 * 6, 9, seed=0).reshape(6, 3, 16, 9)
    res = train(
        ens, lambda k: data[k % 6], n_steps=5, lr=0.5, record_every=1, progress=False
    )
    for i in range(3):
        single = OneLayerTransformer(
            4, 5, n_models=1, eps=0.1, seed=0, dtype=torch.float64, device="cpu"
        )
        with torch.no_grad():
            for mine, src in zip((single.W0, single.W1, single.WQ, single.WK), init):
                mine.copy_(src[i : i + 1])
        r1 = train(
            single,
            lambda k: data[k % 6][i : i + 1],
            n_steps=5,
            lr=0.5,
            record_every=1,
            progress=False,
        )
        np.testing.assert_allclose(res.W0[:, i], r1.W0[:, 0], atol=1e-12)
        np.testing.assert_allclose(res.loss[:, i], r1.loss[:, 0], atol=1e-12)


def test_training_is_reproducible_and_saves_npz(tmp_path):
    P = perturbed_chain(4, 0.6, 0.05, 0.5)

    def run(seed):
        m = OneLayerTransformer(4, 5, n_models=2, eps=0.01, seed=seed, device="cpu")
        s = MarkovWindows(P, batch=32, context=8, n_models=2, seed=seed, device="cpu")
        return train(m, s, n_steps=20, lr=0.5, record_every=5, progress=False)

    a, b, c = run(0), run(0), run(1)
    np.testing.assert_array_equal(a.W0, b.W0)
    assert not np.array_equal(a.W0, c.W0)
    assert a.W0.shape == (5, 2, 4, 5) and a.loss.shape == (5, 2)
    np.testing.assert_allclose(a.t, a.step * 0.5)
    back = TrainResult.load(a.save(tmp_path / "run.npz"))
    np.testing.assert_array_equal(back.WK, a.WK)
    assert back.lr == 0.5 and str(back.info["optimizer"]) == "sgd"


def test_sgd_on_long_contexts_follows_the_population_flow():
    """Finite-sample SGD (large batch, long context) tracks the exact flow through stage I."""
    P = perturbed_chain(4, 0.7, 0.04, 0.5)
    model = OneLayerTransformer(
        4, 5, n_models=1, eps=1e-2, seed=0, dtype=torch.float64, device="cpu"
    )
    start = Params(*(x[0] for x in model.params()))
    lr, steps = 0.5, 60
    res = train(
        model,
        MarkovWindows(P, batch=512, context=64, n_models=1, seed=0, device="cpu"),
        n_steps=steps,
        lr=lr,
        record_every=20,
        progress=False,
    )
    flow = population_flow(start, P, lr * steps, t_eval=res.t)
    # the loss drops from log d to near H(pi) in both; the trajectories agree to a few %
    assert flow.loss[-1] < 1.0 and res.loss[-1, 0] < 1.05
    rel = np.linalg.norm(res.W0[-1, 0] - flow.W0[-1]) / np.linalg.norm(flow.W0[-1])
    assert rel < 0.1


def test_text_windows_and_divergence_detection():
    ids = torch.arange(100) % 7
    tw = TextWindows(ids, batch=5, context=4, n_models=2, seed=0, device="cpu")
    w = tw(0)
    assert w.shape == (2, 5, 5)
    assert torch.all((w[..., 1:] - w[..., :-1]) % 7 == 1)  # consecutive ids
    with pytest.raises(ValueError, match="ids"):
        TextWindows(torch.arange(3), batch=2, context=4)
    m = OneLayerTransformer(7, 4, n_models=1, eps=3.0, seed=0, device="cpu")
    with pytest.raises(TrainingDiverged):
        train(
            m,
            TextWindows(ids, batch=8, context=4, seed=0, device="cpu"),
            n_steps=200,
            lr=1e6,
            record_every=1,
            progress=False,
        )
    with pytest.raises(ValueError, match="optimizer"):
        train(m, tw, n_steps=1, lr=0.1, optimizer="lbfgs")


def test_markov_context_loss_matches_sampled_target_loss_in_expectation():
    P = perturbed_chain(4, 0.6, 0.05, 0.5)
    p = init_params(4, 5, eps=0.8, seed=4)
    w = sample_sequences(P, 20000, 17, seed=3)
    a = float(markov_context_loss(p, w[:, :-1], P))
    b = float(finite_loss(p, w))
    assert abs(a - b) < 0.03


@pytest.mark.parametrize("context", [1, 3, 8, 12])
def test_markov_windows_counts_match_windows_and_the_chain(context):
    """sample_counts gives the key counts, query and target of the windows the same draw
    builds; windows have the chain's stationary law and transitions."""
    P = perturbed_chain(4, 0.6, 0.05, 0.5)
    s = MarkovWindows(P, batch=40, context=context, n_models=3, seed=0, device="cpu")
    state = s.gen.get_state()
    w = s(0)
    s.gen.set_state(state)
    counts, q, y = s.sample_counts(0)
    ref = torch.nn.functional.one_hot(w[..., :-1], 4).sum(-2).double()
    torch.testing.assert_close(counts, ref)
    assert torch.equal(q, w[..., -2]) and torch.equal(y, w[..., -1])
    big = MarkovWindows(P, batch=40000, context=context, seed=1, device="cpu")(0)[0]
    pi = torch.bincount(big[:, 0], minlength=4).double() / big.shape[0]
    torch.testing.assert_close(pi, markov_stationary(P), atol=0.01, rtol=0)
    x, z = big[:, -2], big[:, -1]
    C = torch.zeros(4, 4, dtype=torch.float64)
    C.index_put_((x, z), torch.ones(len(x), dtype=torch.float64), accumulate=True)
    torch.testing.assert_close(C / C.sum(1, keepdim=True), P, atol=0.03, rtol=0)


def test_training_by_counts_equals_the_windows_loss():
    """train() on Markov windows uses key counts; its recorded loss is finite_loss."""
    P = perturbed_chain(4, 0.6, 0.05, 0.5)
    m = OneLayerTransformer(4, 5, n_models=2, eps=0.3, seed=0, dtype=torch.float64)
    p0 = m.params()
    s = MarkovWindows(P, batch=16, context=6, n_models=2, seed=3, device="cpu")
    w = MarkovWindows(P, batch=16, context=6, n_models=2, seed=3, device="cpu")(0)
    res = train(m, s, n_steps=1, lr=0.1, record_every=1, progress=False)
    torch.testing.assert_close(
        torch.as_tensor(res.loss[0]), finite_loss(p0, w).double(), rtol=1e-12, atol=0
    )


@pytest.mark.parametrize("d,context", [(4, 32), (9, 40), (12, 40), (3, 7)])
def test_markov_windows_fast_paths_keep_the_draws(d, context):
    """The packed integer counts (and their float fallback for large d) equal the windows'
    counts, and the CPU (NumPy) and torch paths draw the same tokens as the step-by-step
    alias draw from the same uniforms (so archived runs reproduce)."""
    g = torch.Generator().manual_seed(d)
    P = torch.softmax(torch.randn(d, d, generator=g, dtype=torch.float64), -1)
    s = MarkovWindows(P, batch=30, context=context, n_models=2, seed=5)
    state = s.gen.get_state()
    w = s(0)
    s.gen.set_state(state)
    counts, q, y = s.sample_counts(0, dtype=torch.float32)
    ref = torch.nn.functional.one_hot(w[..., :-1], d).sum(-2).float()
    assert torch.equal(counts, ref)
    assert torch.equal(q, w[..., -2]) and torch.equal(y, w[..., -1])
    s.gen.set_state(state)  # train()'s form: log counts, the token axis in the middle
    logn = s._counts_by_type(torch.float32, log=True)[0]
    assert torch.equal(logn, ref.double().log().float().transpose(1, 2))
    # the torch steps (a GPU's) give the same draws as the NumPy ones, here on the CPU
    t = MarkovWindows(P, batch=30, context=context, n_models=2, seed=5)
    t._numpy = False
    t.gen.set_state(state)
    assert torch.equal(t(0), w)
    t.gen.set_state(state)
    for a, b in zip(t._counts_by_type(torch.float32, log=True), (logn, q, y)):
        assert torch.equal(a, b)
    # the reference: one block after another, in torch, from the same uniforms
    s.gen.set_state(state)
    u = torch.rand(1 + context // s.block, 60, generator=s.gen, dtype=torch.float64)
    K = s._n_paths
    j = (u[0] * d).floor().long()
    x = torch.where(u[0] * d - j < s._accept_pi[j], j, s._alias_pi[j])
    toks = [x[:, None]]
    for ub in u[1:]:
        jb = (ub * K).floor().long()
        idx = x * K + jb
        code = torch.where(ub * K - jb < s._accept[idx], jb, s._alias[idx])
        toks.append(s._paths[code])
        x = s._last[code]
    assert torch.equal(w.reshape(60, -1), torch.cat(toks, 1))


@pytest.mark.parametrize("masked", [False, True])
def test_hand_derived_gradient_matches_autograd(masked):
    """train()'s loss and gradient (no autograd) equal autograd's on the count-based loss,
    which equals finite_loss on the windows; with masked keys too (all-masked windows give
    no output)."""
    P = perturbed_chain(4, 0.6, 0.05, 0.5)
    m = OneLayerTransformer(4, 5, n_models=3, eps=0.7, seed=2, dtype=torch.float64)
    mk = torch.tensor([False, True, False, True]) if masked else None
    s = MarkovWindows(P, batch=60, context=2, n_models=3, seed=1, device="cpu")
    counts, q, y = s.sample_counts(0)
    if masked:  # some windows have every key masked
        assert bool((counts[..., ~mk].sum(-1) == 0).any())
    params = [m.W0, m.W1, m.WQ, m.WK]
    ref = _losses_from_counts(*params, counts, q, y, mk)
    want = torch.autograd.grad(ref.sum(), params)
    got, grads = _loss_and_grads(
        *(x.detach() for x in params), counts.transpose(1, 2).log(), q, y, mk
    )
    torch.testing.assert_close(got, ref.detach(), rtol=1e-12, atol=0)
    for g, w in zip(grads, want):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-12)
