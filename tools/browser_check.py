"""Open every page of the built book in a real browser and check what a reader sees.

Run after ``make book`` (``make test-browser`` does both the install and the run)::

    python tools/browser_check.py _build/html --screens _build/screens

Playwright drives the system Chromium (Debian package ``chromium``; Playwright's own browser
download is not needed). The built book is served over HTTP on loopback, as a reader's web
server would (over ``file://`` the search page's fetches are blocked by the browser).

For every page: no console error, no uncaught exception and no failed request (a response
of 400 or more counts as failed); math typeset by MathJax (``mjx-container`` elements, and no
raw ``$$``, ``\\(``, ``\\[`` or ``{prf:``/``{doc}``/``{ref}``/``{cite}`` left in the visible
text outside code); every image loaded; every exercise's solution dropdown opens; and, read
as a reader in light and dark themes at 1280 and 400 px (``READER_VIEWS``): every caption and
claim chip at WCAG AA contrast, no page wider than the window, and on a chapter page the
verification outside folds at most 5 % and visible code at most 25 % of the words shown
(``READER_FACTS``). Then the
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

On a busy machine every timed wait (loading, typesetting, the search, each screenshot) may
run out of time: a page or deck whose wait times out, or whose browser tab crashes, is tried
again on a fresh tab with a longer time limit (``ATTEMPT_TIMEOUTS_MS``). When every attempt
fails the page fails with one line naming it, for instance ``focus/focus.html: screenshot
timed out 3 times (30 s, 60 s, 90 s)``, and the run goes on to the next page.
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
import urllib.parse
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

# Timed steps and their retries --------------------------------------------------------------
#: the time limit of every timed step (loading, a script, a screenshot) in each attempt at a
#: page, in ms: Playwright's default 30 s is too short for a full-page screenshot of a tall
#: page on a busy 2-core machine, so each retry allows more
ATTEMPT_TIMEOUTS_MS = (30_000, 60_000, 90_000)
#: messages of Playwright errors that mean the tab (or its renderer) died under the step: a
#: fresh tab may well succeed, as after a timeout
_CRASHED = re.compile(
    r"target crashed|page crashed|target page, context or browser has been closed",
    re.IGNORECASE,  # also Playwright's "Navigation failed because page crashed!"
)


def _playwright_errors():
    """Playwright's ``(Error, TimeoutError)``, imported only once a browser is wanted."""
    from playwright.sync_api import Error, TimeoutError

    return Error, TimeoutError


class StepError(Exception):
    """A Playwright error in the named step of one attempt at a check.

    ``retryable`` when trying again on a fresh tab may help: the step timed out or its tab
    crashed. Anything else (a JavaScript error in a check, a refused connection) is a real
    failure of the page and is reported at once.
    """

    def __init__(self, step: str, error: Exception):
        error_class, timeout_class = _playwright_errors()
        self.step = step
        self.error = error
        if isinstance(error, timeout_class):
            self.reason = "timed out"
        elif _CRASHED.search(str(error)):
            self.reason = "lost its tab (crashed or closed)"
        else:
            self.reason = "failed"
        self.retryable = self.reason != "failed"
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        super().__init__(f"{step} {self.reason}: {first_line}")


class CheckGaveUp(Exception):
    """No attempt at a check (or at starting Chromium) succeeded; the message is the
    report's one line for it."""


@contextlib.contextmanager
def step(name: str):
    """Name the Playwright calls of the block in what a failure reports (``screenshot``)."""
    error_class, _ = _playwright_errors()
    try:
        yield
    except error_class as exc:
        raise StepError(name, exc) from exc


