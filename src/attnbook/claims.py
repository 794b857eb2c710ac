"""The claims ledger: every checkable statement of the book, asserted where it is made.

A chapter opens a :class:`Ledger` and states each claim with :meth:`Ledger.check`, giving the
measured number and what the theory expects (a value with a tolerance, or bounds). The check

* asserts the claim (raising :class:`ClaimFailed`, an ``AssertionError``, so nbval and the book
  build fail when a claim fails),
* shows the claim with its measured value on the page, and
* records it in a JSON file, one per chapter, that the ledger page of the book collects.

Records are written to ``$ATTNBOOK_LEDGER_DIR`` when set, else to ``_build/ledger/`` beside the
book's ``_toc.yml`` (found by walking up from the working directory), else to a per-user cache
folder (e.g. on Colab). They are plain JSON: nothing is ever unpickled.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import html
import json
import math
import numbers
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "Claim",
    "ClaimFailed",
    "Ledger",
    "find_book_root",
    "ledger_dir",
    "load_records",
    "chapter_source",
    "ledger_table_html",
    "SOURCES",
]

#: Where a claim comes from: the paper's summary, our reconstruction, or a derivation in the book.
SOURCES = ("seed", "reconstructed", "derived", "measured")


class ClaimFailed(AssertionError):
    """A claim of the book did not hold for the measured value."""


def _to_float(value, name: str) -> float:
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, (bool, np.bool_)):
        return float(bool(value))
    if not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a real scalar (float, int, bool, 0-d array), "
            f"got {type(value).__name__}"
        )
    return float(value)


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    if x == 0 or (1e-3 <= abs(x) < 1e5):
        return f"{x:.6g}"
    return f"{x:.3e}"


@dataclass
class Claim:
    """One checked claim: what was stated, what was measured, and whether it held."""

    id: str
    statement: str
    measured: float
    passed: bool
    expected: float | None = None
    rtol: float | None = None
    atol: float | None = None
    lower: float | None = None
    upper: float | None = None
    source: str = "derived"
    note: str | None = None
    chapter: str | None = None
    checked_at: str = ""

    def criterion(self) -> str:
        """The test applied, in words: ``≈ 0.0798 (rtol 0.001)``, ``≤ 1e-06``, ``∈ [a, b]``."""
        parts = []
        if self.expected is not None:
            tol = []
            if self.rtol:
                tol.append(f"rtol {_fmt(self.rtol)}")
            if self.atol:
                tol.append(f"atol {_fmt(self.atol)}")
            if tol:
                parts.append(f"≈ {_fmt(self.expected)} ({', '.join(tol)})")
            else:
                parts.append(f"= {_fmt(self.expected)}")
        if self.lower is not None and self.upper is not None:
            parts.append(f"∈ [{_fmt(self.lower)}, {_fmt(self.upper)}]")
        elif self.lower is not None:
            parts.append(f"≥ {_fmt(self.lower)}")
        elif self.upper is not None:
            parts.append(f"≤ {_fmt(self.upper)}")
        return "; ".join(parts)

    def _repr_html_(self) -> str:
        mark, colour = ("✔", "#1a7f37") if self.passed else ("✘", "#cf222e")
        return (
            f'<div class="attnbook-claim" style="border-left:4px solid {colour};'
            f'padding:2px 8px;margin:4px 0"><b style="color:{colour}">{mark} claim</b> '
            f"<code>{html.escape(self.id)}</code> — {html.escape(self.statement)}<br>"
            f"measured <b>{html.escape(_fmt(self.measured))}</b>, expected "
            f"{html.escape(self.criterion())} <i>[{html.escape(self.source)}]</i></div>"
        )

    def _ipython_display_(self) -> None:
        # shown once: by Ledger.check when it is made, not again as a cell's result
        if getattr(self, "_displayed", False):
            return
        from IPython.display import display

        self._displayed = True
        display({"text/html": self._repr_html_(), "text/plain": repr(self)}, raw=True)

    def __repr__(self) -> str:
        mark = "PASS" if self.passed else "FAIL"
        return (
            f"[{mark}] {self.id}: {self.statement} — measured {_fmt(self.measured)}, "
            f"expected {self.criterion()} [{self.source}]"
        )


def _show(claim: Claim) -> None:
    """Display a claim on the page when running inside IPython (a notebook or the book build)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with the book's toolchain
        return
    if get_ipython() is not None:
        claim._ipython_display_()


