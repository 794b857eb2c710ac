"""Tests of attnbook.pde.particles: every velocity field against a plain per-token loop."""

import math

import numpy as np
import pytest
import torch

from attnbook.attention import KIND_ALIASES, attention_weights
from attnbook.errors import BlowUpError
from attnbook.pde import (
    KINDS,
    attention_matrix,
    interaction_energy,
    particle_masses,
    sample_gaussian,
    simulate,
    velocity,
)
from attnbook.pde.particles import (
    check_cloud,
    interaction_matrices,
    partition_function,
    prepare_inputs,
    sink_weights,
)

torch.set_num_threads(1)
RNG = np.random.default_rng(12345)


def _naive(x, kind, A, V, w=None, causal=False, bias=0.0, Q=None, K=None):
    """Straight from the formulas, one token at a time (float64 NumPy)."""
    n, d = x.shape
    w = np.full(n, 1 / n) if w is None else w
    out = np.zeros_like(x)
    for i in range(n):
        js = range(i + 1) if causal else range(n)
        acc, norm = np.zeros(d), 0.0
        for j in js:
            if kind == "softmax":
                k = w[j] * math.exp(x[i] @ A.T @ x[j])
                norm += k
            elif kind == "l2":
                k = w[j] * math.exp(-np.sum((Q @ x[i] - K @ x[j]) ** 2))
                norm += k
            elif kind == "sigmoid":
                k = w[j] / (1 + math.exp(-(x[i] @ A.T @ x[j] + bias)))
            else:
                k = w[j] * (x[i] @ A.T @ x[j])
            acc += k * (V @ x[j])
        out[i] = acc / norm if kind in ("softmax", "l2") else acc
    return out


@pytest.fixture
def cloud():
    x = RNG.normal(size=(9, 3))
    A = RNG.normal(size=(3, 3)) * 0.5
    V = RNG.normal(size=(3, 3))
    return x, A, V


@pytest.mark.parametrize("kind", ["softmax", "sigmoid", "linear"])
@pytest.mark.parametrize("causal", [False, True])
def test_velocity_matches_naive_loop(cloud, kind, causal):
    x, A, V = cloud
    v = velocity(x, kind=kind, A=A, V=V, causal=causal, bias=0.3)
    assert isinstance(v, np.ndarray) and v.shape == x.shape
    np.testing.assert_allclose(
        v, _naive(x, kind, A, V, causal=causal, bias=0.3), rtol=1e-11, atol=1e-12
    )


def test_l2_kernel_with_Q_K_and_with_A_only(cloud):
    x, A, V = cloud
    Q, K = RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3))
    np.testing.assert_allclose(
        velocity(x, kind="l2", Q=Q, K=K, V=V),
        _naive(x, "l2", None, V, Q=Q, K=K),
        rtol=1e-11,
    )
    # A only: Q = A, K = I (kernel exp(-|Ax - y|^2))
    np.testing.assert_allclose(
        velocity(x, kind="l2", A=A, V=V),
        _naive(x, "l2", None, V, Q=A, K=np.eye(3)),
        rtol=1e-11,
    )


def test_Q_K_give_A_with_sqrt_k_scaling(cloud):
    x, _, V = cloud
    Q, K = RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3))
    A = K.T @ Q / 2.0
    np.testing.assert_allclose(
        velocity(x, kind="softmax", Q=Q, K=K, V=V),
        velocity(x, kind="softmax", A=A, V=V),
        rtol=1e-12,
    )


