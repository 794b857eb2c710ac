"""Colab notebooks generated from the MyST chapters, with one pinned install.

Run as ``python -m tools.colab COMMAND`` from the repository root (the Makefile does):

``sync``
    build every notebook chapter with sphinx-tojupyter (plain Jupyter Markdown: numbered
    propositions, ``$…$`` math, citations and cross-references as links to the published
    book) and post-process it: the generated install cell first, exercises as headings,
    solutions moved to a "Solutions" section at the end, Colab metadata, no outputs. The
    notebooks are written next to their sources (``book/<part>/<chapter>.ipynb``): the files
    the launch buttons open. The MyST ``.md`` stays the single source.
    ``sync`` also writes the student notebooks (see ``student``).
``student``
    write the **student notebooks** (``make student``) from the current Colab notebooks:
    ``notebooks/student/<part>/<chapter>.ipynb``, the same conversion with the solutions
    removed and every coding exercise turned into a stub that ends with the call to its
    checker. Colab opens them at
    ``https://colab.research.google.com/github/<owner>/<repo>/blob/<tag>/notebooks/student/<part>/<chapter>.ipynb``
    (:func:`student_colab_url`). They are committed, like the Colab notebooks.
``check``
    fail if a notebook (Colab or student) is missing, holds outputs, or was generated from
    another version of its chapter or of the release settings (run ``make sync-notebooks``).
``install-cell``
    print the install cell.
``excerpts DIR``
    write the data excerpts (``attnbook.download``) from a local data folder into ``DIR``,
    for a publisher to upload as assets of the release.

Stubs of coding exercises (the convention the student notebooks rely on). A coding exercise's
solution has a code cell that defines the student's function and ends with its checker::

    from attnbook import exercises


    def l2_weights(q, k):
        # BEGIN SOLUTION
        shifted = 2 * q @ k.T - (k**2).sum(-1)
        return torch.softmax(shifted, -1)
        # END SOLUTION


    exercises.check("ex-l2-weights", l2_weights)

In the student notebook the lines from ``# BEGIN SOLUTION`` to ``# END SOLUTION`` become
``raise NotImplementedError("write your code here")`` at the marker's indentation, or the lines
``# STUB: <code>`` written inside the block (uncommented), when the stub needs something else
(a block at the top level should say what to assign, e.g. ``# STUB: answer = ...``). The cell
goes right after the exercise's statement; every other cell of the solution is dropped. The
checker is ``attnbook.exercises.CHECKERS[<the exercise's label>]``; ``tests/test_exercises.py``
runs every reference solution and every stub through it.

The release settings are set once: the repository URL (``repository.url`` in ``_config.yml``),
the published book (``html.baseurl``) and the package version (``attnbook.__version__``, which
``pyproject.toml`` reads); the release
tag is ``v<version>`` and ``repository.branch`` must name it (the launch buttons open the
notebooks at that tag, and the install cell installs the package at that tag).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from attnbook.claims import reads_ledger

__all__ = [
    "INSTALL_ENV",
    "Release",
    "release",
    "install_cell_source",
    "ledger_guard_source",
    "notebook_chapters",
    "source_digest",
    "postprocess",
    "sync",
    "check",
    "STUDENT_DIR",
    "student_notebook",
    "student_path",
    "student_colab_url",
    "stub_source",
    "write_students",
]

ROOT = Path(__file__).resolve().parents[1]

#: bump when the post-processing changes: every notebook is then stale
GENERATOR_VERSION = 2

#: the environment variable that makes the install cell install a pip requirement of your choice
#: (a ``git+file://`` URL of a checkout, a wheel, a branch...) instead of the release, also
#: outside Colab: the way to run the notebooks anywhere outside a checkout (and what
#: ``make test-colab`` sets)
INSTALL_ENV = "ATTNBOOK_INSTALL"

#: Colab opens a notebook with a GPU runtime when its metadata asks for one
COLAB_METADATA = {"accelerator": "GPU", "colab": {"provenance": [], "gpuType": "T4"}}


#: where the student notebooks go: ``notebooks/student/<part>/<chapter>.ipynb``
STUDENT_DIR = Path("notebooks") / "student"
BEGIN_SOLUTION = "# BEGIN SOLUTION"
END_SOLUTION = "# END SOLUTION"
STUB_PREFIX = "# STUB:"
STUB_DEFAULT = 'raise NotImplementedError("write your code here")'


@dataclass(frozen=True)
class Release:
    url: str  # https://github.com/owner/repo
    version: str  # package version (attnbook.__version__)
    branch: str  # repository.branch of _config.yml (must equal tag)
    baseurl: str  # published book, ends with /

    @property
    def tag(self) -> str:
        return f"v{self.version}"

    @property
    def wheel_url(self) -> str:
        """The release's wheel (``make release-dry`` builds it, the release workflow uploads it)."""
        return f"{self.url}/releases/download/{self.tag}/attnbook-{self.version}-py3-none-any.whl"

    @property
    def requirement(self) -> str:
        """What the install cell installs on Colab: the wheel (pip builds nothing)."""
        return self.wheel_url

    def page_url(self, docname: str) -> str:
        """``book/focus/dilution`` → the published HTML page."""
        return f"{self.baseurl}{docname}.html"