def with_retries(name: str, attempt, timeouts_ms=None):
    """The value of ``attempt(timeout_ms)``, tried once per time limit of ``timeouts_ms``
    (``ATTEMPT_TIMEOUTS_MS`` when None) while a step of it times out or loses its tab.

    ``attempt`` should open its own tab, so that a retry does not reuse a wedged one.
    Any other error is raised at once: a real failure is not retried. Raises ``CheckGaveUp``,
    whose message names ``name``, the step and the time limits, when no attempt succeeded.
    """
    error_class, _ = _playwright_errors()
    if timeouts_ms is None:
        timeouts_ms = ATTEMPT_TIMEOUTS_MS  # read here, so that a test can shorten it
    misses: list[tuple[StepError, float]] = []
    for n, timeout_ms in enumerate(timeouts_ms, start=1):
        try:
            return attempt(timeout_ms)
        except StepError as exc:
            failure = exc
        except error_class as exc:  # outside any named step: opening the tab
            failure = StepError("opening a tab", exc)
        if not failure.retryable:
            raise failure
        misses.append((failure, timeout_ms))
        if n < len(timeouts_ms):
            print(
                f"     {name}: {failure.step} {failure.reason} after "
                f"{_seconds(timeout_ms)}; trying again within {_seconds(timeouts_ms[n])}",
                flush=True,
            )
    raise CheckGaveUp(_gave_up_line(name, misses))


def _seconds(ms: float) -> str:
    return f"{ms / 1000:g} s"


def _gave_up_line(name: str, misses: list[tuple[StepError, float]]) -> str:
    """``focus/focus.html: screenshot timed out 3 times (30 s, 60 s, 90 s)``."""
    what = {(f.step, f.reason) for f, _ in misses}
    if len(what) == 1:
        step_name, reason = what.pop()
        limits = ", ".join(_seconds(t) for _, t in misses)
        return f"{name}: {step_name} {reason} {len(misses)} times ({limits})"
    tries = "; ".join(f"{f.step} {f.reason} at {_seconds(t)}" for f, t in misses)
    return f"{name}: gave up after {len(misses)} attempts ({tries})"


def run_check(name: str, attempt) -> dict:
    """The record of ``attempt`` (see ``with_retries``), with the time all its attempts took;
    a failing record whose one problem names ``name`` when it gave up or a step failed."""
    start = time.perf_counter()
    try:
        rec = with_retries(name, attempt)
    except CheckGaveUp as exc:
        rec = {"page": name, "ok": False, "problems": [str(exc)]}
    except StepError as exc:
        rec = {"page": name, "ok": False, "problems": [f"{name}: {exc}"]}
    rec["wall_s"] = round(time.perf_counter() - start, 2)
    return rec


def evaluate_within(page, script: str, arg, timeout_ms: float):
    """``page.evaluate(script, arg)`` with a time limit, which ``evaluate`` lacks (a script
    awaiting MathJax or reveal.js could otherwise hang the run). ``wait_for_function`` runs
    the script once and awaits it; its value must be truthy, or the script runs again."""
    return page.wait_for_function(script, arg=arg, timeout=timeout_ms).json_value()


def load_typeset(page, url: str, timeout_ms: float) -> None:
    """Load ``url`` in ``page`` and wait until MathJax has typeset it and its images are
    decoded (two named steps, each within ``timeout_ms``)."""
    with step("load"):
        page.goto(url, wait_until="load", timeout=timeout_ms)
    with step("math typesetting and images"):
        evaluate_within(page, WAIT_MATH, None, timeout_ms)


def discard_tab(page) -> None:
    """Close a tab, even one that crashed or was closed already."""
    error_class, _ = _playwright_errors()
    with contextlib.suppress(error_class):
        page.close()


def page_name(url: str) -> str:
    """The page's path under the served directory: ``focus/focus.html``."""
    return urllib.parse.urlsplit(url).path.lstrip("/")


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

