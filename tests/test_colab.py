"""The Colab notebooks: generated, current, plain Markdown, one pinned install; the package's
dependencies cover the chapters' imports; the HTML hygiene check."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnbook.claims import reads_ledger
from tools import colab, html_hygiene

ROOT = Path(__file__).resolve().parents[1]
REL = colab.release(ROOT)
NOTEBOOKS = [md.with_suffix(".ipynb") for md in colab.notebook_chapters(ROOT)]
RAW_MYST = re.compile(
    r"\{(?:prf:\w+|exercise|solution(?:-start|-end)?|cite(?::\w+)?|ref|doc|eq|numref)\}"
    r"|^\(\S+\)=\s*$|^:::|^```\{",
    flags=re.M,
)


def _nb(path):
    return json.loads(path.read_text(encoding="utf-8"))


def test_release_settings_agree():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    import attnbook
    from attnbook import download

    assert REL.branch == REL.tag, "_config.yml repository.branch must be v<version>"
    assert attnbook.__version__ == REL.version
    assert f'Homepage = "{REL.url}"' in text
    assert download.REPOSITORY == REL.url
    # the release's wheel: what `make release-dry` builds and the release workflow uploads
    from tools.release import wheel_name

    assert REL.requirement == (
        f"{REL.url}/releases/download/v{REL.version}/{wheel_name(REL.version)}"
    )


def test_install_cell_installs_the_release_or_the_override():
    src = colab.install_cell_source(REL)
    assert f'"{REL.requirement}"' in src and colab.INSTALL_ENV in src
    assert 'if "google.colab" in sys.modules else ""' in src
    compile(src, "install-cell", "exec")


def _run_install_cell(requirement):
    env = {k: v for k, v in os.environ.items() if k != colab.INSTALL_ENV}
    env[colab.INSTALL_ENV] = requirement
    src = colab.install_cell_source(REL)
    return subprocess.run(
        [sys.executable, "-c", src],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_install_cell_skips_what_pip_says_is_installed():
    """A second notebook in the same runtime installs nothing: pip's record of the installed
    attnbook (direct_url.json; here the checkout, installed by `make venv`) names the same
    requirement."""
    import importlib.metadata

    info = json.loads(
        importlib.metadata.distribution("attnbook").read_text("direct_url.json") or "{}"
    )
    if info.get("url") != ROOT.resolve().as_uri():
        pytest.skip("attnbook is not installed from this checkout")
    proc = _run_install_cell(str(ROOT))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"attnbook {REL.version} is installed from file://")
    assert "Installing" not in proc.stdout


def test_install_cell_failure_says_what_to_do():
    """A failed install ends in one message naming the source and the release tried and what
    a reader can do, after pip's last lines (no CalledProcessError)."""
    missing = "/nonexistent/attnbook-0.0.0-py3-none-any.whl"
    proc = _run_install_cell(missing)
    assert proc.returncode != 0
    assert f"Installing attnbook from {missing}" in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"Could not install attnbook from {missing} (the release {REL.tag}"
    )
    assert "What you can do" in last and colab.INSTALL_ENV in last
    assert "CalledProcessError" not in proc.stderr and "Traceback" not in proc.stderr


def test_every_notebook_starts_with_the_install_cell_and_is_clean():
    assert NOTEBOOKS, "no notebook chapters"
    for path in NOTEBOOKS:
        cells = _nb(path)["cells"]
        code = [c for c in cells if c["cell_type"] == "code"]
        assert code[0]["source"] == colab.install_cell_source(REL), path.name
        # a page that reads the ledger (ledger page, findings pages) makes no claims
        assert "setup_chapter(" in "".join(c["source"] for c in code) or reads_ledger(
            f"{path.parent.name}/{path.stem}"
        )
        assert not any(c["outputs"] for c in code), f"{path.name} holds outputs"


