"""The book's student edition: the built HTML without the exercises' solutions.

``python -m tools.student_edition [_build/html] [--out _build/html-student]`` (``make
book-student``, after ``make book``) copies the built book and, on every page:

- removes each solution (sphinx-exercise's ``div.solution``, gated code cells included) and
  the course pages' expected answers (``div.instructor-answers``);
- points the Colab launch links at the chapter's student notebook (``notebooks/student/``,
  exercises as stubs), where there is one, instead of the instructor's notebook;
- removes the links to the page's sources (``_sources/``, which hold the solutions) and the
  folder itself;
- adds a banner naming the edition.

Then it checks the result: no page holds a solution, a "Solution to" heading or a link into
``_sources``, and every Colab link names a notebook that exists. The student PDF
(``make pdf``) removes the same ``div.solution`` elements.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

from tools.colab import STUDENT_DIR  # the one name of the student notebooks' folder

ROOT = Path(__file__).resolve().parents[1]

_DIV = re.compile(r"<div\b|</div>")
# a solution (sphinx-exercise) or the course pages' expected answers (instructor's edition only)
_SOLUTION = re.compile(r'<div class="(?:solution\b|[^"]*\binstructor-answers\b)[^"]*"')
_SOURCE_LINK = re.compile(r'<li><a href="[^"]*_sources/[^"]*".*?</li>', flags=re.S)
_COLAB = re.compile(
    r"(https://colab\.research\.google\.com/github/[^/]+/[^/]+/blob/[^/]+/)book/([^\"']+?)\.ipynb"
)
BANNER = (
    '<div class="admonition note student-edition"><p>Student edition: the exercises\' '
    "solutions are left out, and the Colab links open the student notebooks.</p></div>"
)


def remove_solutions(html: str) -> tuple[str, int]:
    """``html`` without its ``div.solution`` elements (nested divs matched); and how many."""
    out, n, pos = [], 0, 0
    while (m := _SOLUTION.search(html, pos)) is not None:
        depth, end = 0, None
        for d in _DIV.finditer(html, m.start()):
            depth += 1 if d.group(0) == "<div" else -1
            if depth == 0:
                end = d.end()
                break
        if end is None:
            raise ValueError("a solution's <div> is never closed")
        out.append(html[pos : m.start()])
        pos, n = end, n + 1
    out.append(html[pos:])
    return "".join(out), n


def student_page(html: str, *, has_student_notebook) -> tuple[str, int]:
    """One page of the student edition; and the number of solutions removed."""
    html, n = remove_solutions(html)
    html = _SOURCE_LINK.sub("", html)

    def colab(m):
        path = f"{STUDENT_DIR.as_posix()}/{m.group(2)}.ipynb"
        return m.group(1) + path if has_student_notebook(path) else m.group(0)

    html = _COLAB.sub(colab, html)
    html = html.replace(
        '<article class="bd-article">', '<article class="bd-article">' + BANNER, 1
    )
    return html, n


def problems(out_dir: Path, root: Path = ROOT) -> list[str]:
    """What still gives a solution away in the student edition at ``out_dir``."""
    found = []
    if (out_dir / "_sources").exists():
        found.append("_sources/ is still there")
    for page in sorted(out_dir.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(out_dir)
        if (
            _SOLUTION.search(text)
            or "Solution to" in text
            or "Expected answers" in text
        ):
            found.append(f"{rel}: a solution is left")
        if "_sources/" in text:
            found.append(f"{rel}: links into _sources/")
        for m in re.finditer(
            r"https://colab\.research\.google\.com/github/[^/]+/[^/]+/blob/[^/]+/([^\"'<]+\.ipynb)",
            text,
        ):
            if "&lt;" not in m.group(1) and not (root / m.group(1)).is_file():
                found.append(f"{rel}: Colab link to a missing notebook {m.group(1)}")
    return found


def build(html_dir: Path, out_dir: Path, root: Path = ROOT) -> dict:
    """Write the student edition of ``html_dir`` into ``out_dir`` (replaced) and check it."""
    html_dir, out_dir = Path(html_dir), Path(out_dir)
    if not (html_dir / "index.html").is_file():
        raise ValueError(f"{html_dir} holds no built book (run make book first)")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    shutil.copytree(
        html_dir, out_dir, ignore=shutil.ignore_patterns("_sources", ".doctrees")
    )
    pages = solutions = student_links = 0
    for page in sorted(out_dir.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        new, n = student_page(text, has_student_notebook=lambda p: (root / p).is_file())
        marker = f"/{STUDENT_DIR.as_posix()}/"
        student_links += new.count(marker) - text.count(marker)
        page.write_text(new, encoding="utf-8")
        pages, solutions = pages + 1, solutions + n
    found = problems(out_dir, root)
    return {
        "pages": pages,
        "solutions_removed": solutions,
        "student_links": student_links,
        "problems": found,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, nargs="?", default=Path("_build/html"))
    parser.add_argument("--out", type=Path, default=Path("_build/html-student"))
    args = parser.parse_args(argv)
    report = build(args.html, args.out)
    for p in report["problems"]:
        print("PROBLEM:", p)
    print(
        f"student edition at {args.out}: {report['pages']} pages, "
        f"{report['solutions_removed']} solutions removed, {report['student_links']} Colab "
        "links pointed at student notebooks"
    )
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