def release(root: Path | None = None) -> Release:
    """The release settings of ``_config.yml`` and ``pyproject.toml``."""
    root = ROOT if root is None else Path(root)
    cfg = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    text = (root / "src" / "attnbook" / "__init__.py").read_text(encoding="utf-8")
    m = re.search(r'^__version__\s*=\s*"([^"]+)"', text, flags=re.M)
    if m is None:
        raise ValueError("src/attnbook/__init__.py: no __version__")
    repo = cfg.get("repository") or {}
    base = (cfg.get("html") or {}).get("baseurl") or ""
    if not repo.get("url") or not base:
        raise ValueError(
            "_config.yml must set repository.url and html.baseurl (see README, Publishing)"
        )
    return Release(
        url=str(repo["url"]).rstrip("/"),
        version=m.group(1),
        branch=str(repo.get("branch", "")),
        baseurl=str(base).rstrip("/") + "/",
    )


def install_cell_source(rel: Release) -> str:
    """The first cell of every notebook: installs the release's wheel where attnbook is missing.

    It skips the install when pip's record of the installed attnbook (``direct_url.json``)
    names the same requirement (a second notebook in the same runtime), says what it installs,
    and on failure says which release it tried and what a reader can do, without a traceback.
    """
    return f"""\
# Installs attnbook {rel.tag}, the release this notebook belongs to, on Colab (its wheel).
# Elsewhere set {INSTALL_ENV} to a pip requirement (a wheel, git+https://...@main) to install
# that; in a checkout with attnbook installed this cell does nothing.
import importlib.metadata, json, os, subprocess, sys, time

requirement = os.environ.get("{INSTALL_ENV}") or (
    "{rel.requirement}" if "google.colab" in sys.modules else "")
try:  # pip's record of where the installed attnbook came from
    info = json.loads(importlib.metadata.distribution("attnbook").read_text("direct_url.json") or "{{}}")
    vcs = info.get("vcs_info")
    installed = f"{{vcs['vcs']}}+{{info['url']}}@{{vcs.get('requested_revision')}}" if vcs else info.get("url")
except importlib.metadata.PackageNotFoundError:
    installed = None
if os.path.exists(requirement):
    requirement = "file://" + os.path.abspath(requirement)
if requirement and requirement == installed:
    print(f"attnbook {{importlib.metadata.version('attnbook')}} is installed from {{requirement}}")
elif requirement:
    print(f"Installing attnbook from {{requirement}} and what this runtime lacks of its dependencies")
    t0, pip = time.time(), subprocess.run([sys.executable, "-m", "pip", "install", "-q", requirement], capture_output=True, text=True)
    if pip.returncode:
        print(pip.stderr[-1500:], file=sys.stderr)
        raise SystemExit(f"Could not install attnbook from {{requirement}} (the release {rel.tag}; pip's last words above). What you can do: check the runtime's network and run this cell again, or set os.environ['{INSTALL_ENV}'] to another source, e.g. a wheel uploaded to the runtime or git+{rel.url}@main, and run it again.")
    print(f"Installed attnbook {{importlib.metadata.version('attnbook')}} in {{time.time() - t0:.0f}} s")"""