def test_notebooks_hold_no_raw_myst_and_link_to_the_published_book():
    for path in NOTEBOOKS:
        for cell in _nb(path)["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            src = cell["source"]
            assert not RAW_MYST.search(src), f"{path.name}: raw MyST in {src[:200]!r}"
            for link in re.findall(r"\]\(([^)\s]+)\)", src):
                # a label's anchor is the published page's: Colab scrolls only to headings
                assert link.startswith(("https://", "http://")), (
                    f"{path.name}: relative or in-notebook link {link}"
                )
                assert ".ipynb" not in link, f"{path.name}: {link}"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("a $x\n+ y$ b", "list marker"),  # Markdown makes `+ y$ b` a bullet
        ("a $x\n- y$ b", "list marker"),
        (
            "$$\na\n+ b\n$$",
            "list marker",
        ),  # viewers that parse Markdown first break it too
        ("then\n\\$$ x $$ y", "escaped dollar"),  # a converter's trace of display math
        ("one $x$ and $y", "odd number"),
        ("$\\lambda_\\max$", "lambda_{\\max}"),
    ],
)
def test_math_problems_finds_what_a_viewer_breaks(text, problem):
    found = colab.math_problems(text)
    assert len(found) >= 1 and problem in found[0], found


@pytest.mark.parametrize(
    "text",
    [
        "$x$\n\n- a bullet with $y$",  # a real list after a closed span
        "$$\na +\nb\n$$\n-x $y$",  # an operator ending a line; '-x' is no list marker
        "cost `$5` and $x$",  # dollars in code spans
        "```\n$ echo\n```\n$\\lambda_{\\max}$",
    ],
)
def test_math_problems_accepts_good_math(text):
    assert colab.math_problems(text) == []


def test_every_notebook_and_chapter_has_whole_math():
    import jupytext

    found = []
    for path in NOTEBOOKS + sorted((ROOT / "notebooks" / "student").rglob("*.ipynb")):
        for i, cell in enumerate(_nb(path)["cells"]):
            if cell["cell_type"] == "markdown":
                found += [
                    f"{path.name} cell {i}: {p}"
                    for p in colab.math_problems(cell["source"])
                ]
    for md in colab.notebook_chapters(ROOT):
        for cell in jupytext.read(md).cells:
            if cell.cell_type == "markdown":
                found += [f"{md.name}: {p}" for p in colab.math_problems(cell.source)]
    assert not found, "\n".join(found)


def test_math_spans_and_katex_refusals():
    spans = colab.math_spans("a $x$ `$no$` b\n$$\n\\frac12\n$$ and $\\lambda_\\max$")
    assert spans == [("x", False), ("\n\\frac12\n", True), ("\\lambda_\\max", False)]
    refused = colab.katex_refusals(spans + [("\\frac{1}{", True)])
    assert set(refused) == {2, 3} and "KaTeX parse error" in refused[2]


def test_notebook_math_renders_in_katex():
    # Colab renders Markdown math with KaTeX, which refuses some TeX that MathJax accepts
    spans, where = [], []
    for path in NOTEBOOKS:
        for i, cell in enumerate(_nb(path)["cells"]):
            if cell["cell_type"] == "markdown":
                got = colab.math_spans(cell["source"])
                spans += got
                where += [f"{path.name} cell {i}"] * len(got)
    assert len(spans) > 1000  # every chapter's math, not an empty extraction
    refused = colab.katex_refusals(spans)
    assert not refused, "\n".join(
        f"{where[i]}: {spans[i][0][:60]!r}: {e}" for i, e in refused.items()
    )


def test_solutions_are_at_the_end():
    n = 0
    for path in NOTEBOOKS:
        heads = [
            c["source"] for c in _nb(path)["cells"] if c["cell_type"] == "markdown"
        ]
        sol = [i for i, s in enumerate(heads) if s.startswith("### Solution to")]
        if sol:
            n += len(sol)
            start = heads.index(next(s for s in heads if s.startswith("## Solutions")))
            assert min(sol) > start, path.name
            assert not any(s.startswith("### Exercise") for s in heads[start:])
    assert n > 0


def test_ledger_notebook_explains_itself():
    cells = _nb(ROOT / "book" / "reference" / "claims-ledger.ipynb")["cells"]
    assert cells[0]["cell_type"] == "markdown"
    assert "book build" in cells[0]["source"]
    assert REL.page_url("book/reference/claims-ledger") in cells[0]["source"]


