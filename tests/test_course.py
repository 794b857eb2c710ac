"""The course pages agree with the chapters and with each other (tools/course.py), and each of
the rules fails on a page that breaks it."""

import shutil
from pathlib import Path

import pytest

from tools import course

ROOT = Path(__file__).resolve().parents[1]


def test_the_course_pages_agree():
    assert course.problems(ROOT) == []


def test_every_session_and_problem_set_is_read():
    sessions = course.sessions(ROOT)
    assert [s.number for s in sessions] == [1, 2, 3, 4, 5, 6]
    for s in sessions:
        assert s.length == 90 and s.lab_minutes > 0, s.number
        assert any(n.startswith("Homework (problem set") for n in s.bullets), s.number
    psets = course.problem_sets(ROOT)
    assert [p.number for p in psets] == [1, 2, 3]
    for p in psets:
        assert len(p.written) == 5 and len(p.checked) == 5, p.number
    ex = course.exercises(ROOT)
    assert len(ex) >= 90 and sum(e.checked for e in ex.values()) >= 38


@pytest.fixture
def book(tmp_path):
    """A copy of the chapters and course pages to break."""
    shutil.copytree(
        ROOT / "book", tmp_path / "book", ignore=shutil.ignore_patterns("*.ipynb", "_*")
    )
    # the release settings and the student notebooks the syllabus links to
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "src" / "attnbook").mkdir(parents=True)
    shutil.copy(
        ROOT / "src/attnbook/__init__.py", tmp_path / "src/attnbook/__init__.py"
    )
    (tmp_path / "notebooks").symlink_to(ROOT / "notebooks")
    return tmp_path


def _edit(root, page, old, new):
    path = root / "book" / "course" / page
    text = path.read_text(encoding="utf-8")
    assert old in text, (page, old)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_a_lab_longer_than_its_minutes_fails(book):
    _edit(book, "session-6.md", "| 30–75 | lab |", "| 30–55 | lab |")
    _edit(book, "session-6.md", "| 75–85 | discussion |", "| 55–85 | discussion |")
    found = course.problems(book)
    assert (
        "session 6: the lab's exercises take 30 min by their estimates, the lab 25 min"
        in found
    )


def test_a_plan_with_a_gap_fails(book):
    _edit(book, "session-2.md", "| 75–85 | discussion |", "| 76–85 | discussion |")
    assert (
        "session 2: the plan does not run from 0 to 90 min without gaps"
        in course.problems(book)
    )


def test_homework_missing_from_its_problem_set_fails(book):
    _edit(
        book,
        "session-5.md",
        "- **Practice (checked, not marked):** {ref}`ex-tve-reached-minimum`",
        "- **Homework (problem set 3, more):** {ref}`ex-tve-reached-minimum`",
    )
    found = course.problems(book)
    assert "session 5: homework ex-tve-reached-minimum is not in problem set 3" in found


def test_a_problem_set_over_its_hours_fails(book):
    _edit(book, "problem-sets.md", "four to five hours", "three to four hours")
    found = "\n".join(course.problems(book))
    assert (
        "problem set 1: 265 min by its estimates" in found
        and "over the stated 4 hours" in found
    )


def test_an_unknown_exercise_and_an_unassigned_checked_one_fail(book):
    _edit(
        book,
        "session-1.md",
        "{ref}`ex-row-entropy` *(checked)*",
        "{ref}`ex-row-entropie` *(checked)*",
    )
    found = course.problems(book)
    assert "session-1.md: names ex-row-entropie, which no chapter defines" in found
    assert any(
        f.startswith(
            "ex-row-entropy (book/foundations/attention-maps) is checked but never"
        )
        for f in found
    )


def test_the_list_of_exercises_no_page_sets_is_exact(book):
    _edit(book, "problem-sets.md", "*Rank-one fixed points*, ", "")
    found = "\n".join(course.problems(book))
    assert "'Exercises no page sets' omits ['Rank-one fixed points']" in found


def test_a_missing_student_notebook_link_fails(book):
    _edit(book, "session-2.md", "/notebooks/student/focus/condensation.ipynb)", ")")
    found = course.problems(book)
    assert (
        "session-2.md: no link to the student notebook of focus/condensation" in found
    )


def test_every_session_has_expected_answers_for_the_instructor_only():
    """Warm-up, explorer (where the plan has one) and exit question, in a dropdown that the
    student edition removes (class instructor-answers)."""
    import re

    for page in sorted((ROOT / "book" / "course").glob("session-*.md")):
        text = page.read_text(encoding="utf-8")
        blocks = re.findall(
            r"```\{admonition\} Expected answers.*?\n:class: [^\n]*instructor-answers"
            r"[^\n]*\n(.*?)```",
            text,
            flags=re.S,
        )
        assert len(blocks) == 1, page.name
        assert "**Warm-up.**" in blocks[0] and "**Exit question.**" in blocks[0], (
            page.name
        )
        plan = text.split("## Plan", 1)[1].split("## ", 1)[0]
        if "explorer" in plan:
            assert "**Explorer.**" in blocks[0], page.name
