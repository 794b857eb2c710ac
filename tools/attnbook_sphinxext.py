"""A small Sphinx extension for the book (loaded by ``sphinx: local_extensions`` in ``_config.yml``).

It reads (and so executes) the pages that read the ledger (each part's findings page, then the
claims-ledger page) after every other page, so they show the claims of the chapters executed in
the same build, and it tells the chapters'
kernels that they run under the book build (recorded with each claim). On a chapter page whose
chapter has a student notebook (``notebooks/student/``, no solutions) it adds "Student notebook
(Colab)" to the rocket's launch menu, beside the instructor's notebook.

It also adds what the front pages show, computed at build time:

* ``story-figure`` (a directive, argument: a part, content: the caption; option ``:name:``
  numbers it): the part's story figure (``tools/story_figures.py``) drawn as SVG into
  ``_build/story-figures/`` and shown as a figure;
* ``verdict-strip`` (a directive, argument: a part): one line counting the verdicts of
  ``book/<part>/findings.yml``, linked to the part's findings page;
* ``reading-time`` (a role, content: pages relative to the current one, separated by spaces):
  the estimated reading time of their prose, added up.
"""

from __future__ import annotations

import os
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx import addnodes
from sphinx.util.docutils import SphinxDirective, SphinxRole

PREFIX = "book/"
STUDENT_DIR = "notebooks/student/"
#: where the story figures are written, under the book's source folder (excluded from it)
STORY_DIR = "_build/story-figures"
#: how the verdict strip names each verdict of a findings page (one result, several)
VERDICT_WORDS = {
    "reproduced": ("holds", "hold"),
    "reproduced with caveat": ("holds with a caveat", "hold with a caveat"),
    "differs": ("differs", "differ"),
    "not tested": ("not tested", "not tested"),
}


def _ledger_last(app, env, docnames):
    from attnbook.claims import LEDGER_CHAPTER, reads_ledger

    readers = [
        d for d in docnames if d.startswith(PREFIX) and reads_ledger(d[len(PREFIX) :])
    ]
    # the findings pages in book order, the ledger page last of all
    readers.sort(key=lambda d: d == PREFIX + LEDGER_CHAPTER)
    for d in readers:
        docnames.remove(d)
        docnames.append(d)


def student_launch_button(srcdir, context) -> dict | None:
    """Add the student notebook to the page's launch menu (after sphinx-book-theme built it);
    the entry added, or None where the chapter has no student notebook."""
    group = next(
        (
            b
            for b in context.get("header_buttons", [])
            if isinstance(b, dict) and b.get("label") == "launch-buttons"
        ),
        None,
    )
    if group is None:
        return None
    colab = next((b for b in group["buttons"] if b.get("text") == "Colab"), None)
    marker = "/" + PREFIX
    if colab is None or marker not in colab["url"]:
        return None
    head, rel = colab["url"].split(marker, 1)  # .../blob/<tag>, <part>/<chapter>.ipynb
    if not (Path(srcdir) / STUDENT_DIR / rel).is_file():
        return None
    entry = {
        "type": "link",
        "text": "Student notebook (Colab)",
        "tooltip": "Launch the student notebook on Colab: exercises as stubs, no solutions",
        "icon": colab.get("icon", ""),
        "url": f"{head}/{STUDENT_DIR}{rel}",
    }
    group["buttons"].append(entry)
    return entry


def _student_button(app, pagename, templatename, context, doctree):
    student_launch_button(app.srcdir, context)


def _part(directive) -> str:
    import story_figures

    part = directive.arguments[0]
    if part not in story_figures.PARTS:
        raise directive.error(
            f"part must be one of {story_figures.PARTS}, not {part!r}"
        )
    return part


#: (source folder, part) → the SVG this process drew: each figure is drawn once per build
_drawn: dict[tuple[str, str], Path] = {}


