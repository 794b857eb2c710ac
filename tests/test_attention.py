"""attnbook.attention against direct float64 formulas, POT's Sinkhorn, and known limits."""

import math
import warnings

import numpy as np
import pytest
import torch

from attnbook import attention as att


def _rand(*shape, seed=0):
    return torch.randn(
        *shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )


def direct(q, k, kind, bias=0.0, causal=False):
    """Entry-by-entry float64 reference, written from the definitions."""
    q, k = np.asarray(q, float), np.asarray(k, float)
    n, m = len(q), len(k)
    P = np.zeros((n, m))
    for i in range(n):
        visible = range(i + 1) if causal else range(m)
        if kind == "softmax":
            z = sum(math.exp(q[i] @ k[j]) for j in visible)
            for j in visible:
                P[i, j] = math.exp(q[i] @ k[j]) / z
        elif kind == "l2":
            z = sum(math.exp(-np.sum((q[i] - k[j]) ** 2)) for j in visible)
            for j in visible:
                P[i, j] = math.exp(-np.sum((q[i] - k[j]) ** 2)) / z
        elif kind == "linear":
            for j in visible:
                P[i, j] = (q[i] @ k[j]) / len(visible)
        elif kind == "sigmoid":
            for j in visible:
                P[i, j] = 1 / (1 + math.exp(-(q[i] @ k[j] + bias))) / len(visible)
    return P


@pytest.mark.parametrize("kind", ["softmax", "l2", "linear", "sigmoid"])
@pytest.mark.parametrize("causal", [False, True])
def test_maps_match_direct_formula(kind, causal):
    q, k = _rand(6, 3, seed=1), _rand(6, 3, seed=2)
    P = att.attention_weights(q, k, kind=kind, causal=causal, bias=0.3)
    np.testing.assert_allclose(
        P.numpy(), direct(q, k, kind, bias=0.3, causal=causal), atol=1e-13
    )


def test_rectangular_and_scale():
    q, k = _rand(4, 2, seed=3), _rand(7, 2, seed=4)
    P = att.attention_weights(q, k, kind="softmax", scale=0.5)
    np.testing.assert_allclose(P.numpy(), direct(0.5 * q, k, "softmax"), atol=1e-14)
    assert P.shape == (4, 7)


def test_sinkhorn_matches_pot():
    ot = pytest.importorskip("ot")
    q, k = _rand(8, 3, seed=5), _rand(8, 3, seed=6)
    S = (q @ k.T).numpy()
    res = att.sinkhorn(torch.from_numpy(S), tol=1e-12, n_iters=5000)
    a = np.full(8, 1 / 8)
    G = ot.sinkhorn(a, a, -S, reg=1.0, numItermax=20000, stopThr=1e-14)
    np.testing.assert_allclose(res.plan.numpy() / 8, G, atol=1e-11)
    assert res.converged and res.max_error <= 1e-12


def test_sinkhorn_rectangular_marginals():
    S = _rand(5, 9, seed=7)
    res = att.sinkhorn(S, tol=1e-11)
    np.testing.assert_allclose(res.plan.sum(-1).numpy(), 1.0, atol=1e-13)
    np.testing.assert_allclose(res.plan.sum(-2).numpy(), 5 / 9, atol=1e-11)


def test_sinkhorn_is_softmax_when_columns_already_balance():
    # a circulant score matrix: softmax rows are shifts of each other, so columns sum to 1 and
    # Sinkhorn stops after its first half-step, which is softmax
    row = _rand(6, seed=8)
    S = torch.stack([row.roll(i) for i in range(6)])
    res = att.sinkhorn(S, tol=1e-12)
    assert res.iterations == 1
    np.testing.assert_allclose(
        res.plan.numpy(), torch.softmax(S, -1).numpy(), atol=1e-15
    )


