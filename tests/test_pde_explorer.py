"""The Part III explorer (attnbook.pde.explorer): the fates it reports are the package's, its
matrices are the sliders' and its widget redraws."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnbook.pde import closed_forms as cf  # noqa: E402
from attnbook.pde.explorer import (  # noqa: E402
    EXPLORER_KINDS,
    draw_gaussian_view,
    explorer_grid,
    gaussian_explorer,
    gaussian_view,
    layer_matrices,
    sym2,
)


def test_sym2_has_the_eigenvalues_and_the_angle():
    M = sym2((2.0, -0.5), 0.3)
    w, U = np.linalg.eigh(M)
    assert np.allclose(w, [-0.5, 2.0]) and np.allclose(M, M.T)
    assert math.isclose(abs(U[:, 1] @ [math.cos(0.3), math.sin(0.3)]), 1.0)
    with pytest.raises(ValueError, match="eigenvalues"):
        sym2((1.0, math.nan), 0.0)


def test_layer_matrices_skew_part_leaves_the_symmetric_part():
    A0, V, S0 = layer_matrices(a=(1.0, -0.5), skew=0.0)
    A1, _, _ = layer_matrices(a=(1.0, -0.5), skew=1.3)
    assert np.allclose(A0 + A0.T, A1 + A1.T) and not np.allclose(A0, A1)
    assert np.allclose(V, np.eye(2)) and np.all(np.linalg.eigvalsh(S0) > 0)
    with pytest.raises(ValueError, match="sigma"):
        layer_matrices(sigma=(1.0, 0.0))


def test_blowup_time_is_the_closed_form_for_identity_value():
    A, V, S0 = layer_matrices()
    view = gaussian_view(A, V, S0)
    T = cf.identity_value_blowup_time(S0, A)
    assert view.fate == "blow-up" and math.isclose(view.blowup_time, T, rel_tol=1e-4)
    assert view.t[-1] < T and view.eigenvalues[-1, 1] > 1e3 * view.eigenvalues[0, 1]
    assert "T* = " in view.summary and view.growth_rate is None


def test_negative_semidefinite_part_clusters_to_rank_one():
    A, V, S0 = layer_matrices(a=(-1.0, 0.0))
    view = gaussian_view(A, V, S0, t_max=6.0)
    assert view.fate == "bounded" and view.n_decaying == 1 and view.blowup_time is None
    limit = np.linalg.eigvalsh(cf.clustering_limit(S0, A))
    assert np.allclose(view.eigenvalues[-1, 1], limit[1], rtol=0.02)
    assert "rank 1" in view.summary


def test_sinkhorn_grows_without_a_singularity():
    A, V, S0 = layer_matrices(v=(1.5, 1.5))
    view = gaussian_view(A, V, S0, kind="sinkhorn")
    assert view.fate == "growth" and view.blowup_time is None
    assert view.growth_rate > 0 and "no finite-time singularity" in view.summary


def test_bad_arguments_name_themselves():
    A, V, S0 = layer_matrices()
    with pytest.raises(ValueError, match="kind"):
        gaussian_view(A, V, S0, kind="sigmoid")
    with pytest.raises(ValueError, match="t_max"):
        gaussian_view(A, V, S0, t_max=-1.0)
    with pytest.raises(ValueError, match="cov0"):
        gaussian_view(A, V, -np.eye(2))
    with pytest.raises(ValueError, match="n_times"):
        gaussian_view(A, V, S0, n_times=2)


def test_drawing_and_the_grid():
    A, V, S0 = layer_matrices(a=(-1.0, 0.0))
    axes = draw_gaussian_view(gaussian_view(A, V, S0, t_max=2.0))
    assert len(axes) == 2 and len(axes[1].lines) == 6
    fig, views = explorer_grid({"one": (A, V, S0, "softmax")}, t_max=2.0)
    assert set(views) == {"one"} and len(fig.axes) == 2
    plt.close("all")
    with pytest.raises(ValueError, match="settings"):
        explorer_grid({})


def test_the_widget_redraws_for_every_kind():
    pytest.importorskip("ipywidgets")
    box = gaussian_explorer(t_max=1.0)
    kind_box = box.children[0].children[0]
    assert list(kind_box.options) == list(EXPLORER_KINDS)
    kind_box.value = "l2"  # triggers a redraw
    box.children[1].children[0].children[0].value = -1.0  # A: λ₁
    plt.close("all")
    with pytest.raises(ValueError, match="kind"):
        gaussian_explorer(kind="linear")
