"""The whole book as one PDF, printed from the built HTML by Chromium.

Run after ``make book`` (``make pdf`` does both the install and the run)::

    python tools/book_pdf.py _build/html --out _build/pdf/attnbook.pdf
    python tools/book_pdf.py _build/html --out _build/pdf/attnbook-student.pdf --no-solutions
    python tools/book_pdf.py check _build/pdf/attnbook.pdf _build/pdf/attnbook-student.pdf

Every page of ``_toc.yml`` is opened in the system Chromium (Playwright, served over HTTP on
loopback), MathJax typesets its math, the exercises' solution dropdowns are opened (or, with
``--no-solutions``, removed), and the page is printed to A4 with the print style below. The
pages are merged with pypdf behind a title page and a table of contents, numbered as one
document, and given a bookmark per part and chapter. Links to other pages of the book are
turned into plain text (they would point at the temporary server). Why this route and not
Sphinx's LaTeX builder: see ``README.md`` (*A printable book*).
"""

from __future__ import annotations

import argparse
import html
import html.parser
import io
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser_check import (  # noqa: E402
    CHROMIUM,
    CheckGaveUp,
    StepError,
    browser,
    discard_tab,
    load_typeset,
    page_name,
    serve,
    step,
    with_retries,
)

MARGIN = {"top": "16mm", "bottom": "18mm", "left": "16mm", "right": "16mm"}

# what a printed chapter shows: the article only, full width, code wrapped, no buttons
PRINT_CSS = """
@page { size: A4; }
html { font-size: 13px; }
.bd-header, .bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary,
.prev-next-area, .bd-footer, .bd-footer-content, footer, .header-article,
.toggle-button, .headerlink, .copybtn, .onlyprint, #pst-back-to-top, .pst-scrollable-table-container + .headerlink,
.search-button__wrapper, .skip-link, .bd-header-announcement { display: none !important; }
.bd-container, .bd-container__inner, .bd-page-width, .bd-main, .bd-content,
.bd-article-container, .bd-article { max-width: 100% !important; width: 100% !important;
  padding: 0 !important; margin: 0 !important; }
pre { white-space: pre-wrap !important; word-break: break-word; font-size: 0.85em !important; }
img { max-width: 100% !important; height: auto !important; }
figure, .cell_output img, .math, mjx-container[display="true"], table,
div.cell_input, div.cell_output, div.admonition { break-inside: avoid; }
/* the theme's print style hides the article's title in favour of its own print header */
.bd-main .bd-content .bd-article h1:first-of-type { display: block !important; }
h1, h2, h3 { break-after: avoid; }
a { color: inherit; text-decoration: none; }
"""

PREPARE = """async ([keepSolutions, base]) => {
  if (!keepSolutions) {
    // the solutions, and the course pages' expected answers (instructor's edition only)
    document.querySelectorAll("div.solution, div.instructor-answers").forEach((el) => el.remove());
  }
  document.querySelectorAll(".headerlink, .onlyprint").forEach((el) => el.remove());
  document.querySelectorAll(".toggle-hidden").forEach((el) => el.classList.remove("toggle-hidden"));
  document.querySelectorAll("details").forEach((el) => { el.open = true; });
  for (const a of [...document.querySelectorAll("a[href]")]) {
    if (a.href.startsWith(base)) {
      const span = document.createElement("span");
      span.innerHTML = a.innerHTML;
      a.replaceWith(span);
    }
  }
  await new Promise((r) => setTimeout(r, 100));
  return document.querySelectorAll("div.solution").length;
}"""