def test_sinkhorn_large_scores_are_stable():
    S = 200 * _rand(6, 6, seed=9)
    res = att.sinkhorn(S, n_iters=20000, tol=1e-8, on_nonconvergence="ignore")
    assert torch.isfinite(res.plan).all()


def _is_scaling_of(plan, log_kernel, row_sums, col_sums, atol):
    """The defining property of the Sinkhorn plan, checked from its definition: it has the
    given marginals and log(plan) - log_kernel = f_i + g_j (double centring removes f, g)."""
    R = np.log(plan) - np.asarray(log_kernel)
    centred = R - R.mean(0, keepdims=True) - R.mean(1, keepdims=True) + R.mean()
    np.testing.assert_allclose(plan.sum(1), row_sums, atol=atol)
    np.testing.assert_allclose(plan.sum(0), col_sums, atol=atol)
    np.testing.assert_allclose(centred, 0.0, atol=1e-9)


@pytest.mark.parametrize("beta", [20.0, 100.0])
def test_sinkhorn_two_clusters_at_low_temperature_converges(beta):
    # two clusters nearly decouple: Sinkhorn alone stalls (its rate is 1 - 1e-6 here)
    x = att.example_tokens(12, 2, seed=2)
    S = beta * x @ x.T
    plain = att.sinkhorn(S, n_newton_iters=0, on_nonconvergence="ignore")
    assert not plain.converged
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = att.sinkhorn(S)
    assert res.converged and res.newton_steps > 0 and res.max_error <= 1e-9
    _is_scaling_of(res.plan.numpy(), S.numpy(), 1.0, 1.0, atol=1e-9)


def test_sinkhorn_newton_on_blocks_that_decouple_exactly():
    """Couplings that underflow (e^-800 = 0): each block has its own free shift, so Newton's
    matrix is singular; the solver takes the least-norm step instead of raising (it raised
    LinAlgError on a chapter's cloud at one seed)."""
    g = torch.Generator().manual_seed(0)
    S = torch.full((6, 8, 8), -800.0, dtype=torch.float64)
    S[:, :4, :4] = 4 * torch.randn(6, 4, 4, generator=g, dtype=torch.float64)
    S[:, 4:, 4:] = 4 * torch.randn(6, 4, 4, generator=g, dtype=torch.float64)
    res = att.sinkhorn(S, n_iters=3)
    assert res.converged and res.newton_steps > 0 and res.max_error <= 1e-9
    for b in range(
        6
    ):  # each block is a Sinkhorn scaling of its own kernel (POT-free check)
        for blk in (slice(0, 4), slice(4, 8)):
            _is_scaling_of(
                res.plan[b, blk, blk].numpy(),
                S[b, blk, blk].numpy(),
                1.0,
                1.0,
                atol=1e-9,
            )


def test_sinkhorn_newton_is_batched_per_problem():
    x = att.example_tokens(12, 2, seed=2)
    S = torch.stack([0.5 * x @ x.T, 30.0 * x @ x.T, 5.0 * x @ x.T])
    res = att.sinkhorn(S)
    assert res.converged
    for b in range(3):
        _is_scaling_of(res.plan[b].numpy(), S[b].numpy(), 1.0, 1.0, atol=1e-9)


def test_sinkhorn_token_masses_match_pot():
    """Non-uniform masses w: POT's plan with a = b = w is the outside reference."""
    ot = pytest.importorskip("ot")
    x = _rand(7, 2, seed=30)
    w = torch.softmax(_rand(7, seed=31), -1)
    S = (x @ x.T).numpy()
    res = att.sinkhorn(torch.from_numpy(S), log_marginal=w.log(), tol=1e-12)
    a = w.numpy()
    G = ot.sinkhorn(a, a, -S, reg=1.0, numItermax=50000, stopThr=1e-15)
    np.testing.assert_allclose(res.plan.numpy() * a[:, None], G, atol=1e-12)
    np.testing.assert_allclose(res.plan.sum(-1).numpy(), 1.0, atol=1e-13)