def test_postprocess_of_a_tojupyter_notebook(tmp_path):
    md = tmp_path / "book" / "part" / "ch.md"
    md.parent.mkdir(parents=True)
    md.write_text("---\nkernelspec: {}\n---\n# Ch\n")
    raw = {
        "metadata": {"title": "Ch"},
        "cells": [
            {
                "cell_type": "markdown",
                "source": "See [[Chen *et al.*, 2026](../reference/bibliography.ipynb#id2)] "
                "and [Proposition 3](other.ipynb#prop-x); $ x^2 $ and $$\ny\n$$",
            },
            {"cell_type": "code", "source": "x = 1\n", "metadata": {"tags": ["a"]}},
            {"cell_type": "markdown", "source": "<a id='chapter-x'></a>"},
            {
                "cell_type": "markdown",
                "source": "By [(1)](#equation-eq-a) and [[Cuturi, 2013]"
                "(../reference/bibliography.ipynb#cite-cuturi2013)].",
            },
            {
                "cell_type": "markdown",
                "source": "##  (Shift invariance (★, 5 min))Exercise 1\n\nShow it.",
            },
            {
                "cell_type": "markdown",
                "source": "## Solution to[ Exercise 1 (Shift invariance (★, 5 min))](#ex-shift)"
                "\n\nBecause.",
            },
            {"cell_type": "code", "source": "assert x == 1", "metadata": {}},
            {"cell_type": "markdown", "source": "## Summary"},
            {"cell_type": "markdown", "source": "**Proof.**\n\nProof. Easy."},
        ],
    }
    nb = colab.postprocess(raw, "book/part/ch", md, REL, {"x = 1": "A line."})
    src = [c["source"] for c in nb["cells"]]
    assert src.pop(3) == "**Figure.** A line."
    base = REL.baseurl
    assert src[0] == colab.install_cell_source(REL)
    assert src[1] == (
        f"See ([Chen *et al.*, 2026]({base}book/reference/bibliography.html)) and "
        f"[Proposition 3]({base}book/part/other.html#prop-x); $x^2$ and $$\ny\n$$"
    )
    # the anchor-only cell is dropped; a label links to the published page, a citation to
    # its bibliography entry
    assert src[3] == (
        f"By [(1)]({base}book/part/ch.html#equation-eq-a) and ([Cuturi, 2013]"
        f"({base}book/reference/bibliography.html#cite-cuturi2013))."
    )
    src.pop(3)
    assert src[3].startswith("### Exercise 1: Shift invariance (★, 5 min)\n")
    assert src[4] == "## Summary" and src[5] == "**Proof.** Easy."
    assert src[6].startswith("## Solutions")
    assert (
        src[7] == "### Solution to Exercise 1: Shift invariance (★, 5 min)\n\nBecause."
    )
    assert src[8] == "assert x == 1"
    assert nb["metadata"]["accelerator"] == "GPU"
    assert nb["metadata"]["attnbook"]["source_digest"] == colab.source_digest(md, REL)
    assert all(c["metadata"] == {} for c in nb["cells"] if c["cell_type"] == "code")


# --- the package's dependencies cover what the chapters (and the package) import ------------

#: imported but not installed by `pip install attnbook`, and why that is fine
NOT_DEPENDENCIES = {
    "attnbook": "the package itself",
    "IPython": "the notebook kernel (ipykernel) brings it: every notebook runs in IPython",
    "huggingface_hub": "optional: only for splits without an excerpt, guarded by ImportError",
    "pandas": "optional: read hub parquet files, only with huggingface_hub",
}
#: build tooling still under src/ (moving to tools/): not run by a chapter
BUILD_TOOLING = {"build_tools.py", "sphinxext.py"}
#: import name → distribution name where they differ
DISTRIBUTION = {"ot": "pot", "yaml": "pyyaml", "PIL": "pillow"}


def _imports(code: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _dependencies() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, flags=re.M | re.S).group(1)
    return {
        re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower().replace("_", "-")
        for d in re.findall(r'^\s*"([^"]+)"', block, flags=re.M)
    }


