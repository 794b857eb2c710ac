import numpy as np
import pytest
import torch

from attnbook.copyhead import diagnostics as D
from attnbook.copyhead import heads, nested_statistics

torch.set_num_threads(1)


def test_block_step_sizes_linear_and_softmax():
    st = nested_statistics([40, 160], 6, 3, seed=0)
    theta = 0.5 * torch.randn(2, 37, dtype=torch.float64)
    eta, lam = D.block_step_sizes(st, theta, fraction=0.2, n_mode_steps=50, seed=1)
    assert eta.shape == theta.shape and set(lam) == {"G", "b"}
    # the bias carries the data's stiffness, which grows with P
    assert (lam["b"] > lam["G"]).all() and lam["b"][1] > lam["b"][0]
    assert torch.allclose(eta[:, -1], 0.2 / lam["b"])
    assert torch.allclose(eta[:, 0], 0.2 / lam["G"])
    eta_s, lam_s = D.block_step_sizes(
        st, theta[:, :36], kind="softmax", n_mode_steps=0, seed=1
    )
    assert set(lam_s) == {"G"} and eta_s.shape == (2, 36)
    with pytest.raises(ValueError, match="theta"):
        D.block_step_sizes(st, theta[:, :36])
    with pytest.raises(ValueError, match="fraction"):
        D.block_step_sizes(st, theta, fraction=4.0)
    with pytest.raises(TypeError, match="stats"):
        D.block_step_sizes("x", theta)


def test_sgld_targets_shapes_and_halving_interface():
    st = nested_statistics([30, 60], 5, 3, seed=1)
    r = D.sgld_targets(st, n_chains=3, n_steps=300, burn_in=100, thin=4, seed=0)
    assert r.obs.shape == (50, 3, 2, 2)
    for key in ("mean", "mcse", "var", "var_mcse", "rhat", "ess"):
        assert r[key].shape == (2, 2) and np.isfinite(r[key]).all()
    assert r.obs[..., 0].min() >= 0  # |m| is sign-invariant
    half = D.sgld_targets(
        st,
        n_chains=3,
        n_steps=200,
        burn_in=100,
        thin=4,
        step_size=r.step_size / 2,
        seed=1,
    )
    assert half.lambda_max == {} and torch.equal(half.step_size, r.step_size / 2)
    with pytest.raises(ValueError, match="init"):
        D.sgld_targets(st, n_chains=3, n_steps=10, init=torch.zeros(2, 26))
    with pytest.raises(ValueError, match="n_chains"):
        D.sgld_targets(st, n_chains=0, n_steps=10)


def test_target_chains_targets_selects_the_rows_of_those_targets():
    st = nested_statistics([20, 40, 80], 4, 3, seed=2)
    r = D.sgld_targets(st, n_chains=2, n_steps=120, burn_in=20, thin=5, seed=3)
    sub = r.targets([2, 0])
    assert sub.obs.shape == (20, 2, 2, 2)
    np.testing.assert_array_equal(sub.obs, r.obs[:, :, [2, 0]])
    # chain j of target i at j · n_targets + i: rows 2, 0 (chain 0) and 5, 3 (chain 1)
    rows = [2, 0, 5, 3]
    assert torch.equal(sub.samples, r.samples[:, rows])
    assert torch.equal(sub.step_size, r.step_size[rows])
    assert torch.equal(sub.lambda_max["b"], r.lambda_max["b"][rows])
    assert torch.equal(sub.final, r.final[rows])
    np.testing.assert_allclose(sub["mean"], r["mean"][[2, 0]], rtol=1e-12)


def test_step_halving_runs_both_steps_in_one_batch():
    st = nested_statistics([30, 90], 5, 3, seed=4)
    full, half = D.step_halving(
        st, n_chains=3, n_steps=300, burn_in=100, thin=4, fraction=0.2, seed=5
    )
    for r in (full, half):
        assert r.obs.shape == (50, 3, 2, 2) and np.isfinite(r["mean"]).all()
    # the rule for each chain's own curvature, and half of it for the second set of chains
    assert torch.allclose(full.step_size[:, -1], 0.2 / full.lambda_max["b"])
    assert torch.allclose(half.step_size[:, -1], 0.1 / half.lambda_max["b"])
    assert torch.allclose(half.step_size[:, 0], 0.1 / half.lambda_max["G"])
    # fresh chains: the two halves start from different points
    assert not torch.equal(full.samples[0], half.samples[0])
    again = D.step_halving(
        st, n_chains=3, n_steps=300, burn_in=100, thin=4, fraction=0.2, seed=5
    )
    assert torch.equal(again[1].samples, half.samples)  # a seed gives the same chains
    with pytest.raises(TypeError, match="stats"):
        D.step_halving("x")
    with pytest.raises(ValueError, match="n_chains"):
        D.step_halving(st, n_chains=0)


def test_sgld_targets_softmax_hot_start():
    st = nested_statistics([50], 6, 3, seed=2)
    hot = heads.copy_start(2, 6, seed=0)
    r = D.sgld_targets(
        st,
        n_chains=2,
        kind="softmax",
        init=hot,
        n_steps=200,
        burn_in=50,
        thin=5,
        seed=0,
    )
    assert r.obs.shape == (30, 2, 1, 2)
    assert np.allclose(r.obs[..., 0], 1.0)  # softmax rows sum to one


def test_observable_summary_iid():
    x = torch.randn(
        200, 4, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    s = D.observable_summary(x)
    assert np.allclose(s["var"], 1.0, atol=0.15)
    assert (s["rhat"] < 1.05).all() and (s["ess"] > 400).all()
    with pytest.raises(ValueError, match="n_draws"):
        D.observable_summary(x[0])


@pytest.mark.slow
def test_sgld_crossover_experiment_smoke_point():
    import dataclasses

    from attnbook import experiments as E
    from attnbook.experiments.copyhead import crossover_grid

    exp = E.get("copyhead-sgld-crossover")
    (_, cfg), *_ = exp.points("smoke")
    out = E.run_point("copyhead-sgld-crossover", cfg)
    n_p, n_data, n_chains = cfg.n_p, cfg.n_data, cfg.n_chains
    for k in ("mean", "mcse", "var", "rhat", "ess"):
        assert out[k].shape == (n_p, n_data, 2) and np.isfinite(out[k]).all(), k
    assert out["lambda_G"].shape == (n_p, n_data, n_chains)
    assert (out["lambda_b"] > out["lambda_G"]).all()  # the bias is the stiff block
    P = out["P"]
    assert np.all(np.diff(P) > 0)
    assert (
        P[0] < out["p_saddle"] < out["p_fluct"] < P[-1]
    )  # the grid spans both theories
    assert (out["mean"][..., 0] >= 0).all()  # |m|
    again = E.run_point("copyhead-sgld-crossover", cfg)
    np.testing.assert_array_equal(out["mean"], again["mean"])  # same seed, same numbers
    other = E.run_point("copyhead-sgld-crossover", dataclasses.replace(cfg, seed=1))
    assert not np.array_equal(out["mean"], other["mean"])
    with pytest.raises(ValueError, match="float64"):
        E.run_point(
            "copyhead-sgld-crossover", dataclasses.replace(cfg, dtype="float32")
        )
    assert len(crossover_grid(64, 4, 6)) == 6
    assert {c.L for _, c in exp.points("paper")} == {64, 128, 256}