def find_book_root(start: str | os.PathLike | None = None) -> Path | None:
    """The nearest folder at or above ``start`` (default: the working directory) holding ``_toc.yml``."""
    here = Path(start or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_toc.yml").is_file():
            return folder
    return None


def ledger_dir(create: bool = True) -> Path:
    """Folder the ledger's JSON records go to (see the module docstring)."""
    env = os.environ.get("ATTNBOOK_LEDGER_DIR")
    if env:
        path = Path(env)
    else:
        root = find_book_root()
        if root is not None:
            path = root / "_build" / "ledger"
        else:
            path = (
                Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                / "attnbook"
                / "ledger"
            )
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def chapter_source(chapter: str, root: Path | None = None) -> Path | None:
    """The MyST source ``book/<chapter>.md`` of a chapter id, or None outside a checkout."""
    root = find_book_root() if root is None else root
    if root is None:
        return None
    return root / "book" / f"{chapter}.md"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Ledger:
    """The claims of one chapter.

    Parameters
    ----------
    chapter:
        The chapter's path under ``book/`` without suffix, e.g. ``"foundations/attention-maps"``.
        Inside a checkout it must name an existing file (a typo is an error, not a lost record).
    title:
        The chapter's title, shown on the ledger page.
    directory:
        Where to write the record (default :func:`ledger_dir`).
    """

    def __init__(
        self,
        chapter: str,
        *,
        title: str | None = None,
        directory: str | os.PathLike | None = None,
    ):
        if (
            not isinstance(chapter, str)
            or not chapter
            or chapter.startswith("/")
            or ".." in chapter
        ):
            raise ValueError(
                f"chapter must be a relative path under book/ such as "
                f"'foundations/attention-maps', got {chapter!r}"
            )
        self.chapter = chapter
        self.title = title or chapter
        self.claims: list[Claim] = []
        self._t0 = time.perf_counter()
        src = chapter_source(chapter)
        if src is not None and not src.is_file():
            raise ValueError(f"chapter {chapter!r} has no source file {src}")
        self.source_sha256 = _sha256(src) if src is not None else None
        self.path = Path(directory or ledger_dir()) / (
            chapter.replace("/", "__") + ".json"
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self._write()  # a fresh record: re-executing a chapter replaces its claims

    def check(
        self,
        claim_id: str,
        statement: str,
        measured,
        *,
        expected=None,
        rtol: float | None = None,
        atol: float | None = None,
        lower=None,
        upper=None,
        source: str = "derived",
        note: str | None = None,
    ) -> Claim:
        """Assert a claim, show it and record it.

        The claim holds when every criterion given holds: ``|measured − expected| ≤ atol + rtol·|expected|``
        (with ``expected``; default tolerance ``rtol = 1e-9`` if neither is given),
        ``measured ≥ lower`` and ``measured ≤ upper``. At least one criterion is required.
        Raises :class:`ClaimFailed` when it does not hold (after recording it as failed).
        """
        if not isinstance(claim_id, str) or not claim_id.strip():
            raise ValueError("claim_id must be a non-empty string")
        if any(c.id == claim_id for c in self.claims):
            raise ValueError(
                f"claim_id {claim_id!r} is used twice in chapter {self.chapter!r}"
            )
        if not isinstance(statement, str) or not statement.strip():
            raise ValueError("statement must be a non-empty string")
        if source not in SOURCES:
            raise ValueError(f"unknown source {source!r}; expected one of {SOURCES}")
        value = _to_float(measured, "measured")
        exp = None if expected is None else _to_float(expected, "expected")
        lo = None if lower is None else _to_float(lower, "lower")
        hi = None if upper is None else _to_float(upper, "upper")
        if exp is None and lo is None and hi is None:
            raise ValueError("give expected, lower or upper: a claim needs a criterion")
        for tol, name in ((rtol, "rtol"), (atol, "atol")):
            if tol is not None and (not isinstance(tol, numbers.Real) or tol < 0):
                raise ValueError(f"{name} must be a non-negative number, got {tol!r}")
        if exp is not None and rtol is None and atol is None:
            rtol = 1e-9
        ok = math.isfinite(value)
        if exp is not None:
            ok = ok and abs(value - exp) <= (atol or 0.0) + (rtol or 0.0) * abs(exp)
        if lo is not None:
            ok = ok and value >= lo
        if hi is not None:
            ok = ok and value <= hi
        claim = Claim(
            id=claim_id,
            statement=statement,
            measured=value,
            passed=bool(ok),
            expected=exp,
            rtol=rtol,
            atol=atol,
            lower=lo,
            upper=hi,
            source=source,
            note=note,
            chapter=self.chapter,
            checked_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        )
        self.claims.append(claim)
        self._write()
        _show(claim)
        if not claim.passed:
            raise ClaimFailed(repr(claim))
        return claim

    def _write(self) -> None:
        import torch  # imported late: the ledger itself needs no torch

        record = {
            "chapter": self.chapter,
            "title": self.title,
            "source_sha256": self.source_sha256,
            "started": self.started,
            "elapsed_s": round(time.perf_counter() - self._t0, 3),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "device": "cuda" if torch.cuda.is_available() else "cpu",
            "executor": os.environ.get("ATTNBOOK_EXECUTOR", "notebook"),
            "claims": [asdict(c) for c in self.claims],
        }
        # a per-process temporary name: concurrent writers never rename each other's file
        tmp = self.path.with_suffix(f".json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
        os.replace(tmp, self.path)

    def _repr_html_(self) -> str:
        return ledger_table_html([self.record()], show_chapter=False)

    def record(self) -> dict:
        """This chapter's record as written to disk."""
        return json.loads(self.path.read_text(encoding="utf-8"))

    @property
    def all_passed(self) -> bool:
        return bool(self.claims) and all(c.passed for c in self.claims)


def load_records(directory: str | os.PathLike | None = None) -> list[dict]:
    """Every chapter record in the ledger folder, sorted by chapter id."""
    folder = Path(directory) if directory is not None else ledger_dir(create=False)
    if not folder.is_dir():
        return []
    records = []
    for path in sorted(folder.glob("*.json")):
        try:
            records.append(json.loads(path.read_text(encoding="utf-8")))
        except json.JSONDecodeError as exc:
            raise ValueError(f"ledger record {path} is not valid JSON: {exc}") from None
    return records


def ledger_table_html(
    records: list[dict], *, show_chapter: bool = True, stale: set[str] | None = None
) -> str:
    """An HTML table of the claims in ``records``: one row per claim, grouped by chapter."""
    stale = stale or set()
    cell = 'style="padding:3px 6px;vertical-align:top"'
    head = (
        f"<tr><th {cell}>claim</th><th {cell}>measured</th><th {cell}>expected</th>"
        f"<th {cell}>source</th><th {cell}>status</th></tr>"
    )
    rows = []
    for rec in records:
        is_stale = rec["chapter"] in stale
        if show_chapter:
            extra = (
                " — <i>stale: the chapter changed after these claims were recorded</i>"
                if is_stale
                else ""
            )
            rows.append(
                f'<tr><td colspan="5" {cell}><b>{html.escape(rec.get("title", rec["chapter"]))}'
                f"</b> <code>{html.escape(rec['chapter'])}</code>{extra}</td></tr>"
            )
        for c in rec["claims"]:
            claim = Claim(**c)
            ok = claim.passed and not is_stale
            status = ("✔ pass" if claim.passed else "✘ FAIL") + (
                " (stale)" if is_stale else ""
            )
            colour = "#1a7f37" if ok else "#cf222e"
            rows.append(
                f"<tr><td {cell}><code>{html.escape(claim.id)}</code><br>{html.escape(claim.statement)}</td>"
                f"<td {cell}>{html.escape(_fmt(claim.measured))}</td>"
                f"<td {cell}>{html.escape(claim.criterion())}</td>"
                f"<td {cell}>{html.escape(claim.source)}</td>"
                f'<td {cell} style="color:{colour};white-space:nowrap">{status}</td></tr>'
            )
    return (
        '<table class="attnbook-ledger" style="font-size:0.85em;border-collapse:collapse">'
        + head
        + "".join(rows)
        + "</table>"
    )
