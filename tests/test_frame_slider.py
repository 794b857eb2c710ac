"""widgets.frame_slider: an explorer's frames behind HTML sliders, moving without a kernel."""

import json
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from attnbook.widgets import frame_slider  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _draw(a, b):
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.set_title(f"{a}-{b}")
    return fig


def test_one_frame_per_setting_first_axis_outermost():
    seen = []

    def draw(a, b):
        seen.append((a, b))
        return _draw(a, b)

    fs = frame_slider(draw, {"a": [1, 2], "b": [0.5, 1.5, 2.5]}, start={"b": 1.5})
    assert seen == [(1, 0.5), (1, 1.5), (1, 2.5), (2, 0.5), (2, 1.5), (2, 2.5)]
    page = fs._repr_html_()
    data = json.loads(
        re.search(r"<script type=\"application/json\">(.*?)</script>", page).group(1)
    )
    assert data["sizes"] == [2, 3] and data["labels"] == [
        ["1", "2"],
        ["0.5", "1.5", "2.5"],
    ]
    assert len(set(data["frames"])) == 6  # six different pictures
    assert 'data-frame="1"' in page  # a = 1, b = 1.5 is shown first
    assert page.count('type="range"') == 2 and "6 frames" in repr(fs)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="draw"):
        frame_slider(None, {"a": [1]})
    with pytest.raises(ValueError, match="axes"):
        frame_slider(_draw, {})
    with pytest.raises(ValueError, match="start"):
        frame_slider(_draw, {"a": [1], "b": [2]}, start={"a": 3})
    with pytest.raises(TypeError, match="figure"):
        frame_slider(lambda a: None, {"a": [1]})


@pytest.mark.slow
def test_the_slider_changes_the_frame_in_a_browser(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import browser_check

    if not Path(browser_check.CHROMIUM).is_file():
        pytest.skip("no Chromium (`make chromium` installs it)")
    fs = frame_slider(_draw, {"a": [1, 2], "b": [0.5, 1.5]})
    (tmp_path / "p.html").write_text(
        f"<!doctype html><html><body>{fs._repr_html_()}</body></html>", encoding="utf-8"
    )
    with browser_check.serve(tmp_path) as base, browser_check.browser() as b:
        page = b.new_page()
        page.goto(base + "p.html")
        src0 = page.get_attribute("img", "src")
        page.locator("input[type=range]").nth(1).fill("1")
        assert page.get_attribute("img", "data-frame") == "1"
        assert page.get_attribute("img", "src") != src0
        page.locator("input[type=range]").nth(0).fill("1")
        assert page.get_attribute("img", "data-frame") == "3"
        assert page.locator("output").nth(0).text_content() == "2"