def ledger_guard_source(rel: Release, docname: str) -> str:
    """The second cell of a notebook that reads the ledger: outside a checkout of the book (on
    Colab) it stops the notebook with a pointer to the published page, instead of failing on
    a missing ``_toc.yml`` further down."""
    return f"""\
# This page reads the claims that a build of the book recorded: it runs in a checkout only.
from attnbook.claims import find_book_root

if find_book_root() is None:
    raise SystemExit(
        "This notebook lists the claims that a build of the book recorded (make test in a "
        "checkout of {rel.url}), so it runs only there. Read it on the published page: "
        "{rel.page_url(docname)}"
    )"""


def notebook_chapters(root: Path | None = None) -> list[Path]:
    """The executable chapters of ``_toc.yml`` (MyST files with a kernelspec), in order."""
    root = ROOT if root is None else Path(root)
    text = (root / "_toc.yml").read_text(encoding="utf-8")
    out = []
    for entry in re.findall(r"^\s*-?\s*(?:file|root):\s*([^\s#]+)", text, flags=re.M):
        p = root / entry
        p = p if p.suffix else p.with_suffix(".md")
        if p.is_file():
            head = p.read_text(encoding="utf-8")
            if (
                head.startswith("---")
                and "kernelspec:" in head[3:].split("\n---", 1)[0]
            ):
                out.append(p)
    return out


def source_digest(md: Path, rel: Release) -> str:
    """What a notebook is generated from: its chapter, the release settings, the generator."""
    h = hashlib.sha256()
    h.update(Path(md).read_bytes())
    h.update(json.dumps([rel.url, rel.tag, rel.baseurl, GENERATOR_VERSION]).encode())
    return h.hexdigest()


# --- post-processing of sphinx-tojupyter's notebooks ---------------------------------------

_LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s]+?)\.ipynb(#[^)\s]*)?\)")
#: a story figure (``story-figure`` directive): drawn at build time into the build folder,
#: published with the book's images (``_images/<part>.svg``)
_STORY_IMAGE = re.compile(
    r"!\[[^\]]*\]\((?!https?:)[^)\s]*story-figures/([\w-]+\.svg)\)"
)
_CITE = re.compile(r"\[((?:\[[^\]]+\]\([^)]*bibliography\.html[^)]*\)(?:,\s*)?)+)\]")
_EXERCISE = re.compile(r"^#+\s+\((.*)\)(Exercise [\d.]+)\s*$", flags=re.M)
_SOLUTION = re.compile(r"#+\s+Solution to\s*\[\s*(Exercise [^\]]*)\]\([^)]*\)[^\n]*\n?")
_LOCAL_ANCHOR = re.compile(r"\]\(#([^)\s]+)\)")
_INLINE_MATH = re.compile(r"(?<![\$\\])\$ ([^$]+?) \$(?!\$)")


_TITLED = re.compile(r"^(Exercise [\d.]+) \((.*)\)$", flags=re.S)
_ANCHOR_ONLY = re.compile(r"^\s*<a id=['\"][^'\"]+['\"]></a>\s*$")


def _exercise_title(text: str) -> str:
    """``Exercise 3.1 (Title (★, 10 min))`` → ``Exercise 3.1: Title (★, 10 min)``: one pair of
    parentheses in a heading, as in the HTML book."""
    m = _TITLED.match(text.strip())
    return f"{m.group(1)}: {m.group(2)}" if m else text.strip()


def _page_of(link: str, docname: str) -> str:
    """Resolve a relative ``.ipynb`` link of page ``docname`` to a docname."""
    base = Path(docname).parent
    parts = []
    for part in (base / link).as_posix().split("/"):
        if part == "..":
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def _fix_markdown(text: str, docname: str, rel: Release) -> str:
    def link(m):
        target = _page_of(m.group(1), docname)
        anchor = m.group(2) or ""
        if target.endswith("bibliography") and not anchor.startswith("#cite-"):
            anchor = ""  # only the entries' ids (bibtex_cite_id) are the HTML page's
        return f"]({rel.page_url(target)}{anchor})"

    text = _LINK.sub(link, text)
    text = _STORY_IMAGE.sub(
        lambda m: f"![the figure of this part]({rel.baseurl}_images/{m.group(1)})", text
    )
    # a label of this chapter (a proposition, an equation) is an anchor of its published page,
    # not of the notebook: Colab scrolls only to headings
    text = _LOCAL_ANCHOR.sub(lambda m: f"]({rel.page_url(docname)}#{m.group(1)})", text)
    # [[Chen et al., 2026](…)] → ([Chen et al., 2026](…))
    text = _CITE.sub(lambda m: f"({m.group(1)})", text)
    text = _EXERCISE.sub(lambda m: f"### {m.group(2)}: {m.group(1)}\n", text)
    text = text.replace("**Proof.**\n\nProof. ", "**Proof.** ")
    text = _INLINE_MATH.sub(lambda m: f"${m.group(1).strip()}$", text)
    return text


# --- math that a Markdown viewer (Colab, Jupyter, GitHub) would break --------------------------

_CODE_SPAN = re.compile(r"`[^`\n]*`")
_BULLET = re.compile(r"^\s{0,3}[-+*]\s")
_DOLLARS = re.compile(r"\$\$|\$")
#: macros that KaTeX-based viewers refuse or MathJax reads differently, with their fixes
_BAD_MACROS = {
    "\\lambda_\\max": "\\lambda_{\\max}",
    "\\lambda_\\min": "\\lambda_{\\min}",
}


def math_problems(text: str) -> list[str]:
    """What in one Markdown cell would reach a reader as broken math (empty when none).

    Checked: an escaped dollar (``\\$``, what a converter leaves of display math it could not
    place); an odd number of ``$`` in a paragraph (an unclosed span); a line that starts with a
    list marker inside inline or display math (a viewer that parses Markdown before math reads
    ``+ x`` or ``- x`` at the start of a line as a bullet, cutting the formula in two); macros
    in :data:`_BAD_MACROS`. Code spans and
    fenced code are skipped.
    """
    problems, fenced = [], False
    paragraphs, current = [], []
    for line in text.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.strip():
            current.append(_CODE_SPAN.sub("", line))
        elif current:
            paragraphs.append(current)
            current = []
    if current:
        paragraphs.append(current)
    for para in paragraphs:
        joined = "\n".join(para)
        if "\\$" in joined:
            problems.append(f"an escaped dollar \\$ in {joined[:80]!r}")
        if joined.replace("\\$", "").count("$") % 2:
            problems.append(f"an odd number of $ in {joined[:80]!r}")
        inline = display = False  # math open at the start of each line
        for line in para:
            if (inline or display) and _BULLET.match(line):
                problems.append(
                    f"a list marker starts a line inside math: {line[:60]!r}"
                )
            for token in _DOLLARS.findall(line.replace("\\$", "")):
                if token == "$$":
                    display = not display
                else:
                    inline = not inline
        for bad, fix in _BAD_MACROS.items():
            if bad in joined:
                problems.append(f"{bad} (write {fix}) in {joined[:60]!r}")
    return problems


_FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.M | re.S)
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$([^$]+?)\$", flags=re.S)
#: where ``make katex`` puts KaTeX's Node build (outside the book's static files)
KATEX_JS = ROOT / "_build" / "katex" / "katex.js"


