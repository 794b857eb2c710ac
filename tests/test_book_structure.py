"""The book's structure: toc, Colab twins, captions, citations, and the build checks."""

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # the build tooling is not part of the package

import build_tools  # noqa: E402


def test_every_toc_entry_exists():
    missing = [str(p) for p in build_tools.toc_files(ROOT) if not p.is_file()]
    assert not missing, f"listed in _toc.yml but missing: {missing}"


def test_every_notebook_under_book_is_in_the_toc():
    in_toc = {p.resolve() for p in build_tools.toc_files(ROOT)}
    orphans = [
        str(p)
        for p in (ROOT / "book").rglob("*.md")
        if build_tools.is_notebook(p)
        and p.resolve() not in in_toc
        and "_build" not in p.parts
    ]
    assert not orphans, (
        f"notebook chapters not in _toc.yml (never built nor tested): {orphans}"
    )


def test_colab_notebooks_exist_and_are_current():
    from tools import colab

    problems = colab.check(ROOT)
    assert not problems, "\n".join(problems)


def test_chapters_open_their_own_ledger():
    for md in build_tools.notebook_chapters(ROOT):
        text = md.read_text(encoding="utf-8")
        if "setup_chapter(" in text:
            cid = build_tools.chapter_id(md, ROOT)
            assert re.search(r'setup_chapter\(\s*"' + re.escape(cid) + '"', text), (
                f"{md}: setup_chapter must name {cid!r}"
            )


def test_every_figure_cell_has_a_caption():
    import jupytext

    bad = []
    for md in build_tools.notebook_chapters(ROOT):
        for i, cell in enumerate(jupytext.read(md).cells):
            if (
                cell.cell_type == "code"
                and "plt.show()" in cell.source
                and "remove-output" not in cell.metadata.get("tags", [])
            ):
                if not cell.metadata.get("mystnb", {}).get("figure", {}).get("caption"):
                    bad.append(f"{md.name} cell {i}")
    assert not bad, f"figures without a caption: {bad}"


def test_every_citation_is_in_the_bibliography():
    bib = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    keys = set(re.findall(r"@\w+\{([^,]+),", bib))
    cited = set()
    for md in (ROOT / "book").rglob("*.md"):
        for group in re.findall(
            r"\{cite(?::\w+)?\}`([^`]+)`", md.read_text(encoding="utf-8")
        ):
            cited.update(k.strip() for k in group.split(","))
    assert cited and cited <= keys, f"unknown citation keys: {cited - keys}"
    for key in ("chen2026focus", "lavie2026copyhead", "castin2025unified"):
        assert key in keys


def test_check_html_finds_problems(tmp_path):
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\n")
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.md").write_text("# Intro\n")
    (tmp_path / "book" / "ch.ipynb").write_text("{}")
    html = tmp_path / "_build" / "html"
    html.mkdir(parents=True)
    (html / "ok.png").write_bytes(b"png")
    (html / "page.html").write_text(
        '<img src="ok.png"><img src="gone.png">'
        '<script src="https://cdn.example.org/mathjax/tex-chtml.js"></script>'
        '<a href="https://colab.research.google.com/github/o/r/blob/main/book/ch.ipynb">ok</a>'
        '<a href="https://colab.research.google.com/github/o/r/blob/main/book/nope.ipynb">bad</a>'
    )
    (tmp_path / "_config.yml").write_text("html:\n  baseurl: https://o.example/r\n")
    (html / "book").mkdir()
    (html / "book" / "ch.html").write_text('<span id="prop-a"></span>')
    base = "https://o.example/r/book"
    links = [f"{base}/ch.html#prop-a", f"{base}/ch.html#prop-b", f"{base}/gone.html"]
    (tmp_path / "book" / "ch.ipynb").write_text(
        json.dumps(
            {
                "cells": [
                    {
                        "cell_type": "markdown",
                        "source": "".join(f"[x]({u}) " for u in links),
                    }
                ]
            }
        )
    )
    report = build_tools.check_html(html, tmp_path)
    text = "\n".join(report["problems"])
    assert report["images"] == 2 and report["colab_links"] == 2
    assert "gone.png" in text and "not local" in text and "nope.ipynb" in text
    assert not any("Colab link" in p and "/ch.ipynb " in p for p in report["problems"])
    # links from the notebooks into the published book: a missing id and a missing page
    assert report["notebook_links"] == 3
    assert "no id 'prop-b'" in text and "gone.html names no page" in text
    assert "prop-a" not in text


def test_code_lines_fit_the_page():
    """Code cells wider than ~88 characters get a scroll bar in the HTML book."""
    import jupytext

    long = []
    for md in build_tools.notebook_chapters(ROOT):
        for i, cell in enumerate(jupytext.read(md).cells):
            if cell.cell_type == "code":
                long += [
                    f"{md.name} cell {i}: {len(l)} chars"
                    for l in cell.source.splitlines()
                    if len(l) > 88
                ]
    assert not long, "\n".join(long)