def test_chapters_imports_are_installed_by_the_package():
    import jupytext

    used = {}
    for md in colab.notebook_chapters(ROOT):
        for cell in jupytext.read(md).cells:
            if cell.cell_type == "code":
                code = "\n".join(
                    ln
                    for ln in cell.source.splitlines()
                    if not ln.startswith(("%", "!"))
                )
                for name in _imports(code):
                    used.setdefault(name, md.name)
    for py in (ROOT / "src" / "attnbook").rglob("*.py"):
        if py.name in BUILD_TOOLING:
            continue
        for name in _imports(py.read_text(encoding="utf-8")):
            used.setdefault(name, str(py.relative_to(ROOT)))
    deps = _dependencies()
    missing = {
        f"{name} (in {where})"
        for name, where in used.items()
        if name not in sys.stdlib_module_names
        and name not in NOT_DEPENDENCIES
        and DISTRIBUTION.get(name, name).lower().replace("_", "-") not in deps
    }
    assert not missing, f"imported but not a dependency of attnbook: {sorted(missing)}"
    assert "pot" in deps  # attnbook.pde imports ot at run time


# --- clean outputs in the built HTML -----------------------------------------------------------

_PAGE = """<html><body><div class="cell docutils container">
<div class="cell_input docutils container"><pre>print(1)</pre></div>
<div class="cell_output docutils container">
<div class="output stream highlight-myst-ansi notranslate"><div class="highlight"><pre>{out}</pre>
</div></div></div></div><p>{text}</p></body></html>"""


def test_html_hygiene_finds_warnings_tracebacks_and_paths():
    paths = ["/srv/build/attnbook"]
    ok = _PAGE.format(
        out="loss 0.25; a SinkhornWarning is shown deliberately", text="ok"
    )
    assert html_hygiene.check_page(ok, "ok.html", paths) == []
    warn = _PAGE.format(
        out="/srv/x/attention.py:120: SinkhornWarning: did not converge", text=""
    )
    tb = _PAGE.format(out="Traceback (most recent call last):\n  boom", text="")
    err = _PAGE.replace("output stream", "output traceback").format(out="x", text="")
    path = _PAGE.format(out="1", text="see /srv/build/attnbook/src/a.py")
    home = _PAGE.format(out="saved to /home/alice/x.npz", text="")
    assert "warning in an output" in html_hygiene.check_page(warn, "w", paths)[0]
    assert "traceback in an output" in html_hygiene.check_page(tb, "t", paths)[0]
    assert "traceback" in html_hygiene.check_page(err, "e", paths)[0]
    assert "build machine" in html_hygiene.check_page(path, "p", paths)[0]
    assert "/home/alice" in html_hygiene.check_page(home, "h", paths)[0]
    table = _PAGE.format(out="| claim | seeds |\n| — | — |\n| x | 20/20 |", text="")
    assert "unrendered Markdown table" in html_hygiene.check_page(table, "m", paths)[0]
    # a URL is not a path of the machine
    url = _PAGE.format(out="1", text="https://example.org/home/alice/x")
    assert html_hygiene.check_page(url, "u", paths) == []


def test_html_hygiene_knows_this_machine():
    paths = html_hygiene.machine_paths(ROOT)
    assert str(ROOT.resolve()) in paths and sys.prefix in paths


