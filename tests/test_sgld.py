import math

import numpy as np
import pytest
import torch

from attnbook import sgld

torch.set_num_threads(1)


def gaussian_potential(mean, prec):
    def U(theta):
        d = theta - mean
        return 0.5 * torch.einsum("ci,ij,cj->c", d, prec, d)

    return U


@pytest.mark.slow
def test_gaussian_moments_and_diagnostics():
    mean = torch.tensor([1.0, -2.0], dtype=torch.float64)
    cov = torch.tensor([[1.0, 0.6], [0.6, 2.0]], dtype=torch.float64)
    U = gaussian_potential(mean, torch.linalg.inv(cov))
    init = torch.zeros(64, 2, dtype=torch.float64)
    res = sgld.sample(
        U, init, step_size=0.05, n_steps=12000, burn_in=2000, thin=10, seed=0
    )
    x = res.samples
    assert x.shape == (1000, 64, 2)
    flat = x.reshape(-1, 2)
    # Monte Carlo error of the mean from the sampler's own effective sample size
    mc_err = torch.sqrt(torch.diagonal(cov) / res.ess)
    assert torch.all((flat.mean(0) - mean).abs() < 4 * mc_err)
    emp_cov = torch.cov(flat.T)
    # SGLD's O(η) discretisation bias: for a Gaussian the stationary covariance is
    # inflated by about (1 + η/4 · λ) ≤ 2 % here; tolerate 6 % + MC error
    assert torch.allclose(emp_cov, cov, rtol=0.06, atol=0.04)
    assert res.diagnostics["max_rhat"] < 1.05
    assert res.diagnostics["min_ess"] > 500
    assert res.rhat.shape == (2,) and res.ess.shape == (2,)
    assert res.diagnostics["potential"].shape == (1000, 64)


def test_bias_shrinks_with_step_size():
    # 1-d Gaussian with precision 4: the exact SGLD stationary variance is
    # 1/(λ(1 − ηλ/4)) for the discretised Ornstein-Uhlenbeck process
    lam = 4.0
    U = lambda th: 0.5 * lam * (th**2).sum(-1)  # noqa: E731
    vs = []
    for eta in (0.2, 0.05):
        res = sgld.sample(
            U,
            torch.zeros(2000, 1, dtype=torch.float64),
            step_size=eta,
            n_steps=1500,
            burn_in=300,
            thin=3,
            seed=1,
        )
        v = float(res.samples.var())
        exact = 1 / (lam * (1 - eta * lam / 4))
        assert v == pytest.approx(exact, rel=0.03)
        vs.append(v)
    assert abs(vs[1] - 1 / lam) < abs(vs[0] - 1 / lam)


def test_minibatch_gradients_unbiased():
    # posterior of a Gaussian mean with N data points, minibatches of 10 rescaled by N/10
    g = torch.Generator().manual_seed(3)
    data = 1.5 + torch.randn(200, generator=g, dtype=torch.float64)
    N, n = len(data), 10

    def U(theta, idx):
        return 0.5 * theta[:, 0] ** 2 + (N / n) * 0.5 * (
            (theta - data[idx][None, :]) ** 2
        ).sum(-1)

    def batch(step, gen):
        return torch.randint(N, (n,), generator=gen)

    res = sgld.sample(
        U,
        torch.zeros(200, 1, dtype=torch.float64),
        step_size=2e-4,
        n_steps=2000,
        burn_in=500,
        thin=5,
        seed=0,
        minibatch=batch,
    )
    post_mean = data.sum() / (N + 1)
    assert float(res.samples.mean()) == pytest.approx(float(post_mean), abs=0.02)


def test_reproducible_and_per_chain_steps():
    U = lambda th: 0.5 * (th**2).sum(-1)  # noqa: E731
    a = sgld.sample(U, torch.zeros(4, 3), step_size=0.1, n_steps=50, seed=7).samples
    b = sgld.sample(U, torch.zeros(4, 3), step_size=0.1, n_steps=50, seed=7).samples
    assert torch.equal(a, b)
    steps = np.array([0.1, 0.1, 0.01, 0.01])
    c = sgld.sample(U, np.full((4, 256), 10.0), step_size=steps, n_steps=50, seed=7)
    assert c.samples.shape == (50, 4, 256)
    # each chain drifts with its own step: on U = |θ|²/2 the Welling–Teh mean obeys
    # m ← (1 − η/2) m, so samples[t] (after t steps) has mean 10 (1 − η/2)^t: 0.81 for
    # η = 0.1 and 7.82 for η = 0.01 at t = 49; the noise moves a mean over 256 coordinates
    # by less than 0.4 (over 6σ, σ ≤ 1/16; the worst of 200 seeds was 0.24)
    t = np.arange(50)[:, None]
    drift = 10 * (1 - steps[None, :] / 2) ** t  # (step, chain)
    mean = c.samples.mean(-1).numpy()
    assert np.abs(mean - drift).max() < 0.4
    assert np.abs(mean[-1, 2:] - mean[-1, :2].mean()).min() > 5  # the steps differ


