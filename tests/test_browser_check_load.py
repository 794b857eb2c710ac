"""tools/browser_check.py on a busy machine: timed steps are retried, then reported.

The retry helper is tested with fake steps (no browser). The rest runs the real check on a
three-page book in tmp_path in the system Chromium (skipped when it is absent), with a
screenshot made to time out by a fake rather than by real slowness.
"""

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import browser_check  # noqa: E402

playwright_api = pytest.importorskip("playwright.sync_api")
PlaywrightError = playwright_api.Error
PlaywrightTimeout = playwright_api.TimeoutError

needs_chromium = pytest.mark.skipif(
    not Path(browser_check.CHROMIUM).is_file(),
    reason=f"no Chromium at {browser_check.CHROMIUM} (`make chromium` installs it)",
)

LIMITS_MS = (1000, 2000, 3000)


def flaky_step(step_name: str, failures: list[Exception]):
    """An attempt whose named step raises each of ``failures`` in turn, then succeeds;
    it records the time limit of every call."""
    calls: list[float] = []

    def attempt(timeout_ms: float) -> str:
        calls.append(timeout_ms)
        with browser_check.step(step_name):
            if len(calls) <= len(failures):
                raise failures[len(calls) - 1]
        return "done"

    return attempt, calls


def timeout(ms: float = 1000) -> Exception:
    return PlaywrightTimeout(f"Page.screenshot: Timeout {ms}ms exceeded.")


# the retry helper, with fake steps ------------------------------------------------------
def test_a_timeout_is_retried_with_a_longer_limit_then_succeeds(capsys):
    attempt, calls = flaky_step("screenshot", [timeout()])
    assert browser_check.with_retries("a.html", attempt, LIMITS_MS) == "done"
    assert calls == [1000, 2000]
    note = capsys.readouterr().out
    assert "a.html: screenshot timed out after 1 s; trying again" in note


def test_a_crashed_tab_is_retried_like_a_timeout():
    attempt, calls = flaky_step("load", [PlaywrightError("Page.goto: Target crashed")])
    assert browser_check.with_retries("a.html", attempt, LIMITS_MS) == "done"
    assert calls == [1000, 2000]


def test_after_the_last_timeout_it_gives_up_with_one_line_naming_page_and_step():
    attempt, calls = flaky_step("screenshot", [timeout()] * 3)
    with pytest.raises(browser_check.CheckGaveUp) as gave_up:
        browser_check.with_retries("focus/focus.html", attempt, LIMITS_MS)
    assert calls == list(LIMITS_MS)
    assert str(gave_up.value) == (
        "focus/focus.html: screenshot timed out 3 times (1 s, 2 s, 3 s)"
    )


def test_a_non_timeout_error_is_not_retried():
    refused = PlaywrightError("Page.goto: net::ERR_CONNECTION_REFUSED")
    attempt, calls = flaky_step("load", [refused])
    with pytest.raises(browser_check.StepError) as failed:
        browser_check.with_retries("a.html", attempt, LIMITS_MS)
    assert calls == [1000]
    assert not failed.value.retryable
    assert str(failed.value) == "load failed: Page.goto: net::ERR_CONNECTION_REFUSED"

    calls.clear()

    def buggy(timeout_ms):  # a bug in the check itself is not a timeout either
        calls.append(timeout_ms)
        raise KeyError("math")

    with pytest.raises(KeyError):
        browser_check.with_retries("a.html", buggy, LIMITS_MS)
    assert calls == [1000]


def test_run_check_turns_giving_up_into_a_failing_record(monkeypatch):
    attempt, _ = flaky_step("screenshot", [timeout()] * 3)
    monkeypatch.setattr(browser_check, "ATTEMPT_TIMEOUTS_MS", LIMITS_MS)
    rec = browser_check.run_check("b.html", attempt)
    assert rec["ok"] is False
    assert rec["problems"] == ["b.html: screenshot timed out 3 times (1 s, 2 s, 3 s)"]


# the real check on a tiny book ------------------------------------------------------------
PAGE = """<!DOCTYPE html><html><head><title>{title}</title>
<link rel="icon" href="data:,"></head><body><main><h1>{title}</h1>
<p>{text}</p></main></body></html>"""

# what the tool reads of Sphinx's search page: a list of results, then the summary line
SEARCH = """<!DOCTYPE html><html><head><title>Search</title>
<link rel="icon" href="data:,"></head><body><main><div id="search-results"></div>
<script>
  const term = new URLSearchParams(location.search).get("q") || "";
  const out = document.getElementById("search-results");
  const found = term === "condensation" ? ["Condensation of attention"] : [];
  out.innerHTML = '<p class="search-summary">Search finished, found '
    + found.length + ' page(s).</p><ul class="search">'
    + found.map((t) => '<li><a href="b.html">' + t + "</a></li>").join("") + "</ul>";
</script></main></body></html>"""