def math_spans(text: str) -> list[tuple[str, bool]]:
    """``(tex, display)`` of every math span of one Markdown cell (code spans and fences
    skipped), in order."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", text.replace("\\$", "")))
    return [
        (m.group(1), True) if m.group(1) is not None else (m.group(2), False)
        for m in _MATH_SPAN.finditer(text)
    ]


def katex_refusals(spans: list[tuple[str, bool]], katex_js: Path = KATEX_JS) -> dict:
    """``{index: KaTeX's error}`` for the ``spans`` that KaTeX (Colab's renderer) refuses,
    rendered by ``tools/katex_check.js`` in Node. Raises FileNotFoundError without KaTeX
    (``make katex``) and RuntimeError without Node."""
    katex_js = Path(katex_js)
    if not katex_js.is_file():
        raise FileNotFoundError(f"no KaTeX at {katex_js}: run `make katex`")
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is needed to run KaTeX (install Node.js)")
    out = subprocess.run(
        [node, str(Path(__file__).with_name("katex_check.js")), str(katex_js)],
        input=json.dumps([{"tex": t, "display": d} for t, d in spans]),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {r["index"]: r["error"] for r in json.loads(out)}


def _new_cell(cell_type: str, source: str, index: str) -> dict:
    cell = {"cell_type": cell_type, "id": index, "metadata": {}, "source": source}
    if cell_type == "code":
        cell.update(outputs=[], execution_count=None)
    return cell


def _is_heading(cell: dict) -> bool:
    return cell["cell_type"] == "markdown" and cell["source"].lstrip().startswith("#")


def figure_captions(md: Path) -> dict[str, str]:
    """Code-cell source → its figure caption (sphinx-tojupyter drops the captions)."""
    import jupytext

    out = {}
    for cell in jupytext.read(md).cells:
        caption = cell.metadata.get("mystnb", {}).get("figure", {}).get("caption")
        if cell.cell_type == "code" and caption:
            out[cell.source.strip()] = " ".join(caption.split())
    return out


def postprocess(
    nb: dict, docname: str, md: Path, rel: Release, captions: dict | None = None
) -> dict:
    """Turn one sphinx-tojupyter notebook into the Colab notebook of chapter ``docname``.

    ``captions`` (code-cell source → caption) puts each figure's caption after its cell.
    """
    captions = captions or {}
    cells = []
    for c in nb["cells"]:
        c = copy.deepcopy(c)
        src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        c["source"] = src.strip("\n")
        if c["cell_type"] == "markdown":
            c["source"] = _fix_markdown(c["source"], docname, rel)
            # an empty cell, or one that holds only an HTML anchor (every link to a label now
            # goes to the published page), is dropped
            if not c["source"].strip() or _ANCHOR_ONLY.match(c["source"]):
                continue
        else:
            c["metadata"] = {}
            c["outputs"], c["execution_count"] = [], None
        cells.append(c)
        if c["cell_type"] == "code" and c["source"].strip() in captions:
            caption = captions[c["source"].strip()]
            cells.append(_new_cell("markdown", f"**Figure.** {caption}", "caption"))

    # solutions (a "Solution to Exercise N" heading up to the next heading) go to the end
    body, solutions, in_solution = [], [], False
    for c in cells:
        m = _SOLUTION.match(c["source"]) if c["cell_type"] == "markdown" else None
        if m:
            in_solution = True
            rest = c["source"][m.end() :].strip("\n")
            head = f"### Solution to {_exercise_title(m.group(1))}"
            solutions.append({**c, "source": f"{head}\n\n{rest}".strip()})
        elif in_solution and _is_heading(c):
            in_solution = False
            body.append(c)
        elif in_solution:
            solutions.append(c)
        else:
            body.append(c)

    cells = [_new_cell("code", install_cell_source(rel), "install")] + body
    if reads_ledger(docname.removeprefix("book/")):
        cells.insert(1, _new_cell("code", ledger_guard_source(rel, docname), "guard"))
        cells.insert(
            0,
            _new_cell(
                "markdown",
                "**This notebook reads the claims recorded by a book build.** A build "
                "(`make test` or `make book` in a checkout of the repository) executes every "
                "chapter, and each chapter's claims are written to `_build/ledger/`; this "
                "notebook reads them, so it runs only inside such a checkout after a build. "
                f"The page of the published book: [{rel.page_url(docname)}]"
                f"({rel.page_url(docname)}).",
                "colab-note",
            ),
        )
    if solutions:
        cells.append(
            _new_cell(
                "markdown",
                "## Solutions\n\nRun the chapter above first: the solutions use its variables.",
                "solutions",
            )
        )
        cells += solutions
    _renumber(cells)
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {
                "display_name": "Python 3",
                "language": "python",
                "name": "python3",
            },
            "language_info": {"name": "python"},
            "title": nb.get("metadata", {}).get("title", ""),
            **copy.deepcopy(COLAB_METADATA),
            "attnbook": {
                "source": md.relative_to(md.parents[2]).as_posix(),
                "source_digest": source_digest(md, rel),
                "release": rel.tag,
            },
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


# --- student notebooks ----------------------------------------------------------------------

_EXERCISE_HEAD = re.compile(r"^###\s+(Exercise [\d.]+)\b")
_SOLUTION_HEAD = re.compile(r"^###\s+Solution to\s+(Exercise [\d.]+)\b")


def stub_source(src: str) -> str:
    """A solution cell with each ``# BEGIN SOLUTION`` … ``# END SOLUTION`` block made a stub."""
    out, block, indent = [], None, ""
    for line in src.split("\n"):
        text = line.strip()
        if text == BEGIN_SOLUTION:
            if block is not None:
                raise ValueError(f"nested {BEGIN_SOLUTION} in:\n{src}")
            block, indent = [], line[: len(line) - len(line.lstrip())]
        elif text == END_SOLUTION:
            if block is None:
                raise ValueError(f"{END_SOLUTION} without {BEGIN_SOLUTION} in:\n{src}")
            out += [indent + stub for stub in (block or [STUB_DEFAULT])]
            block = None
        elif block is not None:
            if text.startswith(STUB_PREFIX):
                block.append(text[len(STUB_PREFIX) :].strip())
        else:
            out.append(line)
    if block is not None:
        raise ValueError(f"{BEGIN_SOLUTION} without {END_SOLUTION} in:\n{src}")
    return "\n".join(out)


