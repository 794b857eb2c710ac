"""The Part II explorer (attnbook.copyhead.explorer): its thresholds and curves are the
package's theory, its figures draw them, and the widget updates fast."""

import math
import time

import matplotlib
import numpy as np
import pytest

from attnbook.copyhead import action as A
from attnbook.copyhead import explorer as E

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def test_thresholds_are_the_theory():
    th = E.explorer_thresholds(seq_len=32, vocab_size=4)
    assert th["P_on"] == A.linear_onset_p(seq_len=32, vocab_size=4)
    assert th["P_cross"] == A.linear_crossover_p(seq_len=32, vocab_size=4)
    assert th["P_cross_fluct"] == pytest.approx(2 * 32**2 * 4 / 3)
    assert th["L_c"] == A.softmax_critical_length(vocab_size=4)
    assert th["P_star"] == A.softmax_critical_p(seq_len=32, vocab_size=4)
    lo, hi = th["window"]
    assert lo < th["P_star"] < hi


def test_below_the_critical_length_there_is_no_softmax_jump():
    th = E.explorer_thresholds(seq_len=16, vocab_size=4)
    assert 16 < th["L_c"] and math.isnan(th["P_star"]) and th["window"] is None
    th["P_on"] = -1.0  # a copy: the cache is not touched
    assert E.explorer_thresholds(seq_len=16, vocab_size=4)["P_on"] > 0


def test_curves_are_the_saddles_on_a_grid_past_every_threshold():
    cv = E.explorer_curves(seq_len=32, vocab_size=4, n_points=30)
    P = cv["P"]
    assert P.shape == (30,) and P[0] == 1.0
    th = E.explorer_thresholds(seq_len=32, vocab_size=4)
    assert P[-1] > max(th["P_star"], th["P_cross_fluct"], th["P_on"])
    lin = A.linear_saddle(P, seq_len=32, vocab_size=4)
    np.testing.assert_allclose(cv["linear_m"], lin.m)
    np.testing.assert_allclose(cv["linear_c_G"], lin.c_G)
    soft = A.softmax_saddle(P, seq_len=32, vocab_size=4)
    np.testing.assert_allclose(cv["softmax_a_G"], soft.a_G, atol=1e-6)
    above = P > 1.2 * th["window"][1]
    assert (cv["softmax_a_G"][above] > 0.1).all()
    assert (cv["softmax_a_G"][P < 0.8 * th["window"][0]] < 0.05).all()


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(seq_len=1, vocab_size=4), "seq_len"),
        (dict(seq_len=16, vocab_size=1), "vocab_size"),
        (dict(seq_len=16.5, vocab_size=4), "seq_len"),
    ],
)
def test_bad_sizes_name_the_argument(kw, match):
    with pytest.raises((TypeError, ValueError), match=match):
        E.explorer_thresholds(**kw)


def test_figure_draws_actions_order_parameters_and_thresholds():
    fig = E.explorer_figure(342.0, seq_len=32, vocab_size=4)
    ax_lin, ax_soft, ax_order = fig.axes
    g, S = ax_soft.lines[0].get_data()
    inner = (S[1:-1] < S[:-2]) & (S[1:-1] < S[2:])
    assert inner.sum() == 2  # two minima near P*
    labels = [line.get_label() for line in ax_order.lines]
    assert r"softmax $P^\star$" in labels
    assert r"linear onset $P_\mathrm{on}$" in labels
    assert "$P = 342$" in labels
    plt.close(fig)
    with pytest.raises(ValueError, match="n_sequences"):
        E.plot_actions(plt.subplots(1, 2)[1], -1.0, seq_len=32, vocab_size=4)
    plt.close("all")


def test_widget_builds_and_updates_fast():
    pytest.importorskip("ipywidgets")
    w = E.copyhead_explorer(n_sequences=300, seq_len=32, vocab_size=4)
    p_slider, l_slider, v_slider = w.children[0].children
    t0 = time.perf_counter()
    p_slider.value = 1000.0  # a new P: curves cached
    v_slider.value = 8  # a new V: thresholds and curves computed
    wall_s = (time.perf_counter() - t0) / 2
    assert wall_s < 4.0, wall_s  # < 2 s on an idle CPU; the margin is for a loaded one
    plt.close("all")
    with pytest.raises(ValueError, match="seq_len must be one of"):
        E.copyhead_explorer(seq_len=33)
