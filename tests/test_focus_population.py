"""attnbook.focus.population: the exact population loss, its gradient, and the flow."""

import numpy as np
import pytest
import torch

from attnbook.errors import BlowUpError
from attnbook.focus import (
    FlowDiverged,
    Params,
    gradient_descent,
    init_params,
    population_flow,
    population_gradient,
    population_hessian,
    population_loss,
)
from attnbook.focus.model import finite_loss, markov_context_loss
from attnbook.focus.population import (
    FlowResult,
    _gradient_np,
    _log_key_weights,
    pack,
    unpack,
)
from attnbook.markov import (
    entropy,
    lazy_chain,
    perturbed_chain,
    sample_sequences,
    stationary,
)

torch.set_num_threads(1)
PI = torch.tensor([0.75, 0.19, 0.05, 0.01], dtype=torch.float64)
P = lazy_chain(PI, 0.5)


def _rand(d=4, m=6, scale=0.7, seed=0, n=None):
    return init_params(d, m, eps=scale, seed=seed, n_models=n)


def _autograd(p, P, **kw):
    q = Params(*(x.clone().requires_grad_() for x in p))
    L = population_loss(*q, P, **kw).sum()
    return torch.autograd.grad(L, q)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_form_gradient_matches_autograd(seed):
    p = _rand(seed=seed)
    g = population_gradient(*p, P)
    ga = _autograd(p, P)
    for a, b in zip(g, ga):
        assert float((a - b).abs().max()) < 1e-12 * max(1.0, float(b.abs().max()))


def test_gradient_matches_central_finite_differences():
    p = _rand(seed=5)
    theta = pack(p)
    g = pack(population_gradient(*p, P))
    rng = np.random.default_rng(0)
    for _ in range(3):
        v = torch.from_numpy(rng.standard_normal(theta.shape[-1]))
        v = v / v.norm()
        h = 1e-5
        fd = (
            population_loss(*unpack(theta + h * v, 4, 6), P)
            - population_loss(*unpack(theta - h * v, 4, 6), P)
        ) / (2 * h)
        assert float(fd) == pytest.approx(float(g @ v), abs=1e-8)


def test_batched_numpy_and_float32_inputs():
    p = _rand(n=3, seed=1)
    L = population_loss(*p, P)
    assert L.shape == (3,)
    for i in range(3):
        assert float(L[i]) == pytest.approx(
            float(population_loss(*(x[i] for x in p), P)), rel=1e-13
        )
    L_np = population_loss(*(x[0].numpy() for x in p), P.numpy())
    assert L_np.dim() == 0 and float(L_np) == pytest.approx(float(L[0]), rel=1e-13)
    L32 = population_loss(*(x[0].float() for x in p), P.float())
    assert L32.dtype == torch.float32 and float(L32) == pytest.approx(
        float(L[0]), rel=1e-5
    )
    g = population_gradient(*p, P)
    assert g.W0.shape == (3, 4, 6) and g.WK.shape == (3, 6, 6)
    # a batch of chains with a batch of parameters
    Pb = torch.stack([lazy_chain(PI, lam) for lam in (0.1, 0.5, 0.9)])
    Lb = population_loss(*p, Pb)
    assert float(Lb[2]) == pytest.approx(
        float(population_loss(*(x[2] for x in p), Pb[2])), rel=1e-13
    )


def test_numpy_twin_equals_torch_gradient():
    p = _rand(n=2, seed=7)
    pi = stationary(P)
    mk = torch.tensor([False, False, False, True])
    for mask in (None, mk):
        g = population_gradient(*p, P, masked_keys=mask)
        gn = _gradient_np(
            *(x.numpy() for x in p),
            P.numpy(),
            pi.numpy(),
            _log_key_weights(pi, mask).numpy(),
        )
        for a, b in zip(g, gn):
            np.testing.assert_allclose(a.numpy(), b, atol=1e-14)