def _renumber(cells: list[dict]) -> list[dict]:
    for i, c in enumerate(cells):
        # deterministic cell ids: regenerating an unchanged notebook changes nothing in git
        digest = hashlib.sha1(c["source"].encode()).hexdigest()[:8]
        c["id"] = f"c{i:03d}-{digest}"
    return cells


def student_notebook(nb: dict) -> dict:
    """The student edition of a Colab notebook: no solutions, coding exercises as stubs.

    The stub of each solution cell holding ``# BEGIN SOLUTION`` goes right after the statement
    of its exercise (see the module's docstring); the "Solutions" section is dropped.
    """
    nb = copy.deepcopy(nb)
    cells = nb["cells"]
    start = next(
        (
            i
            for i, c in enumerate(cells)
            if c["cell_type"] == "markdown" and c["source"].startswith("## Solutions")
        ),
        len(cells),
    )
    body, stubs, current = cells[:start], {}, None
    for c in cells[start + 1 :]:
        m = _SOLUTION_HEAD.match(c["source"]) if c["cell_type"] == "markdown" else None
        if m:
            current = m.group(1)
        elif c["cell_type"] == "code" and BEGIN_SOLUTION in c["source"]:
            stub = _new_cell("code", stub_source(c["source"]), "stub")
            stubs.setdefault(current, []).append(stub)
    out, placed = [], set()
    for c in body:
        c.setdefault("metadata", {})
        if c["cell_type"] == "markdown":  # notebooks made before the heading fix
            c["source"] = _EXERCISE.sub(
                lambda m: f"### {m.group(2)} ({m.group(1)})\n", c["source"]
            )
        out.append(c)
        m = _EXERCISE_HEAD.match(c["source"]) if c["cell_type"] == "markdown" else None
        if m and m.group(1) in stubs:
            out += stubs[m.group(1)]
            placed.add(m.group(1))
    if set(stubs) - placed:
        raise ValueError(
            f"stubs without an exercise heading: {sorted(set(stubs) - placed)}"
        )
    nb["cells"] = _renumber(out)
    nb["metadata"]["attnbook"]["edition"] = "student"
    return nb