def test_divergence_is_reported_not_nan():
    U = lambda th: 0.5 * 1e4 * (th**2).sum(-1)  # noqa: E731
    with pytest.raises(sgld.SGLDDivergence, match="smaller step_size"):
        sgld.sample(U, torch.ones(3, 2), step_size=1.0, n_steps=2000, seed=0)


def test_validation():
    U = lambda th: (th**2).sum(-1)  # noqa: E731
    with pytest.raises(ValueError, match="step_size"):
        sgld.sample(U, torch.zeros(2, 2), step_size=-1.0, n_steps=10)
    with pytest.raises(ValueError, match="burn_in"):
        sgld.sample(U, torch.zeros(2, 2), step_size=0.1, n_steps=10, burn_in=10)
    with pytest.raises(TypeError, match="potential"):
        sgld.sample(3, torch.zeros(2, 2), step_size=0.1, n_steps=10)
    with pytest.raises(ValueError, match="init"):
        sgld.sample(
            U, torch.tensor([np.nan, 0.0]).reshape(2, 1), step_size=0.1, n_steps=10
        )
    with pytest.raises(ValueError, match="shape"):
        sgld.sample(lambda th: th.sum(), torch.zeros(2, 2), step_size=0.1, n_steps=10)
    with pytest.raises(TypeError, match="n_steps"):
        sgld.sample(U, torch.zeros(2, 2), step_size=0.1, n_steps=1.5)


def test_rhat_and_ess_on_known_draws():
    g = torch.Generator().manual_seed(0)
    iid = torch.randn(1000, 8, 3, generator=g, dtype=torch.float64)
    assert torch.all((sgld.split_rhat(iid) - 1).abs() < 0.01)
    ess = sgld.effective_sample_size(iid)
    assert torch.all((ess > 6000) & (ess < 10500))
    # AR(1) with coefficient φ: ESS/N = (1 − φ)/(1 + φ)
    phi = 0.9
    x = torch.zeros(4000, 8, dtype=torch.float64)
    e = torch.randn(4000, 8, generator=g, dtype=torch.float64)
    for t in range(1, 4000):
        x[t] = phi * x[t - 1] + e[t]
    ess_ar = float(sgld.effective_sample_size(x))
    assert ess_ar == pytest.approx(32000 * (1 - phi) / (1 + phi), rel=0.25)
    # chains stuck at different places: R-hat far above 1
    shifted = iid + torch.arange(8, dtype=torch.float64)[None, :, None]
    assert torch.all(sgld.split_rhat(shifted) > 1.5)
    with pytest.raises(ValueError, match="samples"):
        sgld.split_rhat(torch.zeros(3, 2))


def test_potential_is_recorded_for_the_kept_state():
    def pot(theta):
        return 0.5 * (theta**2).sum(-1)

    res = sgld.sample(
        pot,
        torch.ones(3, 2, dtype=torch.float64),
        step_size=0.1,
        n_steps=30,
        burn_in=5,
        thin=5,
        seed=0,
    )
    expected = 0.5 * (res.samples**2).sum(-1)
    assert torch.allclose(res.diagnostics["potential"], expected, rtol=1e-14)
    assert res.diagnostics["steps"].tolist() == [5, 10, 15, 20, 25]
    assert res.diagnostics["wall_s"] > 0


def test_sampler_diverged_is_the_shared_exception_with_partial_samples():
    from attnbook.errors import DivergenceError, SamplerDiverged

    assert sgld.SGLDDivergence is SamplerDiverged

    def pot(theta):
        return (theta**4).sum(-1)

    with pytest.raises(SamplerDiverged) as info:
        sgld.sample(
            pot,
            torch.full((2, 1), 0.5, dtype=torch.float64),
            step_size=1.5,
            n_steps=200,
            seed=0,
        )
    assert isinstance(info.value, DivergenceError) and info.value.time is not None
    assert info.value.partial is not None


def test_seed_accepts_a_generator_and_none_uses_the_global_generator():
    def pot(theta):
        return 0.5 * (theta**2).sum(-1)

    x0 = torch.zeros(2, 1, dtype=torch.float64)
    a = sgld.sample(
        pot, x0, step_size=0.1, n_steps=5, seed=torch.Generator().manual_seed(4)
    )
    b = sgld.sample(pot, x0, step_size=0.1, n_steps=5, seed=4)
    assert torch.equal(a.samples, b.samples)
    torch.manual_seed(1)
    c = sgld.sample(pot, x0, step_size=0.1, n_steps=5)
    torch.manual_seed(1)
    d = sgld.sample(pot, x0, step_size=0.1, n_steps=5)
    assert torch.equal(c.samples, d.samples)