#: What a reader of a chapter page sees (issue 48). Words of the main element's rendered text
#: (``innerText`` leaves out what a closed ``<details>`` or a hidden toggle hides); the words
#: of verification apparatus outside collapsed elements (issue 48's measure): an open claim
#: chip whole (a failed claim is shown open), the inputs of visible cells that call the ledger
#: or a checker, and ledger tables; apart from it, ``claims``: the one-line summaries of the
#: closed chips (a claim's statement and measured number, which the book shows where the
#: claim is made; a cell's group of chips counts as its line), reported, not bounded; the
#: words of visible code; a page wider than the window; the contrast of every visible caption
#: and claim chip against the background it is drawn on (WCAG 2 relative luminance).
READER_FACTS = """() => {
  const main = document.querySelector("main") || document.body;
  const words = (el) => (el.innerText || "").split(/\\s+/).filter(Boolean).length;
  const shown = (el) => el.offsetParent !== null || el.getClientRects().length > 0;
  const total = words(main);
  let apparatus = 0, claims = 0;
  main.querySelectorAll("details.attnbook-claim").forEach((d) => {
    // a chip inside a cell's group is counted with the group (closed: its summary line)
    if (!shown(d) || d.parentElement.closest("details.attnbook-claim")) return;
    if (d.open) apparatus += words(d);
    else claims += words(d.querySelector("summary"));
  });
  const checks = /ledger\\.(check|record)\\(|exercises\\.(check|hint)\\(/;
  let code = 0;
  main.querySelectorAll("div.cell_input").forEach((c) => {
    if (!shown(c) || c.closest("details:not([open])") || c.closest(".toggle-hidden")) return;
    const n = words(c);
    code += n;
    if (checks.test(c.innerText)) apparatus += n;
  });
  main.querySelectorAll("table.attnbook-ledger").forEach((t) => {
    if (shown(t) && !t.closest("details:not([open])")) apparatus += words(t);
  });
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length >= 3 && (c.length < 4 || c[3] > 0.5)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const lowContrast = [];
  main.querySelectorAll("figcaption, details.attnbook-claim > summary").forEach((el) => {
    if (!shown(el) || !(el.innerText || "").trim()) return;
    const a = lum(rgb(getComputedStyle(el).color).slice(0, 3)), b = lum(background(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) lowContrast.push(`${el.innerText.trim().slice(0, 40)} (${ratio.toFixed(2)})`);
  });
  const overflow = document.documentElement.scrollWidth - window.innerWidth;
  return {total, apparatus, claims, code, lowContrast, overflow,
          theme: document.documentElement.dataset.theme || "light"};
}"""

