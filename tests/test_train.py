import numpy as np
import pytest
import torch

from attnbook import train

torch.set_num_threads(1)


def quad_loss(targets):
    def loss(p):
        return ((p["w"] - targets) ** 2).sum(-1) + (p["b"] ** 2) * 0.5

    return loss


def test_batched_equals_loop_of_single_runs():
    g = torch.Generator().manual_seed(0)
    n = 5
    targets = torch.randn(n, 3, generator=g, dtype=torch.float64)
    init = {
        "w": torch.randn(n, 3, generator=g, dtype=torch.float64),
        "b": torch.randn(n, generator=g, dtype=torch.float64),
    }

    def nonconvex(p, t):
        return (torch.sin(p["w"]) - t).pow(2).sum(-1) + p["b"] ** 4

    lrs = torch.tensor([0.01, 0.02, 0.05, 0.1, 0.03], dtype=torch.float64)
    batched = train.adam(
        lambda p: nonconvex(p, targets), init, n_steps=200, lr=lrs, weight_decay=0.01
    )
    for i in range(n):
        single = train.adam(
            lambda p: nonconvex(p, targets[i : i + 1]),
            {k: v[i : i + 1] for k, v in init.items()},
            n_steps=200,
            lr=float(lrs[i]),
            weight_decay=0.01,
        )
        for k in init:
            assert torch.allclose(batched.params[k][i], single.params[k][0], atol=1e-12)
        assert batched.loss[:, i] == pytest.approx(single.loss[:, 0], abs=1e-12)


def test_matches_torch_adam():
    g = torch.Generator().manual_seed(1)
    w0 = torch.randn(3, 4, generator=g, dtype=torch.float64)
    loss = lambda p: (p["w"] ** 2 * torch.arange(1, 5)).sum(-1)  # noqa: E731
    ours = train.adam(loss, {"w": w0}, n_steps=50, lr=0.05)
    w = w0.clone().requires_grad_(True)
    opt = torch.optim.Adam([w], lr=0.05)
    for _ in range(50):
        opt.zero_grad()
        loss({"w": w}).sum().backward()
        opt.step()
    assert torch.allclose(ours.params["w"], w.detach(), atol=1e-10)


def test_history_records_and_converges():
    t = torch.tensor([[1.0, 2.0, 3.0]] * 4)
    h = train.adam(
        quad_loss(t),
        {"w": torch.zeros(4, 3), "b": torch.ones(4)},
        n_steps=500,
        lr=0.05,
        record_every=100,
        monitor=lambda p: {"norm": p["w"].norm(dim=-1)},
    )
    assert list(h.steps) == [0, 100, 200, 300, 400, 499]
    assert h.loss.shape == (6, 4)
    assert h.extra["norm"].shape == (6, 4)
    assert np.all(h.final_loss < 1e-3)
    assert not h.diverged.any()


def test_divergence_raise_and_freeze():
    loss = lambda p: torch.exp(p["w"] * 50).sum(-1)  # noqa: E731
    init = {"w": torch.tensor([[0.0], [5.0]])}
    with pytest.raises(train.TrainingDiverged, match="non-finite"):
        train.adam(
            lambda p: loss(p) * torch.where(p["w"][:, 0] > 1, np.inf, 1.0),
            init,
            n_steps=3,
        )
    h = train.adam(
        lambda p: (p["w"] ** 2).sum(-1) / (p["w"][:, 0] < 1).double().clamp(min=0),
        {"w": torch.tensor([[0.5], [2.0]], dtype=torch.float64)},
        n_steps=10,
        lr=0.1,
        on_divergence="freeze",
    )
    assert list(h.diverged) == [False, True]
    assert np.isinf(h.final_loss[1]) and np.isfinite(h.final_loss[0])


def test_validation():
    with pytest.raises(TypeError):
        train.adam(lambda p: p["w"].sum(-1), [torch.zeros(2, 2)], n_steps=3)
    with pytest.raises(ValueError, match="lr"):
        train.adam(
            lambda p: p["w"].sum(-1),
            {"w": torch.zeros(2, 2)},
            n_steps=3,
            lr=torch.ones(3),
        )
    with pytest.raises(ValueError, match="on_divergence"):
        train.adam(
            lambda p: p["w"].sum(-1),
            {"w": torch.zeros(2, 2)},
            n_steps=3,
            on_divergence="x",
        )
    with pytest.raises(ValueError, match="shape"):
        train.adam(lambda p: p["w"].sum(), {"w": torch.zeros(2, 2)}, n_steps=3)
    with pytest.raises(ValueError, match="dim 0"):
        train.adam(
            lambda p: p["w"].sum(-1),
            {"w": torch.zeros(2, 2), "b": torch.zeros(3)},
            n_steps=3,
        )