def test_masked_keys_gradient_and_meaning():
    p = _rand(seed=3)
    mk = torch.tensor([True, False, False, False])
    g = population_gradient(*p, P, masked_keys=mk)
    for a, b in zip(g, _autograd(p, P, masked_keys=mk)):
        assert float((a - b).abs().max()) < 1e-12
    with pytest.raises(ValueError, match="masked_keys"):
        population_loss(*p, P, masked_keys=torch.ones(4, dtype=torch.bool))
    with pytest.raises(TypeError, match="masked_keys"):
        population_loss(*p, P, masked_keys=torch.zeros(4))


def test_special_points_origin_and_saddle_loss():
    z = Params(*(torch.zeros_like(x) for x in _rand()))
    assert float(population_loss(*z, P)) == pytest.approx(np.log(4), rel=1e-14)
    # a model that predicts pi for every query (M = 1 log(pi)^T, Phi = 0) has loss H(pi)
    d, m = 4, 6
    W0 = torch.zeros(d, m, dtype=torch.float64)
    W0[:, 0] = 1.0
    W1 = torch.zeros(m, d, dtype=torch.float64)
    W1[0] = torch.log(PI)
    zero = torch.zeros(m, m, dtype=torch.float64)
    assert float(population_loss(W0, W1, zero, zero, P)) == pytest.approx(
        float(entropy(PI)), rel=1e-13
    )


def test_finite_sample_loss_and_gradient_converge_to_population():
    """The population loss is the s -> infinity limit of the finite-context loss (N -> infinity)."""
    Pc = perturbed_chain(4, 0.6, 0.05, 0.5)
    p = _rand(seed=11, scale=0.8)
    L_pop = float(population_loss(*p, Pc))
    g_pop = pack(population_gradient(*p, Pc))
    errs, gerrs = [], []
    for s in (8, 32, 128, 512):
        ctx = sample_sequences(Pc, 8000, s, seed=s)
        q = Params(*(x.clone().requires_grad_() for x in p))
        Lf = markov_context_loss(q, ctx, Pc)
        gf = pack(Params(*torch.autograd.grad(Lf, q)))
        errs.append(abs(float(Lf.detach()) - L_pop))
        gerrs.append(float((gf - g_pop).norm() / g_pop.norm()))
    # O(1/s) bias: large at s = 8, small at s = 512; the gradient error shrinks monotonically
    assert errs[0] > 0.1 and errs[3] < 0.01
    assert all(a > b for a, b in zip(gerrs, gerrs[1:])), gerrs
    assert gerrs[0] > 0.3 and gerrs[3] < 0.05
    # the plain sampled-target loss estimates the same quantity (noisier)
    w = sample_sequences(Pc, 8000, 129, seed=1)
    assert abs(float(finite_loss(p, w)) - L_pop) < 0.05


def test_hessian_is_symmetric_and_matches_autograd():
    p = _rand(d=3, m=3, seed=2)
    P3 = lazy_chain([0.5, 0.3, 0.2], 0.4)
    H = population_hessian(*p, P3)
    theta = pack(p).clone().requires_grad_()
    Ha = torch.autograd.functional.hessian(
        lambda th: population_loss(*unpack(th, 3, 3), P3), theta
    )
    assert float((H - Ha).abs().max()) < 1e-12
    Hb = population_hessian(*_rand(d=3, m=3, seed=2, n=2), P3)
    assert Hb.shape == (2, 36, 36)  # 2dm + 2m^2 = 36


def test_flow_matches_gradient_descent_and_decreases_loss():
    Pc = perturbed_chain(4, 0.7, 0.04, 0.5)
    p0 = init_params(4, 5, eps=0.05, seed=0)
    flow = population_flow(p0, Pc, 30.0, t_eval=np.linspace(0, 30, 31))
    gd = gradient_descent(p0, Pc, lr=0.01, n_steps=3000, record_every=100)
    assert np.all(np.diff(flow.loss) <= 1e-12)
    assert np.max(np.abs(flow.loss - gd.loss)) < 2e-3
    assert np.max(np.abs(flow.W0[-1] - gd.W0[-1])) < 5e-3 * np.abs(flow.W0[-1]).max()