def test_agrees_with_attention_module(cloud):
    x, A, V = cloud
    xt = torch.as_tensor(x)
    for kind in ("softmax", "sigmoid", "linear"):
        P_ref = attention_weights(xt @ torch.as_tensor(A).T, xt, kind=kind, bias=0.2)
        P = attention_matrix(xt, kind=kind, A=A, bias=0.2)[0]
        torch.testing.assert_close(P, P_ref, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("uniform", [True, False])
def test_sinkhorn_plan_matches_pot(cloud, uniform):
    """The Sinkhorn interaction against POT's plan with both marginals the token masses."""
    import ot

    x, A, _ = cloud
    w = np.full(9, 1 / 9) if uniform else RNG.uniform(0.5, 2.0, size=9)
    w /= w.sum()
    L = (x @ A.T) @ x.T
    plan = ot.sinkhorn(w, w, -L, reg=1.0, numItermax=10_000, stopThr=1e-13)
    P = attention_matrix(x, kind="sinkhorn", A=A, weights=None if uniform else w)[0]
    np.testing.assert_allclose(P, plan / w[:, None], rtol=1e-7, atol=1e-10)


def test_sinkhorn_plan_is_doubly_stochastic(cloud):
    x, A, _ = cloud
    P = attention_matrix(x, kind="sinkhorn", A=A)[0]
    np.testing.assert_allclose(P.sum(1), 1, atol=1e-9)
    np.testing.assert_allclose(P.sum(0), 1, atol=1e-9)


def test_multihead_is_the_sum_of_heads(cloud):
    x, _, _ = cloud
    Q, K = RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3))
    Vs = RNG.normal(size=(2, 3, 3))
    v = velocity(x, kind="multihead", Q=Q, K=K, V=Vs, heads=2)
    ref = sum(
        velocity(
            x,
            kind="softmax",
            A=K[2 * h : 2 * h + 2].T @ Q[2 * h : 2 * h + 2] / math.sqrt(2),
            V=Vs[h],
        )
        for h in range(2)
    )
    np.testing.assert_allclose(v, ref, rtol=1e-12)
    # stacked (H, k, d) and stacked A give the same field
    np.testing.assert_allclose(
        velocity(x, kind="multihead", Q=Q.reshape(2, 2, 3), K=K.reshape(2, 2, 3), V=Vs),
        v,
        rtol=1e-12,
    )
    # against the per-token formulas, head by head (an outside reference)
    As = RNG.normal(size=(2, 3, 3)) * 0.5
    naive = sum(_naive(x, "softmax", As[h], Vs[h]) for h in range(2))
    np.testing.assert_allclose(
        velocity(x, kind="multihead", A=As, V=Vs), naive, rtol=1e-10, atol=1e-12
    )


def test_batched_and_torch_inputs(cloud):
    x, A, V = cloud
    xb = RNG.normal(size=(4, 2, 9, 3))
    for kind in KINDS:
        vb = velocity(
            torch.as_tensor(xb), kind=kind, A=A if kind != "multihead" else A[None], V=V
        )
        assert isinstance(vb, torch.Tensor) and vb.shape == xb.shape
        v12 = velocity(
            xb[1, 1], kind=kind, A=A if kind != "multihead" else A[None], V=V
        )
        np.testing.assert_allclose(vb[1, 1].numpy(), v12, rtol=1e-9, atol=1e-10)


def test_permutation_equivariance(cloud):
    x, A, V = cloud
    perm = RNG.permutation(len(x))
    for kind in ("softmax", "l2", "sinkhorn", "sigmoid", "linear"):
        np.testing.assert_allclose(
            velocity(x[perm], kind=kind, A=A, V=V),
            velocity(x, kind=kind, A=A, V=V)[perm],
            rtol=1e-8,
            atol=1e-12,
        )


def test_causal_uses_only_the_past(cloud):
    x, A, V = cloud
    v = velocity(x, kind="softmax", A=A, V=V, causal=True)
    np.testing.assert_allclose(v[0], V @ x[0])  # the first token sees itself only
    y = x.copy()
    y[5:] += 1.0
    np.testing.assert_allclose(
        velocity(y, kind="softmax", A=A, V=V, causal=True)[:5], v[:5], rtol=1e-12
    )


def test_weights_equal_duplicated_particles(cloud):
    x, A, V = cloud
    w = np.full(9, 1.0)
    w[2] = 2.0
    w /= w.sum()
    xd = np.vstack([x, x[2:3]])
    for kind in ("softmax", "sigmoid", "linear", "sinkhorn"):
        vd = velocity(xd, kind=kind, A=A, V=V)
        np.testing.assert_allclose(
            velocity(x, kind=kind, A=A, V=V, weights=w), vd[:9], rtol=1e-8, atol=1e-10
        )


