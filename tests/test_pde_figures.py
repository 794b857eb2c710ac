"""attnbook.pde.figures: batched covariance right-hand sides against the SymPy-derived moment
field, flows against closed forms, grids, ranks and the plot helpers."""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnbook.pde import closed_forms as cf  # noqa: E402
from attnbook.pde import figures as figs  # noqa: E402
from attnbook.pde.gaussian import moment_field  # noqa: E402

RNG = np.random.default_rng(3)
D = 3
W = RNG.normal(size=(D, D))
S = W @ W.T + 0.2 * np.eye(D)
A = RNG.normal(size=(D, D))
V = RNG.normal(size=(D, D))
Q, K = RNG.normal(size=(2, 2, D))


@pytest.mark.parametrize(
    "kind,kw",
    [
        ("softmax", dict(A=A, V=V)),
        ("sinkhorn", dict(A=A, V=V)),
        ("l2", dict(Q=Q, K=K, V=V)),
    ],
)
def test_rhs_matches_the_symbolic_moment_field(kind, kw):
    ref = moment_field(kind, D, **kw)(np.zeros(D), S)[1]
    got = figs.covariance_rhs(S, kind=kind, **kw)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, ref, atol=1e-12)


def test_multihead_rhs_and_blocks():
    Qh, Kh = RNG.normal(size=(2, 4, 4))
    Vh = RNG.normal(size=(4, 4))
    Ah, Ch = figs.multihead_blocks(Qh, Kh, Vh, n_heads=2)
    assert Ah.shape == Ch.shape == (2, 4, 4)
    np.testing.assert_allclose(Ah[1], Kh[2:].T @ Qh[2:] / math.sqrt(2))
    np.testing.assert_allclose(Ch[0][2:], 0.0)
    S4 = np.eye(4) + 0.1
    ref = moment_field("multihead", 4, A=Ah, V=Ch, heads=2)(np.zeros(4), S4)[1]
    np.testing.assert_allclose(
        figs.covariance_rhs(S4, kind="multihead", A=Ah, V=Ch), ref, atol=1e-12
    )
    with pytest.raises(ValueError, match="Q and K"):
        figs.multihead_blocks(Qh[:3], Kh[:3], n_heads=2)


def test_batched_rhs_per_member_and_tensor_in_tensor_out():
    Ss = np.stack([S, 2 * S])
    As = np.stack([A, -A])
    got = figs.covariance_rhs(torch.tensor(Ss), kind="softmax", A=As)
    assert isinstance(got, torch.Tensor)
    np.testing.assert_allclose(
        got[1].numpy(), figs.covariance_rhs(2 * S, kind="softmax", A=-A)
    )


def test_flow_matches_the_identity_value_closed_form():
    grid = figs.trace_one_grid(4, radius=0.5)
    An = -np.outer([1.0, 0.5], [1.0, 0.5])
    t = np.array([0.0, 1.0, 10.0])
    fl = figs.batched_covariance_flow(grid, t, kind="softmax", A=An)
    for b, S0 in enumerate(grid):
        np.testing.assert_allclose(
            fl.cov[:, b], cf.identity_value_covariance(t, S0, An), atol=1e-7
        )
    assert not fl.exploded.any() and np.isinf(fl.explode_time).all()


@pytest.mark.parametrize("method", ["bdf", "radau", "lsoda"])
def test_stiff_methods_match_the_closed_form(method):
    # an independent check: the identity-value closed form, over a horizon where the
    # collapsed direction makes the explicit flow stiff
    grid = figs.trace_one_grid(4, radius=0.5)
    An = -np.outer([1.0, 0.5], [1.0, 0.5])
    t = np.array([0.0, 1.0, 10.0, 300.0])
    fl = figs.batched_covariance_flow(grid, t, kind="softmax", A=An, method=method)
    for b, S0 in enumerate(grid):
        np.testing.assert_allclose(
            fl.cov[:, b], cf.identity_value_covariance(t, S0, An), atol=1e-6
        )
    assert not fl.exploded.any()


def test_stiff_method_flags_the_same_explosions():
    grid = figs.trace_one_grid(3, radius=0.5)
    t = np.array([0.0, 0.5, 5.0])
    runs = [
        figs.batched_covariance_flow(grid, t, kind="softmax", A=A_sign, method=m)
        for A_sign in (np.eye(2), -np.eye(2))
        for m in ("dopri5", "bdf")
    ]
    assert runs[0].exploded.all() and runs[1].exploded.all()
    np.testing.assert_array_equal(runs[0].explode_time, runs[1].explode_time)
    assert not runs[2].exploded.any() and not runs[3].exploded.any()
    np.testing.assert_allclose(runs[2].cov, runs[3].cov, atol=1e-6)


def test_flow_refuses_a_fixed_step_method():
    with pytest.raises(ValueError, match="method must be one of"):
        figs.batched_covariance_flow(
            np.eye(2), [0.0, 1.0], kind="softmax", A=-np.eye(2), method="rk4"
        )


