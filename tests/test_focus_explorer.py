"""The Part I explorer (attnbook.focus.explorer): it builds, an update redraws from the cache,
the runs show the stages, and bad settings are refused."""

import time

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from attnbook.focus import explorer as ex  # noqa: E402

SHORT = {"t_end": 300.0, "seed": 0}  # stages I–III only: fast; one seed, one cache key


def test_a_run_shows_stages_one_to_three_and_is_cached():
    run = ex.explorer_run(0.02, 0.5, **SHORT)
    st = run.stages
    assert st["I_end"] < st["II_end"] < st["III_end"] < 300
    assert run.loss.shape == run.t.shape == run.phi_norm.shape == run.sigma2_W0.shape
    assert np.all(run.loss_gap > 0) and run.h < run.loss[-1] < np.log(4)
    t0 = time.perf_counter()
    assert ex.explorer_run(0.02, 0.5, **SHORT) is run
    assert time.perf_counter() - t0 < 0.1


def test_the_figure_has_four_panels_with_legible_fonts():
    runs = ex.explorer_runs([(0.0, 0.5), (0.04, 0.8)], **SHORT)
    for fig in (ex.explorer_figure(runs), ex.explorer_figure(runs[0])):
        axes = [ax for ax in fig.axes if ax.get_visible()]
        assert len(axes) == 4 and fig.get_figwidth() <= 7  # shown at ~page width
        sizes = [ax.title.get_fontsize() for ax in axes]
        sizes += [t.get_fontsize() for ax in axes for t in ax.get_xticklabels()]
        assert min(sizes) >= 9
        matplotlib.pyplot.close(fig)


def test_the_widget_builds_and_an_update_redraws(capsys):
    pytest.importorskip("ipywidgets")
    widget = ex.focus_explorer(
        deltas=(0.0, 0.02), rhos=(0.5,), precompute=True, **SHORT
    )
    delta, rho = widget.children[0].children
    t0 = time.perf_counter()
    delta.value = 0.0  # cached: only redraws
    assert time.perf_counter() - t0 < 2.0
    assert rho.value == 0.5


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"delta": -0.1}, ValueError),
        ({"rho": 1.0}, ValueError),
        ({"delta": "0.02"}, ValueError),
        ({"t_end": -1.0}, ValueError),
        ({"seed": 1.5}, TypeError),
    ],
)
def test_bad_settings_are_refused(kwargs, error):
    with pytest.raises(error):
        ex.explorer_run(**kwargs)


def test_the_figure_refuses_other_objects():
    with pytest.raises(TypeError, match="ExplorerRun"):
        ex.explorer_figure([1, 2])


def test_the_widget_refuses_a_start_off_its_sliders():
    pytest.importorskip("ipywidgets")
    with pytest.raises(ValueError, match="not a setting"):
        ex.focus_explorer(start=(0.03, 0.5))
