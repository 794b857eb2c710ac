"""Helpers moved out of the Part I chapters: run analysis, entropy levels, the rank-one plateau,
the seed convention, errors and plots."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnbook import (
    errors,  # noqa: E402
    focus,  # noqa: E402
)
from attnbook.device import as_generator  # noqa: E402
from attnbook.focus import metrics, plots, theory  # noqa: E402
from attnbook.markov import (  # noqa: E402
    perturbed_chain,
    sample_sequences,
    stationary,
)

torch.set_num_threads(1)


def test_errors_are_the_shared_classes():
    assert focus.FlowDiverged is errors.FlowDiverged
    assert focus.TrainingDiverged is errors.TrainingDiverged
    assert issubclass(focus.FlowDiverged, errors.DivergenceError)


def test_divergence_carries_partial():
    P = perturbed_chain(4, 0.7, 0.02, 0.5)
    with pytest.raises(errors.FlowDiverged) as info:
        focus.gradient_descent(
            focus.init_params(4, 5, eps=3.0, seed=0), P, lr=1e3, n_steps=50
        )
    assert info.value.partial is not None and info.value.time is not None


def test_seed_convention():
    a = focus.init_params(3, 2, eps=1.0, seed=5)
    b = focus.init_params(3, 2, eps=1.0, seed=torch.Generator().manual_seed(5))
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)
    assert as_generator(None) is None
    torch.manual_seed(7)
    c = focus.init_params(3, 2, eps=1.0)
    torch.manual_seed(7)
    e = focus.init_params(3, 2, eps=1.0)
    torch.testing.assert_close(c.W0, e.W0)  # seed=None draws from the global generator
    P = perturbed_chain(4, 0.7, 0.02, 0.5)
    g = torch.Generator().manual_seed(3)
    assert torch.equal(
        sample_sequences(P, 5, 7, seed=3), sample_sequences(P, 5, 7, seed=g)
    )
    with pytest.raises(TypeError):
        focus.init_params(3, 2, 1.0)  # eps is keyword-only


def test_entropy_levels_and_time_helpers():
    w = np.array([[0.7, 0.2, 0.1], [1 / 3, 1 / 3, 1 / 3]])
    pi = np.array([0.5, 0.3, 0.2])
    kl = metrics.attention_kl(w, pi)
    np.testing.assert_allclose(kl[0], (w[0] * np.log(w[0] / pi)).sum())
    # exact when the context holds s * pi_k copies of each type
    s = 10
    counts = (s * pi).astype(int)
    per_position = np.repeat(w[0] / counts, counts)
    H_pos = -(per_position * np.log(per_position)).sum()
    assert metrics.position_entropy(w, pi, s)[0] == pytest.approx(H_pos)
    with pytest.raises(ValueError):
        metrics.position_entropy(w, pi, 0)
    t = np.array([0.0, 1.0, 2.0, 3.0])
    assert metrics.time_index(t, 1.5) == 2
    assert metrics.time_index(t, 99) == 3
    assert metrics.first_time(t, [True, False, True, True], after=0.5) == 2.0
    assert np.isnan(metrics.first_time(t, [False] * 4))


def test_analyse_flow_matches_metrics_and_stages():
    P = perturbed_chain(4, 0.7, 0.02, 0.5)
    run = focus.population_flow(
        focus.init_params(4, 6, eps=1e-3, seed=1, n_models=2),
        P,
        150.0,
        t_eval=np.linspace(0, 150, 301),
    )
    m, st = metrics.analyse_flow(run, 1)
    ref = metrics.trajectory_metrics(
        run.W0[:, 1], run.W1[:, 1], run.WQ[:, 1], run.WK[:, 1], run.pi
    )
    np.testing.assert_allclose(m["entropy_uniform"], ref["entropy_uniform"])
    st_ref = metrics.stage_times(run.t, run.loss[:, 1], ref, run.pi)
    np.testing.assert_equal(list(st.values()), list(st_ref.values()))
    assert st["I_end"] < st["II_start"] < st["II_end"] < st["III_end"]
    # the position-level divergence rises through stages II-III while H_u rebounds
    i2, i3 = (metrics.time_index(run.t, st[k]) for k in ("II_end", "III_end"))
    assert m["kl_uniform"][i3] > m["kl_uniform"][i2] > m["kl_uniform"][0]
    assert m["entropy_uniform"][i3] > m["entropy_uniform"][i2]


def test_rank_one_minimum_is_a_critical_point_and_matches_the_flow():
    P = perturbed_chain(4, 0.7, 0.0, 0.5)
    run = focus.population_flow(
        focus.init_params(4, 6, eps=1e-3, seed=0),
        P,
        400.0,
        t_eval=np.linspace(0, 400, 81),
    )
    y = theory.project_rank_one(run.params(-1))
    loss, y_min = theory.rank_one_minimum(P, y)
    assert run.loss[-1] == pytest.approx(loss, abs=1e-7)
    g = focus.population_gradient(*theory.reduced_to_params(y_min, 6), P)
    assert max(float(x.abs().max()) for x in g) < 1e-6
    # the projection keeps Phi restricted to alpha and the loss near the rank-one state
    proj = focus.population_loss(*theory.reduced_to_params(y, 6), P)
    assert float(proj) == pytest.approx(run.loss[-1], abs=1e-6)
    L0, lam0 = theory.plateau_instability(P, y, 6)
    assert L0 == pytest.approx(loss) and abs(lam0) < 1e-7
    _, lam = theory.plateau_instability(perturbed_chain(4, 0.7, 0.04, 0.5), y, 6)
    assert lam > 1e-3  # the asymmetry makes the plateau a saddle
    with pytest.raises(ValueError):
        theory.rank_one_minimum(P, y[:-1])


def test_rank_one_lowest_minimum_is_the_lowest_of_independent_starts():
    P = perturbed_chain(4, 0.7, 0.0, 0.5)
    loss, y, losses = theory.rank_one_lowest_minimum(P, n_starts=4, seed=1)
    assert losses.shape == (4,) and loss == losses.min()
    assert float(focus.population_loss(*theory.rank_one_params(y), P)) == pytest.approx(
        loss, abs=1e-12
    )
    # the same seed gives the same starts; a single start can only be higher or equal
    again = theory.rank_one_lowest_minimum(P, n_starts=4, seed=1)
    assert np.array_equal(again[2], losses)
    assert theory.rank_one_lowest_minimum(P, n_starts=1, seed=1)[0] >= loss - 1e-12
    with pytest.raises(ValueError, match="n_starts"):
        theory.rank_one_lowest_minimum(P, n_starts=0)
    with pytest.raises(ValueError, match="P"):
        theory.rank_one_lowest_minimum(torch.stack([P, P]), seed=0)


def test_rank_one_orbits_are_exact_symmetries_of_the_rank_one_loss():
    P = perturbed_chain(4, 0.7, 0.02, 0.5)
    y = np.random.default_rng(3).normal(size=10)

    def loss(yy):
        return float(focus.population_loss(*theory.rank_one_params(yy), P))

    d = 4
    scaled = np.concatenate([1.7 * y[:d], y[d : 2 * d] / 1.7, y[2 * d :] / 1.7])
    swapped = np.concatenate([y[: 2 * d], [0.4 * y[2 * d], y[2 * d + 1] / 0.4]])
    shifted = np.concatenate([y[:d], y[d : 2 * d] + 2.5, y[2 * d :]])
    for moved in (scaled, swapped, shifted):  # the finite symmetry maps
        assert loss(moved) == pytest.approx(loss(y), abs=1e-12)
    Z = theory.rank_one_orbits(y)
    for z in Z:  # their tangents, by central differences
        h = 1e-5
        assert abs(loss(y + h * z) - loss(y - h * z)) / (2 * h) < 1e-8
    assert np.linalg.matrix_rank(Z) == 3
    with pytest.raises(ValueError, match="y must"):
        theory.rank_one_orbits(y[:-1])


@pytest.mark.slow
def test_solve_reduced_matches_the_full_flow():
    P = perturbed_chain(4, 0.7, 0.02, 0.5)
    y0 = np.array([0.8, 0.2, 0.15, 0.1, 1.0, -0.5, -0.2, -0.3, 0.05, 0.04])
    t = np.linspace(0, 20, 21)
    t_red, y, loss = theory.solve_reduced(y0, P, t)
    full = focus.population_flow(theory.reduced_to_params(y0, 5), P, 20.0, t_eval=t)
    np.testing.assert_allclose(loss, full.loss, atol=1e-7)
    assert y.shape == (10, 21)
    with pytest.raises(ValueError):
        theory.solve_reduced(y0, P, [1.0])


def test_focus_episode_and_change_correlation():
    weight = np.array([[0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    H = np.array([1.0, 0.5, 0.9])
    ep = metrics.focus_episode(weight, H)
    assert ep["peak"] == 1 and ep["token"] == 0
    assert ep["gain"] == pytest.approx(3.0) and ep["kept"] == pytest.approx(0.5)
    rng = np.random.default_rng(0)
    a = rng.random((4, 3, 3))
    c = metrics.change_correlation(a, 2 * a + 1)
    assert np.isnan(c[0]) and np.allclose(c[1:], 1.0)
    with pytest.raises(ValueError):
        metrics.change_correlation(a, a[:2])
    w, Hu = metrics.key_weights(
        *focus.init_params(3, 2, eps=0.5, seed=0)[0:1],
        *focus.init_params(3, 2, eps=0.5, seed=0)[2:],
        np.array([0.5, 0.3, 0.2]),
    )
    assert w.shape == (3,) and np.isclose(w.sum(), 1.0) and Hu > 0


def test_markov_context_loss_is_exported():
    P = perturbed_chain(4, 0.7, 0.02, 0.5)
    ctx = sample_sequences(P, 400, 16, seed=0)
    p = focus.init_params(4, 5, eps=0.5, seed=0)
    assert np.isfinite(float(focus.markov_context_loss(p, ctx, P)))
    assert torch.allclose(stationary(P).sum(), torch.tensor(1.0, dtype=torch.float64))


def test_plots_run():
    import matplotlib.pyplot as plt

    t = np.linspace(1, 10, 10)
    st = {
        "I_start": 1.0,
        "I_end": 2.0,
        "II_start": 3.0,
        "II_end": 4.0,
        "III_end": 5.0,
        "IV_escape": float("nan"),
    }
    fig = plots.curve_panels(
        t,
        [("a", [(t, "x", "")]), ("b", [((t, t**2), "", "k--")])],
        stages=st,
        xscale="log",
        yscales={1: "log"},
        hlines={0: [(1.0, ":")]},
    )
    assert len(fig.axes) == 2
    fig2 = plots.attention_maps([np.eye(3)] * 2, ["a", "b"])
    fig3 = plots.embedding_paths(np.random.default_rng(0).random((5, 3, 3)), [0, 4])
    err = np.random.default_rng(1).random((2, 3, 4)) + 0.1
    fig4 = plots.error_panels([64, 256], [8, 32, 128], err)
    assert len(fig4.axes) == 2
    with pytest.raises(ValueError, match="err must have shape"):
        plots.error_panels([64], [8, 32, 128], err)
    for f in (fig, fig2, fig3, fig4):
        plt.close(f)


def test_rank_one_params_is_the_m1_model_of_the_reduced_coordinates():
    """The m = 1 weights give the same loss as the reduced coordinates embedded in m = 6."""
    P = perturbed_chain(4, 0.7, 0.02, 0.5)
    y = np.random.default_rng(0).normal(size=10) * 0.5
    p1 = theory.rank_one_params(y)
    assert p1.W0.shape == (4, 1) and p1.WQ.shape == (1, 1)
    a = focus.population_loss(*p1, P)
    b = focus.population_loss(*theory.reduced_to_params(y, 6), P)
    assert abs(float(a) - float(b)) < 1e-12
    with pytest.raises(ValueError, match="y must be"):
        theory.rank_one_params(np.zeros(5))


def test_population_adam_is_torch_adam_on_the_exact_loss():
    P = perturbed_chain(4, 0.7, 0.02, 0.5)
    start = focus.init_params(4, 3, eps=0.1, seed=0)
    run = focus.gradient_descent(start, P, lr=0.01, n_steps=5, optimizer="adam")
    w = [x.clone().requires_grad_(True) for x in start]
    opt = torch.optim.Adam(w, lr=0.01)
    for _ in range(5):
        opt.zero_grad()
        focus.population_loss(*w, P).backward()
        opt.step()
    np.testing.assert_allclose(run.W0[-1], w[0].detach().numpy(), atol=1e-12)
    with pytest.raises(ValueError, match="optimizer"):
        focus.gradient_descent(start, P, lr=0.1, n_steps=2, optimizer="sgd")


def test_window_attention_entropy_of_uniform_attention_is_log_of_the_keys():
    """W_Q = 0: uniform attention over the unmasked positions, entropy log(count)."""
    p = focus.init_params(4, 3, eps=0.5, seed=0, n_models=2)
    p = focus.Params(p.W0, p.W1, torch.zeros_like(p.WQ), p.WK)
    ctx = torch.tensor([[0, 1, 2, 3, 0, 1], [3, 3, 3, 3, 3, 1]])
    H = metrics.window_attention_entropy(p, ctx)
    np.testing.assert_allclose(H, np.log(6.0), atol=1e-12)
    mask = torch.tensor([False, False, False, True])
    H = metrics.window_attention_entropy(p, ctx, masked_keys=mask)
    np.testing.assert_allclose(H, (np.log(5.0) + np.log(1.0)) / 2, atol=1e-12)
    one = metrics.window_attention_entropy(focus.Params(*(x[0] for x in p)), ctx)
    assert isinstance(one, float)


def test_symmetric_plateau_changes_stability_with_laziness():
    start = np.array([-1.8, 0.5, 0.5, 0.5, -1.2, 0.4, 0.4, 0.4, 1.1, 1.1])
    P5 = perturbed_chain(4, 0.7, 0.0, 0.5)
    loss, y, curv = theory.symmetric_plateau(P5, start)
    assert loss == pytest.approx(theory.rank_one_minimum(P5, start)[0], abs=1e-10)
    assert np.ptp(y[1:4]) < 1e-12 and np.ptp(y[5:8]) < 1e-12
    g = focus.population_gradient(*theory.rank_one_params(y), P5)
    assert max(float(x.abs().max()) for x in g) < 1e-6
    assert curv.shape == (4,) and curv[0] > 0.01  # stable: a symmetric start stays
    P8 = perturbed_chain(4, 0.7, 0.0, 0.8)
    loss8, y8, curv8 = theory.symmetric_plateau(P8, start)
    assert curv8[0] < -0.01  # a saddle along the manifold
    # a symmetry-breaking nudge lowers the loss below the symmetric critical point
    assert theory.rank_one_minimum(P8, y8 + 1e-3 * np.eye(10)[1])[0] < loss8 - 1e-3
    with pytest.raises(ValueError, match="permutations"):
        theory.symmetric_plateau(perturbed_chain(4, 0.7, 0.02, 0.5), start)
    with pytest.raises(ValueError):
        theory.symmetric_plateau(P5, start[:-1])


def test_rare_spread():
    alpha = np.eye(5)[0]
    W0 = np.outer([2.0, 0.5, 0.5, 0.5], alpha)
    assert float(metrics.rare_spread(W0)) == pytest.approx(0.0, abs=1e-12)
    W0[1:, 0] = [0.4, 0.5, 0.6]
    assert float(metrics.rare_spread(W0)) == pytest.approx(np.sqrt(0.02))
    assert metrics.rare_spread(np.stack([W0, -W0])).shape == (2,)
    with pytest.raises(ValueError):
        metrics.rare_spread(np.ones((2, 3)))