def toc_entries(root: Path) -> list[tuple[str | None, str]]:
    """``(part caption or None, docname)`` for every page of ``_toc.yml``, in reading order."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    entries: list[tuple[str | None, str]] = [(None, toc["root"])]
    for part in toc.get("parts", []):
        for chapter in part.get("chapters", []):
            entries.append((part.get("caption"), chapter["file"]))
            for section in chapter.get("sections", []) or []:
                entries.append((part.get("caption"), section["file"]))
    return entries


def _page_count(pdf_bytes: bytes) -> int:
    from pypdf import PdfReader

    return len(PdfReader(io.BytesIO(pdf_bytes)).pages)


def _print(page, **kw) -> bytes:
    return page.pdf(format="A4", print_background=True, margin=MARGIN, **kw)


def print_chapter(
    context, url: str, base: str, *, solutions: bool
) -> tuple[str, bytes]:
    """Open one built page, prepare it for print and return ``(title, pdf bytes)``. Each try
    is on a fresh tab with its time limit, and a step that times out (or loses its tab, as
    on a busy machine) is tried again (``browser_check.with_retries``); when every try fails,
    ``CheckGaveUp`` names the page and the step."""

    def attempt(timeout_ms: float) -> tuple[str, bytes]:
        page = context.new_page()
        page.set_default_timeout(timeout_ms)
        try:
            load_typeset(page, url, timeout_ms)
            with step("preparing for print"):
                page.add_style_tag(content=PRINT_CSS)
                page.evaluate(PREPARE, [solutions, base])
                page.emulate_media(media="print")
                title = page.evaluate(
                    "() => (document.querySelector('article h1') || {}).textContent"
                    " || document.title"
                )
            with step("printing"):
                data = _print(page, outline=False)
            return title.replace("#", "").strip(), data
        finally:
            discard_tab(page)

    return with_retries(page_name(url), attempt)


def front_matter_html(
    title: str, subtitle: str, rows: list[tuple[str, str, int]]
) -> str:
    """A title page and a table of contents (``rows``: part, chapter title, first page)."""
    lines = []
    last_part = None
    for part, chapter, first in rows:
        if part != last_part and part:
            lines.append(
                f'<tr class="part"><td colspan="2">{html.escape(part)}</td></tr>'
            )
            last_part = part
        lines.append(
            f"<tr><td>{html.escape(chapter)}</td><td class='n'>{first}</td></tr>"
        )
    return f"""<!doctype html><html><head><meta charset="utf-8"><style>
    body {{ font-family: sans-serif; color: #1f2328; }}
    .title {{ height: 240mm; display: flex; flex-direction: column; justify-content: center;
              text-align: center; break-after: page; }}
    .title h1 {{ font-size: 30pt; margin-bottom: 4mm; }} .title p {{ font-size: 13pt; }}
    table {{ width: 100%; border-collapse: collapse; font-size: 11pt; }}
    td {{ padding: 1.2mm 0; }} td.n {{ text-align: right; width: 20mm; }}
    tr.part td {{ font-weight: bold; padding-top: 4mm; }}
    </style></head><body>
    <div class="title"><h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p></div>
    <h2>Contents</h2><table>{"".join(lines)}</table></body></html>"""


def numbers_html(n_pages: int, first: int) -> str:
    """``n_pages`` A4 pages, each with only its page number at the bottom (an overlay)."""
    pages = "".join(
        f'<div class="p"><span>{first + i}</span></div>' for i in range(n_pages)
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><style>
    @page {{ size: A4; margin: 0; }} body {{ margin: 0; }}
    .p {{ height: 297mm; position: relative; break-after: page; overflow: hidden; }}
    .p span {{ position: absolute; bottom: 8mm; width: 100%; text-align: center;
               font: 9pt sans-serif; color: #555; }}</style></head><body>{pages}</body></html>"""


def build_pdf(
    html_dir: Path,
    out: Path,
    *,
    solutions: bool = True,
    root: Path | None = None,
    chromium: str = CHROMIUM,
) -> dict:
    """Print every page of the book and merge them into ``out``; returns a summary."""
    from pypdf import PdfReader, PdfWriter

    root = root or Path(__file__).resolve().parent.parent
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    title = config.get("title", "Book")
    edition = "instructor's edition, with solutions" if solutions else "student edition"
    subtitle = f"{config.get('author', '')} · {edition}"
    start = time.perf_counter()
    chapters = []  # (part, title, pdf bytes)
    with serve(html_dir) as base, browser(chromium) as b:
        context = b.new_context(viewport={"width": 1100, "height": 1400})
        for part, docname in toc_entries(root):
            path = html_dir / f"{docname}.html"
            if not path.is_file():
                raise FileNotFoundError(f"{path} is missing: build the book first")
            chapter_title, data = print_chapter(
                context, base + f"{docname}.html", base, solutions=solutions
            )
            chapters.append((part, chapter_title, data))
            print(f"  {docname}: {_page_count(data)} pages")
        page = context.new_page()
        counts = [_page_count(d) for _, _, d in chapters]

        def front(first_pages):
            rows = [(p, t, n) for (p, t, _), n in zip(chapters, first_pages)]
            page.set_content(front_matter_html(title, subtitle, rows))
            return _print(page)

        n_front = _page_count(front([0] * len(chapters)))
        firsts = [n_front + 1 + sum(counts[:i]) for i in range(len(counts))]
        front_pdf = front(firsts)
        total = n_front + sum(counts)
        page.set_content(numbers_html(total, 1))
        numbers = PdfReader(io.BytesIO(page.pdf(format="A4", margin={"top": "0"})))
        context.close()

    writer = PdfWriter()
    for data in [front_pdf] + [d for _, _, d in chapters]:
        writer.append(PdfReader(io.BytesIO(data)))
    for i, p in enumerate(writer.pages):
        if i >= n_front:  # no number on the title page and the contents
            p.merge_page(numbers.pages[i])
        # Chromium's page streams arrive uncompressed after merging: deflate them (3x smaller)
        p.compress_content_streams(level=9)
    parents = {}
    for (part, chapter_title, _), first in zip(chapters, firsts):
        parent = None
        if part:
            if part not in parents:
                parents[part] = writer.add_outline_item(part, page_number=first - 1)
            parent = parents[part]
        writer.add_outline_item(chapter_title, page_number=first - 1, parent=parent)
    writer.add_metadata(
        {"/Title": f"{title} ({edition})", "/Author": config.get("author", "")}
    )
    writer.compress_identical_objects()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.pdf")
    with open(tmp, "wb") as fh:
        writer.write(fh)
    tmp.replace(out)
    wall_s = time.perf_counter() - start
    return {
        "pages": total,
        "chapters": len(chapters),
        "bytes": out.stat().st_size,
        "wall_s": round(wall_s, 1),
        "solutions": solutions,
        "path": str(out),
    }


def _images_of(resources, seen: set) -> int:
    """Image XObjects drawn through ``resources``, also inside form XObjects (once each)."""
    n = 0
    for ref in ((resources or {}).get("/XObject") or {}).values():
        key = getattr(ref, "idnum", None) or id(ref)
        if key in seen:
            continue
        seen.add(key)
        obj = ref.get_object()
        if obj.get("/Subtype") == "/Image":
            n += 1
        elif obj.get("/Subtype") == "/Form":
            n += _images_of(obj.get("/Resources"), seen)
    return n


def _pdf_facts(path: Path) -> dict:
    """Pages, text, images and font families of a printed edition (pypdf)."""
    from pypdf import PdfReader

    reader = PdfReader(str(path))
    text, images, fonts, seen = [], 0, set(), set()
    for page in reader.pages:
        text.append(page.extract_text() or "")
        resources = page.get("/Resources") or {}
        images += _images_of(resources, seen)
        for font in (resources.get("/Font") or {}).values():
            font = font.get_object()
            descriptor = font.get("/FontDescriptor")
            family = descriptor.get_object().get("/FontFamily") if descriptor else None
            # Chromium embeds web fonts (MathJax's among them) as Type 3, named by family
            fonts.add(str(family or font.get("/BaseFont", "")))
    return {
        "pages": len(reader.pages),
        "text": "\n".join(text),
        "images": images,
        "fonts": fonts,
    }


#: TeX that is left in a page's text only where math was not typeset (or shown as code)
TEX_TOKENS = ("\\(", "\\[", "$$", "\\frac", "\\mathrm", "\\lambda", "\\sum")


_VOID = {"img", "br", "hr", "input", "meta", "link", "source", "wbr", "col", "area"}


class _ChapterHTML(html.parser.HTMLParser):
    """The text inside ``<pre>``/``<code>`` (TeX shown as code, legitimately) and the figures
    (``<img>``) of a built page, and which of them sit inside a solution dropdown. An SVG
    figure (a part's story figure) is counted apart: the printer draws it as vector paths,
    not as an image object."""

    def __init__(self):
        super().__init__()
        self.code, self.images, self.solution_images, self.vectors = [], 0, 0, 0
        self._code_depth, self._stack = 0, []

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if tag not in _VOID:
            self._stack.append((tag, "solution" in classes))
        if tag in ("pre", "code"):
            self._code_depth += 1
        # what is printed: the article (the header's logo and the sidebars are not)
        if tag == "img" and any(t == "article" for t, _ in self._stack):
            src = (dict(attrs).get("src") or "").split("?")[0].split("#")[0]
            if src.lower().endswith(".svg"):
                self.vectors += 1
                return
            self.images += 1
            self.solution_images += any(sol for _, sol in self._stack)

    def handle_endtag(self, tag):
        if tag in ("pre", "code"):
            self._code_depth = max(0, self._code_depth - 1)
        if tag not in _VOID:
            # pop to the matching open tag (HTML may leave some unclosed)
            for k in range(len(self._stack) - 1, -1, -1):
                if self._stack[k][0] == tag:
                    del self._stack[k:]
                    break

    def handle_data(self, data):
        if self._code_depth:
            self.code.append(data)


def check_editions(instructor: Path, student: Path, html_dir: Path) -> list[str]:
    """What is wrong with the two printed editions:

    * every chapter of ``_toc.yml`` printed (at least a page each);
    * the math typeset: MathJax's fonts are embedded, and no TeX source is left in the text
      beyond what the built pages show as code (a TeX token counted in the PDF's text may not
      outnumber its occurrences in the pages' ``<pre>``/``<code>``);
    * the figures there: at least as many images as the chapters' raster ``<img>`` (the
      student's edition: those outside solutions; SVGs print as paths, not images);
    * the solutions and the course pages' expected answers in the instructor's edition only.
    """
    facts = {"instructor": _pdf_facts(instructor), "student": _pdf_facts(student)}
    root = Path(__file__).resolve().parent.parent
    pages = [html_dir / f"{d}.html" for _, d in toc_entries(root)]
    problems = [f"no built page {p}" for p in pages if not p.is_file()]
    code_text, figures, solution_figures, vectors = [], 0, 0, 0
    for page in (p for p in pages if p.is_file()):
        parsed = _ChapterHTML()
        parsed.feed(page.read_text(encoding="utf-8"))
        code_text += parsed.code
        figures += parsed.images
        solution_figures += parsed.solution_images
        vectors += parsed.vectors
    code = "".join(code_text)
    expected_images = {"instructor": figures, "student": figures - solution_figures}
    for name, f in facts.items():
        if f["pages"] < len(pages):
            problems.append(f"{name}: {f['pages']} pages for {len(pages)} chapters")
        if not any("MathJax" in font for font in f["fonts"]):
            problems.append(f"{name}: no MathJax font embedded (math not typeset)")
        for tex in TEX_TOKENS:
            n_pdf, n_code = f["text"].count(tex), code.count(tex)
            if n_pdf > n_code:
                problems.append(
                    f"{name}: TeX {tex!r} printed {n_pdf} times, shown as code only "
                    f"{n_code} times in the pages (math not typeset)"
                )
        if f["images"] < expected_images[name]:
            problems.append(
                f"{name}: {f['images']} images printed for {expected_images[name]} "
                "figures in the pages"
            )
    solutions = facts["instructor"]["text"].count("Solution to")
    if solutions == 0:
        problems.append("instructor: no solution printed")
    if "Expected answers" not in facts["instructor"]["text"]:
        problems.append(
            "instructor: the course pages' expected answers are not printed"
        )
    for word in ("Solution to", "Expected answers"):
        if word in facts["student"]["text"]:
            problems.append(f"student: {word!r} is printed")
    summary = "; ".join(
        f"{n}: {f['pages']} pages, {f['images']} images, "
        f"{sum('MathJax' in x for x in f['fonts'])} MathJax fonts"
        for n, f in facts.items()
    )
    print(
        f"{summary}; {solutions} solutions in the instructor's; "
        f"{figures} figures in the pages ({solution_figures} in solutions) and {vectors} SVG "
        "figures (printed as paths)"
    )
    return problems


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == [
        "check"
    ]:  # python tools/book_pdf.py check INSTRUCTOR STUDENT [HTML]
        if len(argv) not in (3, 4):
            print("usage: book_pdf.py check INSTRUCTOR.pdf STUDENT.pdf [HTML_DIR]")
            return 2
        instructor, student = Path(argv[1]), Path(argv[2])
        html_dir = Path(argv[3]) if len(argv) > 3 else Path("_build/html")
        problems = check_editions(instructor, student, html_dir)
        for p in problems:
            print("PROBLEM:", p)
        return 1 if problems else 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, nargs="?", default=Path("_build/html"))
    parser.add_argument("--out", type=Path, default=Path("_build/pdf/attnbook.pdf"))
    parser.add_argument(
        "--solutions",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="print the exercises' solutions (default); --no-solutions for students",
    )
    parser.add_argument("--chromium", default=CHROMIUM)
    args = parser.parse_args(argv)
    if not (args.html / "search.html").is_file():
        print(f"no built book at {args.html}: run `make book` first", file=sys.stderr)
        return 2
    try:
        summary = build_pdf(
            args.html, args.out, solutions=args.solutions, chromium=args.chromium
        )
    except (CheckGaveUp, StepError) as exc:  # one line naming the page, not a traceback
        print(f"FAIL {exc}", file=sys.stderr)
        return 1
    print(
        f"{summary['path']}: {summary['pages']} pages, {summary['chapters']} chapters, "
        f"{summary['bytes'] / 1e6:.1f} MB, {summary['wall_s']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
