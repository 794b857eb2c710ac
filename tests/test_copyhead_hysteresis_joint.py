import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnbook.copyhead import action as A  # noqa: E402
from attnbook.copyhead import heads, hysteresis, joint_map, nested_statistics, plots  # noqa: E402

torch.set_num_threads(1)


def test_hysteresis_loop_shapes_and_plot():
    loop = hysteresis.hysteresis_loop(
        [40, 20, 80], 6, 3, n_datasets=2, n_steps=80, thin=4, seed=0
    )
    assert np.array_equal(loop.n_sequences, [20, 40, 80])  # sorted
    for arr in (loop.up, loop.down, loop.up_se, loop.down_se):
        assert arr.shape == (3, 2) and np.isfinite(arr).all()
    assert loop.wall_s > 0
    fig, ax = plt.subplots()
    plots.hysteresis(ax, loop, p_star=50.0, window=(30, 60))
    assert len(ax.get_legend().get_texts()) == 4
    plt.close(fig)
    with pytest.raises(ValueError, match="n_sequences"):
        hysteresis.hysteresis_loop([40], 6, 3)
    with pytest.raises(ValueError, match="n_steps"):
        hysteresis.hysteresis_loop([20, 40], 6, 3, n_steps=10, thin=5)


def test_joint_map_pools_below_the_marginal_onset():
    L, V = 8, 4
    P_on = A.linear_onset_p(seq_len=L, vocab_size=V)
    P_joint = V / np.sqrt(1 + 1 / L**2)
    assert 2 * P_joint < P_on
    st = nested_statistics([2, 8], L, V, n_datasets=2, seed=0)
    jm = joint_map.joint_map_heads(st, n_steps=800, seed=1)
    m = jm.m.reshape(2, 2)
    assert (m[0] < 1e-3).all()  # below P_joint: the zero network
    assert (m[1] > 0.3).all()  # 2 P_joint < P_on: the joint MAP pools
    marg = heads.linear_map_heads(st, n_steps=600, seed=2)
    assert (A.readouts(marg.params["theta"])["m"] < 1e-3).all()
    assert set(jm.params) == {"G", "W", "b"} and jm.objective.shape == (4,)
    with pytest.raises(TypeError, match="stats"):
        joint_map.joint_map_heads("x")
    with pytest.raises(TypeError, match="prior"):
        joint_map.joint_map_heads(st, sigma_x=1.0)
    soft = joint_map.joint_map_heads(st, kind="softmax", n_steps=50, seed=0)
    assert "b" not in soft.params and np.allclose(soft.m, 1.0)


def test_global_copy_order_from_the_archive():
    from pathlib import Path

    from attnbook.experiments import load
    from attnbook.experiments.copyhead import global_copy_order

    ds = load(Path(__file__).resolve().parents[1] / "results" / "copyhead-phase")
    g = global_copy_order(ds, kind="linear")
    assert g.dims == ("L", "V", "P", "chain")
    # aligned: the pooled, copying heads have c_G ≥ 0 whatever their mirror half
    assert float(g.sel(L=16, V=4).isel(P=-1).min()) > 0
    P = ds.P.values.copy()
    th = A.linear_saddle(P, seq_len=16, vocab_size=4).c_G
    assert np.abs(g.sel(L=16, V=4).mean("chain").values - th).max() < 0.02
    with pytest.raises(ValueError, match="method"):
        global_copy_order(ds, kind="linear", method="x")
    with pytest.raises(TypeError, match="archive"):
        global_copy_order({}, kind="linear")
    fig, ax = plt.subplots()
    plots.matched_series(ax, {"a": (P, th, P, th)}, ylabel="c_G")
    assert len(ax.lines) == 2
    plt.close(fig)


def test_softmax_barrier_and_scaling():
    from attnbook.copyhead import scaling

    b32 = scaling.softmax_barrier(seq_len=32, vocab_size=4)
    assert 1.0 < b32 < 2.0  # about 1.4 units of action at P*
    fss = scaling.softmax_scaling([32, 64], vocab_size=4)
    assert np.isclose(fss.barrier[0], b32)
    assert fss.barrier[1] > 5 * fss.barrier[0]
    assert (fss.window_lo < fss.p_star).all() and (fss.p_star < fss.window_hi).all()
    assert np.allclose(fss.window_over_L2, fss.window_hi / fss.seq_len**2)
    with pytest.raises(ValueError, match="critical length"):
        scaling.softmax_scaling([8, 32], vocab_size=4)
    with pytest.raises(ValueError, match="minimum"):
        scaling.softmax_barrier(seq_len=32, vocab_size=4, n_sequences=100.0)


@pytest.mark.slow
def test_crossover_derivations_match_the_solvers():
    from attnbook.copyhead import crossover

    P_sad, P_lead, s = crossover.derive_saddle_crossover()
    sub = {s["L"]: 1024, s["V"]: 8, s["kappa"]: 1, s["sigma_w"]: 1, s["sigma_g"]: 1}
    solver = A.linear_crossover_p(seq_len=1024, vocab_size=8)
    assert abs(float(P_sad.subs(sub)) / solver - 1) < 0.01
    assert abs(float(P_lead.subs(sub)) / (2 * 8 * 1024**1.5 / np.sqrt(7)) - 1) < 1e-12
    P_flu, v, s2 = crossover.derive_fluctuation_crossover()
    assert v == s2["sigma_g"] ** 2 / 2
    sub2 = {s2["L"]: 256, s2["V"]: 4, s2["kappa"]: 1}
    flu = A.linear_crossover_p(seq_len=256, vocab_size=4, fluctuations=True)
    assert abs(float(P_flu.subs(sub2)) / flu - 1) < 0.03


def test_rhat_by_size_and_phase_lines_on_given_axes():
    fig, ax = plt.subplots(1, 2)
    x = np.array([[0.5, 1.0, 2.0], [0.4, 1.0, 2.5]])
    rhat = np.ones((2, 3, 2)) + 0.01
    plots.rhat_by_size(ax[1], x, rhat, [32, 64])
    assert len(ax[1].lines) == 5  # two observables per L, and the threshold
    with pytest.raises(ValueError, match="rhat"):
        plots.rhat_by_size(ax[1], x, rhat[:, :2], [32, 64])
    out = plots.phase_lines(
        None, {"t": ([8, 16], [1, 4], "-")}, {"p": ([8], [1])}, ax=ax[0]
    )
    assert out is fig and len(ax[0].lines) == 2
    plt.close(fig)