def test_sinkhorn_reports_nonconvergence():
    S = 30 * _rand(10, 10, seed=10)
    with pytest.raises(att.SinkhornNotConverged, match="did not converge"):
        att.sinkhorn(S, n_iters=2, n_newton_iters=0, on_nonconvergence="raise")
    with pytest.warns(att.SinkhornWarning, match="did not converge"):
        res = att.sinkhorn(S, n_iters=2, n_newton_iters=0)
    assert not res.converged and res.max_error > 1e-9 and res.newton_steps == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        att.sinkhorn(S, n_iters=2, n_newton_iters=0, on_nonconvergence="ignore")


def test_l2_is_shifted_softmax_and_linear_is_first_order_softmax():
    q, k = _rand(5, 4, seed=11), _rand(5, 4, seed=12)
    shifted = 2 * q @ k.T - (k**2).sum(-1)
    assert torch.allclose(
        att.attention_weights(q, k, kind="l2"), torch.softmax(shifted, -1), atol=1e-14
    )
    eps = 1e-4
    S = q @ k.T
    lin = att.attention_weights(q, k, kind="linear")  # S / n
    approx = 1 / 5 + eps * (lin - lin.mean(-1, keepdim=True))
    soft = att.attention_weights(q, k, kind="softmax", scale=eps)
    assert float((soft - approx).abs().max()) < 10 * eps**2 * float(S.abs().max()) ** 2


def test_sigmoid_large_bias_is_mean_pooling():
    q, k = _rand(4, 2, seed=13), _rand(4, 2, seed=14)
    P = att.attention_weights(q, k, kind="sigmoid", bias=60.0)
    np.testing.assert_allclose(P.numpy(), 0.25, atol=1e-15)


def test_batched_equals_loop_and_float32():
    q, k = _rand(3, 2, 5, 4, seed=15), _rand(3, 2, 5, 4, seed=16)
    for kind in att.KINDS:
        P = att.attention_weights(q, k, kind=kind)
        for a in range(3):
            for b in range(2):
                assert torch.allclose(
                    P[a, b],
                    att.attention_weights(q[a, b], k[a, b], kind=kind),
                    atol=1e-12,
                )
        P32 = att.attention_weights(q.float(), k.float(), kind=kind)
        assert P32.dtype == torch.float32 and torch.allclose(P32.double(), P, atol=1e-4)


def test_numpy_input_and_broadcast_batch():
    q = _rand(5, 3, seed=17).numpy()
    k = _rand(2, 6, 3, seed=18).numpy()
    P = att.attention_weights(q, k, kind="l2")
    assert isinstance(P, np.ndarray) and P.dtype == np.float64  # NumPy in, NumPy out
    assert P.shape == (2, 5, 6)
    np.testing.assert_allclose(P[1], direct(q, k[1], "l2"), atol=1e-13)
    t = att.attention_weights(torch.from_numpy(q), torch.from_numpy(k), kind="l2")
    assert isinstance(t, torch.Tensor)
    np.testing.assert_array_equal(t.numpy(), P)


def test_multihead_matches_direct_formula_and_is_batched():
    x = _rand(2, 6, 3, seed=19)
    Q, K, V = _rand(2, 2, 3, seed=20), _rand(2, 2, 3, seed=21), _rand(2, 3, 3, seed=22)
    out = att.self_attention(x, Q=Q, K=K, V=V, causal=True)
    assert out.shape == (2, 6, 3)
    s = 1 / math.sqrt(2)  # default scale 1/sqrt(k), k = 2 rows of Q
    for b in range(2):
        X = x[b].numpy()
        ref = sum(
            direct(s * X @ Q[h].numpy().T, X @ K[h].numpy().T, "softmax", causal=True)
            @ X
            @ V[h].numpy().T
            for h in range(2)
        )
        np.testing.assert_allclose(out[b].numpy(), ref, atol=1e-13)
    one = att.self_attention(x[0], Q=Q[0], K=K[0], V=V[0])
    P = direct(
        s * x[0].numpy() @ Q[0].numpy().T, x[0].numpy() @ K[0].numpy().T, "softmax"
    )
    np.testing.assert_allclose(
        one.numpy(), P @ x[0].numpy() @ V[0].numpy().T, atol=1e-13
    )