def test_reached_minimum_filter():
    vals = np.array([1.0, 1.0000001, 2.0, 5.0, 5.0, np.inf])
    groups = np.array([0, 0, 0, 1, 1, 1])
    f = train.reached_minimum(vals, groups, rtol=1e-3)
    assert list(f.keep) == [True, True, False, True, True, False]
    assert list(f.n_kept) == [2, 2] and list(f.n_total) == [3, 3]
    assert "4/6" in f.summary()
    with pytest.raises(ValueError, match="groups"):
        train.reached_minimum(vals, groups[:3])


def test_training_diverged_is_the_shared_exception_with_partial():
    from attnbook.errors import DivergenceError
    from attnbook.errors import TrainingDiverged as Shared

    assert train.TrainingDiverged is Shared

    def loss(p):
        return torch.exp(p["w"] * 1e3).sum(-1)

    with pytest.raises(Shared) as info:
        train.adam(
            loss, {"w": torch.ones(2, 1, dtype=torch.float64)}, n_steps=5, lr=1.0
        )
    assert isinstance(info.value, DivergenceError)
    assert info.value.partial is not None and "w" in info.value.partial


def test_history_reports_wall_s_and_the_old_name():
    def loss(p):
        return (p["w"] ** 2).sum(-1)

    h = train.adam(loss, {"w": torch.ones(2, 1, dtype=torch.float64)}, n_steps=3)
    assert h.wall_s > 0 and h.seconds == h.wall_s


def test_descend_is_the_one_loop_sgd_and_adam_by_hand():
    # θ ← θ − η g and Adam's update, written out here for two steps on L = |θ|²/2 (g = θ)
    theta0 = torch.tensor([[1.0, -2.0], [0.5, 4.0]], dtype=torch.float64)

    def lg(k, xs):
        return 0.5 * (xs[0] ** 2).sum(-1), [xs[0].clone()]

    x = [theta0.clone()]
    run = train.descend(lg, x, n_steps=2, optimizer="sgd", lr=0.1)
    assert torch.allclose(x[0], theta0 * 0.9**2, rtol=0, atol=1e-15)
    assert run.loss.shape == (3, 2) and list(run.steps) == [0, 1, 2]
    x = [theta0.clone()]
    train.descend(lg, x, n_steps=2, optimizer="adam", lr=0.1)
    # step 1: m̂ = g, v̂ = g², so θ moves by η sign(g) (up to eps); step 2 likewise here
    expect = theta0 - 0.1 * torch.sign(theta0)
    g2 = expect
    m2, v2 = 0.9 * 0.1 * theta0 + 0.1 * g2, 0.999 * 0.001 * theta0**2 + 0.001 * g2**2
    expect = expect - 0.1 * (m2 / (1 - 0.9**2)) / ((v2 / (1 - 0.999**2)).sqrt() + 1e-8)
    assert torch.allclose(x[0], expect, rtol=0, atol=1e-7)


def test_descend_freezes_or_raises_on_divergence_and_checks_its_arguments():
    def lg(k, xs):  # model 1's loss becomes infinite at step 3
        loss = (xs[0] ** 2).sum(-1)
        if k >= 3:
            loss = loss + torch.tensor([0.0, float("inf")], dtype=loss.dtype)
        return loss, [2 * xs[0]]

    x = [torch.ones(2, 3, dtype=torch.float64)]
    run = train.descend(
        lg, x, n_steps=6, optimizer="sgd", lr=0.1, on_divergence="freeze"
    )
    assert run.alive.tolist() == [True, False]
    assert torch.allclose(x[0][1], torch.full((3,), 0.8**3, dtype=torch.float64))
    assert np.isinf(run.loss[3:, 1].numpy()).all() and run.final_loss[1] == np.inf
    with pytest.raises(train.TrainingDiverged, match="step 3"):
        train.descend(lg, [torch.ones(2, 3)], n_steps=6, optimizer="sgd", lr=0.1)
    # recorded-only checks see it at the next record, through the average
    with pytest.raises(train.TrainingDiverged, match="step 5"):
        train.descend(
            lg, [torch.ones(2, 3)], n_steps=6, lr=0.1, optimizer="sgd",
            record_steps=[0, 5, 6], average=True, check="recorded",
        )  # fmt: skip
    with pytest.raises(TypeError, match="params"):
        train.descend(lg, [], n_steps=2)
    with pytest.raises(ValueError, match="params\\[1\\]"):
        train.descend(lg, [torch.ones(2, 3), torch.ones(3, 3)], n_steps=2)
    with pytest.raises(ValueError, match="optimizer"):
        train.descend(lg, [torch.ones(2, 3)], n_steps=2, optimizer="lbfgs")
    with pytest.raises(ValueError, match="record_steps"):
        train.descend(lg, [torch.ones(2, 3)], n_steps=2, record_steps=[5])


