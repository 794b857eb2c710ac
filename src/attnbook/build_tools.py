"""Book maintenance: the table of contents, Colab notebooks, MathJax, and checks of the built HTML.

Run as ``python -m attnbook.build_tools COMMAND`` (the Makefile does):

``sync-notebooks``
    write the Colab ``.ipynb`` twin of every notebook chapter from its MyST ``.md`` source;
``check-pairs``
    fail if a twin is missing or out of sync;
``fetch-mathjax --version V --dest DIR``
    put MathJax 3 (from the npm registry) where the book serves it, so math renders offline;
``check-html DIR``
    check a built book: local MathJax present, no missing images, every Colab link names a
    notebook that exists in the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = [
    "toc_files",
    "is_notebook",
    "notebook_chapters",
    "chapter_id",
    "sync_notebooks",
    "check_pairs",
    "fetch_mathjax",
    "check_html",
    "find_root",
]

#: Colab opens a notebook with a GPU runtime when its metadata asks for one.
COLAB_METADATA = {"accelerator": "GPU", "colab": {"provenance": [], "gpuType": "T4"}}


def find_root(start: Path | None = None) -> Path:
    """The repository root: the nearest folder holding ``_toc.yml``."""
    from .claims import find_book_root

    root = find_book_root(start)
    if root is None:
        raise FileNotFoundError(
            "no _toc.yml found here or above: run from inside the repository"
        )
    return root


def toc_files(root: Path | None = None) -> list[Path]:
    """Source files named in ``_toc.yml``, in book order (``.md`` when no suffix is given)."""
    root = find_root() if root is None else Path(root)
    text = (root / "_toc.yml").read_text(encoding="utf-8")
    out = []
    for entry in re.findall(r"^\s*-?\s*(?:file|root):\s*([^\s#]+)", text, flags=re.M):
        p = root / entry
        out.append(p if p.suffix else p.with_suffix(".md"))
    return out


def is_notebook(path: Path) -> bool:
    """A MyST markdown file whose front matter has a kernelspec is an executable chapter."""
    text = Path(path).read_text(encoding="utf-8")
    if not text.startswith("---"):
        return False
    return "kernelspec:" in text[3:].split("\n---", 1)[0]


def notebook_chapters(root: Path | None = None) -> list[Path]:
    """The executable chapters of the table of contents, in order."""
    return [p for p in toc_files(root) if p.is_file() and is_notebook(p)]


def chapter_id(path: Path, root: Path | None = None) -> str:
    """``book/foundations/attention-maps.md`` → ``foundations/attention-maps`` (the ledger's id)."""
    root = find_root() if root is None else Path(root)
    rel = Path(path).resolve().relative_to((root / "book").resolve())
    return rel.with_suffix("").as_posix()


def _twin(md: Path):
    import jupytext

    nb = jupytext.read(md)
    nb.metadata.update(json.loads(json.dumps(COLAB_METADATA)))
    for i, cell in enumerate(nb.cells):
        # deterministic cell ids: regenerating an unchanged twin changes nothing in git
        cell.id = f"c{i:03d}-{hashlib.sha1(cell.source.encode()).hexdigest()[:8]}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def _cells(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def sync_notebooks(root: Path | None = None) -> list[Path]:
    """Write the ``.ipynb`` twin (no outputs, Colab metadata) of every notebook chapter."""
    import jupytext

    written = []
    for md in notebook_chapters(root):
        jupytext.write(_twin(md), md.with_suffix(".ipynb"), fmt="ipynb")
        written.append(md.with_suffix(".ipynb"))
    return written


def check_pairs(root: Path | None = None) -> list[str]:
    """Problems with the ``.md``/``.ipynb`` pairs (empty when every twin is present and in sync)."""
    import jupytext

    problems = []
    for md in notebook_chapters(root):
        ipynb = md.with_suffix(".ipynb")
        if not ipynb.is_file():
            problems.append(
                f"{md}: no Colab twin {ipynb.name} (run `make sync-notebooks`)"
            )
            continue
        twin = jupytext.read(ipynb)
        if _cells(twin) != _cells(_twin(md)):
            problems.append(
                f"{ipynb}: cells differ from {md.name} (run `make sync-notebooks`)"
            )
        if any(c.get("outputs") for c in twin.cells if c.cell_type == "code"):
            problems.append(f"{ipynb}: holds outputs (the Colab twin must be clean)")
    return problems


# files of MathJax's es5 build that the book serves: the TeX/CHTML component, its fonts, the TeX
# extensions it loads on demand, and the menu's accessibility modules
MATHJAX_PARTS = (
    "tex-chtml.js",
    "output/chtml/fonts/woff-v2/",
    "input/tex/extensions/",
    "a11y/",
    "ui/",
)


def fetch_mathjax(version: str, dest: Path) -> Path:
    """Unpack MathJax ``version`` from the npm registry into ``dest`` (needs ``npm``)."""
    dest = Path(dest)
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            "npm is needed to fetch MathJax for offline math (install Node.js), or "
            "set sphinx.config.mathjax_path in _config.yml to a CDN address"
        )
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [npm, "pack", f"mathjax@{version}", "--silent"],
            cwd=tmp,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        tgz = next(Path(tmp).glob("mathjax-*.tgz"))
        with tarfile.open(tgz) as tar:
            members = [
                m
                for m in tar.getmembers()
                if m.isfile()
                and any(
                    m.name.startswith("package/es5/" + part) for part in MATHJAX_PARTS
                )
            ]
            if not any(m.name == "package/es5/tex-chtml.js" for m in members):
                raise RuntimeError(f"mathjax@{version} has no es5/tex-chtml.js")
            if dest.exists():
                shutil.rmtree(dest)
            for m in members:
                target = dest / m.name[len("package/es5/") :]
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(m) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
    return dest / "tex-chtml.js"


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.scripts, self.anchors = [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img" and a.get("src"):
            self.imgs.append(a["src"])
        elif tag == "script" and a.get("src"):
            self.scripts.append(a["src"])
        elif tag == "a" and a.get("href"):
            self.anchors.append(a["href"])


def check_html(build_dir: Path, root: Path | None = None) -> dict:
    """Check the built HTML book; returns counts and a list of problems."""
    root = find_root() if root is None else Path(root)
    build_dir = Path(build_dir)
    pages = sorted(build_dir.rglob("*.html"))
    if not pages:
        raise FileNotFoundError(
            f"no HTML pages under {build_dir}: build the book first"
        )
    problems, n_img, n_colab, math_pages = [], 0, 0, 0
    for page in pages:
        if "_static" in page.parts or "_sources" in page.parts:
            continue
        parser = _Links()
        text = page.read_text(encoding="utf-8")
        parser.feed(text)
        for src in parser.imgs:
            if urlparse(src).scheme in ("http", "https", "data"):
                continue
            n_img += 1
            if not (page.parent / unquote(src.split("#")[0])).resolve().is_file():
                problems.append(f"{page.relative_to(build_dir)}: missing image {src}")
        for src in parser.scripts:
            if "mathjax" in src.lower():
                math_pages += 1
                if urlparse(src).scheme:
                    problems.append(
                        f"{page.relative_to(build_dir)}: MathJax loaded from {src} (not local)"
                    )
                elif not (page.parent / src.split("?")[0]).resolve().is_file():
                    problems.append(
                        f"{page.relative_to(build_dir)}: MathJax file {src} missing"
                    )
        for href in parser.anchors:
            if "colab.research.google.com" in href:
                n_colab += 1
                m = re.search(r"/blob/[^/]+/(.+)$", href)
                if (
                    not m
                    or not m.group(1).endswith(".ipynb")
                    or not (root / m.group(1)).is_file()
                ):
                    problems.append(
                        f"{page.relative_to(build_dir)}: Colab link {href} names no notebook "
                        f"in the repository"
                    )
    from tools.html_hygiene import check_pages  # warnings, tracebacks, local paths

    problems += check_pages(build_dir, root)
    chapters = notebook_chapters(root)
    return {
        "pages": len(pages),
        "images": n_img,
        "colab_links": n_colab,
        "pages_with_mathjax": math_pages,
        "notebook_chapters": len(chapters),
        "problems": problems,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnbook.build_tools",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sync-notebooks")
    sub.add_parser("check-pairs")
    fm = sub.add_parser("fetch-mathjax")
    fm.add_argument("--version", default="3.2.2")
    fm.add_argument("--dest", type=Path, required=True)
    ch = sub.add_parser("check-html")
    ch.add_argument("build_dir", type=Path)
    args = parser.parse_args(argv)
    if args.command == "sync-notebooks":
        for p in sync_notebooks():
            print("wrote", p)
    elif args.command == "check-pairs":
        problems = check_pairs()
        print("\n".join(problems) or "all notebook twins in sync")
        return 1 if problems else 0
    elif args.command == "fetch-mathjax":
        print("MathJax at", fetch_mathjax(args.version, args.dest))
    elif args.command == "check-html":
        report = check_html(args.build_dir)
        for p in report["problems"]:
            print("PROBLEM:", p)
        print(
            f"checked {report['pages']} pages: {report['images']} images, {report['colab_links']} Colab "
            f"links, MathJax on {report['pages_with_mathjax']} pages (local), "
            f"{report['notebook_chapters']} notebook chapters"
        )
        return 1 if report["problems"] else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