def test_causal_first_row_and_mask():
    q = _rand(5, 2, seed=23)
    P = att.attention_weights(q, q, kind="softmax", causal=True)
    assert P[0, 0] == 1 and float(P.triu(1).abs().max()) == 0
    assert torch.equal(
        att.causal_mask(3),
        torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool),
    )


def test_row_entropy_bounds():
    P = att.attention_weights(_rand(6, 2, seed=24), _rand(6, 2, seed=25))
    H = att.row_entropy(P)
    assert (H >= 0).all() and (H <= math.log(6) + 1e-12).all()
    assert float(att.row_entropy(torch.full((1, 4), 0.25))) == pytest.approx(
        math.log(4)
    )
    with pytest.raises(ValueError, match="non-negative"):
        att.row_entropy(torch.tensor([[1.5, -0.5]]))
    from scipy.stats import entropy as scipy_entropy

    np.testing.assert_allclose(H.numpy(), scipy_entropy(P.numpy(), axis=-1), atol=1e-13)


def test_example_tokens_reproducible():
    assert torch.equal(
        att.example_tokens(10, 3, seed=4), att.example_tokens(10, 3, seed=4)
    )
    assert not torch.equal(
        att.example_tokens(10, 3, seed=4), att.example_tokens(10, 3, seed=5)
    )


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (
            lambda: att.attention_weights(_rand(3, 2), _rand(3, 2), kind="cosine"),
            ValueError,
            "kind",
        ),
        (
            lambda: att.attention_weights(_rand(3, 2), _rand(3, 4)),
            ValueError,
            "queries and keys",
        ),
        (lambda: att.attention_weights(_rand(3), _rand(3, 2)), ValueError, "queries"),
        (
            lambda: att.attention_weights(_rand(3, 2), _rand(4, 2), causal=True),
            ValueError,
            "causal",
        ),
        (
            lambda: att.attention_weights(
                _rand(3, 2), _rand(3, 2), kind="sinkhorn", causal=True
            ),
            ValueError,
            "sinkhorn",
        ),
        (
            lambda: att.attention_weights(
                torch.tensor([[float("nan"), 0.0]]), _rand(3, 2)
            ),
            ValueError,
            "queries",
        ),
        (lambda: att.attention_weights("abc", _rand(3, 2)), TypeError, "queries"),
        (
            lambda: att.attention_weights(_rand(3, 2), _rand(3, 2), causal=1),
            TypeError,
            "causal",
        ),
        (
            lambda: att.attention_weights(
                _rand(3, 2), _rand(3, 2), kind="sigmoid", bias=float("inf")
            ),
            TypeError,
            "bias",
        ),
        (lambda: att.causal_mask(0), ValueError, "n"),
        (lambda: att.causal_mask(2.5), TypeError, "n"),
        (lambda: att.sinkhorn(_rand(3, 3), n_iters=0), ValueError, "n_iters"),
        (lambda: att.sinkhorn(_rand(3, 3), tol=-1.0), ValueError, "tol"),
        (
            lambda: att.sinkhorn(_rand(3, 3), n_newton_iters=-1),
            ValueError,
            "n_newton_iters",
        ),
        (
            lambda: att.sinkhorn(_rand(3, 3), on_nonconvergence="maybe"),
            ValueError,
            "on_nonconvergence",
        ),
        (
            lambda: att.self_attention(
                _rand(4, 3), Q=_rand(2, 3), K=_rand(2, 3), V=_rand(3, 2)
            ),
            ValueError,
            "V",
        ),
        (
            lambda: att.self_attention(
                _rand(4, 3), Q=_rand(2, 3), K=_rand(3, 3), V=_rand(3, 3)
            ),
            ValueError,
            "Q and K",
        ),
        (
            lambda: att.self_attention(
                _rand(4, 3), Q=_rand(2, 2, 3), K=_rand(2, 2, 3), V=_rand(3, 3, 3)
            ),
            ValueError,
            "one map per head",
        ),
        (lambda: att.example_tokens(1), ValueError, "n"),
    ],
)
def test_bad_input_is_named(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_entropy_vs_beta_against_direct_softmax_and_limits():
    from scipy.stats import entropy as scipy_entropy

    x = att.example_tokens(8, 2, seed=3)
    betas = [0.0, 0.5, 2.0]
    H = att.entropy_vs_beta(x, betas, kind="softmax")
    assert H.shape == (3,)
    assert float(H[0]) == pytest.approx(math.log(8), abs=1e-14)
    for b, h in zip(betas, H):
        P = direct(math.sqrt(b) * x.numpy(), math.sqrt(b) * x.numpy(), "softmax")
        assert float(h) == pytest.approx(scipy_entropy(P, axis=-1).mean(), abs=1e-13)
    # batched clouds: (n_betas, batch)
    xs = torch.stack([att.example_tokens(8, 2, seed=s) for s in range(3)])
    Hb = att.entropy_vs_beta(xs, betas, kind="ℓ²")
    assert Hb.shape == (3, 3)
    np.testing.assert_allclose(
        Hb[:, 1].numpy(), att.entropy_vs_beta(xs[1], betas, kind="l2").numpy()
    )
    with pytest.raises(ValueError, match="kind"):
        att.entropy_vs_beta(x, betas, kind="linear")
    with pytest.raises(ValueError, match="betas"):
        att.entropy_vs_beta(x, [-1.0])


def test_linear_expansion_gap_is_the_second_order_term():
    # softmax_j(eps s) = 1/n + eps s~_j / n + eps^2 (s~_j^2 - m2) / (2n) + O(eps^3)
    S = _rand(5, 7, seed=40)
    eps = 1e-4
    c = S - S.mean(-1, keepdim=True)
    second = ((c**2 - (c**2).mean(-1, keepdim=True)) / (2 * 7)).abs().max()
    gap = att.linear_expansion_gap(S, eps)
    assert float(gap) == pytest.approx(eps**2 * float(second), rel=1e-3)
    batched = att.linear_expansion_gap(torch.stack([S, 2 * S]), eps)
    assert batched.shape == (2,) and float(batched[0]) == pytest.approx(float(gap))
    with pytest.raises(ValueError, match="eps"):
        att.linear_expansion_gap(S, 0.0)


def test_example_tokens_seed_convention():
    g = torch.Generator().manual_seed(4)
    assert torch.equal(
        att.example_tokens(6, 2, seed=g), att.example_tokens(6, 2, seed=4)
    )
    torch.manual_seed(9)
    a = att.example_tokens(6, 2)
    torch.manual_seed(9)
    assert torch.equal(a, att.example_tokens(6, 2))


def test_sinkhorn_newton_with_token_masses_and_float32():
    x = att.example_tokens(12, 2, seed=1)
    w = torch.softmax(_rand(12, seed=41), -1)
    S = 20.0 * x @ x.T
    res = att.sinkhorn(S, log_marginal=w.log())
    assert res.converged and res.newton_steps > 0
    pi = (w[:, None] * res.plan).numpy()  # the plan with both marginals w
    logk = (S + w.log()[None, :]).numpy()
    _is_scaling_of(pi, logk, w.numpy(), w.numpy(), atol=1e-12)
    r32 = att.sinkhorn(S.float(), tol=1e-5)
    assert r32.plan.dtype == torch.float32 and r32.converged


def test_sinkhorn_warm_start_and_sparse_checks():
    rng = np.random.default_rng(7)
    L = torch.as_tensor(rng.normal(size=(3, 40, 40)))
    lw = torch.full((40,), 1 / 40).log()
    cold = att.sinkhorn(L, log_marginal=lw, tol=1e-11)
    L2 = L + 1e-3 * torch.as_tensor(rng.normal(size=(3, 40, 40)))
    ref = att.sinkhorn(L2, log_marginal=lw, tol=1e-11)
    warm = att.sinkhorn(L2, log_marginal=lw, tol=1e-11, init_log_v=cold.log_v)
    assert warm.converged and warm.iterations < ref.iterations
    torch.testing.assert_close(warm.plan, ref.plan, rtol=0, atol=1e-10)
    sparse = att.sinkhorn(L2, log_marginal=lw, tol=1e-11, check_every=5)
    assert sparse.converged and sparse.iterations % 5 == 0
    torch.testing.assert_close(sparse.plan, ref.plan, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="init_log_v"):
        att.sinkhorn(L2, init_log_v=torch.zeros(3, 39))
    with pytest.raises(ValueError, match="check_every"):
        att.sinkhorn(L2, check_every=0)


@pytest.mark.parametrize("kind", att.SCORE_KINDS)
def test_normalize_scores_is_attention_weights_bit_for_bit(kind):
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 7, 3, generator=gen, dtype=torch.float64)
    s = att.scores(q, k, scale=0.7)
    w = att.normalize_scores(s, kind=kind, bias=0.3)
    assert torch.equal(w, att.attention_weights(q, k, kind=kind, scale=0.7, bias=0.3))
    if kind in ("softmax", "sinkhorn"):
        assert torch.allclose(w.sum(-1), torch.ones(2, 5, dtype=torch.float64))