def test_descend_divergence_screen_flags_each_cause_and_no_healthy_model():
    # the per-step screen (one host sync) against the per-model check it stands in for
    def run(loss_of, grad_of, x0, **kw):
        def lg(k, xs):
            return loss_of(k, xs), [grad_of(k, xs)]

        return train.descend(lg, [x0], n_steps=4, optimizer="sgd", lr=0.1, **kw)

    x0 = torch.ones(2, 3, dtype=torch.float64)
    quad = lambda k, xs: (xs[0] ** 2).sum(-1)  # noqa: E731
    nan_grad = lambda k, xs: torch.where(  # noqa: E731
        torch.tensor([[False], [k >= 2]]), float("nan"), 2 * xs[0]
    )
    with pytest.raises(train.TrainingDiverged, match="step 2"):
        run(quad, nan_grad, x0.clone())
    # a parameter above max_abs (model 1 grows 4x a step): it is frozen, model 0 is not
    grow = lambda k, xs: torch.tensor([[1.0], [-30.0]], dtype=xs[0].dtype) * xs[0]  # noqa: E731
    out = run(quad, grow, x0.clone(), max_abs=50.0, on_divergence="freeze")
    assert out.alive.tolist() == [True, False]
    # finite losses whose sum overflows: the screen flags, the per-model check finds no one
    huge = lambda k, xs: torch.full((2,), 1e308, dtype=xs[0].dtype)  # noqa: E731
    out = run(huge, lambda k, xs: 2 * xs[0], x0.clone(), max_abs=50.0)
    assert out.alive.all() and np.isfinite(out.loss.numpy()).all()


def test_descend_screen_follows_non_contiguous_params_and_sgd_paths_agree():
    # the screen's 1-d views are made once; a non-contiguous parameter (whose reshape is a
    # copy) must still be seen growing past max_abs at the step it does
    def lg(k, xs):
        return (xs[0] ** 2).sum((-1, -2)), [-3.0 * xs[0]]  # each step multiplies by 1.3

    x0 = torch.ones(2, 3, 2, dtype=torch.float64).transpose(1, 2)
    assert not x0.is_contiguous()
    with pytest.raises(train.TrainingDiverged, match="step 3"):
        train.descend(lg, [x0], n_steps=6, optimizer="sgd", lr=0.1, max_abs=2.0)
    # one shared rate (one fused update) and the same rate per model (the per-tensor
    # loop) take the same steps, bit for bit
    rng = torch.Generator().manual_seed(5)
    a = [torch.randn(3, 4, generator=rng, dtype=torch.float64) for _ in range(2)]
    b = [x.clone() for x in a]

    def lg2(k, xs):
        return sum((x**4).sum(-1) for x in xs), [4 * x**3 for x in xs]

    train.descend(lg2, a, n_steps=5, optimizer="sgd", lr=0.01)
    train.descend(
        lg2,
        b,
        n_steps=5,
        optimizer="sgd",
        lr=torch.full((3,), 0.01, dtype=torch.float64),
    )
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    # parameters that require grad are stepped outside autograd's graph
    c = [torch.ones(2, 3, requires_grad=True)]
    train.descend(lambda k, xs: ((xs[0] ** 2).sum(-1), [2 * xs[0].detach()]), c,
                  n_steps=2, optimizer="sgd", lr=0.1)  # fmt: skip
    assert c[0].grad_fn is None and torch.allclose(c[0], torch.full((2, 3), 0.64))
