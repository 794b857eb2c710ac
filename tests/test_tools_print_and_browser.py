"""Unit tests of the printing, browser-test and bibliography tools in tools/ (no browser needed)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import book_pdf  # noqa: E402
import browser_check  # noqa: E402


def test_toc_entries_follow_the_toc_in_reading_order():
    entries = book_pdf.toc_entries(ROOT)
    docs = [doc for _, doc in entries]
    assert docs[0] == "book/intro"
    assert entries[0][0] is None
    assert docs.index("book/foundations/attention-maps") < docs.index(
        "book/pde/particles"
    )
    assert "book/course/setup-check" in docs
    for _, doc in entries:
        assert (ROOT / f"{doc}.md").is_file(), doc


def test_book_pages_and_redirects(tmp_path):
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "x.html").write_text("<p>asset</p>")
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "a.html").write_text("<html><body>a</body></html>")
    (tmp_path / "index.html").write_text(
        '<meta http-equiv="Refresh" content="0; url=book/a.html" />'
    )
    assert browser_check.book_pages(tmp_path) == ["book/a.html", "index.html"]
    assert browser_check.redirect_target(tmp_path / "index.html") == "book/a.html"
    assert browser_check.redirect_target(tmp_path / "book" / "a.html") is None
    assert browser_check.screen_name("book/focus/x.html") == "book__focus__x.jpg"


def test_page_number_overlay_and_front_matter():
    html = book_pdf.numbers_html(3, 5)
    assert html.count('class="p"') == 3
    assert "<span>7</span>" in html
    front = book_pdf.front_matter_html("T", "S", [("Part <I>", "Ch & 1", 4)])
    assert "Part &lt;I&gt;" in front
    assert "Ch &amp; 1" in front


def test_author_year_labels():
    pybtex = pytest.importorskip("pybtex.database")
    import sphinx_reader

    bib = pybtex.parse_string(
        """
        @article{a, author = {Cuturi, Marco}, year = {2013}, title = {x}}
        @article{b, author = {Bobkov, Sergey and Ledoux, Michel}, year = {2019}, title = {y}}
        @article{c, author = {Castin, Val{\\'e}rie and Ablin, P. and Peyr{\\'e}, G.},
                 year = {2025}, title = {z}}
        """,
        "bibtex",
    )
    labels = [sphinx_reader.author_year_label(bib.entries[k]) for k in "abc"]
    assert labels == ["Cuturi, 2013", "Bobkov and Ledoux, 2019", "Castin et al., 2025"]
    style = sphinx_reader.AuthorYearLabelStyle()
    twice = list(style.format_labels([bib.entries["a"], bib.entries["a"]]))
    assert twice == ["Cuturi, 2013a", "Cuturi, 2013b"]


def test_pdf_check_reads_code_and_figures_of_a_page():
    """The PDF check counts TeX shown as code (allowed in print) and the article's figures
    (not the header's logo, which is not printed), and which figures sit inside a solution
    (the student's edition does not print those)."""
    page = book_pdf._ChapterHTML()
    page.feed(
        '<header><img src="logo.png"></header><article>'
        '<p><span class="math">\\(x\\)</span></p><pre>print("\\\\frac")</pre>'
        '<img src="a.png"><div class="solution"><p><img src="b.png"></p></div>'
        "<code>$$</code><img src='c.png'><img src='/_story/focus.svg'></article>"
    )
    code = "".join(page.code)
    assert "\\frac" in code and "$$" in code and "\\(x" not in code
    # the story figure is an SVG: printed as paths, so not an image the PDF can count
    assert page.images == 3 and page.solution_images == 1 and page.vectors == 1


def test_pdf_check_usage_error_without_both_editions(capsys):
    assert book_pdf.main(["check", "only-one.pdf"]) == 2
    assert "usage" in capsys.readouterr().out


class _FakePage:
    """A tab whose load times out the first ``slow`` times it is opened."""

    opened = 0

    def __init__(self, slow: int):
        type(self).opened += 1
        self.slow, self.closed = slow, False

    def set_default_timeout(self, ms):
        pass

    def goto(self, url, wait_until, timeout):
        from playwright.sync_api import TimeoutError

        if type(self).opened <= self.slow:
            raise TimeoutError(f"Page.goto: Timeout {timeout}ms exceeded.")

    def wait_for_function(self, script, arg=None, timeout=None):
        class Handle:
            def json_value(self):
                return True

        return Handle()

    def add_style_tag(self, content):
        pass

    def evaluate(self, script, arg=None):
        return "A chapter" if arg is None else 0

    def emulate_media(self, media):
        pass

    def pdf(self, **kw):
        return b"%PDF-fake"

    def close(self):
        self.closed = True


def _fake_context(slow: int):
    _FakePage.opened = 0
    pages = []

    class Context:
        def new_page(self):
            pages.append(_FakePage(slow))
            return pages[-1]

    return Context(), pages


def test_a_page_that_loads_slowly_once_is_printed_on_a_fresh_tab(monkeypatch):
    import browser_check

    monkeypatch.setattr(browser_check, "ATTEMPT_TIMEOUTS_MS", (10, 20, 30))
    context, pages = _fake_context(slow=1)
    title, data = book_pdf.print_chapter(
        context,
        "http://127.0.0.1:1/book/focus/focus.html",
        "http://127.0.0.1:1/",
        solutions=True,
    )
    assert (title, data) == ("A chapter", b"%PDF-fake")
    assert len(pages) == 2 and all(p.closed for p in pages)


def test_a_page_that_never_loads_is_reported_by_name_not_by_traceback(monkeypatch):
    import browser_check

    monkeypatch.setattr(browser_check, "ATTEMPT_TIMEOUTS_MS", (10, 20, 30))
    context, pages = _fake_context(slow=99)
    with pytest.raises(browser_check.CheckGaveUp) as info:
        book_pdf.print_chapter(
            context,
            "http://127.0.0.1:1/book/focus/focus.html",
            "http://127.0.0.1:1/",
            solutions=False,
        )
    assert (
        str(info.value)
        == "book/focus/focus.html: load timed out 3 times (0.01 s, 0.02 s, 0.03 s)"
    )
    assert len(pages) == 3