def test_rank_normalized_rhat_flags_shifted_and_rescaled_chains():
    g = torch.Generator().manual_seed(0)
    iid = torch.randn(500, 4, 1, generator=g, dtype=torch.float64)
    assert float(sgld.rank_normalized_rhat(iid).max()) < 1.02
    shifted = iid.clone()
    shifted[:, 0] += 2.0
    scaled = iid.clone()
    scaled[:, 0] *= 5.0  # same location, different scale: the folded part catches it
    assert float(sgld.rank_normalized_rhat(shifted).max()) > 1.2
    assert float(sgld.rank_normalized_rhat(scaled).max()) > 1.1
    assert float(sgld.split_rhat(scaled).max()) < float(
        sgld.rank_normalized_rhat(scaled).max()
    )


def test_hessian_lambda_max_and_mask():
    prec = torch.diag(torch.tensor([1.0, 4.0, 50.0], dtype=torch.float64))
    U = gaussian_potential(torch.zeros(3, dtype=torch.float64), prec)
    theta = torch.randn(
        5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    lam = sgld.hessian_lambda_max(U, theta, n_iters=60, seed=1)
    assert lam.shape == (5,)
    assert torch.allclose(lam, torch.full((5,), 50.0, dtype=torch.float64), rtol=1e-6)
    sub = sgld.hessian_lambda_max(
        U, theta, n_iters=60, mask=[True, True, False], seed=1
    )
    assert torch.allclose(sub, torch.full((5,), 4.0, dtype=torch.float64), rtol=1e-6)
    with pytest.raises(ValueError, match="mask"):
        sgld.hessian_lambda_max(U, theta, mask=[False, False, False])
    with pytest.raises(ValueError, match="mask"):
        sgld.hessian_lambda_max(U, theta, mask=[True, False])
    with pytest.raises(TypeError, match="potential"):
        sgld.hessian_lambda_max(3.0, theta)


def test_step_size_rule_and_per_coordinate_steps():
    eta = sgld.step_size_rule(torch.tensor([10.0, 100.0]), fraction=0.2)
    assert torch.allclose(eta, torch.tensor([0.02, 0.002]))
    with pytest.raises(ValueError, match="lambda_max"):
        sgld.step_size_rule([1.0, -1.0])
    with pytest.raises(ValueError, match="fraction"):
        sgld.step_size_rule([1.0], fraction=5.0)
    # a diagonal preconditioner keeps the target: one step per coordinate
    prec = torch.diag(torch.tensor([1.0, 100.0], dtype=torch.float64))
    U = gaussian_potential(torch.zeros(2, dtype=torch.float64), prec)
    init = torch.zeros(64, 2, dtype=torch.float64)
    steps = torch.tensor([0.1, 0.001], dtype=torch.float64).expand(64, 2)
    res = sgld.sample(
        U, init, step_size=steps, n_steps=6000, burn_in=1000, thin=5, seed=0
    )
    var = res.samples.reshape(-1, 2).var(0)
    assert torch.allclose(
        var, torch.tensor([1.0, 0.01], dtype=torch.float64), rtol=0.06
    )
    with pytest.raises(ValueError, match="step_size"):
        sgld.sample(U, init, step_size=-steps, n_steps=10)


def test_monte_carlo_se_matches_iid_error():
    x = torch.randn(
        400, 4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2)
    )
    se = sgld.monte_carlo_se(x)
    assert se.shape == (3,)
    # independent draws: ESS ≈ n, so se ≈ sd/√1600 = 0.025
    assert torch.allclose(se, torch.full((3,), 0.025, dtype=torch.float64), rtol=0.15)


def test_per_coordinate_diagnostics_in_chunks_match_the_whole():
    from attnbook.sgld import _per_coordinate

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, 5, 7, generator=gen, dtype=torch.float64)
    for fn in (sgld.split_rhat, sgld.effective_sample_size):
        whole = fn(x)
        chunked = _per_coordinate(fn, x, budget=40 * 3 * 4)  # 4 coordinates a chunk
        assert chunked.shape == whole.shape == (5, 7)
        torch.testing.assert_close(
            chunked, whole, rtol=1e-10, atol=1e-12
        )  # FFT sizes differ


def test_diagnostics_are_computed_when_first_read():
    init = torch.zeros(3, 2, dtype=torch.float64)
    res = sgld.sample(
        lambda x: 0.5 * (x**2).sum(-1), init, step_size=0.1, n_steps=60, seed=0
    )
    d = res.diagnostics
    assert "rhat" not in d and {"potential", "steps", "wall_s"} <= set(d)
    torch.testing.assert_close(res.rhat, sgld.split_rhat(res.samples))
    assert d["min_ess"] == float(sgld.effective_sample_size(res.samples).min())
    assert d.get("max_rhat") == float(res.rhat.max()) and d.get("nope", 7) == 7
    with pytest.raises(KeyError):
        d["nope"]
    short = sgld.sample(
        lambda x: (x**2).sum(-1), init, step_size=0.1, n_steps=3, seed=0
    )
    assert short.diagnostics["rhat"] is None and math.isnan(
        short.diagnostics["max_rhat"]
    )