def student_path(md: Path, root: Path | None = None) -> Path:
    """``book/<part>/<chapter>.md`` → ``notebooks/student/<part>/<chapter>.ipynb``."""
    root = ROOT if root is None else Path(root)
    rel = Path(md).resolve().relative_to((root / "book").resolve())
    return root / STUDENT_DIR / rel.with_suffix(".ipynb")


def student_colab_url(md: Path, rel: Release, root: Path | None = None) -> str:
    """The Colab URL of a chapter's student notebook, at the release tag."""
    root = ROOT if root is None else Path(root)
    path = student_path(md, root).relative_to(root).as_posix()
    repo = rel.url.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{repo}/blob/{rel.tag}/{path}"


def _has_exercises(md: Path) -> bool:
    return "{exercise}" in Path(md).read_text(encoding="utf-8")


def write_students(root: Path | None = None) -> list[Path]:
    """Write the student notebook of every chapter with exercises from its Colab notebook."""
    root = ROOT if root is None else Path(root)
    rel = release(root)
    written = []
    for md in notebook_chapters(root):
        if not _has_exercises(md):
            continue
        source = md.with_suffix(".ipynb")
        nb = json.loads(source.read_text(encoding="utf-8"))
        if nb.get("metadata", {}).get("attnbook", {}).get(
            "source_digest"
        ) != source_digest(md, rel):
            raise RuntimeError(f"{source} is stale: run `make sync-notebooks` first")
        target = student_path(md, root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            json.dumps(student_notebook(nb), indent=1, ensure_ascii=False) + "\n",
            encoding="utf-8",
        )
        written.append(target)
    return written