def test_attention_sink_weights(cloud):
    x, A, V = cloud
    w = sink_weights(9, 0.5)
    assert float(w[0]) == 0.5 and abs(float(w.sum()) - 1) < 1e-12
    v = velocity(x, kind="softmax", A=A, V=V, causal=True, sink_mass=0.5)
    np.testing.assert_allclose(
        v, _naive(x, "softmax", A, V, w=w.numpy(), causal=True), rtol=1e-11
    )


def test_rk4_is_fourth_order_and_matches_dopri5():
    x0 = RNG.normal(size=(6, 2))
    A = np.array([[0.3, 0.2], [-0.1, 0.4]])
    t = [0.0, 1.0]
    ref = simulate(x0, t, kind="softmax", A=A, method="dopri5", rtol=1e-12, atol=1e-13)[
        -1
    ]
    e1 = np.abs(simulate(x0, t, kind="softmax", A=A, step_size=0.2)[-1] - ref).max()
    e2 = np.abs(simulate(x0, t, kind="softmax", A=A, step_size=0.1)[-1] - ref).max()
    assert 10 < e1 / e2 < 24  # 2^4 = 16
    assert (
        np.abs(simulate(x0, t, kind="softmax", A=A, step_size=0.01)[-1] - ref).max()
        < 1e-8
    )


def test_simulate_shapes_batch_and_reproducible_sampling():
    x0 = sample_gaussian(20, [0, 0], np.eye(2), seed=3, batch=(3,))
    again = sample_gaussian(20, [0, 0], np.eye(2), seed=3, batch=(3,))
    torch.testing.assert_close(x0, again)
    tr = simulate(x0, np.linspace(0, 0.5, 4), kind="l2", step_size=0.05)
    assert tr.shape == (4, 3, 20, 2) and torch.equal(tr[0], x0)
    one = simulate(x0[1], np.linspace(0, 0.5, 4), kind="l2", step_size=0.05)
    torch.testing.assert_close(tr[:, 1], one)


def test_exact_moments_sampling():
    C = np.array([[2.0, 0.5], [0.5, 1.0]])
    x = sample_gaussian(50, [1.0, -1.0], C, seed=0, exact_moments=True).numpy()
    np.testing.assert_allclose(x.mean(0), [1.0, -1.0], atol=1e-12)
    np.testing.assert_allclose(np.cov(x.T, bias=True), C, atol=1e-12)


def test_linear_blowup_is_reported_not_nan():
    # one particle, d = 1: x' = a x^3 blows up at 1/(2 a x0^2) = 0.5
    with pytest.raises(BlowUpError) as info:
        simulate(
            np.array([[1.0]]),
            np.linspace(0, 1, 11),
            kind="linear",
            A=np.array([[1.0]]),
            step_size=1e-3,
        )
    assert 0.45 < info.value.time < 0.52
    assert torch.isfinite(info.value.partial).all() and len(info.value.partial) <= 6


def test_sphere_projection_keeps_norms():
    x0 = RNG.normal(size=(30, 3))
    x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
    v = velocity(x0, kind="softmax", A=4 * np.eye(3), sphere=True)
    np.testing.assert_allclose(np.sum(v * x0, axis=1), 0, atol=1e-12)
    tr = simulate(
        x0, [0, 1.0], kind="softmax", A=4 * np.eye(3), sphere=True, step_size=0.01
    )
    np.testing.assert_allclose(np.linalg.norm(tr[-1], axis=1), 1, atol=1e-6)