def test_colab_install_cell_points_at_the_release():
    """The notebooks' first cell installs the release that _config.yml and pyproject.toml name;
    the chapters' sources hold no install code (the cell is generated)."""
    from tools import colab

    rel = colab.release(ROOT)
    url = re.search(
        r"^\s*url:\s*(\S+)", (ROOT / "_config.yml").read_text(), flags=re.M
    ).group(1)
    assert rel.requirement.startswith(f"{url}/releases/download/v{rel.version}/")
    for md in build_tools.notebook_chapters(ROOT):
        assert '"pip"' not in md.read_text(encoding="utf-8"), f"{md.name}: install code"
        nb = json.loads(md.with_suffix(".ipynb").read_text(encoding="utf-8"))
        first = next(c for c in nb["cells"] if c["cell_type"] == "code")
        assert f'"{rel.requirement}"' in first["source"], md.name


def test_build_tooling_is_outside_the_runtime_package():
    """Colab installs src/attnbook: the book's build tooling must not ship in it."""
    package = ROOT / "src" / "attnbook"
    assert not (package / "build_tools.py").exists()
    assert not (package / "sphinxext.py").exists()
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    local = config["sphinx"]["local_extensions"]
    for module, folder in local.items():
        assert (ROOT / folder / f"{module}.py").is_file(), (module, folder)
    assert not any(
        e.startswith("attnbook.") for e in config["sphinx"]["extra_extensions"]
    )
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "attnbook.build_tools" not in makefile and "tools/build_tools.py" in makefile


def test_chapter_code_keeps_each_code_line_on_its_chapter_line(tmp_path):
    import chapter_code

    text = "\n".join(
        [
            "# Title",
            "```{code-cell} ipython3",
            ":tags: [hide-input]",
            "x = 1",
            "%timeit x",
            "```",
            "prose, not code",
            "````{code-cell} ipython3",
            "---",
            "tags: [raises-exception]",
            "---",
            "y = x + 1",
            "````",
        ]
    )
    lines = chapter_code.code_lines(text)
    assert len(lines) == len(text.split("\n"))
    assert [(i, s) for i, s in enumerate(lines) if s] == [
        (3, "x = 1"),
        (11, "y = x + 1"),
    ]
    mds = chapter_code.chapters()
    assert ROOT / "book" / "foundations" / "attention-maps.md" in mds
    written = chapter_code.export(tmp_path, mds)
    assert len(written) == len(mds)
    md = ROOT / "book" / "foundations" / "attention-maps.md"
    py = tmp_path / "foundations" / "attention-maps.py"
    code = py.read_text().split("\n")
    chapter = md.read_text().split("\n")
    assert all(c == chapter[i] for i, c in enumerate(code) if c)


def test_bibliography_has_full_names_and_author_year_labels():
    import sphinx_reader
    from pybtex.database import parse_file

    bib = parse_file(ROOT / "book" / "references.bib")
    for key, entry in bib.entries.items():
        for person in entry.persons["author"]:
            if str(person) != "others":
                assert person.first_names, f"{key}: {person} has no first name"
    style = sphinx_reader.AuthorYearStyle()
    labels = {e.key: e.label for e in style.format_bibliography(bib)}
    # the labels read as the parenthetical citations do: [Chen et al., 2026]
    assert labels["chen2026focus"] == "Chen et al., 2026"
    assert labels["lavie2026copyhead"] == "Lavie et al., 2026"
    assert labels["welling2011sgld"] == "Welling and Teh, 2011"
    assert labels["olsson2022induction"] == "Olsson et al., 2022"
    assert len(set(labels.values())) == len(labels)


def _code_cells():
    import jupytext

    for md in build_tools.notebook_chapters(ROOT):
        for i, cell in enumerate(jupytext.read(md).cells):
            if cell.cell_type == "code":
                yield md, i, cell.source


def test_code_cells_are_short():
    """QuantEcon's rule: a code cell shows one step, in at most 25 lines (blank ones too)."""
    long = [
        f"{md.relative_to(ROOT)} cell {i}: {n} lines"
        for md, i, src in _code_cells()
        if (n := len(src.strip("\n").splitlines())) > 25
    ]
    assert not long, "\n".join(long)


def test_chapter_figures_fit_the_page():
    """A figure wider than the text column is shrunk, and its labels with it: a chapter's
    ``figsize`` is at most ``plotting.PAGE_WIDTH_IN`` wide (wrap panels into rows instead)."""
    from attnbook.plotting import PAGE_WIDTH_IN

    wide = [
        f"{md.relative_to(ROOT)} cell {i}: figsize width {w}"
        for md, i, src in _code_cells()
        for w in re.findall(r"figsize\s*=\s*\(\s*([0-9.]+)", src)
        if float(w) > PAGE_WIDTH_IN
    ]
    assert not wide, "\n".join(wide)


def test_no_formatter_artefacts_in_chapter_code():
    """A string broken into fragments of a word or two ("in ", "the ") by a formatter reads
    badly in the book: implicit concatenations are wrapped at the line width, so every piece
    but the last of a run fills most of its line."""
    piece = re.compile(r'^\s*f?"((?:[^"\\]|\\.)*)"(,?)\s*$')
    found = []
    for md, i, src in _code_cells():
        lines = src.splitlines()
        for line, after in zip(lines, lines[1:]):
            m = piece.match(line)
            if m and not m.group(2) and piece.match(after) and len(m.group(1)) < 40:
                found.append(f"{md.relative_to(ROOT)} cell {i}: {line.strip()}")
    assert not found, "\n".join(found)