def _tojupyter_config(root: Path, out: Path) -> Path:
    cfg = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    cfg.setdefault("execute", {})["execute_notebooks"] = "off"
    sphinx = cfg.setdefault("sphinx", {})
    # local extensions are found relative to the config file: this one lives elsewhere
    sphinx["local_extensions"] = {
        name: str((root / folder).resolve())
        for name, folder in (sphinx.get("local_extensions") or {}).items()
    }
    sphinx["extra_extensions"] = list(sphinx.get("extra_extensions") or []) + [
        "sphinx_tojupyter"
    ]
    conf = sphinx.setdefault("config", {})
    # without the synonyms every code cell comes out as a Markdown code block
    conf["tojupyter_lang_synonyms"] = ["ipython", "ipython3", "python"]
    conf["tojupyter_drop_solutions"] = False
    conf["html_static_path"] = []  # MathJax is not needed to write notebooks
    path = out / "config.yml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def build_raw(root: Path, out: Path) -> Path:
    """Run sphinx-tojupyter over the book into ``out``; returns the folder of notebooks."""
    config = _tojupyter_config(root, out)
    cmd = [
        sys.executable,
        "-c",
        "from jupyter_book.cli.main import main; main()",
        "build",
        str(root),
        "--builder",
        "custom",
        "--custom-builder",
        "jupyter",
        "--config",
        str(config),
        "--path-output",
        str(out),
        "--quiet",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
    if proc.returncode != 0:
        raise RuntimeError(
            "sphinx-tojupyter build failed (is the book extra installed? "
            "pip install -e '.[book]'):\n" + proc.stdout[-3000:] + proc.stderr[-3000:]
        )
    return out / "_build" / "jupyter"


def sync(root: Path | None = None) -> list[Path]:
    """Generate every chapter's Colab notebook (``book/<part>/<chapter>.ipynb``)."""
    root = ROOT if root is None else Path(root)
    rel = release(root)
    written = []
    with tempfile.TemporaryDirectory(prefix="attnbook-colab-") as tmp:
        raw_dir = build_raw(root, Path(tmp))
        for md in notebook_chapters(root):
            docname = md.relative_to(root).with_suffix("").as_posix()
            raw = json.loads((raw_dir / f"{docname}.ipynb").read_text(encoding="utf-8"))
            nb = postprocess(raw, docname, md, rel, figure_captions(md))
            target = md.with_suffix(".ipynb")
            target.write_text(
                json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
            )
            written.append(target)
    return written + write_students(root)


def check(root: Path | None = None) -> list[str]:
    """Problems with the generated notebooks (empty when all are present and current and
    their math reaches a Markdown viewer whole, :func:`math_problems`)."""
    root = ROOT if root is None else Path(root)
    rel = release(root)
    problems = []
    if rel.branch != rel.tag:
        problems.append(
            f"_config.yml: repository.branch is {rel.branch!r}, but the release tag is "
            f"{rel.tag!r} (attnbook.__version__ = {rel.version!r}): set them together"
        )
    for md in notebook_chapters(root):
        nb_path = md.with_suffix(".ipynb")
        fix = "(run `make sync-notebooks`)"
        if not nb_path.is_file():
            problems.append(f"{md}: no Colab notebook {nb_path.name} {fix}")
            continue
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        meta = nb.get("metadata", {}).get("attnbook", {})
        if meta.get("source_digest") != source_digest(md, rel):
            problems.append(f"{nb_path}: stale, generated from another {md.name} {fix}")
        if any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"):
            problems.append(
                f"{nb_path}: holds outputs (the Colab notebook must be clean)"
            )
        problems += _math_problems_of(nb, nb_path)
        first_code = next((c for c in nb["cells"] if c["cell_type"] == "code"), None)
        if first_code is None or first_code["source"] != install_cell_source(rel):
            problems.append(
                f"{nb_path}: the first code cell is not the install cell {fix}"
            )
        if _has_exercises(md):
            problems += _check_student(md, rel, root)
    return problems


def _check_student(md: Path, rel: Release, root: Path) -> list[str]:
    path = student_path(md, root)
    fix = "(run `make student`)"
    if not path.is_file():
        return [f"{md}: no student notebook {path.relative_to(root)} {fix}"]
    nb = json.loads(path.read_text(encoding="utf-8"))
    meta = nb.get("metadata", {}).get("attnbook", {})
    problems = []
    if (
        meta.get("source_digest") != source_digest(md, rel)
        or meta.get("edition") != "student"
    ):
        problems.append(f"{path}: stale, generated from another {md.name} {fix}")
    if any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"):
        problems.append(f"{path}: holds outputs (the student notebook must be clean)")
    if any(BEGIN_SOLUTION in c["source"] for c in nb["cells"]):
        problems.append(f"{path}: holds a solution {fix}")
    return problems + _math_problems_of(nb, path)


def _math_problems_of(nb: dict, path: Path) -> list[str]:
    fix = "(fix the chapter's Markdown, then `make sync-notebooks`)"
    return [
        f"{path}: cell {i}: {problem} {fix}"
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "markdown"
        for problem in math_problems(c["source"])
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.colab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command", choices=["sync", "student", "check", "install-cell", "excerpts"]
    )
    parser.add_argument("out", nargs="?", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.command == "sync":
        for p in sync():
            print("wrote", os.path.relpath(p))
    elif args.command == "student":
        for p in write_students():
            print("wrote", os.path.relpath(p))
    elif args.command == "check":
        problems = check()
        print("\n".join(problems) or "all Colab notebooks current")
        return 1 if problems else 0
    elif args.command == "excerpts":
        from attnbook.data import find_data_dir
        from attnbook.download import base_url, build_excerpts

        folder = next((d for d in find_data_dir() if d.is_dir()), None)
        if folder is None or args.out is None:
            parser.error("usage: excerpts DIR, with ATTNBOOK_DATA_DIR naming the data")
        for path in build_excerpts(args.out, data_dir=folder).values():
            print(f"wrote {path} ({path.stat().st_size} bytes)")
        print(f"upload them as assets of the release: {base_url()}")
    else:
        print(install_cell_source(release()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
