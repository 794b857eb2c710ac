"""Build the course's slide decks: one reveal.js deck per session, fully offline.

Run after ``make book`` (``make slides`` does, from the repository root)::

    python -m tools.slides --html _build/html --reveal _build/reveal/6.0.2 \\
        --mathjax book/_mathjax/mathjax --out _build/slides

writes ``session-N.html`` for every deck source ``slides/session-N.md``, an ``index.html``
listing them, the chapters' figures the decks show (``images/``) and the assets they load
(``_assets/``: reveal.js, the book's MathJax 3, a style sheet). Nothing is fetched at view time.

A deck source is MyST Markdown with a front matter (``session``, ``week``, ``chapters``: book
paths without ``.md``). ``# Title`` makes the title slide (the session, the week and the chapters'
titles are added to it); every ``## Heading`` starts a new slide. Math is ``$…$`` and ``$$…$$``.
Two MyST constructs are understood, and any other directive or role is refused:

- a figure of a chapter, by the label of its ``mystnb`` figure metadata (``name: fig-…``),
  resolved from the built book (``<figure id="fig-…">`` of the chapter's page); the body is the
  slide's caption::

      ```{chapter-figure} fig-five-maps
      The five maps on one token cloud.
      ```

- ``{exercise}`ex-…``` — an exercise of a chapter, shown as its title, stars and time.

A deck holds no solution and no expected answer: a source whose text mentions either is refused.
A figure label that no chapter names, or that the built book lacks, stops the build with a
message that says which deck, which label and what to do.
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import yaml
from markdown_it import MarkdownIt
from mdit_py_plugins.dollarmath import dollarmath_plugin
from mdit_py_plugins.front_matter import front_matter_plugin
from mdit_py_plugins.myst_role import myst_role_plugin

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: `tools` is importable from the root
    sys.path.insert(0, str(ROOT))

__all__ = [
    "DeckError",
    "Deck",
    "Slide",
    "BuiltFigure",
    "parse_deck",
    "deck_sources",
    "figure_index",
    "resolve_figure",
    "render_deck",
    "build",
    "FORBIDDEN",
]

FIGURE_DIRECTIVE = "chapter-figure"
EXERCISE_ROLE = "exercise"
#: text a deck must never hold: the session pages' answers live in a dropdown of that name
FORBIDDEN = re.compile(r"\bsolutions?\b|expected answers?|instructor-answers", re.I)
_NAME = re.compile(r"^\s*name:\s*(fig-[\w.-]+)\s*$", re.M)


class DeckError(ValueError):
    """A deck source that cannot be built; the message names the deck and what to fix."""


@dataclass
class Slide:
    title: str  # the heading's text, as written
    level: int  # 1: the title slide, 2: a slide
    tokens: list = field(repr=False, default_factory=list)


@dataclass
class Deck:
    source: str  # where the text came from, for messages
    meta: dict
    slides: list[Slide]

    @property
    def title(self) -> str:
        return self.slides[0].title

    def figure_labels(self) -> list[str]:
        """The chapter figures this deck shows, in order."""
        return [
            t.info.split(None, 1)[1].strip()
            for s in self.slides
            for t in s.tokens
            if t.type == "fence" and _directive(t) == FIGURE_DIRECTIVE
        ]

    def exercise_labels(self) -> list[str]:
        """The exercises this deck names, in order."""
        return [
            c.content.strip()
            for s in self.slides
            for t in s.tokens
            for c in t.children or ()
            if c.type == "myst_role" and c.meta.get("name") == EXERCISE_ROLE
        ]


def _directive(token) -> str | None:
    m = re.match(r"\{([\w-]+)\}", token.info.strip())
    return m.group(1) if m else None


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    md.use(front_matter_plugin).use(myst_role_plugin)
    md.use(dollarmath_plugin, allow_labels=False, double_inline=True)
    return md


def parse_deck(text: str, source: str = "<deck>") -> Deck:
    """Split a deck source into its front matter and slides (``#``: title, ``##``: slide)."""
    bad = FORBIDDEN.search(text)
    if bad:
        raise DeckError(
            f"{source}: mentions {bad.group(0)!r}; a deck holds no solutions or expected "
            "answers (they stay in the instructor's edition of the session page)"
        )
    tokens = _markdown().parse(text)
    meta: dict = {}
    if tokens and tokens[0].type == "front_matter":
        meta = yaml.safe_load(tokens.pop(0).content) or {}
        if not isinstance(meta, dict):
            raise DeckError(f"{source}: the front matter is not a mapping")
    slides: list[Slide] = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.tag in ("h1", "h2"):
            title = tokens[i + 1].content.strip()
            slides.append(Slide(title=title, level=int(tok.tag[1])))
            continue
        if not slides:
            if tok.type in ("paragraph_open", "fence", "math_block", "table_open"):
                raise DeckError(
                    f"{source}: content before the first heading (start with '# Title')"
                )
            continue
        slides[-1].tokens.append(tok)
    for s in slides:  # the heading's own three tokens are not content
        if s.tokens and s.tokens[0].type == "inline":
            s.tokens.pop(0)
        if s.tokens and s.tokens[0].type == "heading_close":
            s.tokens.pop(0)
    if not slides or slides[0].level != 1:
        raise DeckError(f"{source}: a deck starts with its title, '# Title'")
    if any(s.level == 1 for s in slides[1:]):
        raise DeckError(f"{source}: one '# Title' per deck; slides are '## Heading'")
    for s in slides:
        for t in s.tokens:
            name = _directive(t) if t.type == "fence" else None
            if name is not None and name != FIGURE_DIRECTIVE:
                raise DeckError(
                    f"{source}: slide {s.title!r} uses the directive {{{name}}}; decks know "
                    f"only {{{FIGURE_DIRECTIVE}}}"
                )
            if name == FIGURE_DIRECTIVE and len(t.info.split()) != 2:
                raise DeckError(
                    f"{source}: slide {s.title!r}: write ```{{{FIGURE_DIRECTIVE}}} fig-label"
                )
            for c in t.children or ():
                if c.type == "myst_role" and c.meta.get("name") != EXERCISE_ROLE:
                    raise DeckError(
                        f"{source}: slide {s.title!r} uses the role "
                        f"{{{c.meta.get('name')}}}; decks know only {{{EXERCISE_ROLE}}}"
                    )
    return Deck(source=source, meta=meta, slides=slides)


def deck_sources(folder: Path) -> list[Path]:
    """The deck sources of ``folder``, ``session-N.md`` in session order."""
    found = [p for p in Path(folder).glob("session-*.md") if p.stem[8:].isdigit()]
    return sorted(found, key=lambda p: int(p.stem[8:]))


# ---- figures of the built book --------------------------------------------------------------


def figure_index(book_dir: Path) -> dict[str, Path]:
    """Every figure label of the chapters (``name: fig-…``) → the chapter source naming it."""
    out: dict[str, Path] = {}
    for md in sorted(Path(book_dir).rglob("*.md")):
        if "_build" in md.parts:
            continue
        for label in _NAME.findall(md.read_text(encoding="utf-8")):
            out.setdefault(label, md)
    return out


class _FigureFinder(HTMLParser):
    """The first image and the caption number inside ``<figure id=label>``."""

    def __init__(self, label: str):
        super().__init__(convert_charrefs=True)
        self.label = label
        self.depth = 0  # > 0 while inside the figure
        self.found = False
        self.src: str | None = None
        self.width: int | None = None  # the image's width on the book's page (CSS px)
        self.number = ""
        self._in_number = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if self.depth:
            if tag == "figure":
                self.depth += 1
            elif tag == "img" and self.src is None:
                self.src = a.get("src")
                # a 2x PNG is drawn at half its pixel width: the page says its width
                m = re.search(r"width:\s*([\d.]+)px", a.get("style") or "")
                width = m.group(1) if m else a.get("width")
                if width and re.fullmatch(r"[\d.]+", width):
                    self.width = round(float(width))
            elif tag == "span" and "caption-number" in (a.get("class") or ""):
                self._in_number = True
        elif a.get("id") == self.label and tag == "figure":
            self.depth, self.found = 1, True

    def handle_endtag(self, tag):
        if self.depth and tag == "figure":
            self.depth -= 1
        if tag == "span":
            self._in_number = False

    def handle_data(self, data):
        if self._in_number:
            self.number += data


@dataclass(frozen=True)
class BuiltFigure:
    label: str
    image: Path  # the PNG in the built book
    chapter: Path  # the chapter's source
    number: str  # "Fig. 2.1", as the book numbers it
    width: int | None = (
        None  # its width on the book's page in CSS px (None: its pixel width)
    )


def resolve_figure(
    label: str,
    html_dir: Path,
    index: dict[str, Path],
    root: Path = ROOT,
    deck: str = "<deck>",
) -> BuiltFigure:
    """Find figure ``label`` in the built book; :class:`DeckError` says why it cannot."""
    if label not in index:
        raise DeckError(
            f"{deck}: figure {label!r} is named by no chapter (no `name: {label}` in the "
            "mystnb figure metadata of book/**/*.md); check the label"
        )
    chapter = index[label]
    page = Path(html_dir) / chapter.resolve().relative_to(root.resolve())
    page = page.with_suffix(".html")
    if not page.is_file():
        raise DeckError(
            f"{deck}: figure {label!r} is in {chapter.relative_to(root)}, but its page "
            f"{page} is not built: run `make book` first"
        )
    finder = _FigureFinder(label)
    finder.feed(page.read_text(encoding="utf-8"))
    if not finder.found or not finder.src:
        raise DeckError(
            f"{deck}: the built page {page} has no <figure id={label!r}> with an image: "
            "rebuild the book (`make book`)"
        )
    image = (page.parent / finder.src).resolve()
    if not image.is_file():
        raise DeckError(f"{deck}: figure {label!r}: {image} is missing from the build")
    return BuiltFigure(label, image, chapter, finder.number.strip(), finder.width)


def _chapter_id(path: Path, root: Path = ROOT) -> str:
    """``<root>/book/focus/focus.md`` → ``focus/focus``."""
    rel = Path(path).resolve().relative_to((root / "book").resolve())
    return rel.with_suffix("").as_posix()


def chapter_title(chapter: str, root: Path = ROOT) -> str:
    """The first ``# `` heading of ``book/<chapter>.md``."""
    path = root / "book" / f"{chapter}.md"
    if not path.is_file():
        raise DeckError(f"no chapter book/{chapter}.md")
    m = re.search(r"^# (.+)$", path.read_text(encoding="utf-8"), re.M)
    return m.group(1).strip() if m else chapter


# ---- rendering --------------------------------------------------------------------------------


def _renderer(figures: dict[str, BuiltFigure], exercises: dict, deck: str, root: Path):
    md = _markdown()

    def math_inline(self, tokens, idx, options, env):
        return (
            f'<span class="math inline">\\({html.escape(tokens[idx].content)}\\)</span>'
        )

    def math_display(self, tokens, idx, options, env):
        return f'<div class="math display">\\[{html.escape(tokens[idx].content)}\\]</div>\n'

    def fence(self, tokens, idx, options, env):
        tok = tokens[idx]
        if _directive(tok) != FIGURE_DIRECTIVE:
            return default_fence(tokens, idx, options, env)
        fig = figures[tok.info.split()[1]]
        caption = md.renderInline(tok.content.strip())
        alt = html.escape(re.sub(r"\s+", " ", tok.content.strip()), quote=True)
        title = chapter_title(_chapter_id(fig.chapter, root), root)
        source = html.escape(f"{fig.number}, {title}" if fig.number else title)
        return (
            f'<img class="r-stretch chapter-figure" src="images/{fig.image.name}" '
            f'alt="{alt}" data-label="{fig.label}"'
            + (f' data-book-width="{fig.width}"' if fig.width else "")
            + ">\n"
            f'<p class="figure-caption">{caption} '
            f'<span class="figure-source">({source})</span></p>\n'
        )

    def role(self, tokens, idx, options, env):
        label = tokens[idx].content.strip()
        ex = exercises.get(label)
        if ex is None:
            raise DeckError(f"{deck}: no exercise labelled {label!r} in the chapters")
        checked = ", checked" if ex.checked else ""
        return (
            f'<em class="exercise">{md.renderInline(ex.title)}</em> '
            f'<span class="exercise-meta">({"★" * ex.stars}, {ex.minutes} min{checked})</span>'
        )

    md.add_render_rule("math_inline", math_inline)
    md.add_render_rule("math_inline_double", math_display)
    md.add_render_rule("math_block", math_display)
    default_fence = md.renderer.rules["fence"]
    md.add_render_rule("fence", fence)
    md.add_render_rule("myst_role", role)
    return md


def render_deck(
    deck: Deck,
    figures: dict[str, BuiltFigure],
    exercises: dict,
    root: Path = ROOT,
    assets: str = "_assets",
) -> str:
    """The deck as one reveal.js page (figures under ``images/``, assets under ``assets``)."""
    md = _renderer(figures, exercises, deck.source, root)
    env: dict = {}
    sections = []
    for i, s in enumerate(deck.slides):
        body = md.renderer.render(s.tokens, md.options, env)
        heading = md.renderInline(s.title)
        if i == 0:
            session, week = deck.meta.get("session"), deck.meta.get("week")
            chapters = " · ".join(
                html.escape(chapter_title(c, root))
                for c in deck.meta.get("chapters", [])
            )
            sections.append(
                '<section class="title-slide">\n'
                f'<p class="kicker">Session {session} · week {week}</p>\n'
                f"<h1>{heading}</h1>\n{body}"
                f'<p class="chapters">Chapters: {chapters}</p>\n</section>'
            )
        else:
            sections.append(f"<section>\n<h2>{heading}</h2>\n{body}</section>")
    page_title = html.escape(f"Session {deck.meta.get('session')} — {deck.title}")
    text = PAGE.format(
        title=page_title, assets=assets, slides="\n".join(sections), n=len(sections)
    )
    visible = re.sub(r"<[^>]+>", " ", text)
    bad = FORBIDDEN.search(visible)
    if bad:  # an exercise title or a caption brought one in
        raise DeckError(f"{deck.source}: the built deck mentions {bad.group(0)!r}")
    return text


PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="icon" href="{assets}/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="{assets}/reveal/dist/reset.css">
<link rel="stylesheet" href="{assets}/reveal/dist/reveal.css">
<link rel="stylesheet" href="{assets}/reveal/dist/theme/white.css">
<link rel="stylesheet" href="{assets}/slides.css">
</head>
<body>
<div class="reveal"><div class="slides" data-slides="{n}">
{slides}
</div></div>
<script>
window.MathJax = {{
  tex: {{inlineMath: [["\\\\(", "\\\\)"]], displayMath: [["\\\\[", "\\\\]"]]}},
  options: {{processHtmlClass: "math", ignoreHtmlClass: "reveal"}},
}};
</script>
<script src="{assets}/mathjax/tex-chtml.js"></script>
<script src="{assets}/reveal/dist/reveal.js"></script>
<script>
window.deckReady = Reveal.initialize({{
  hash: true, width: 1280, height: 720, margin: 0.04, center: false,
  slideNumber: "c/t", transition: "none", controlsTutorial: false,
}}).then(() => MathJax.startup.promise).then(() => Reveal.layout());
</script>
</body>
</html>
"""

INDEX = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Slides — How attention learns and behaves</title>
<link rel="icon" href="_assets/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="_assets/slides.css">
</head>
<body class="deck-index">
<h1>Slides of the three-week module</h1>
<ol>
{items}
</ol>
<p>Keys: arrows or space to move, <kbd>F</kbd> full screen, <kbd>O</kbd> overview,
<kbd>?</kbd> all keys.</p>
</body>
</html>
"""

CSS = """/* attnbook slide decks: reveal.js white theme, sized for a 1280 x 720 canvas */
.reveal { font-size: 32px; }
.reveal h1, .reveal h2 { text-transform: none; letter-spacing: 0; }
.reveal h1 { font-size: 1.9em; }
.reveal h2 { font-size: 1.3em; margin-bottom: 0.5em; color: #1f3a5f; }
.reveal .slides section { text-align: left; }
.reveal ul, .reveal ol { display: block; margin-left: 1.1em; }
.reveal li { margin: 0.25em 0; }
.reveal li > ul, .reveal li > ol { font-size: 0.9em; }
.reveal p { margin: 0.45em 0; }
.reveal table { font-size: 0.8em; margin: 0.4em 0; }
.reveal .math.display { margin: 0.35em 0; text-align: center; }
.reveal img.chapter-figure { display: block; margin: 0.2em auto; border: 0; box-shadow: none; }
.reveal .figure-caption { font-size: 0.7em; text-align: center; margin: 0.2em 3.5em 0; }
.reveal .figure-source { color: #666; }
.reveal .exercise-meta { color: #555; font-size: 0.85em; }
.reveal blockquote { width: 92%; font-size: 1.05em; padding: 0.4em 0.8em; }
.reveal .title-slide { padding-top: 5.5em; }
.reveal .title-slide .kicker { color: #666; text-transform: uppercase; font-size: 0.75em; }
.reveal .title-slide .chapters { color: #1f3a5f; font-size: 0.85em; margin-top: 1em; }
body.deck-index { font: 18px/1.5 system-ui, sans-serif; max-width: 44em; margin: 3em auto; }
"""


def build(
    decks_dir: Path,
    html_dir: Path,
    reveal_dir: Path,
    mathjax_dir: Path,
    out: Path,
    root: Path = ROOT,
) -> list[Path]:
    """Build every deck of ``decks_dir`` into ``out``; returns the decks written."""
    from tools import course
    from tools.build_tools import REVEAL_FILES

    sources = deck_sources(decks_dir)
    if not sources:
        raise DeckError(f"no deck sources (session-N.md) in {decks_dir}")
    if not (Path(html_dir) / "search.html").is_file():
        raise DeckError(f"no built book in {html_dir}: run `make book` first")
    for name in REVEAL_FILES:
        if not (Path(reveal_dir) / name).is_file():
            raise DeckError(
                f"{reveal_dir} has no {name}: run `make slides` (fetch-reveal)"
            )
    if not (Path(mathjax_dir) / "tex-chtml.js").is_file():
        raise DeckError(f"{mathjax_dir} has no tex-chtml.js: run `make slides`")
    decks = [parse_deck(p.read_text(encoding="utf-8"), str(p)) for p in sources]
    index = figure_index(root / "book")
    exercises = course.exercises(root)
    figures: dict[str, BuiltFigure] = {}
    for deck in decks:
        for label in deck.figure_labels():
            figures[label] = resolve_figure(label, html_dir, index, root, deck.source)
    pages = {
        p: render_deck(d, figures, exercises, root) for p, d in zip(sources, decks)
    }

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "index.html").is_file():
        raise DeckError(
            f"{out} is not empty and holds no decks: refusing to replace it"
        )
    if out.exists():
        shutil.rmtree(out)
    (out / "images").mkdir(parents=True)
    for fig in figures.values():
        shutil.copy2(fig.image, out / "images" / fig.image.name)
    assets = out / "_assets"
    for name in REVEAL_FILES:
        (assets / "reveal" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(reveal_dir) / name, assets / "reveal" / name)
    shutil.copytree(mathjax_dir, assets / "mathjax")
    favicon = root / "book" / "_static" / "favicon.svg"
    if favicon.is_file():
        shutil.copy2(favicon, assets / "favicon.svg")
    (assets / "slides.css").write_text(CSS, encoding="utf-8")
    written = []
    for src, text in pages.items():
        target = out / f"{src.stem}.html"
        target.write_text(text, encoding="utf-8")
        written.append(target)
    items = "\n".join(
        f'<li><a href="{p.stem}.html">Session {d.meta.get("session")}: '
        f"{html.escape(d.title)}</a></li>"
        for p, d in zip(sources, decks)
    )
    (out / "index.html").write_text(INDEX.format(items=items), encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.slides",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--decks", type=Path, default=ROOT / "slides")
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument(
        "--reveal", type=Path, required=True, help="reveal.js (fetch-reveal)"
    )
    parser.add_argument(
        "--mathjax", type=Path, default=ROOT / "book" / "_mathjax" / "mathjax"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "slides")
    args = parser.parse_args(argv)
    try:
        written = build(args.decks, args.html, args.reveal, args.mathjax, args.out)
    except DeckError as exc:
        print(f"slides: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print("wrote", path)
    print(f"{len(written)} decks in {args.out} (open {args.out / 'index.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
