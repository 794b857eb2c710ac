"""The front pages' story figures, verdict strips and reading times (tools/story_figures.py and
the directives of tools/attnbook_sphinxext.py)."""

import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # the build tooling is not part of the package

import attnbook_sphinxext  # noqa: E402
import story_figures  # noqa: E402

PAGES = {part: ROOT / "book" / part / "index.md" for part in story_figures.PARTS}


@pytest.fixture(scope="module")
def archives():
    from attnbook.experiments import load_archive

    names = {n for p in story_figures.PARTS for n in story_figures.archives_of(p)}
    return {n: load_archive(n, progress=False) for n in names}


def _lines(ax):
    return [(line.get_xdata(), line.get_ydata()) for line in ax.get_lines()]


def _check_axes(fig):
    """Every panel has labelled axes, a title and finite, non-empty data; text ≥ 9 pt."""
    from attnbook.plotting import effective_font_size

    assert tuple(fig.get_size_inches()) == story_figures.FIGSIZE
    assert effective_font_size(fig, width=6.5) >= story_figures.MIN_FONT_PT
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
        data = [np.asarray(y, float) for _, y in _lines(ax)]
        data += [np.array([p.get_width() for p in ax.patches])]
        data = [d for d in data if d.size]
        assert data, ax.get_title()
        assert all(np.isfinite(d).all() for d in data), ax.get_title()


def _has_curve(ax, x, y):
    """Whether ``ax`` draws ``y`` against ``x`` (to round-off)."""
    return any(
        len(lx) == len(x) and np.allclose(lx, x) and np.allclose(ly, y, rtol=1e-12)
        for lx, ly in _lines(ax)
    )


def test_focus_story_draws_the_archived_flow(archives):
    import matplotlib.pyplot as plt

    ds = archives["focus-delta"]
    deltas = (0.0, 0.04)
    fig = story_figures.focus_story(deltas, archive=ds)
    try:
        _check_axes(fig)
        a, b = fig.axes
        assert (
            "$" in a.get_ylabel() and "$" in b.get_ylabel()
        )  # mathtext, not raw names
        for d in deltas:
            i = int(np.flatnonzero(np.isclose(ds["delta"].values, d))[0])
            t = ds["t"].values[i, 0]
            keep = t > 0  # a log axis
            H = ds["entropy_uniform"].values[i, 0, :, 0]
            assert _has_curve(b, t[keep], H[keep]), d
            # the loss panel: the archive's loss less a constant (the entropy rate)
            loss = ds["loss"].values[i, 0, :, 0][keep]
            gaps = [
                ly
                for lx, ly in _lines(a)
                if len(lx) == keep.sum() and np.allclose(lx, t[keep])
            ]
            above = loss - loss.min() > 1e-3  # where the floor does not bite
            assert any(np.ptp((loss - np.asarray(g))[above]) < 1e-12 for g in gaps), d
        labels = [t.get_text() for t in a.get_legend().get_texts()]
        assert labels == [r"$\delta = 0$", r"$\delta = 0.04$"]
    finally:
        plt.close(fig)


def test_copyhead_story_draws_the_archived_heads(archives):
    import matplotlib.pyplot as plt

    from attnbook.experiments.copyhead import global_copy_order

    ph, mp = archives["copyhead-phase"], archives["copyhead-softmax-map"]
    fig = story_figures.copyhead_story(phase=ph, softmax_map=mp, n_theory=20)
    try:
        _check_axes(fig)
        a, b = fig.axes
        adam = global_copy_order(ph, kind="linear", method="adam").sel(V=4)
        P = ph["P"].values
        for L in ph["L"].values:
            assert _has_curve(a, P, adam.sel(L=L).mean("chain").values), L
        # the softmax heads: the deeper start of each run, against P / P*
        deeper = (mp["action"].isel(start=0) <= mp["action"].isel(start=1)).values
        a_G = np.where(deeper, mp["a_G"].isel(start=0), mp["a_G"].isel(start=1))
        ratio = (mp["P"] / mp["p_star"]).values
        for i, L in enumerate(mp["L"].values):
            assert _has_curve(b, ratio[i].mean(0), a_G[i].mean(axis=(0, 2))), L
        # the theory jumps at P* (a first-order transition): its largest step is there
        for x, y in _lines(b)[::2]:
            k = int(np.argmax(np.diff(y)))
            assert x[k] <= 1.0 <= x[k + 1] * 1.05
    finally:
        plt.close(fig)


