"""Open every page of the built book in a real browser and check what a reader sees.

Run after ``make book`` (``make test-browser`` does both the install and the run)::

    python tools/browser_check.py _build/html --screens _build/screens

Playwright drives the system Chromium (Debian package ``chromium``; Playwright's own browser
download is not needed). The built book is served over HTTP on loopback, as a reader's web
server would (over ``file://`` the search page's fetches are blocked by the browser).

For every page: no console error, no uncaught exception and no failed request (a response
of 400 or more counts as failed); math typeset by MathJax (``mjx-container`` elements, and no
raw ``$$``, ``\\(``, ``\\[`` or ``{prf:``/``{doc}``/``{ref}``/``{cite}`` left in the visible
text outside code); every image loaded; every exercise's solution dropdown opens. Then the
search page must find a known term. A full-page screenshot of each page is saved under
``--screens`` with a ``report.json`` listing each page's checks; the exit status is 1 when
any page fails.

With ``--slides`` the directory is the slide decks of ``make slides`` (``_build/slides``), and
every ``session-N.html`` there is opened instead::

    python tools/browser_check.py --slides _build/slides --screens _build/screens-slides

For every deck: reveal.js initialised, at least ``--min-slides`` slides (and as many as the
deck declares), no console error and no failed request (everything is served locally), every
image loaded, every math element typeset and no raw ``$``, ``\\(`` or ``\\[`` left in the text,
no slide taller or wider than the 1280 x 720 canvas, every figure at least ``FIGURE_MIN_SCALE`` of its size in the book, and
no "Solution" or "Expected answers" anywhere. A screenshot of every slide, at 1280 x 720, goes
under ``--screens``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import re
import shutil
import sys
import threading
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
SKIP_DIRS = {"_static", "_sources", "_images", "_downloads", "screens"}
RAW_MARKUP = (
    "$$",
    "\\(",
    "\\[",
    "{prf:",
    "{doc}",
    "{ref}",
    "{cite}",
    "{eq}",
    "{numref}",
)

# JavaScript run in the page once it has loaded --------------------------------------------
WAIT_MATH = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  await Promise.all([...document.images].map((img) => {
    img.loading = "eager";
    return img.decode().catch(() => null);
  }));
  return true;
}"""

PAGE_FACTS = """(raw) => {
  const main = document.querySelector("main") || document.body;
  const clone = main.cloneNode(true);
  clone.querySelectorAll("pre, code, script, style, mjx-container, .MathJax, textarea")
       .forEach((el) => el.remove());
  const text = clone.textContent;
  const leftovers = raw.filter((m) => text.includes(m));
  const mathNodes = main.querySelectorAll("span.math, div.math").length;
  const typeset = main.querySelectorAll("mjx-container").length;
  const broken = [...document.images]
    .filter((img) => !(img.complete && img.naturalWidth > 0))
    .map((img) => img.getAttribute("src"));
  return {leftovers, mathNodes, typeset, images: document.images.length, broken,
          solutions: document.querySelectorAll("div.solution.dropdown").length,
          exercises: document.querySelectorAll("div.exercise").length};
}"""

OPEN_SOLUTIONS = """async () => {
  const items = [...document.querySelectorAll("div.solution.dropdown")];
  const closed = [];
  for (const item of items) {
    const title = item.querySelector(":scope > .admonition-title");
    if (title) title.click();
  }
  await new Promise((r) => setTimeout(r, 400));
  for (const item of items) {
    const body = [...item.children].filter((c) => !c.classList.contains("admonition-title"));
    const shown = !item.classList.contains("toggle-hidden")
      && body.length > 0 && body.every((c) => c.offsetHeight > 0);
    if (!shown) closed.push(item.id || "(no id)");
  }
  return closed;
}"""


# slide decks (``--slides``) ---------------------------------------------------------------
#: text no deck may show: the session pages keep their answers in a dropdown of that name
DECK_FORBIDDEN = r"\bsolutions?\b|expected answers?"
#: the smallest scale of a chapter figure on a slide: canvas pixels per pixel of the book's
#: image (its labels are legible in the book at scale 1 in a 1280-pixel-wide window)
FIGURE_MIN_SCALE = 0.6
DECK_RAW_MATH = ("$", "\\(", "\\)", "\\[", "\\]")

