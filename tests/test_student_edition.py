"""The student edition of the built book (tools/student_edition.py) on a small built page."""

from pathlib import Path

from tools import student_edition as se

COLAB = "https://colab.research.google.com/github/attnbook/attnbook/blob/v0.1.0/"
PAGE = f"""<html><body><ul>
<li><a href="../../_sources/book/pde/x.md" target="_blank"
   class="btn dropdown-item">.md</a></li>
<li><a href="{COLAB}book/pde/x.ipynb">Colab</a></li></ul>
<article class="bd-article">
<div class="exercise admonition" id="ex-a"><p>Exercise 1</p></div>
<div class="solution dropdown admonition" id="s1"><p>Solution to Exercise 1</p>
<div class="cell docutils container"><div class="highlight"><pre>x = 1</pre></div></div>
</div>
<p>between</p>
<div class="solution dropdown admonition" id="s2"><div><div>deep</div></div></div>
<div class="exercise admonition" id="ex-b"><p>Exercise 2</p></div>
<div class="dropdown instructor-answers admonition"><p>Expected answers</p><p>hidden</p></div>
</article></body></html>"""


def _book(tmp_path):
    html = tmp_path / "html"
    (html / "book" / "pde").mkdir(parents=True)
    (html / "index.html").write_text("<html></html>")
    (html / "book" / "pde" / "x.html").write_text(PAGE)
    (html / "_sources" / "book" / "pde").mkdir(parents=True)
    (html / "_sources" / "book" / "pde" / "x.md").write_text("solution text")
    root = tmp_path / "repo"
    (root / "notebooks" / "student" / "pde").mkdir(parents=True)
    (root / "notebooks" / "student" / "pde" / "x.ipynb").write_text("{}")
    return html, root


def test_solutions_sources_and_colab_links(tmp_path):
    html, root = _book(tmp_path)
    report = se.build(html, tmp_path / "student", root=root)
    assert report["problems"] == [] and report["solutions_removed"] == 3
    page = (tmp_path / "student" / "book" / "pde" / "x.html").read_text()
    assert "Solution to" not in page and "deep" not in page and "x = 1" not in page
    assert "Expected answers" not in page and "hidden" not in page
    assert "Exercise 1" in page and "Exercise 2" in page and "between" in page
    assert f"{COLAB}notebooks/student/pde/x.ipynb" in page and "_sources" not in page
    assert "Student edition" in page
    assert not (tmp_path / "student" / "_sources").exists()
    assert "Solution to" in (html / "book" / "pde" / "x.html").read_text()  # untouched


def test_what_is_left_is_reported(tmp_path):
    html, root = _book(tmp_path)
    out = tmp_path / "student"
    se.build(html, out, root=root)
    (out / "book" / "pde" / "x.html").write_text(PAGE)  # a page the edition missed
    found = se.problems(out, root)
    assert "book/pde/x.html: a solution is left" in found
    assert "book/pde/x.html: links into _sources/" in found
    (root / "notebooks" / "student" / "pde" / "x.ipynb").unlink()
    page = se.student_page(PAGE, has_student_notebook=lambda p: False)[0]
    assert f"{COLAB}book/pde/x.ipynb" in page  # no student notebook: the link is kept


def test_an_unclosed_solution_is_an_error(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="never closed"):
        se.remove_solutions('<div class="solution x"><div></div>')


def test_the_real_book_has_a_student_notebook_per_chapter_with_exercises():
    from tools import colab

    root = Path(__file__).resolve().parents[1]
    for md in colab.notebook_chapters(root):
        if colab._has_exercises(md):
            assert colab.student_path(md, root).is_file(), md.name


def test_the_launch_menu_gets_the_student_notebook(tmp_path):
    from tools.attnbook_sphinxext import student_launch_button

    (tmp_path / "notebooks" / "student" / "pde").mkdir(parents=True)
    (tmp_path / "notebooks" / "student" / "pde" / "x.ipynb").write_text("{}")
    colab = {
        "type": "link",
        "text": "Colab",
        "icon": "logo.png",
        "url": COLAB + "book/pde/x.ipynb",
    }
    context = {"header_buttons": [{"label": "launch-buttons", "buttons": [colab]}]}
    entry = student_launch_button(tmp_path, context)
    assert entry["url"] == COLAB + "notebooks/student/pde/x.ipynb"
    assert context["header_buttons"][0]["buttons"][-1] is entry
    colab["url"] = COLAB + "book/pde/none.ipynb"  # a chapter without a student notebook
    assert (
        student_launch_button(
            tmp_path,
            {"header_buttons": [{"label": "launch-buttons", "buttons": [colab]}]},
        )
        is None
    )
    assert student_launch_button(tmp_path, {"header_buttons": []}) is None