@pytest.fixture
def tiny_book(tmp_path):
    html = tmp_path / "html"
    html.mkdir()
    (html / "index.html").write_text(PAGE.format(title="Index", text="Start here."))
    (html / "a.html").write_text(PAGE.format(title="A", text="Attention."))
    (html / "b.html").write_text(PAGE.format(title="B", text="Condensation."))
    (html / "search.html").write_text(SEARCH)
    return html


def run_main(html: Path, screens: Path, *extra: str) -> int:
    argv = [str(html), "--screens", str(screens), "--chromium", browser_check.CHROMIUM]
    return browser_check.main(argv + list(extra))


@needs_chromium
@pytest.mark.slow  # real Chromium: seconds each, more on a busy machine
def test_a_screenshot_that_keeps_timing_out_fails_its_page_and_the_run(
    tiny_book, tmp_path, monkeypatch, capsys
):
    real_screenshot = playwright_api.Page.screenshot

    def screenshot(page, **kwargs):  # b.html's screenshot never finishes in time
        if page.url.endswith("/b.html"):
            raise PlaywrightTimeout(
                f"Page.screenshot: Timeout {kwargs['timeout']:g}ms exceeded."
            )
        return real_screenshot(page, **kwargs)

    monkeypatch.setattr(playwright_api.Page, "screenshot", screenshot)
    screens = tmp_path / "screens"

    assert run_main(tiny_book, screens) == 1  # and no exception

    out = capsys.readouterr().out
    expected = "b.html: screenshot timed out 3 times (30 s, 60 s, 90 s)"
    assert "FAIL b.html" in out
    assert f"     {expected}" in out
    assert "1 failing" in out
    report = json.loads((screens / "report.json").read_text())
    records = {r["page"]: r for r in report["records"]}
    assert records["b.html"]["ok"] is False
    assert records["b.html"]["problems"] == [expected]
    assert records["a.html"]["ok"] and records["index.html"]["ok"]
    assert records["search: condensation"]["ok"]
    assert (screens / "a.jpg").is_file()
    assert not (screens / "b.jpg").exists()


@needs_chromium
@pytest.mark.slow  # real Chromium: seconds each, more on a busy machine
def test_a_screenshot_that_times_out_once_is_retried_and_the_run_passes(
    tiny_book, tmp_path, monkeypatch, capsys
):
    real_screenshot = playwright_api.Page.screenshot
    timed_out: list[str] = []

    def screenshot(page, **kwargs):  # a.html's first screenshot is too slow
        if page.url.endswith("/a.html") and not timed_out:
            timed_out.append(page.url)
            raise PlaywrightTimeout("Page.screenshot: Timeout 30000ms exceeded.")
        return real_screenshot(page, **kwargs)

    monkeypatch.setattr(playwright_api.Page, "screenshot", screenshot)
    screens = tmp_path / "screens"

    assert run_main(tiny_book, screens) == 0

    out = capsys.readouterr().out
    assert "a.html: screenshot timed out after 30 s; trying again" in out
    assert re.search(r"^ok   a\.html \(", out, re.M)
    assert (screens / "a.jpg").is_file()


@needs_chromium
@pytest.mark.slow  # real Chromium: seconds each, more on a busy machine
def test_a_search_that_never_finishes_times_out_for_real_and_is_reported(
    tiny_book, tmp_path, monkeypatch, capsys
):
    (tiny_book / "search.html").write_text(
        PAGE.format(title="Search", text='<div id="search-results"></div>')
    )
    screens = tmp_path / "screens"
    # real Playwright timeouts, short ones: only the search is meant to run out of time
    monkeypatch.setattr(browser_check, "ATTEMPT_TIMEOUTS_MS", (2000, 2000, 2000))
    monkeypatch.setattr(browser_check, "book_pages", lambda html: [])

    assert run_main(tiny_book, screens) == 1

    report = json.loads((screens / "report.json").read_text())
    (search,) = report["records"]
    assert search["ok"] is False
    (problem,) = search["problems"]
    # on a very busy machine a load may also run out of 2 s: then the line lists each try
    assert re.fullmatch(
        r"search: condensation: (search results timed out 3 times \(2 s, 2 s, 2 s\)"
        r"|gave up after 3 attempts \(.*search results timed out at 2 s\))",
        problem,
    ), problem


@needs_chromium
@pytest.mark.slow  # real Chromium: seconds each, more on a busy machine
def test_a_search_that_finds_nothing_fails_at_once(
    tiny_book, tmp_path, monkeypatch, capsys
):
    screens = tmp_path / "screens"
    monkeypatch.setattr(browser_check, "book_pages", lambda html: [])
    assert run_main(tiny_book, screens, "--term", "nothing") == 1
    out = capsys.readouterr().out
    assert "trying again" not in out
    assert "search for 'nothing' found nothing" in out