DECK_FACTS = """async ([raw, forbidden]) => {
  await window.deckReady;
  await Promise.all([...document.images].map((img) => img.decode().catch(() => null)));
  const deck = document.querySelector(".reveal .slides");
  const clone = deck.cloneNode(true);
  clone.querySelectorAll("pre, code, script, style, mjx-container, .MathJax")
       .forEach((el) => el.remove());
  const text = clone.textContent;
  const math = [...deck.querySelectorAll(".math")];
  const broken = [...document.images]
    .filter((img) => !(img.complete && img.naturalWidth > 0))
    .map((img) => img.getAttribute("src"));
  const shown = document.body.textContent;
  return {
    ready: Reveal.isReady(),
    slides: Reveal.getTotalSlides(),
    declared: Number(deck.dataset.slides),
    height: Reveal.getConfig().height,
    width: Reveal.getConfig().width,
    leftovers: raw.filter((m) => text.includes(m)),
    math: math.length,
    untypeset: math.filter((el) => !el.querySelector("mjx-container")).length,
    images: document.images.length,
    broken,
    forbidden: (shown.match(new RegExp(forbidden, "gi")) || []),
  };
}"""

SLIDE_FACTS = """async (i) => {
  Reveal.slide(i);
  Reveal.layout();
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const s = Reveal.getCurrentSlide();
  const title = (s.querySelector("h1, h2") || {}).textContent || "";
  const figures = [...s.querySelectorAll("img.chapter-figure")]
    .map((img) => Math.round(100 * img.offsetWidth / img.naturalWidth) / 100);
  return {title, height: s.scrollHeight, width: s.scrollWidth, figures};
}"""


def deck_pages(slides_dir: Path) -> list[str]:
    """The decks of ``make slides``: ``session-N.html``, in session order."""
    found = [
        p.name for p in Path(slides_dir).glob("session-*.html") if p.stem[8:].isdigit()
    ]
    return sorted(found, key=lambda n: int(n[8:-5]))