def test_normalize_scores_rejects_bad_input_and_reads_nothing_back():
    with pytest.raises(TypeError, match="s must be a torch.Tensor"):
        att.normalize_scores(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        att.normalize_scores(torch.zeros(3))
    with pytest.raises(ValueError, match="kind"):
        att.normalize_scores(torch.zeros(3, 3), kind="l2")  # needs the tokens
    with pytest.raises(TypeError, match="bias"):
        att.normalize_scores(torch.zeros(3, 3), kind="sigmoid", bias="1")
    # a meta tensor has no values: any host read (a finiteness check) would raise
    for kind in ("softmax", "linear", "sigmoid"):
        w = att.normalize_scores(torch.empty(4, 6, 6, device="meta"), kind=kind)
        assert w.shape == (4, 6, 6) and w.device.type == "meta"
    # no check, so non-finite scores give non-finite weights (the caller's loop reports them)
    s = torch.tensor([[0.0, float("nan")], [1.0, 2.0]])
    w = att.normalize_scores(s)
    assert torch.isnan(w[0]).all() and torch.isfinite(w[1]).all()


# --- the one attention kernel: masked_softmax, l2_score_terms, softmax_pool -----------


def test_masked_softmax_empty_rows_give_zero_weights_and_finite_gradients():
    s = _rand(3, 5, seed=31).requires_grad_(True)
    mask = torch.tensor([[True] * 5, [False] * 5, [True, False, True, False, False]])
    w = att.masked_softmax(s, mask)
    assert torch.equal(w[1], torch.zeros(5))  # sees nothing: no output, not NaN
    ref = torch.softmax(s[2, [0, 2]], -1)
    w_ = w.detach()
    assert torch.allclose(w_[2, [0, 2]], ref.detach(), atol=1e-15) and w_[2, 1] == 0
    (w * _rand(3, 5, seed=32)).sum().backward()
    assert torch.isfinite(s.grad).all() and torch.equal(s.grad[1], torch.zeros(5))
    # without a mask it is torch's softmax, bit for bit (the inner loops rely on it)
    assert torch.equal(att.masked_softmax(s.detach()), torch.softmax(s.detach(), -1))


def test_l2_score_terms_stay_accurate_far_from_the_origin():
    # a tight cloud (spread 1e-3) at distance 1e4: the plain expansion 2<q,k> - |k|^2
    # carries round-off of order eps |x|^2 ~ 2e-8, larger than the score differences
    # (~1e-6) it must resolve; centred, the error is of order eps * spread^2
    g = torch.Generator().manual_seed(33)
    centre = torch.full((3,), 1e4, dtype=torch.float64)
    q = centre + 1e-3 * torch.randn(6, 3, generator=g, dtype=torch.float64)
    k = centre + 1e-3 * torch.randn(7, 3, generator=g, dtype=torch.float64)
    exact = -((q[:, None, :] - k[None]) ** 2).sum(-1)  # differences first: exact here
    exact = exact - exact[:, :1]  # scores up to a row constant
    qc, kc, b = att.l2_score_terms(q, k)
    centred = qc @ kc.T + b
    centred = centred - centred[:, :1]
    plain = 2 * q @ k.T - (k * k).sum(-1)
    plain = plain - plain[:, :1]
    scale = float(exact.abs().max())
    assert float((centred - exact).abs().max()) < 1e-6 * scale
    assert float((plain - exact).abs().max()) > 1e-3 * scale  # the null: no centring
    # NumPy in, NumPy out, the same numbers
    # NumPy in, NumPy out (its mean rounds differently; the scores do not care where c is)
    qn, kn, bn = att.l2_score_terms(q.numpy(), k.numpy())
    assert isinstance(qn, np.ndarray) and isinstance(bn, np.ndarray)
    sn = qn @ kn.T + bn
    np.testing.assert_allclose(sn - sn[:, :1], exact.numpy(), atol=1e-6 * scale)


@pytest.mark.parametrize("n", [7, 2048])  # 2048: several blocks of rows on a CPU
@pytest.mark.parametrize("as_numpy", [False, True])
def test_softmax_pool_equals_weights_times_values(n, as_numpy):
    g = torch.Generator().manual_seed(34 + n)
    q = torch.randn(2, n, 3, generator=g, dtype=torch.float64)
    k = torch.randn(2, n, 3, generator=g, dtype=torch.float64)
    v = torch.randn(2, n, 4, generator=g, dtype=torch.float64)
    b = torch.randn(2, n, generator=g, dtype=torch.float64)
    ref = torch.softmax(q @ k.mT + b[:, None, :], -1) @ v
    args = (q, k, v) if not as_numpy else (q.numpy(), k.numpy(), v.numpy())
    out = att.softmax_pool(*args, key_bias=b.numpy() if as_numpy else b)
    assert isinstance(out, np.ndarray) == as_numpy
    np.testing.assert_allclose(np.asarray(out), ref.numpy(), rtol=1e-12, atol=1e-13)
    # scores large enough that exp overflows without the max-subtraction pass
    big = att.softmax_pool(*(a * 30 if i < 2 else a for i, a in enumerate(args)))
    ref_big = torch.softmax(900 * q @ k.mT, -1) @ v
    np.testing.assert_allclose(np.asarray(big), ref_big.numpy(), rtol=1e-9, atol=1e-12)


def test_masked_softmax_numpy_in_numpy_out():
    s = _rand(3, 5, seed=35)
    mask = torch.tensor([[True] * 5, [False] * 5, [True, False, True, True, False]])
    got = att.masked_softmax(s.numpy(), mask.numpy())
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, att.masked_softmax(s, mask).numpy(), atol=1e-15)
    assert (got[1] == 0).all()
    np.testing.assert_allclose(
        att.masked_softmax(s.numpy()), torch.softmax(s, -1).numpy(), atol=1e-15
    )