def test_pde_story_draws_the_archived_fates(archives):
    import matplotlib.pyplot as plt

    ds = archives["pde-fates"]
    fig = story_figures.pde_story(2, n_times=40, archive=ds)
    try:
        _check_axes(fig)
        a, b = fig.axes
        # (a) the blow-up draw diverges where the archive saw it explode: its blow-up time is
        # the first time of the archive's output grid past the singularity
        from attnbook.experiments.pde import FatesConfig

        cfg = FatesConfig(**json.loads(ds.attrs["fixed"]))
        grid = np.geomspace(1e-2, cfg.t_end, cfg.n_times - 1)
        gen = ds.sel(kind="softmax", ensemble="generic", d=2)["blowup_time"].values
        T_arch = gen[np.isfinite(gen)][0]
        before = grid[np.searchsorted(grid, T_arch * (1 - 1e-9)) - 1]
        xs = [lx for lx, _ in _lines(a)]
        T_drawn = max(float(np.max(x)) for x in xs if np.max(x) < T_arch)
        assert before < T_drawn < T_arch
        # (b) the bars count the archive's generic draws per kind
        widths = np.array([p.get_width() for p in b.patches]).reshape(3, -1)
        g = ds.sel(ensemble="generic")
        blow = [
            np.isfinite(g["blowup_time"].sel(kind=k).values).sum()
            for k in g.kind.values
        ]
        grow = [
            np.isfinite(g["growth_rate"].sel(kind=k).values).sum()
            for k in g.kind.values
        ]
        np.testing.assert_array_equal(widths[0], blow)
        np.testing.assert_array_equal(widths[1], grow)
        np.testing.assert_array_equal(widths.sum(0), g["rank"].sel(kind="softmax").size)
    finally:
        plt.close(fig)


def test_story_functions_validate_their_arguments(archives):
    with pytest.raises(ValueError, match="part"):
        story_figures.story_figure("nope")
    with pytest.raises(TypeError, match="part"):
        story_figures.story_figure(1)
    with pytest.raises(ValueError, match="deltas"):
        story_figures.focus_story((0.5,), archive=archives["focus-delta"])
    with pytest.raises(TypeError, match="deltas"):
        story_figures.focus_story(0.5)
    with pytest.raises(TypeError, match="archive"):
        story_figures.focus_story(archive={"loss": 1})
    with pytest.raises(ValueError, match="vocab_size"):
        story_figures.copyhead_story(vocab_size=5, phase=archives["copyhead-phase"])
    with pytest.raises(ValueError, match="d"):
        story_figures.pde_story(7, archive=archives["pde-fates"])
    with pytest.raises(TypeError, match="n_times"):
        story_figures.pde_story(2, n_times=4.0)
    with pytest.raises(ValueError, match="path"):
        story_figures.save_story_svg("pde", "x.png")
    with pytest.raises(ValueError, match="words_per_minute"):
        story_figures.reading_minutes(PAGES["pde"], words_per_minute=0)


def test_save_story_svg_writes_an_svg(tmp_path):
    path = story_figures.save_story_svg("pde", tmp_path / "pde.svg")
    text = path.read_text(encoding="utf-8")
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert str(tmp_path) not in text  # no machine path in a published file


def test_each_part_page_shows_its_story_and_verdicts():
    for part, page in PAGES.items():
        text = page.read_text(encoding="utf-8")
        fig = re.search(r"```\{story-figure\} (\w+)\n(.+?)\n```", text, re.S)
        assert fig and fig.group(1) == part, part
        assert len(fig.group(2).split()) >= 20, (
            f"{part}: the caption must say what to see"
        )
        assert f"```{{verdict-strip}} {part}\n```" in text, part
        # near the top: before the page's second heading or list
        assert text.index("{story-figure}") < text.index("\n1. "), part


def test_landing_page_shows_all_stories_and_reading_paths():
    text = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    assert re.findall(r"```\{story-figure\} (\w+)", text) == list(story_figures.PARTS)
    assert "{container} attnbook-story-grid" in text
    assert "## Reading paths" in text and "{doc}`course/syllabus`" in text
    weekend = re.findall(
        r"^\d+\. \{doc\}`([\w/-]+)` \(\{reading-time\}`([\w/-]+)`\)", text, re.M
    )
    assert 6 <= len(weekend) <= 10 and all(a == b for a, b in weekend)
    for part in story_figures.PARTS:  # the researcher's path: front page, then findings
        assert f"{{doc}}`{part}/index` → {{doc}}`{part}/findings`" in text
    css = (ROOT / "book" / "_static" / "reader.css").read_text(encoding="utf-8")
    assert ".attnbook-story-grid" in css and "auto-fit" in css


def test_verdict_counts_equal_the_findings_files():
    for part in story_figures.PARTS:
        path = ROOT / "book" / part / "findings.yml"
        rows = yaml.safe_load(path.read_text(encoding="utf-8"))["rows"]
        counts = attnbook_sphinxext.findings_counts(path)
        assert {k: v for k, v in counts.items() if v} == dict(
            Counter(r["verdict"] for r in rows)
        )
        assert sum(counts.values()) == len(rows)


def test_prose_words_skip_code_math_and_options():
    page = (
        "---\nkernelspec:\n  name: python3\n---\n# Title here\n\nTwo words $x^2$.\n\n"
        "```{code-cell} ipython3\nnot = prose + at_all\n```\n\n$$\na + b\n$$\n\n"
        "```{figure} x.png\n:name: fig-x\nA caption.\n```\n\nSee {doc}`intro`.\n"
    )
    # Title here / Two words x / A caption / See intro
    assert story_figures.prose_words(page) == 9
    assert story_figures.reading_minutes(PAGES["focus"]) >= 1