def test_flow_flags_explosions():
    fl = figs.batched_covariance_flow(
        np.eye(2) / 2, [0.0, 5.0], kind="softmax", A=np.eye(2)
    )
    assert fl.exploded.all() and fl.explode_time[0] == 5.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="Q and K"):
        figs.covariance_rhs(S, kind="l2", A=A)
    with pytest.raises(ValueError, match="takes A"):
        figs.covariance_rhs(S, kind="softmax", Q=Q, K=K)
    with pytest.raises(ValueError, match="A must be"):
        figs.covariance_rhs(S, kind="softmax", A=np.eye(2))
    with pytest.raises(ValueError):
        figs.covariance_rhs(S, kind="sigmoid", A=A)
    with pytest.raises(ValueError, match="radius"):
        figs.trace_one_grid(3, radius=2.0)
    with pytest.raises(TypeError, match="ranks"):
        figs.rank_counts([0.5, 1.0], 3)
    with pytest.raises(ValueError, match="0..3"):
        figs.rank_counts(np.array([4]), 3)


def test_grid_disc_and_rank_counts():
    grid = figs.trace_one_grid(5, radius=1.0)
    np.testing.assert_allclose(np.trace(grid, axis1=1, axis2=2), 1.0)
    assert (np.linalg.eigvalsh(grid) > 0).all()
    u = np.array([0.6, 0.8])
    np.testing.assert_allclose(
        np.linalg.norm(figs.disc_coordinates(np.outer(u, u))), 1.0
    )
    rc = figs.rank_counts(np.array([1, 2, 2, 3]), 4)
    assert (
        rc["counts"].tolist() == [0, 1, 2, 1, 0]
        and rc["above"] == 1
        and rc["bound"] == 2
    )


def test_plot_helpers_draw():
    grid = figs.trace_one_grid(3, radius=0.5)
    fl = figs.batched_covariance_flow(
        grid, [0.0, 1.0, 2.0], kind="softmax", A=-np.eye(2)
    )
    fig = plt.figure()
    ax3 = fig.add_subplot(1, 3, 1, projection="3d")
    figs.plot_cone_paths(ax3, fl.cov, line=np.diag([1.0, 0.0]), title="x")
    figs.plot_disc_paths(fig.add_subplot(1, 3, 2), fl.cov, marks=[[1.0, 0.0]])
    rc = figs.plot_rank_histogram(fig.add_subplot(1, 3, 3), np.array([1, 2, 3]), 3)
    assert rc["above"] == 1
    plt.close(fig)


def test_authors_layer_scaling_and_refusals():
    Q = np.arange(6.0).reshape(1, 2, 3)
    A = figs.authors_layer("softmax", Q, 3)["A"]
    np.testing.assert_allclose(A, -Q.transpose(0, 2, 1) @ Q / np.sqrt(3))
    kw = figs.authors_layer("l2", Q, 3)
    np.testing.assert_allclose(kw["Q"], Q / np.sqrt(3))
    np.testing.assert_allclose(kw["K"], -Q)
    with pytest.raises(ValueError, match="kind"):
        figs.authors_layer("sinkhorn", Q, 3)
    with pytest.raises(ValueError, match="Q must"):
        figs.authors_layer("softmax", Q, 4)


def test_authors_draws_are_the_draws_of_their_script_global_seeding():
    # their 2d_plots.py seeds NumPy's global generator; replay two of its cells literally
    state = np.random.get_state()
    try:
        np.random.seed(35)
        Q = np.random.rand(2, 2)
        V = np.random.randn(2, 2)
        collapse = {"Q": Q, "K": -Q, "V": V @ V.T}
        np.random.seed(33)
        for _ in range(1000):
            Q = np.random.randn(2, 2)
            K = np.random.randn(2, 2)
            if np.linalg.eigh(K.T @ Q + Q.T @ K)[0][0] > 0:
                break
        explosion = {"Q": Q, "K": K, "V": np.eye(2)}
    finally:
        np.random.set_state(state)
    for figure, expected in (("collapse", collapse), ("explosion", explosion)):
        got = figs.authors_draws(figure)
        for name in "QKV":
            np.testing.assert_array_equal(got[name], expected[name])


def test_authors_draws_meet_their_stated_conditions():
    two, both = figs.authors_draws("two-lines"), figs.authors_draws("both")
    np.testing.assert_array_equal(two["Q"], both["Q"])
    w = np.linalg.eigvalsh(two["K"].T @ two["Q"] + two["Q"].T @ two["K"])
    assert w[0] < 0 < w[1]
    line = figs.authors_draws("line")
    assert line["Q"].shape == (1, 2) and abs(np.linalg.norm(line["Q"]) - 1) < 1e-15
    with pytest.raises(ValueError, match="figure"):
        figs.authors_draws("histogram")


def test_a_missing_score_matrix_is_named():
    from attnbook.pde.figures import covariance_rhs

    with pytest.raises(ValueError, match="needs A"):
        covariance_rhs(np.eye(2), kind="sinkhorn")
    with pytest.raises(ValueError, match="takes A, not Q and K"):
        covariance_rhs(np.eye(2), kind="softmax", Q=np.eye(2), K=np.eye(2))
