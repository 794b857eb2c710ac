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
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import re
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
    args = parser.parse_args(argv)
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