SET_THEME = """(mode) => {
  document.documentElement.dataset.theme = mode;
  document.documentElement.dataset.mode = mode;
  return true;
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
#: the smallest scale of a chapter figure on a slide: canvas pixels per CSS pixel of the image
#: on the book's page (``data-book-width``; its labels are legible in the book at scale 1 in a
#: 1280-pixel-wide window)
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
    // against its width on the book's page (a 2x PNG is drawn at half its pixel width)
    .map((img) => Math.round(100 * img.offsetWidth
      / (Number(img.dataset.bookWidth) || img.naturalWidth)) / 100);
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
    """Open one deck, run every check on it and screenshot each slide; returns its record.

    A timed-out step opens the deck again on a fresh tab and redoes every slide."""

    def attempt(timeout_ms: float) -> dict:
        page, errors = _open_listening(context)
        try:
            with step("load"):
                page.goto(url, wait_until="load", timeout=timeout_ms)
            with step("deck start (reveal.js, MathJax)"):
                page.wait_for_function(
                    "() => window.deckReady !== undefined", timeout=timeout_ms
                )
                facts = evaluate_within(
                    page, DECK_FACTS, [list(DECK_RAW_MATH), DECK_FORBIDDEN], timeout_ms
                )
            if shots is not None and shots.exists():
                # no screenshot of an earlier, longer deck (or attempt) stays behind
                shutil.rmtree(shots)
            slides = []
            for i in range(facts["slides"]):
                with step(f"slide {i + 1}"):
                    slides.append(evaluate_within(page, SLIDE_FACTS, i, timeout_ms))
                if shots is not None:
                    shots.mkdir(parents=True, exist_ok=True)
                    with step(f"screenshot of slide {i + 1}"):
                        page.screenshot(
                            path=str(shots / f"{i + 1:02d}.jpg"),
                            type="jpeg",
                            quality=75,
                            timeout=timeout_ms,
                        )
            seen = list(errors)  # before closing: a closing tab may abort requests
        finally:
            discard_tab(page)
        return _deck_record(url, facts, slides, seen, min_slides)

    return run_check(page_name(url), attempt)


def _deck_record(
    url: str, facts: dict, slides: list[dict], errors: list[str], min_slides: int
) -> dict:
    """A deck's record from its facts, its slides' facts and the errors of its tab."""
    problems = list(dict.fromkeys(errors))
    for i, rec in enumerate(slides):
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
    }


def check_deck_index(context, url: str, decks: list[str]) -> dict:
    """The list of decks: loads without errors and links every deck."""

    def attempt(timeout_ms: float) -> dict:
        page = context.new_page()
        errors: list[str] = []
        page.on(
            "console",
            lambda m: (
                errors.append(f"console: {m.text}") if m.type == "error" else None
            ),
        )
        page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
        try:
            with step("load"):
                page.goto(url, wait_until="load", timeout=timeout_ms)
            with step("reading the links"):
                links = evaluate_within(
                    page,
                    "() => [...document.querySelectorAll('a')]"
                    ".map(e => e.getAttribute('href'))",
                    None,
                    timeout_ms,
                )
            seen = list(errors)
        finally:
            discard_tab(page)
        problems = seen + [f"no link to {d}" for d in decks if d not in links]
        return {"page": url, "ok": not problems, "problems": problems}

    return run_check(page_name(url), attempt)


def check_decks(slides_dir: Path, screens: Path, chromium: str, min_slides: int) -> int:
    """``--slides``: every deck of ``slides_dir``; writes ``report.json``; the exit status."""
    decks = deck_pages(slides_dir)
    if not decks:
        print(f"no decks in {slides_dir}: run `make slides` first", file=sys.stderr)
        return 2
    start = time.perf_counter()
    records = []
    try:
        with serve(slides_dir) as base, browser(chromium) as b:
            context = b.new_context(viewport={"width": 1280, "height": 720})
            for name in ["index.html"] + decks:
                details = ""
                if name == "index.html":
                    rec = check_deck_index(context, base + name, decks)
                else:
                    shots = screens / name.removesuffix(".html")
                    rec = check_deck(context, base + name, shots, min_slides)
                    details = f"{rec['wall_s']} s"
                    if "slides" in rec:  # not when every attempt timed out
                        details += (
                            f", {rec['slides']} slides, {rec['math']} math, "
                            f"{rec['images']} images"
                        )
                rec["page"] = name
                records.append(rec)
                _print_record(name, rec, details)
            context.close()
    except CheckGaveUp as exc:  # Chromium did not start
        print(f"FAIL {exc}", file=sys.stderr)
        return 1
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
    """A headless Chromium driven by Playwright (the system browser, no sandbox).

    Its start is retried like any timed step; raises ``CheckGaveUp`` when it does not start
    (``main`` reports that in one line)."""
    from playwright.sync_api import sync_playwright

    def launch(timeout_ms: float):
        with step("start"):
            return p.chromium.launch(
                executable_path=executable, args=["--no-sandbox"], timeout=timeout_ms
            )

    with sync_playwright() as p:
        try:
            b = with_retries(executable, launch)
        except StepError as exc:  # no such file, say: no use trying again
            raise CheckGaveUp(f"{executable}: {exc}") from exc
        try:
            yield b
        finally:
            b.close()


def check_page(context, url: str, shot: Path | None) -> dict:
    """Load one page and run every check on it; returns the page's record.

    A timed-out step loads the page again on a fresh tab and redoes every check."""

    def attempt(timeout_ms: float) -> dict:
        page, errors = _open_listening(context)
        try:
            load_typeset(page, url, timeout_ms)
            with step("reading the page"):
                facts = evaluate_within(page, PAGE_FACTS, list(RAW_MARKUP), timeout_ms)
            with step("reading as a reader"):
                reader = read_as_reader(page, timeout_ms)
            with step("opening the solutions"):
                closed = evaluate_within(page, OPEN_SOLUTIONS, None, timeout_ms)
            if shot is not None:
                shot.parent.mkdir(parents=True, exist_ok=True)
                with step("screenshot"):
                    evaluate_within(
                        page,
                        "() => { window.scrollTo(0, 0); return true; }",
                        None,
                        timeout_ms,
                    )
                    page.screenshot(
                        path=str(shot),
                        full_page=True,
                        type="jpeg",
                        quality=70,
                        timeout=timeout_ms,
                    )
            seen = list(errors)  # before closing: a closing tab may abort requests
        finally:
            discard_tab(page)
        return _page_record(url, facts, closed, seen, reader)

    return run_check(page_name(url), attempt)


#: the widths and themes a page is read in: a laptop and a phone, light and dark
READER_VIEWS = (("light", 1280), ("dark", 1280), ("dark", 400), ("light", 400))
#: on a chapter page, verification outside folds and visible code, as shares of the words a
#: reader sees (issue 48: "≤ 5 %" and "≤ 25 %")
APPARATUS_MAX, CODE_MAX = 0.05, 0.25
#: pages of the parts that are not chapters (a part's front page, its findings)
NOT_CHAPTERS = ("index", "findings")


def read_as_reader(page, timeout_ms: float) -> dict:
    """:data:`READER_FACTS` in each of :data:`READER_VIEWS`, on the loaded page (the theme
    and the window changed in place: no reload); the page is left light at 1280 px."""
    views = {}
    try:
        for theme, width in READER_VIEWS:
            page.set_viewport_size({"width": width, "height": 900})
            evaluate_within(page, SET_THEME, theme, timeout_ms)
            views[f"{theme} {width}"] = evaluate_within(
                page, READER_FACTS, None, timeout_ms
            )
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})
        evaluate_within(page, SET_THEME, "light", timeout_ms)
    return views


def is_chapter(url: str) -> bool:
    """A chapter of a part (its page carries the chapter's cells), not a front page."""
    parts = page_name(url).removesuffix(".html").split("/")
    return (
        len(parts) == 3
        and parts[0] == "book"
        and parts[1] in ("foundations", "focus", "copyhead", "pde")
        and parts[2] not in NOT_CHAPTERS
    )


def reader_problems(url: str, views: dict) -> list[str]:
    """What a reader would trip over, from :func:`read_as_reader`'s facts."""
    problems = []
    for view, f in views.items():
        if f["lowContrast"]:
            problems.append(
                f"{view}: text below WCAG AA contrast: {f['lowContrast'][:3]}"
            )
        if f["overflow"] > 1:
            problems.append(
                f"{view}: the page is {f['overflow']} px wider than the window"
            )
    first = views.get("light 1280")
    if first and is_chapter(url) and first["total"]:
        for what, limit in (("apparatus", APPARATUS_MAX), ("code", CODE_MAX)):
            share = first[what] / first["total"]
            if share > limit:
                problems.append(
                    f"{what} is {share:.0%} of the visible words (at most {limit:.0%})"
                )
    return problems


def _page_record(
    url: str,
    facts: dict,
    closed: list[str],
    errors: list[str],
    reader: dict | None = None,
) -> dict:
    """A page's record from its facts, its solutions left closed, its tab's errors and what
    it shows a reader (:func:`read_as_reader`)."""
    problems = list(dict.fromkeys(errors))  # a resource retried is reported once
    problems += reader_problems(url, reader or {})
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
        "reader": reader or {},
    }


