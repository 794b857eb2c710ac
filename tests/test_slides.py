"""The slide decks (slides/session-N.md, built by tools/slides.py): one per session, figures the
chapters name, exercises the session sets, and no answers. Fast; no book build, no browser."""

import re
from pathlib import Path

import pytest

from tools import browser_check, build_tools, slides

ROOT = Path(__file__).resolve().parent.parent
DECKS = ROOT / "slides"
SESSIONS = sorted(
    (ROOT / "book" / "course").glob("session-*.md"), key=lambda p: int(p.stem[8:])
)


def _deck(n: int) -> slides.Deck:
    path = DECKS / f"session-{n}.md"
    return slides.parse_deck(path.read_text(encoding="utf-8"), str(path))


def _session_text(n: int) -> str:
    return (ROOT / "book" / "course" / f"session-{n}.md").read_text(encoding="utf-8")


def _answers(text: str) -> str:
    """The session page's instructor-only answers (the dropdown the student edition drops)."""
    m = re.search(r"```\{admonition\} Expected answers.*?\n(.*?)```", text, re.S)
    return m.group(1) if m else ""


NUMBERS = [int(p.stem[8:]) for p in SESSIONS]


def test_every_session_has_one_deck_and_nothing_else():
    assert NUMBERS == list(range(1, 7))
    assert [p.name for p in slides.deck_sources(DECKS)] == [p.name for p in SESSIONS]


@pytest.mark.parametrize("n", NUMBERS)
def test_deck_front_matter_matches_its_session_page(n):
    deck = _deck(n)
    text = _session_text(n)
    intro = re.search(r"^\*Week (\d+),(.*?)\n\n", text, re.S | re.M)
    assert deck.meta["session"] == n
    assert deck.meta["week"] == int(intro.group(1))
    named = set(re.findall(r"\{doc\}`\.\./([^`]+)`", intro.group(2)))
    assert deck.meta["chapters"] and set(deck.meta["chapters"]) <= named
    for chapter in deck.meta["chapters"]:
        assert (ROOT / "book" / f"{chapter}.md").is_file(), chapter


@pytest.mark.parametrize("n", NUMBERS)
def test_deck_has_the_parts_of_a_session(n):
    titles = [s.title for s in _deck(n).slides]
    assert len(titles) >= 6
    for part in ("Objectives", "Warm-up", "Lab", "Discussion", "Exit question"):
        assert any(t.startswith(part) for t in titles), (n, part, titles)
    assert titles.index("Objectives") < min(
        i for i, t in enumerate(titles) if t.startswith("Warm-up")
    )


@pytest.mark.parametrize("n", NUMBERS)
def test_every_figure_is_a_named_figure_of_the_sessions_chapters(n):
    deck = _deck(n)
    index = slides.figure_index(ROOT / "book")
    labels = deck.figure_labels()
    assert 2 <= len(labels) <= 4, labels
    assert len(set(labels)) == len(labels)
    for label in labels:
        assert label in index, f"session {n}: no chapter names {label}"
        chapter = index[label].relative_to(ROOT / "book").with_suffix("").as_posix()
        assert chapter in deck.meta["chapters"], (label, chapter)


@pytest.mark.parametrize("n", NUMBERS)
def test_every_exercise_is_one_the_session_sets(n):
    labels = _deck(n).exercise_labels()
    assert labels
    assert set(labels) <= set(re.findall(r"\{ref\}`(ex-[^`]+)`", _session_text(n)))


@pytest.mark.parametrize("n", NUMBERS)
def test_deck_holds_no_solution_and_no_expected_answer(n):
    text = (DECKS / f"session-{n}.md").read_text(encoding="utf-8")
    assert not slides.FORBIDDEN.search(text)
    # no formula that only the instructor's answers hold (the question's own math may recur);
    # compared without white space, formulas of 12 characters or more
    page = _session_text(n)
    answers = _answers(page)
    assert answers, f"session {n} has no expected answers to keep out"
    rest = _squeeze(page.replace(answers, ""))
    answer_math = {_squeeze(m) for m in re.findall(r"\$([^$]+)\$", answers)}
    answer_math = {m for m in answer_math if len(m) >= 12 and m not in rest}
    leaked = sorted(m for m in answer_math if m in _squeeze(text))
    assert not leaked, f"session {n}: the deck shows answers' math {leaked}"


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


TINY = """---
session: 9
week: 5
chapters: [foundations/attention-maps]
---

# A tiny deck

A subtitle with $x^2$.

## First

- one $a_{ij}$
- two

$$
e^{i\\pi} + 1 = 0
$$

## A figure

```{chapter-figure} fig-tiny
A *short* caption with $\\beta$.
```

## Lab

- {exercise}`ex-shift-invariance`
"""


def test_parse_a_tiny_deck():
    deck = slides.parse_deck(TINY, "tiny.md")
    assert deck.meta == {
        "session": 9,
        "week": 5,
        "chapters": ["foundations/attention-maps"],
    }
    assert [(s.title, s.level) for s in deck.slides] == [
        ("A tiny deck", 1),
        ("First", 2),
        ("A figure", 2),
        ("Lab", 2),
    ]
    assert deck.figure_labels() == ["fig-tiny"]
    assert deck.exercise_labels() == ["ex-shift-invariance"]


