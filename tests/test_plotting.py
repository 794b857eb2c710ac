"""The book's figure policy: multi-panel figures fit the page, and small text is refused."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnbook import plotting  # noqa: E402


def setup_module():
    plotting.use_style()


def test_panel_columns_wrap_at_the_page_width():
    assert plotting.panel_columns(5, 2.5) == 2  # 2 × 2.5 + 0.6 ≤ 7.5 < 3 × 2.5 + 0.6
    assert plotting.panel_columns(2, 2.0) == 2
    assert plotting.panel_columns(1, 20.0) == 1
    with pytest.raises(ValueError, match="n_panels"):
        plotting.panel_columns(0, 2.0)
    with pytest.raises(ValueError, match="panel_width"):
        plotting.panel_columns(3, 0.0)


def test_five_matrices_wrap_into_rows_and_stay_legible():
    mats = {f"m{i}": np.eye(4) for i in range(5)}
    fig, axes = plotting.matrix_panels(mats)
    assert axes.shape[0] == 2 and fig.get_size_inches()[0] <= plotting.PAGE_WIDTH_IN
    assert plotting.check_legible(fig) >= plotting.MIN_FONT_PT
    plt.close(fig)


def test_a_wide_strip_of_panels_is_refused_with_the_reason():
    fig, axes = plt.subplots(1, 5, figsize=(13, 3))
    for ax in axes:
        ax.plot([0, 1], [0, 1])
        ax.set_xlabel("time t")
    # the style's 9–10 pt labels print at 10 × 7.5 / 13 ≈ 5.2 pt
    assert plotting.effective_font_size(fig) == pytest.approx(
        min(t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_text())
        * 7.5
        / 13
    )
    with pytest.raises(ValueError, match="wrap the panels"):
        plotting.check_legible(fig)
    plt.close(fig)


def test_effective_font_size_rejects_what_is_not_a_figure():
    with pytest.raises(TypeError, match="fig"):
        plotting.effective_font_size("figure")