def test_batched_flow_equals_individual_flows_and_npz_roundtrip(tmp_path):
    Pc = perturbed_chain(3, 0.6, 0.05, 0.5)
    p0 = init_params(3, 4, eps=0.05, seed=1, n_models=2)
    te = np.linspace(0, 40, 9)
    both = population_flow(p0, Pc, 40.0, t_eval=te)
    one = population_flow(Params(*(x[1] for x in p0)), Pc, 40.0, t_eval=te)
    assert both.W0.shape == (9, 2, 3, 4)
    np.testing.assert_allclose(both.W0[:, 1], one.W0, atol=1e-6)
    np.testing.assert_allclose(both.loss[:, 1], one.loss, atol=1e-8)
    path = both.save(tmp_path / "flow.npz")
    back = FlowResult.load(path)
    np.testing.assert_array_equal(back.W1, both.W1)
    assert str(back.info["method"]) == "bdf"
    with np.load(path, allow_pickle=False) as z:  # no pickled objects inside
        assert "loss" in z.files


def test_flow_reports_blowup_and_bad_arguments():
    p0 = init_params(4, 5, eps=1e-3, seed=0)
    # the flows' one blow-up convention: BlowUpError (a FlowDiverged) with where and what
    with pytest.raises(BlowUpError, match="left the bound") as info:
        population_flow(p0, P, 200.0, max_norm=0.5)
    assert 0 < info.value.time < 200.0 and info.value.partial.shape[0] >= 1
    assert float(info.value.state.abs().max()) == pytest.approx(0.5, rel=1e-3)
    with pytest.raises(FlowDiverged, match="diverged"):
        gradient_descent(init_params(4, 5, eps=3.0, seed=0), P, lr=1e3, n_steps=50)
    with pytest.raises(ValueError, match="t_end"):
        population_flow(p0, P, -1.0)
    with pytest.raises(ValueError, match="method"):
        population_flow(p0, P, 1.0, method="euler")


def test_validation_names_the_argument():
    W0, W1, WQ, WK = _rand()
    with pytest.raises(ValueError, match="W1"):
        population_loss(W0, W1.T[:, :3], WQ, WK, P)
    with pytest.raises(ValueError, match="WK"):
        population_loss(W0, W1, WQ, WK[:3], P)
    bad = W0.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="W0"):
        population_loss(bad, W1, WQ, WK, P)
    with pytest.raises(ValueError, match="P"):
        population_loss(W0, W1, WQ, WK, P * 1.1)
    with pytest.raises(ValueError, match="P"):
        population_loss(W0, W1, WQ, WK, lazy_chain([0.5, 0.5], 0.1))
    with pytest.raises(TypeError, match="W0"):
        population_loss("W0", W1, WQ, WK, P)


def test_flow_with_one_chain_per_model_equals_separate_flows():
    Ps = torch.stack([perturbed_chain(3, 0.6, delta, 0.5) for delta in (0.0, 0.05)])
    p0 = init_params(3, 4, eps=0.05, seed=2)  # shared start, broadcast to the batch
    te = np.linspace(0, 30, 7)
    both = population_flow(p0, Ps, 30.0, t_eval=te)
    assert both.W0.shape == (7, 2, 3, 4) and both.pi.shape == (2, 3)
    for k in range(2):
        one = population_flow(p0, Ps[k], 30.0, t_eval=te)
        np.testing.assert_allclose(both.W0[:, k], one.W0, atol=1e-6)
        np.testing.assert_allclose(both.loss[:, k], one.loss, atol=1e-8)
    H = population_hessian(*p0, Ps)
    assert H.shape == (2, 56, 56)  # 2dm + 2m^2
    assert float((H[1] - population_hessian(*p0, Ps[1])).abs().max()) < 1e-13