#: true once the search page lists a result or has said that it found none (Sphinx's
#: searchtools.js writes the summary line when the search is over)
SEARCH_DONE = """() => {
  const results = document.querySelectorAll("#search-results ul.search li").length;
  const summary = document.querySelector("#search-results p.search-summary");
  return results > 0 || Boolean(summary && summary.textContent.trim());
}"""


def check_search(context, base: str, term: str, expect: str) -> dict:
    """Search for ``term``: the results must list a page whose title contains ``expect``."""

    def attempt(timeout_ms: float) -> dict:
        page = context.new_page()
        try:
            with step("load"):
                page.goto(
                    f"{base}search.html?q={term}", wait_until="load", timeout=timeout_ms
                )
            with step("search results"):
                page.wait_for_function(SEARCH_DONE, timeout=timeout_ms)
                titles = evaluate_within(
                    page,
                    "() => [...document.querySelectorAll('#search-results ul.search li a')]"
                    ".map(e => e.textContent)",
                    None,
                    timeout_ms,
                )
        finally:
            discard_tab(page)
        problems = []
        if not titles:
            problems.append(f"search for {term!r} found nothing")
        elif not any(expect.lower() in t.lower() for t in titles):
            problems.append(
                f"search for {term!r} did not list {expect!r}: {titles[:5]}"
            )
        return {
            "page": f"search: {term}",
            "ok": not problems,
            "problems": problems,
            "results": len(titles),
        }

    rec = run_check(f"search: {term}", attempt)
    rec.setdefault("results", 0)  # it gave up: no result seen
    return rec