# what the deck check reads of a reveal.js deck, without reveal.js
DECK = """<!DOCTYPE html><html><head><title>Deck</title>
<link rel="icon" href="data:,"></head><body>
<div class="reveal"><div class="slides" data-slides="6">{sections}</div></div>
<script>
  const slides = [...document.querySelectorAll(".reveal .slides section")];
  let current = 0;
  window.Reveal = {{
    isReady: () => true, getTotalSlides: () => slides.length,
    getConfig: () => ({{width: 1280, height: 720}}), layout: () => null,
    slide: (i) => {{ current = i; }}, getCurrentSlide: () => slides[current],
  }};
  window.deckReady = Promise.resolve();
</script></body></html>"""


@needs_chromium
@pytest.mark.slow  # real Chromium: seconds each, more on a busy machine
def test_a_deck_whose_slide_screenshot_times_out_once_is_retried_and_passes(
    tmp_path, monkeypatch, capsys
):
    decks = tmp_path / "slides"
    decks.mkdir()
    sections = "".join(f"<section><h2>Slide {i}</h2></section>" for i in range(1, 7))
    (decks / "session-1.html").write_text(DECK.format(sections=sections))
    (decks / "index.html").write_text(
        PAGE.format(title="Decks", text='<a href="session-1.html">1</a>')
    )
    real_screenshot = playwright_api.Page.screenshot
    shots: list[str] = []

    def screenshot(page, **kwargs):  # the third slide's first screenshot is too slow
        shots.append(kwargs["path"])
        if len(shots) == 3:
            raise PlaywrightTimeout("Page.screenshot: Timeout 30000ms exceeded.")
        return real_screenshot(page, **kwargs)

    monkeypatch.setattr(playwright_api.Page, "screenshot", screenshot)
    screens = tmp_path / "screens"

    argv = ["--slides", str(decks), "--screens", str(screens)]
    assert browser_check.main(argv + ["--chromium", browser_check.CHROMIUM]) == 0

    out = capsys.readouterr().out
    assert "session-1.html: screenshot of slide 3 timed out after 30 s" in out
    assert re.search(r"^ok   session-1\.html \(.*6 slides", out, re.M)
    assert sorted(p.name for p in (screens / "session-1").iterdir()) == [
        f"{i:02d}.jpg" for i in range(1, 7)
    ]


# reading as a reader (issue 48) ------------------------------------------------------------
READER_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<style>body {{ margin: 0 }} .faint {{ color: #bbb }}</style></head><body><main>
<p>{prose}</p>
<details class="attnbook-claim"><summary>✔ a claim 0.5</summary>{hidden}</details>
<details open class="attnbook-claim"><summary>✘ a failed claim 2</summary>shown evidence</details>
<details class="attnbook-claim attnbook-claims"><summary>✔ 3 claims hold here</summary>
  <details class="attnbook-claim"><summary>✔ inside a group 1</summary>{hidden}</details></details>
<div class="cell_input"><pre>ch.ledger.check("a", "b", 1.0, upper=2)</pre></div>
<details class="hide"><summary>show</summary>
  <div class="cell_input"><pre>ch.ledger.check("c", "d", 1.0, upper=2) {hidden}</pre></div></details>
<div class="cell_input"><pre>x = make_a_figure()</pre></div>
<figure><figcaption class="faint">a faint caption</figcaption></figure>
<div style="width: {wide}px">wide</div>
</main></body></html>"""


@needs_chromium
@pytest.mark.slow
def test_reading_a_page_counts_only_what_is_not_folded(tmp_path):
    """Folded text (a closed chip's evidence, a hidden cell) is not counted; an open chip
    and a visible check cell are apparatus; a faint caption and a page wider than a phone
    are reported."""
    hidden = " ".join(["folded"] * 500)
    html = tmp_path / "html" / "book" / "focus"
    html.mkdir(parents=True)
    page_text = READER_PAGE.format(prose="one two three", hidden=hidden, wide=600)
    (html / "chapter.html").write_text(page_text, encoding="utf-8")
    with browser_check.serve(tmp_path / "html") as base, browser_check.browser() as b:
        context = b.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(base + "book/focus/chapter.html")
        views = browser_check.read_as_reader(page, 10_000)
        context.close()
    light = views["light 1280"]
    assert (
        "folded" not in str(light) and light["total"] < 60
    )  # 500 folded words left out
    # apparatus outside collapsed elements: the open chip (5 + 2) and the visible check cell
    # (4 whitespace-separated words); the closed chips' lines apart: the chip's (4) and the
    # closed group's (5; its chips are folded); code: the check cell and the figure's (3)
    assert light["apparatus"] == 7 + 4 and light["claims"] == 4 + 5
    assert light["code"] == 4 + 3
    assert light["lowContrast"] and "faint caption" in light["lowContrast"][0]
    assert views["light 1280"]["overflow"] == 0 and views["dark 400"]["overflow"] >= 200
    problems = browser_check.reader_problems(base + "book/focus/chapter.html", views)
    assert any("apparatus is" in p for p in problems)
    assert any("400: the page is" in p for p in problems)
    assert any("contrast" in p for p in problems)
    # a part's front page is not held to a chapter's shares
    front = browser_check.reader_problems(base + "book/focus/index.html", views)
    assert not any("apparatus is" in p for p in front)