def test_energy_decreases_for_V_I_A_minus_I():
    """Symmetric A, V A^{-1} = -I negative definite: E is monotone (decreasing) along the flow."""
    x0 = RNG.normal(size=(40, 2))
    tr = simulate(
        x0, np.linspace(0, 2, 21), kind="softmax", A=-np.eye(2), step_size=0.02
    )
    E = np.array([interaction_energy(x, A=-np.eye(2)) for x in tr])
    assert np.all(np.diff(E) < 0)
    Z = partition_function(x0, A=-np.eye(2))
    assert Z.shape == (40,) and np.all(Z > 0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(kind="softmaxx"), "kind"),
        (dict(kind="softmax", A=np.ones((3, 2))), "A"),
        (dict(kind="softmax", A=np.eye(2)), "A"),
        (dict(kind="softmax", V=np.eye(4)), "V"),
        (dict(kind="softmax", Q=np.ones((2, 3)), K=np.ones((3, 3))), "Q and K"),
        (dict(kind="softmax", Q=np.ones((3, 3)), K=np.ones((3, 3)), heads=2), "heads"),
        (dict(kind="softmax", A=np.eye(3), Q=np.eye(3), K=np.eye(3)), "either A"),
        (dict(kind="sinkhorn", causal=True), "causal"),
        (dict(kind="softmax", weights=np.ones(9)), "weights"),
        (dict(kind="softmax", sink_mass=1.5), "sink_mass"),
        (dict(kind="multihead", A=np.ones((2, 3, 3)), V=np.ones((3, 3, 3))), "V"),
    ],
)
def test_bad_arguments_raise_naming_them(cloud, kwargs, match):
    x, _, _ = cloud
    with pytest.raises(ValueError, match=match):
        velocity(x, **kwargs)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="x"):
        velocity(np.ones(3), kind="softmax")
    with pytest.raises(ValueError, match="x"):
        velocity(np.array([[np.nan, 1.0]]), kind="softmax")
    with pytest.raises(TypeError, match="kind"):
        velocity(np.ones((2, 2)), kind=3)
    with pytest.raises(ValueError, match="increasing"):
        simulate(np.ones((2, 2)), [0.0, 1.0, 0.5], kind="softmax")
    with pytest.raises(ValueError, match="method"):
        simulate(np.ones((2, 2)), [0.0, 1.0], kind="softmax", method="euler")