def _open_listening(context):
    """A new page whose console errors, uncaught exceptions, failed requests and HTTP errors
    are collected in the returned list (what every check of a page or deck fails on)."""
    page = context.new_page()
    errors: list[str] = []
    page.on(
        "console",
        lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda e: errors.append(f"exception: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.on(
        "response",
        lambda r: (
            errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None
        ),
    )
    return page, errors


def check_deck(context, url: str, shots: Path | None, min_slides: int = 6) -> dict:
    """Open one deck, run every check on it and screenshot each slide; returns its record."""
    page, errors = _open_listening(context)
    start = time.perf_counter()
    page.goto(url, wait_until="load")
    problems: list[str] = []
    try:
        page.wait_for_function("() => window.deckReady !== undefined", timeout=15000)
        facts = page.evaluate(DECK_FACTS, [list(DECK_RAW_MATH), DECK_FORBIDDEN])
    except Exception as exc:  # reveal.js or MathJax never came up
        page.close()
        return {"page": url, "ok": False, "problems": [f"deck not ready: {exc}"]}
    if shots is not None and shots.exists():
        shutil.rmtree(shots)  # no screenshot of an earlier, longer deck stays behind
    slides = []
    for i in range(facts["slides"]):
        rec = page.evaluate(SLIDE_FACTS, i)
        slides.append(rec)
        where = f"slide {i + 1} ({rec['title'].strip()[:40]!r})"
        if rec["height"] > facts["height"]:
            problems.append(
                f"{where} is {rec['height']} px tall, more than the {facts['height']} "
                "px canvas"
            )
        if rec["width"] > facts["width"]:
            problems.append(
                f"{where} is {rec['width']} px wide, more than the {facts['width']} px "
                "canvas"
            )
        small = [x for x in rec["figures"] if x < FIGURE_MIN_SCALE]
        if small:
            problems.append(
                f"{where}: figure shown at {small[0]:.2f} of its size in the book "
                f"(at least {FIGURE_MIN_SCALE}: give it more of the slide)"
            )
        if shots is not None:
            shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(
                path=str(shots / f"{i + 1:02d}.jpg"), type="jpeg", quality=75
            )
    page.close()
    problems[:0] = list(dict.fromkeys(errors))
    if not facts["ready"]:
        problems.append("reveal.js did not initialise")
    if facts["slides"] < min_slides:
        problems.append(f"{facts['slides']} slides, fewer than {min_slides}")
    if facts["slides"] != facts["declared"]:
        problems.append(
            f"{facts['slides']} slides, but the deck has {facts['declared']}"
        )
    if facts["leftovers"]:
        problems.append(f"raw math in the text: {facts['leftovers']}")
    if facts["untypeset"]:
        problems.append(
            f"{facts['untypeset']} of {facts['math']} math elements not typeset"
        )
    if facts["broken"]:
        problems.append(f"images not loaded: {facts['broken']}")
    if facts["forbidden"]:
        problems.append(f"answer text in the deck: {sorted(set(facts['forbidden']))}")
    return {
        "page": url,
        "ok": not problems,
        "problems": problems,
        "slides": facts["slides"],
        "math": facts["math"],
        "images": facts["images"],
        "titles": [s["title"] for s in slides],
        "figure_scale": {s["title"]: s["figures"] for s in slides if s["figures"]},
        "wall_s": round(time.perf_counter() - start, 2),
    }


def check_deck_index(context, url: str, decks: list[str]) -> dict:
    """The list of decks: loads without errors and links every deck."""
    page = context.new_page()
    errors: list[str] = []
    page.on(
        "console",
        lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None,
    )
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.goto(url, wait_until="load")
    links = page.eval_on_selector_all(
        "a", "els => els.map(e => e.getAttribute('href'))"
    )
    page.close()
    problems = errors + [f"no link to {d}" for d in decks if d not in links]
    return {"page": url, "ok": not problems, "problems": problems}


def check_decks(slides_dir: Path, screens: Path, chromium: str, min_slides: int) -> int:
    """``--slides``: every deck of ``slides_dir``; writes ``report.json``; the exit status."""
    decks = deck_pages(slides_dir)
    if not decks:
        print(f"no decks in {slides_dir}: run `make slides` first", file=sys.stderr)
        return 2
    start = time.perf_counter()
    records = []
    with serve(slides_dir) as base, browser(chromium) as b:
        context = b.new_context(viewport={"width": 1280, "height": 720})
        for name in ["index.html"] + decks:
            if name == "index.html":
                rec = check_deck_index(context, base + name, decks)
                print(("ok  " if rec["ok"] else "FAIL") + f" {name}")
            else:
                shots = screens / name.removesuffix(".html")
                rec = check_deck(context, base + name, shots, min_slides)
                print(
                    ("ok  " if rec["ok"] else "FAIL")
                    + f" {name} ({rec.get('wall_s')} s, {rec.get('slides')} slides, "
                    f"{rec.get('math')} math, {rec.get('images')} images)"
                )
            rec["page"] = name
            records.append(rec)
            for p in rec["problems"]:
                print(f"     {p}")
        context.close()
    wall_s = time.perf_counter() - start
    failed = [r for r in records if not r["ok"]]
    screens.mkdir(parents=True, exist_ok=True)
    report = {"decks": len(decks), "failed": len(failed), "wall_s": round(wall_s, 1)}
    report["records"] = records
    (screens / "report.json").write_text(json.dumps(report, indent=1))
    print(
        f"{len(decks)} decks checked in {wall_s:.0f} s, {len(failed)} failing; "
        f"screenshots in {screens}"
    )
    return 1 if failed else 0


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test's output readable
        pass


@contextlib.contextmanager
def serve(root: Path):
    """Serve ``root`` over HTTP on a free loopback port; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def book_pages(html_dir: Path) -> list[str]:
    """Every built HTML page, relative to ``html_dir`` (assets and sources excluded)."""
    pages = []
    for path in sorted(html_dir.rglob("*.html")):
        rel = path.relative_to(html_dir)
        if rel.parts[0] in SKIP_DIRS:
            continue
        pages.append(rel.as_posix())
    return pages


@contextlib.contextmanager
def browser(executable: str = CHROMIUM):
    """A headless Chromium driven by Playwright (the system browser, no sandbox)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


def check_page(context, url: str, shot: Path | None) -> dict:
    """Load one page and run every check on it; returns the page's record."""
    page, errors = _open_listening(context)
    start = time.perf_counter()
    page.goto(url, wait_until="load")
    page.evaluate(WAIT_MATH)
    facts = page.evaluate(PAGE_FACTS, list(RAW_MARKUP))
    closed = page.evaluate(OPEN_SOLUTIONS)
    if shot is not None:
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.evaluate("() => window.scrollTo(0, 0)")
        page.screenshot(path=str(shot), full_page=True, type="jpeg", quality=70)
    page.close()
    problems = list(dict.fromkeys(errors))  # a resource retried is reported once
    if facts["leftovers"]:
        problems.append(f"raw markup in visible text: {facts['leftovers']}")
    if facts["mathNodes"] and not facts["typeset"]:
        problems.append(
            f"{facts['mathNodes']} math elements but none typeset by MathJax"
        )
    if facts["broken"]:
        problems.append(f"images not loaded: {facts['broken']}")
    if closed:
        problems.append(f"solution dropdowns that did not open: {closed}")
    return {
        "page": url,
        "ok": not problems,
        "problems": problems,
        "math": facts["typeset"],
        "images": facts["images"],
        "exercises": facts["exercises"],
        "solutions": facts["solutions"],
        "wall_s": round(time.perf_counter() - start, 2),
    }


def check_search(context, base: str, term: str, expect: str) -> dict:
    """Search for ``term``: the results must list a page whose title contains ``expect``."""
    page = context.new_page()
    page.goto(f"{base}search.html?q={term}", wait_until="load")
    problems = []
    try:
        page.wait_for_function(
            "document.querySelectorAll('#search-results ul.search li').length > 0",
            timeout=15000,
        )
        titles = page.eval_on_selector_all(
            "#search-results ul.search li a", "els => els.map(e => e.textContent)"
        )
    except Exception as exc:  # a timeout: no result at all
        titles = []
        problems.append(f"search for {term!r} found nothing ({type(exc).__name__})")
    if titles and not any(expect.lower() in t.lower() for t in titles):
        problems.append(f"search for {term!r} did not list {expect!r}: {titles[:5]}")
    page.close()
    return {
        "page": f"search: {term}",
        "ok": not problems,
        "problems": problems,
        "results": len(titles),
    }


def redirect_target(path: Path) -> str | None:
    """The target of a redirect page (``<meta http-equiv="Refresh" ...>`` only), else None."""
    text = path.read_text(encoding="utf-8", errors="replace")[:500]
    match = re.match(
        r'\s*<meta http-equiv="Refresh" content="0; url=([^"]+)"', text, re.I
    )
    return match.group(1) if match else None


def screen_name(page: str) -> str:
    return page.removesuffix(".html").replace("/", "__") + ".jpg"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, nargs="?", default=Path("_build/html"))
    parser.add_argument("--screens", type=Path, default=Path("_build/screens"))
    parser.add_argument("--chromium", default=CHROMIUM)
    parser.add_argument(
        "--term", default="condensation", help="a term search must find"
    )
    parser.add_argument("--expect", default="condensation", help="a title it must list")
    parser.add_argument(
        "--slides", type=Path, help="check the slide decks of this directory instead"
    )
    parser.add_argument("--min-slides", type=int, default=6)
    args = parser.parse_args(argv)
    if args.slides is not None:
        return check_decks(args.slides, args.screens, args.chromium, args.min_slides)
    if not (args.html / "search.html").is_file():
        print(f"no built book at {args.html}: run `make book` first", file=sys.stderr)
        return 2
    pages = book_pages(args.html)
    start = time.perf_counter()
    records = []
    with serve(args.html) as base, browser(args.chromium) as b:
        context = b.new_context(viewport={"width": 1280, "height": 900})
        for rel in pages:
            target = redirect_target(args.html / rel)
            if target is not None:
                ok = (args.html / rel).parent.joinpath(target).is_file()
                problems = [] if ok else [f"redirect to a missing page: {target}"]
                records.append({"page": rel, "ok": ok, "problems": problems})
                print(("ok  " if ok else "FAIL") + f" {rel} (redirect to {target})")
                continue
            rec = check_page(context, base + rel, args.screens / screen_name(rel))
            rec["page"] = rel
            records.append(rec)
            mark = "ok  " if rec["ok"] else "FAIL"
            print(
                f"{mark} {rel} ({rec['wall_s']} s, {rec['math']} math, "
                f"{rec['images']} images, {rec['solutions']} solutions)"
            )
            for p in rec["problems"]:
                print(f"     {p}")
        rec = check_search(context, base, args.term, args.expect)
        records.append(rec)
        print(
            ("ok  " if rec["ok"] else "FAIL")
            + f" {rec['page']} ({rec['results']} results)"
        )
        for p in rec["problems"]:
            print(f"     {p}")
        context.close()
    wall_s = time.perf_counter() - start
    failed = [r for r in records if not r["ok"]]
    args.screens.mkdir(parents=True, exist_ok=True)
    report = {
        "pages": len(pages),
        "failed": len(failed),
        "wall_s": round(wall_s, 1),
        "records": records,
    }
    (args.screens / "report.json").write_text(json.dumps(report, indent=1))
    print(
        f"{len(pages)} pages checked in {wall_s:.0f} s, {len(failed)} failing; "
        f"screenshots in {args.screens}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