class StoryFigure(SphinxDirective):
    """The story figure of a part, drawn now, with the directive's content as its caption."""

    required_arguments = 1
    has_content = True
    option_spec = {"name": directives.unchanged, "alt": directives.unchanged}

    def run(self):
        import story_figures

        part = _part(self)
        if not self.content:
            raise self.error("story-figure needs a caption (say what to see)")
        src = Path(self.env.srcdir)
        self.env.note_dependency(story_figures.__file__)
        for name in story_figures.archives_of(part):
            self.env.note_dependency(str(src / "results" / name / "manifest.json"))
        key = (str(src), part)
        if key not in _drawn:
            try:
                _drawn[key] = story_figures.save_story_svg(
                    part, src / STORY_DIR / f"{part}.svg"
                )
            except (OSError, ValueError, TypeError, KeyError) as exc:
                raise self.error(f"the story figure of {part!r} failed: {exc}") from exc
        body = nodes.Element()
        self.state.nested_parse(self.content, self.content_offset, body)
        if not isinstance(body[0], nodes.paragraph):
            raise self.error("the caption of story-figure must start with a paragraph")
        caption = nodes.caption(body[0].rawsource, "", *body[0].children)
        caption.source, caption.line = self.get_source_info()
        alt = self.options.get("alt", caption.astext())
        # a width makes the HTML builder link the image to itself: a tap opens it full size
        image = nodes.image(uri=f"/{STORY_DIR}/{part}.svg", alt=alt, width="100%")
        figure = nodes.figure("", image, caption, classes=["attnbook-story-figure"])
        if len(body) > 1:
            figure += nodes.legend("", *body[1:])
        self.set_source_info(figure)
        self.add_name(figure)
        return [figure]


def findings_counts(path) -> dict[str, int]:
    """How many rows of the findings file at ``path`` carry each verdict (every verdict of
    :data:`attnbook.findings.VERDICTS`, in its order)."""
    from attnbook.findings import load_findings, verdict_counts

    return verdict_counts(load_findings(path).rows)


class VerdictStrip(SphinxDirective):
    """One line: the part's results that hold / hold with a caveat / differ, linked to its
    findings page."""

    required_arguments = 1

    def run(self):
        part = _part(self)
        path = Path(self.env.srcdir) / PREFIX / part / "findings.yml"
        self.env.note_dependency(str(path))
        try:
            counts = findings_counts(path)
        except (OSError, ValueError, TypeError) as exc:
            raise self.error(f"verdict-strip: {exc}") from exc
        line = nodes.paragraph(classes=["attnbook-verdict-line"])
        line += nodes.Text(f"Of the paper's {sum(counts.values())} results: ")
        shown = [v for v in VERDICT_WORDS if counts[v] or v != "not tested"]
        for i, verdict in enumerate(shown):
            n = counts[verdict]
            slug = verdict.replace(" ", "-")
            text = f"{n} {VERDICT_WORDS[verdict][n != 1]}"
            line += nodes.inline(
                text, text, classes=["attnbook-verdict", f"attnbook-verdict-{slug}"]
            )
            line += nodes.Text(" · " if i < len(shown) - 1 else " — ")
        link = addnodes.pending_xref(
            "",
            nodes.inline("", "see the findings"),
            refdomain="std",
            reftype="doc",
            reftarget=f"/{PREFIX}{part}/findings",
            refexplicit=True,
            refwarn=True,
            refdoc=self.env.docname,
        )
        line += link
        self.set_source_info(line)
        return [line]


class ReadingTime(SphinxRole):
    """``{reading-time}`a b```: the minutes to read the prose of pages a and b (paths relative
    to the current page, without ``.md``), as "≈ N min"."""

    def run(self):
        import story_figures

        here = Path(self.env.doc2path(self.env.docname)).parent
        pages = self.text.split()
        if not pages:
            msg = self.inliner.reporter.error("reading-time needs at least one page")
            return [], [msg]
        minutes = 0
        for page in pages:
            path = here / f"{page}.md"
            if not path.is_file():
                msg = self.inliner.reporter.error(
                    f"reading-time: no page {page!r}", line=self.lineno
                )
                return [self.inliner.problematic(self.rawtext, self.rawtext, msg)], [
                    msg
                ]
            self.env.note_dependency(str(path))
            minutes += story_figures.reading_minutes(path)
        text = f"≈ {minutes} min"
        return [nodes.inline(text, text, classes=["attnbook-reading-time"])], []


def setup(app):
    os.environ.setdefault("ATTNBOOK_EXECUTOR", "jupyter-book")
    app.add_directive("story-figure", StoryFigure)
    app.add_directive("verdict-strip", VerdictStrip)
    app.add_role("reading-time", ReadingTime())
    app.connect("env-before-read-docs", _ledger_last)
    # after sphinx-book-theme's launch buttons (priority 501)
    app.connect("html-page-context", _student_button, priority=600)
    return {"version": "0.1", "parallel_read_safe": False, "parallel_write_safe": True}