def redirect_target(path: Path) -> str | None:
    """The target of a redirect page (``<meta http-equiv="Refresh" ...>`` only), else None."""
    text = path.read_text(encoding="utf-8", errors="replace")[:500]
    match = re.match(
        r'\s*<meta http-equiv="Refresh" content="0; url=([^"]+)"', text, re.I
    )
    return match.group(1) if match else None


def screen_name(page: str) -> str:
    return page.removesuffix(".html").replace("/", "__") + ".jpg"


def _check_book(args, pages: list[str], records: list[dict]) -> None:
    """Check every page of ``pages`` and the search, appending their records to ``records``."""
    with serve(args.html) as base, browser(args.chromium) as b:
        context = b.new_context(viewport={"width": 1280, "height": 900})
        for rel in pages:
            target = redirect_target(args.html / rel)
            if target is not None:
                ok = (args.html / rel).parent.joinpath(target).is_file()
                problems = [] if ok else [f"redirect to a missing page: {target}"]
                records.append({"page": rel, "ok": ok, "problems": problems})
                _print_record(rel, records[-1], f"redirect to {target}")
                continue
            rec = check_page(context, base + rel, args.screens / screen_name(rel))
            rec["page"] = rel
            records.append(rec)
            details = f"{rec['wall_s']} s"
            if "math" in rec:  # not when every attempt timed out
                details += (
                    f", {rec['math']} math, {rec['images']} images, "
                    f"{rec['solutions']} solutions"
                )
                first = rec["reader"].get("light 1280")
                if first and first["total"] and is_chapter(base + rel):
                    details += (
                        f", apparatus {first['apparatus'] / first['total']:.1%}, "
                        f"claim lines {first.get('claims', 0) / first['total']:.1%}, "
                        f"code {first['code'] / first['total']:.1%}"
                    )
            _print_record(rel, rec, details)
        rec = check_search(context, base, args.term, args.expect)
        records.append(rec)
        _print_record(rec["page"], rec, f"{rec['results']} results")
        context.close()


def _print_record(name: str, rec: dict, details: str = "") -> None:
    """``ok   name (details)`` or ``FAIL name (details)``, then one line per problem."""
    mark = "ok  " if rec["ok"] else "FAIL"
    # flushed: under make, a slow run shows how far it got
    print(f"{mark} {name}" + (f" ({details})" if details else ""), flush=True)
    for problem in rec["problems"]:
        print(f"     {problem}")


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
    try:
        _check_book(args, pages, records)
    except CheckGaveUp as exc:  # Chromium did not start
        print(f"FAIL {exc}", file=sys.stderr)
        return 1
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