def _fake_book(tmp_path: Path, label: str = "fig-tiny") -> tuple[Path, dict]:
    """A built page holding one figure, and the index that points the label at it."""
    html_dir = tmp_path / "html"
    page = html_dir / "book" / "foundations" / "attention-maps.html"
    (html_dir / "_images").mkdir(parents=True)
    page.parent.mkdir(parents=True)
    (html_dir / "_images" / "abc.png").write_bytes(b"\x89PNG fake")
    (html_dir / "search.html").write_text("search")
    page.write_text(
        f'<figure class="align-default" id="{label}">\n'
        '<img alt="x" src="../../_images/abc.png" />\n'
        '<figcaption><p><span class="caption-number">Fig. 2.1 </span>'
        '<span class="caption-text">Long caption.</span></p></figcaption></figure>',
        encoding="utf-8",
    )
    return html_dir, {label: ROOT / "book" / "foundations" / "attention-maps.md"}


def test_resolve_a_figure_from_the_built_page(tmp_path):
    html_dir, index = _fake_book(tmp_path)
    fig = slides.resolve_figure("fig-tiny", html_dir, index, ROOT)
    assert fig.image == (html_dir / "_images" / "abc.png").resolve()
    assert fig.number == "Fig. 2.1"
    assert fig.width is None  # the page gives no width: the slide check uses its pixels


def test_a_2x_figure_is_measured_against_its_width_on_the_page(tmp_path):
    """A 2x PNG is drawn at half its pixel width: the deck carries the page's width, which
    the slide check divides by (else every retina figure reads as shown at half size)."""
    from tools import course

    html_dir, index = _fake_book(tmp_path)
    page = html_dir / "book" / "foundations" / "attention-maps.html"
    page.write_text(
        page.read_text().replace(
            '<img alt="x" src="../../_images/abc.png" />',
            '<img alt="x" src="../../_images/abc.png" style="width: 799px; height: 562px;" />',
        )
    )
    fig = slides.resolve_figure("fig-tiny", html_dir, index, ROOT)
    assert fig.width == 799
    deck = slides.parse_deck(TINY, "tiny.md")
    html = slides.render_deck(deck, {"fig-tiny": fig}, course.exercises(ROOT), ROOT)
    assert 'data-label="fig-tiny" data-book-width="799">' in html
    assert "img.dataset.bookWidth" in browser_check.SLIDE_FACTS


def test_a_missing_figure_label_is_a_clear_error(tmp_path):
    html_dir, index = _fake_book(tmp_path)
    with pytest.raises(slides.DeckError, match="'fig-nowhere' is named by no chapter"):
        slides.resolve_figure("fig-nowhere", html_dir, index, ROOT, "deck.md")
    # named by a chapter, absent from the build
    index["fig-unbuilt"] = index["fig-tiny"]
    with pytest.raises(
        slides.DeckError, match="no <figure id='fig-unbuilt'>.*make book"
    ):
        slides.resolve_figure("fig-unbuilt", html_dir, index, ROOT, "deck.md")
    with pytest.raises(slides.DeckError, match="not built"):
        slides.resolve_figure("fig-tiny", tmp_path / "nothing", index, ROOT)


def test_render_a_tiny_deck_offline(tmp_path):
    from tools import course

    html_dir, index = _fake_book(tmp_path)
    deck = slides.parse_deck(TINY, "tiny.md")
    figures = {"fig-tiny": slides.resolve_figure("fig-tiny", html_dir, index, ROOT)}
    page = slides.render_deck(deck, figures, course.exercises(ROOT), ROOT)
    assert page.count("<section") == 4 and 'data-slides="4"' in page
    assert '<span class="math inline">\\(x^2\\)</span>' in page
    assert "\\[\ne^{i\\pi} + 1 = 0\n\\]" in page
    assert '<img class="r-stretch chapter-figure" src="images/abc.png"' in page
    assert "(Fig. 2.1, Attention maps)" in page
    assert "<em>short</em>" in page
    assert "Shift invariance" in page  # the exercise's title, from its chapter
    assert "Session 9 · week 5" in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page), (
        "a deck loads nothing remote"
    )


def test_build_writes_decks_images_and_assets(tmp_path):
    html_dir, _ = _fake_book(tmp_path, label="fig-five-maps")
    decks = tmp_path / "decks"
    decks.mkdir()
    (decks / "session-1.md").write_text(
        TINY.replace("fig-tiny", "fig-five-maps"), encoding="utf-8"
    )
    reveal = tmp_path / "reveal"
    for name in build_tools.REVEAL_FILES:
        (reveal / name).parent.mkdir(parents=True, exist_ok=True)
        (reveal / name).write_text("/* reveal */")
    mathjax = tmp_path / "mathjax"
    mathjax.mkdir()
    (mathjax / "tex-chtml.js").write_text("/* mathjax */")
    out = tmp_path / "out"
    written = slides.build(decks, html_dir, reveal, mathjax, out, ROOT)
    assert written == [out / "session-1.html"]
    assert (out / "images" / "abc.png").is_file()
    assert (out / "_assets" / "reveal" / "dist" / "reveal.js").is_file()
    assert (out / "_assets" / "mathjax" / "tex-chtml.js").is_file()
    assert 'href="session-1.html"' in (out / "index.html").read_text()
    with pytest.raises(slides.DeckError, match="no built book"):
        slides.build(decks, tmp_path / "none", reveal, mathjax, out, ROOT)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# T\n\n## Solution\n", "no solutions or expected answers"),
        ("# T\n\n## Q\n\nExpected answers: 3\n", "no solutions or expected answers"),
        ("# T\n\n## Q\n\n```{note}\nx\n```\n", "directive \\{note\\}"),
        ("# T\n\n## Q\n\nsee {doc}`x`\n", "role \\{doc\\}"),
        ("## Q\n\ntext\n", "starts with its title"),
        ("text first\n\n# T\n", "content before the first heading"),
        ("# T\n\n# U\n", "one '# Title' per deck"),
    ],
)
def test_bad_deck_sources_are_refused(text, message):
    with pytest.raises(slides.DeckError, match=message):
        slides.parse_deck(text, "bad.md")