@pytest.mark.parametrize("path", NOTEBOOKS[:1])
def test_notebooks_are_not_collected_by_nbval(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert conftest.pytest_ignore_collect(path, None) is True


def test_every_figure_caption_reaches_the_notebook():
    for md in colab.notebook_chapters(ROOT):
        captions = colab.figure_captions(md)
        cells = _nb(md.with_suffix(".ipynb"))["cells"]
        shown = [c["source"] for c in cells if c["source"].startswith("**Figure.** ")]
        assert shown == [f"**Figure.** {c}" for c in captions.values()], md.name


def test_chapters_load_the_data_with_the_excerpts_split_and_cap():
    """On Colab the loader downloads an excerpt: every load_corpus call of a chapter names a
    split and a cap that one excerpt holds, so Colab reads the book's own data."""
    from attnbook.download import EXCERPTS

    calls = []
    for md in colab.notebook_chapters(ROOT):
        calls += re.findall(r"load_corpus\(([^)]*)\)", md.read_text(encoding="utf-8"))
    assert calls
    for args in calls:
        m = re.match(
            r'\s*"([\w-]+)",\s*\w+,\s*split="(\w+)",\s*max_tokens=([\d_]+)\s*$', args
        )
        assert m, f"load_corpus({args}) must pass split= and max_tokens="
        ex = EXCERPTS.get((m.group(1), m.group(2)))
        assert ex is not None and int(m.group(3).replace("_", "")) == ex.max_tokens, (
            args
        )


# --- student notebooks: the Colab notebooks without solutions, coding exercises as stubs ----

STUDENT_NOTEBOOKS = {
    md: colab.student_path(md, ROOT)
    for md in colab.notebook_chapters(ROOT)
    if "{exercise}" in md.read_text(encoding="utf-8")
}


def test_stub_source_replaces_the_solution_block():
    src = (
        "from attnbook import exercises\n\n\ndef f(x):\n"
        '    """Doc."""\n    # BEGIN SOLUTION\n    y = 2 * x\n    return y\n'
        '    # END SOLUTION\n\n\nexercises.check("ex-f", f)'
    )
    stub = colab.stub_source(src)
    assert stub == (
        "from attnbook import exercises\n\n\ndef f(x):\n"
        '    """Doc."""\n    raise NotImplementedError("write your code here")\n\n\n'
        'exercises.check("ex-f", f)'
    )
    top = "# BEGIN SOLUTION\n# STUB: answer = ...\nanswer = 4\n# END SOLUTION\ncheck(answer)"
    assert colab.stub_source(top) == "answer = ...\ncheck(answer)"
    for broken in ("# BEGIN SOLUTION\nx = 1", "x = 1\n# END SOLUTION"):
        with pytest.raises(ValueError, match="SOLUTION"):
            colab.stub_source(broken)


def test_student_notebook_of_a_colab_notebook(tmp_path):
    import nbformat

    md = tmp_path / "book" / "part" / "ch.md"
    md.parent.mkdir(parents=True)
    md.write_text("---\nkernelspec: {}\n---\n# Ch\n")
    cell = 'def f(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n\n\ncheck("ex-f", f)'
    raw = {
        "metadata": {"title": "Ch"},
        "cells": [
            {
                "cell_type": "markdown",
                "source": "##  (Prove it (★, 5 min))Exercise 1.1\n\nProve.",
            },
            {
                "cell_type": "markdown",
                "source": "##  (Write f (★, 5 min))Exercise 1.2\n\nWrite f.",
            },
            {"cell_type": "markdown", "source": "## Summary"},
            {
                "cell_type": "markdown",
                "source": "## Solution to[ Exercise 1.1 (Prove it)](#a)\n\nQED.",
            },
            {"cell_type": "code", "source": "assert True", "metadata": {}},
            {
                "cell_type": "markdown",
                "source": "## Solution to[ Exercise 1.2 (Write f)](#b)\n\nSo.",
            },
            {"cell_type": "code", "source": cell, "metadata": {}},
            {"cell_type": "code", "source": "f(1)", "metadata": {}},
        ],
    }
    teacher = colab.postprocess(raw, "book/part/ch", md, REL)
    assert any("return x" in c["source"] for c in teacher["cells"])  # solutions kept
    nb = colab.student_notebook(teacher)
    nbformat.validate(nbformat.from_dict(nb))
    src = [c["source"] for c in nb["cells"]]
    assert src[1].startswith("### Exercise 1.1: Prove it")
    assert src[2].startswith("### Exercise 1.2: Write f")
    assert (
        src[3]
        == 'def f(x):\n    raise NotImplementedError("write your code here")\n\n\ncheck("ex-f", f)'
    )
    assert src[4] == "## Summary" and len(src) == 5
    assert nb["metadata"]["attnbook"]["edition"] == "student"
    assert len({c["id"] for c in nb["cells"]}) == len(nb["cells"])


def test_student_notebooks_hold_stubs_and_no_solutions():
    import nbformat

    from attnbook import exercises

    assert STUDENT_NOTEBOOKS, "no chapter with exercises"
    seen = set()
    for md, path in STUDENT_NOTEBOOKS.items():
        assert path.is_file(), f"{path} missing: run make student"
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        text = "\n".join(c["source"] for c in nb["cells"])
        assert "## Solutions" not in text and "Solution to" not in text, path
        assert colab.BEGIN_SOLUTION not in text, path
        assert nb["cells"][0]["source"] == colab.install_cell_source(REL)
        for label in re.findall(r":label: (ex-\S+)", md.read_text(encoding="utf-8")):
            if label in exercises.CHECKERS:
                stub = next(c for c in nb["cells"] if f'check("{label}"' in c["source"])
                assert (
                    stub["cell_type"] == "code"
                    and "NotImplementedError" in stub["source"]
                )
                assert stub["source"].rstrip().endswith(")"), stub["source"]
                seen.add(label)
    assert seen == set(exercises.CHECKERS), "a checked exercise has no stub"


def test_student_colab_url_pattern():
    md = ROOT / "book" / "foundations" / "attention-maps.md"
    assert colab.student_colab_url(md, REL, ROOT) == (
        "https://colab.research.google.com/github/"
        f"{REL.url.removeprefix('https://github.com/')}/blob/{REL.tag}/"
        "notebooks/student/foundations/attention-maps.ipynb"
    )


def test_ledger_notebooks_stop_with_the_published_page_outside_a_checkout(tmp_path):
    """The claims-ledger and findings notebooks read a build's records: on Colab (no
    ``_toc.yml`` above) their second cell stops them with the published page's address; in a
    checkout it lets them run."""
    ledger_nbs = [p for p in NOTEBOOKS if reads_ledger(f"{p.parent.name}/{p.stem}")]
    assert len(ledger_nbs) >= 4  # the ledger page and a findings page per part
    for path in ledger_nbs:
        code = [c for c in _nb(path)["cells"] if c["cell_type"] == "code"]
        docname = path.relative_to(ROOT).with_suffix("").as_posix()
        assert code[1]["source"] == colab.ledger_guard_source(REL, docname), path.name
        outside = subprocess.run(
            [sys.executable, "-c", code[1]["source"]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert outside.returncode == 1, path.name
        assert (
            REL.page_url(docname) in outside.stderr
            and "Traceback" not in outside.stderr
        )
        inside = subprocess.run(
            [sys.executable, "-c", code[1]["source"]],
            cwd=path.parent,
            capture_output=True,
            text=True,
        )
        assert inside.returncode == 0, inside.stderr


def test_gpu_run_script_parses_and_names_its_modes():
    """``tools/gpu_run.sh`` (the prepared GPU run of every notebook) is valid bash, and without
    a mode it says how to call it instead of doing anything."""
    script = ROOT / "tools" / "gpu_run.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert proc.returncode == 2 and "prepare|run" in proc.stderr


def test_colab_test_report_line_holds_the_notebooks_records(tmp_path, monkeypatch):
    """``--report`` writes one JSON line per notebook as it ends, with that chapter's records
    only (a run cut off keeps what finished)."""
    from tools import colab_test

    ledger = tmp_path / "ledger"
    ledger.mkdir()
    for chapter in ("pde/gaussians", "pde/particles"):
        (ledger / f"{chapter.replace('/', '__')}.json").write_text(
            json.dumps({"chapter": chapter, "claims": []})
        )
    monkeypatch.setattr(
        colab_test,
        "_execute_one",
        lambda *a: {"notebook": str(a[1]), "wall_s": 1.5, "error": None},
    )
    report = tmp_path / "report.jsonl"
    nb = ROOT / "book" / "pde" / "gaussians.ipynb"
    env = {"ATTNBOOK_LEDGER_DIR": str(ledger)}
    colab_test._execute(Path(sys.executable), nb, tmp_path, env, 10, report=report)
    (line,) = report.read_text().splitlines()
    got = json.loads(line)
    assert got["chapter"] == "pde/gaussians" and got["wall_s"] == 1.5
    assert [r["chapter"] for r in got["records"]] == ["pde/gaussians"]


def test_a_story_figure_links_to_the_published_image():
    """The story-figure directive draws into the build folder; on Colab the figure is the
    published book's copy of it (Sphinx publishes images under ``_images/``)."""
    rel = colab.release(ROOT)
    src = (
        "![_build/story-figures/focus.svg](_build/story-figures/focus.svg)\n\nCaption."
    )
    text = colab._fix_markdown(src, "book/focus/findings", rel)
    assert f"]({rel.baseurl}_images/focus.svg)" in text and "_build" not in text
    assert rel.baseurl.startswith("https://")