def test_public_input_helpers(cloud):
    x, A, V = cloud
    li = prepare_inputs(x, kind="multi-head", A=np.stack([A, A]), V=V)
    X, p, w = li.X, li.params, li.masses
    assert p.kind == "softmax" and p.heads == 2 and w.shape == (9,) and li.uniform
    torch.testing.assert_close(w, torch.full((9,), 1 / 9, dtype=torch.float64))
    P = interaction_matrices(X, p, w)
    assert P.shape == (2, 9, 9)
    torch.testing.assert_close(P.sum(-1), torch.ones(2, 9, dtype=torch.float64))
    m = particle_masses(5, sink_mass=0.6)
    assert float(m[0]) == pytest.approx(0.6) and float(m.sum()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="weights"):
        particle_masses(3, [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="x0"):
        check_cloud(np.ones(3), "x0")


def test_kind_aliases_come_from_attention():
    x = RNG.normal(size=(5, 2))
    A = np.array([[0.7, -0.2], [0.4, 1.1]])
    for alias, kind in KIND_ALIASES.items():
        kw = {"A": A[None]} if kind == "multihead" else {"A": A}
        if kind == "l2":
            kw = {"Q": A, "K": A.T}
        # each alias gives its canonical kind's field, and the kinds differ from softmax
        np.testing.assert_array_equal(
            np.asarray(velocity(x, kind=alias, **kw)),
            np.asarray(velocity(x, kind=kind, **kw)),
        )
        if kind == "l2":
            assert not np.allclose(
                velocity(x, kind="l2", **kw), velocity(x, kind="softmax", A=A)
            )
    with pytest.raises(ValueError, match="kind"):
        velocity(x, kind="cosine")


def test_sample_gaussian_seed_convention():
    a = sample_gaussian(4, [0.0], [[1.0]], seed=3)
    b = sample_gaussian(4, [0.0], [[1.0]], seed=torch.Generator().manual_seed(3))
    torch.testing.assert_close(a, b)
    torch.manual_seed(5)
    c = sample_gaussian(4, [0.0], [[1.0]])
    torch.manual_seed(5)
    torch.testing.assert_close(c, sample_gaussian(4, [0.0], [[1.0]]))


def test_cloud_statistics():
    from attnbook.pde import eigenvalue_ratio, empirical_cov, numerical_rank

    x = RNG.normal(size=(3, 50, 2))
    C = empirical_cov(x)
    np.testing.assert_allclose(C[1], np.cov(x[1].T, bias=True), rtol=1e-12)
    S = np.diag([0.5, 2.0])
    assert eigenvalue_ratio(S) == pytest.approx(0.25)
    np.testing.assert_allclose(eigenvalue_ratio(np.stack([S, np.eye(2)])), [0.25, 1.0])
    assert isinstance(eigenvalue_ratio(torch.eye(2)), torch.Tensor)
    np.testing.assert_array_equal(
        numerical_rank(np.stack([np.diag([1.0, 1e-5, 2.0]), np.eye(3)])), [2, 3]
    )


def test_trace_one_circle():
    from attnbook.pde import trace_one_circle

    S = trace_one_circle(8, 0.3)
    np.testing.assert_allclose(np.trace(S, axis1=1, axis2=2), 1.0)
    assert np.all(np.linalg.eigvalsh(S) > 0)
    with pytest.raises(ValueError, match="radius"):
        trace_one_circle(4, 0.6)


def test_sample_gaussian_symmetric_cloud():
    m, S = np.array([0.5, -1.0]), np.array([[1.0, 0.3], [0.3, 0.6]])
    x = sample_gaussian(
        10, m, S, seed=3, symmetric=True, exact_moments=True, batch=(2,)
    )
    z = x - torch.as_tensor(m)
    torch.testing.assert_close(z[:, 5:], -z[:, :5], rtol=0, atol=1e-12)
    torch.testing.assert_close(
        (z.mT @ z) / 10, torch.as_tensor(S).expand(2, 2, 2), rtol=0, atol=1e-12
    )
    y = sample_gaussian(6, m, S, seed=3, symmetric=True)
    torch.testing.assert_close(y.mean(0), torch.as_tensor(m), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="even n"):
        sample_gaussian(7, m, S, symmetric=True)
    with pytest.raises(TypeError, match="symmetric"):
        sample_gaussian(6, m, S, symmetric=1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    "layer",
    [
        dict(kind="softmax"),
        dict(kind="l2", Q=np.eye(3)[:2], K=np.eye(3)[1:]),
        dict(kind="multihead", heads=2),
        dict(kind="softmax", weights=np.arange(1.0, 41.0) / 820.0),
    ],
)
@pytest.mark.parametrize("n", [40, 1100])
def test_numpy_cpu_path_matches_torch_path(dtype, layer, n):
    """The CPU velocity (NumPy products and exp) equals the torch one to round-off.

    A tensor that needs gradients takes the torch path; n = 1100 covers the row blocks and the
    skipped max-subtraction of large n."""
    if "weights" in layer and n != 40:
        layer = dict(layer, weights=np.full(n, 1.0 / n) * np.linspace(0.5, 1.5, n))
        layer["weights"] /= layer["weights"].sum()
    A = np.array([[0.3, -0.2, 0.1], [0.2, 0.1, 0.0], [0.0, 0.3, -0.1]])
    x = sample_gaussian(n, np.zeros(3), np.eye(3), seed=1, batch=(2,), dtype=dtype)
    extra = {} if "Q" in layer or layer["kind"] == "multihead" else dict(A=A)
    fast = velocity(x, **layer, **extra)
    slow = velocity(x.clone().requires_grad_(True), **layer, **extra).detach()
    assert fast.dtype == dtype and fast.shape == x.shape
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(fast, slow, rtol=tol, atol=tol)
    traj = simulate(x[0], [0.0, 0.05], step_size=0.01, **layer, **extra)
    assert torch.isfinite(traj).all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_numpy_cpu_path_with_large_scores_subtracts_the_max(dtype):
    """Scores beyond exp's range (|<Ax, y>| up to ~1e3): the NumPy path shifts, stays finite."""
    x = sample_gaussian(64, np.zeros(2), np.eye(2), seed=2, dtype=dtype)
    A = 80.0 * np.eye(2)
    fast = velocity(x, kind="softmax", A=A)
    slow = velocity(x.clone().requires_grad_(True), kind="softmax", A=A).detach()
    assert torch.isfinite(fast).all()
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(fast, slow, rtol=tol, atol=tol)
