"""Findings pages: what a part reproduced of its paper, read from the claims ledger.

A findings page is a table with one :class:`Finding` per result of the paper, written in a
YAML file beside the page (``book/<part>/findings.yml``, read by :func:`load_findings`). The
verdict and its reason are written by a person; every number in the "what we measured" column is
filled in from the ledger records of the same build, through placeholders that name a claim:

.. code-block:: yaml

    rows:
    - result: Stage I grows the attention logits at a rate set by the linearisation
      section: summary, stage 1
      measured: rate {focus2.measured-rate} against {focus2.measured-rate|expected}
      verdict: reproduced
      why: the rate of 5 initialisations agrees within its interval
      claims: [focus2.measured-rate]
    own:
    - a result of the book that the paper does not state, with {a-claim}

A placeholder is ``{claim-id}`` (the measured value, with its interval and n for a random
quantity) or ``{claim-id|field}`` with field ``value``, ``expected``, ``interval``, ``n``,
``criterion``, ``null`` or ``runs`` (how many single runs of a claim on samples meet its
criterion: the claim is judged on the interval of the mean). :func:`findings_table_html` refuses (``ValueError``) a placeholder or
a claim id that the records do not hold, and (:class:`~attnbook.claims.ClaimFailed`) a row that
rests on a failed claim: a findings page cannot state a result its own build contradicts.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .claims import Claim, ClaimFailed, _fmt, claim_anchor

__all__ = [
    "VERDICTS",
    "Finding",
    "claims_by_id",
    "fill",
    "check_findings",
    "findings_table_html",
    "findings_glance_html",
    "verdict_counts",
    "VERDICT_COLOURS",
    "robustness",
    "FindingsPage",
    "load_findings",
    "PartFindings",
    "load_part",
    "robustness_table_html",
    "rules_out",
]

#: The four verdicts a row may carry, and nothing else.
VERDICTS = ("reproduced", "reproduced with caveat", "differs", "not tested")

_PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_.\-]+)(?:\|(\w+))?\}")
_FIELDS = ("value", "expected", "interval", "n", "criterion", "null", "runs", "rival")


def _text(value, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must not be empty")
    return value


@dataclass(frozen=True)
class Finding:
    """One row of a findings page: a result of the paper and what the book measured."""

    result: str  # the paper's result, in its own terms
    section: str  # where the paper (or its summary) states it
    measured: str  # what we measured, with {claim-id} placeholders
    verdict: str  # one of VERDICTS
    why: str  # the caveat, the difference, or why it is untested
    claims: tuple[str, ...] = ()

    def __post_init__(self):
        for name in ("result", "section", "measured", "why"):
            _text(getattr(self, name), name)
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {self.verdict!r}")
        if isinstance(self.claims, str) or not all(
            isinstance(c, str) for c in self.claims
        ):
            raise TypeError("claims must be a tuple of claim ids (strings)")
        object.__setattr__(self, "claims", tuple(self.claims))
        if not self.claims and self.verdict != "not tested":
            raise ValueError(
                f"claims: a row with verdict {self.verdict!r} must name the claims it "
                "rests on; only 'not tested' rows may name none"
            )
        used = {m.group(1) for m in _PLACEHOLDER.finditer(self.measured)}
        unnamed = sorted(used - set(self.claims))
        if unnamed:
            raise ValueError(
                f"measured: placeholders {unnamed} name claims missing from claims"
            )


def claims_by_id(records: list[dict]) -> dict[str, tuple[str, Claim]]:
    """``{claim id: (chapter, Claim)}`` over ledger records; an id made twice is refused."""
    out: dict[str, tuple[str, Claim]] = {}
    for rec in records:
        for c in rec["claims"]:
            claim = Claim(**c)
            if claim.id in out and out[claim.id][0] != rec["chapter"]:
                raise ValueError(
                    f"claim id {claim.id!r} is made by {out[claim.id][0]} and "
                    f"{rec['chapter']}: findings name claims by id"
                )
            out[claim.id] = (rec["chapter"], claim)
    return out


def _short(digits: int | None):
    """The number format of a page: the ledger's (``None``) or ``digits`` significant ones."""
    if digits is None:
        return _fmt
    return lambda x: "" if x is None else f"{x:.{digits}g}"


def _optional_field(claim: Claim, name: str, fmt=_fmt) -> str:
    """A field that not every claim has: ``expected``, ``interval`` (samples only),
    ``rival`` or ``runs`` (samples only); ``ValueError`` when this claim has none."""
    if name == "expected":
        if claim.expected is None:
            raise ValueError(f"claim {claim.id!r} has no expected value")
        return fmt(claim.expected)
    if name == "interval":
        if claim.interval is None:
            raise ValueError(f"claim {claim.id!r} has no interval (one number)")
        lo, hi = claim.interval
        return f"[{fmt(lo)}, {fmt(hi)}]"
    if name == "rival":  # what the claim's rival predicts: "0.84 or 1.19"
        if not claim.rival:
            raise ValueError(f"claim {claim.id!r} names no rival")
        return " or ".join(fmt(v) for v in claim.rival)
    runs = claim.runs_meeting()
    if runs is None:
        raise ValueError(f"claim {claim.id!r} has no runs to count (one number)")
    return f"{runs[0]} of {runs[1]}"


def _field(claim: Claim, name: str | None, fmt=_fmt) -> str:
    if name is None:
        if fmt is _fmt:
            return claim.measured_text()
        if claim.interval is None:
            return fmt(claim.measured)
        lo, hi = claim.interval
        return f"{fmt(claim.measured)} [{fmt(lo)}, {fmt(hi)}] (n = {claim.n})"
    if name == "value":
        return fmt(claim.measured)
    if name in ("expected", "interval", "runs", "rival"):
        return _optional_field(claim, name, fmt)
    if name == "n":
        return str(claim.n)
    if name == "criterion":
        return claim.criterion()
    if name == "null":
        return claim.null_text() or "none"
    raise ValueError(f"placeholder field must be one of {_FIELDS}, not {name!r}")


def fill(
    template: str, by_id: dict[str, tuple[str, Claim]], *, digits: int | None = None
) -> str:
    """``template`` with every ``{claim-id}`` / ``{claim-id|field}`` replaced from the ledger
    (``by_id`` from :func:`claims_by_id`); a missing claim raises ``ValueError``, a failed
    one :class:`~attnbook.claims.ClaimFailed`. ``digits``: round every number to that many
    significant digits (default: the ledger's own format)."""
    _text(template, "template")
    if digits is not None and (
        isinstance(digits, bool) or not isinstance(digits, int) or digits < 1
    ):
        raise ValueError(f"digits must be a positive integer or None, got {digits!r}")
    fmt = _short(digits)

    def sub(m: re.Match) -> str:
        cid, name = m.group(1), m.group(2)
        if cid not in by_id:
            raise ValueError(f"no recorded claim {cid!r} in the ledger")
        claim = by_id[cid][1]
        if not claim.passed:
            raise ClaimFailed(f"claim {cid!r} failed in this build")
        return _field(claim, name, fmt)

    return _PLACEHOLDER.sub(sub, template)


def check_findings(findings, records: list[dict]) -> dict[str, tuple[str, Claim]]:
    """Refuse rows whose claims are missing (``ValueError``) or failed (``ClaimFailed``)."""
    if not findings:
        raise ValueError("findings must hold at least one row")
    for f in findings:
        if not isinstance(f, Finding):
            raise TypeError(f"findings must be Finding rows, not {type(f).__name__}")
    by_id = claims_by_id(records)
    missing = sorted({c for f in findings for c in f.claims} - set(by_id))
    if missing:
        raise ValueError(
            f"findings name claims that the ledger does not hold: {missing} "
            "(run the part's chapters first: make test)"
        )
    failed = sorted({c for f in findings for c in f.claims if not by_id[c][1].passed})
    if failed:
        raise ClaimFailed(
            f"findings rest on claims that failed in this build: {failed}"
        )
    return by_id


def findings_table_html(
    findings,
    records: list[dict],
    *,
    ledger_url: str = "../reference/claims-ledger.html",
) -> str:
    """The findings table, with numbers filled from ``records`` and claims linked to the
    ledger page's rows."""
    by_id = check_findings(findings, records)
    cell = 'style="padding:4px 6px;vertical-align:top"'
    cols = (
        "paper's result",
        "what we measured",
        "verdict",
        "why",
        "rules out",
        "claims",
    )
    colours = VERDICT_COLOURS
    head = "<tr>" + "".join(f"<th {cell}>{c}</th>" for c in cols) + "</tr>"
    rows = []
    for f in findings:
        links = _claim_links(f.claims, by_id, ledger_url, "<br>")
        rows.append(
            f"<tr><td {cell}>{html.escape(f.result)} <small>({html.escape(f.section)})"
            f"</small></td><td {cell}>{html.escape(fill(f.measured, by_id))}</td>"
            f'<td {cell} style="color:{colours[f.verdict]};font-weight:bold">'
            f"{f.verdict}</td><td {cell}>{html.escape(f.why)}</td>"
            f"<td {cell}>{'<br>'.join(map(html.escape, rules_out(f.claims, by_id))) or '—'}"
            f"</td><td {cell}>{links or '—'}</td></tr>"
        )
    return (
        '<table class="attnbook-findings" style="font-size:0.85em;'
        'border-collapse:collapse">' + head + "".join(rows) + "</table>"
    )


def rules_out(claims, by_id: dict) -> list[str]:
    """What a finding's claims rule out, one line per claim: its computed rival (what the
    rival predicts and by how much the measurement excludes it) or else its null."""
    out = []
    for c in claims:
        claim = by_id[c][1]
        if claim.rival_name:
            out.append(f"{c}: {claim.rival_text()}")
        elif claim.null:
            disc = claim.discrimination_text()
            out.append(
                f"{c}: null {claim.null_text()} (misses by {disc} of the effect)"
            )
    return out


def _claim_links(claims, by_id: dict, ledger_url: str, sep: str) -> str:
    """A finding's claims, each linked to its row on the ledger page."""
    return sep.join(
        f'<a href="{ledger_url}#{claim_anchor(by_id[c][0], c)}"><code>'
        f"{html.escape(c)}</code></a>"
        for c in claims
    )


#: a verdict's colour on the page (readable on the light and the dark theme)
VERDICT_COLOURS = {
    "reproduced": "#1a7f37",
    "reproduced with caveat": "#9a6700",
    "differs": "#cf222e",
    "not tested": "#57606a",
}


def verdict_counts(findings) -> dict[str, int]:
    """How many rows carry each verdict, in :data:`VERDICTS` order."""
    counts = dict.fromkeys(VERDICTS, 0)
    for f in findings:
        counts[f.verdict] += 1
    return counts


def findings_glance_html(
    findings,
    records: list[dict],
    *,
    digits: int = 3,
    ledger_url: str = "../reference/claims-ledger.html",
) -> str:
    """The findings at a glance: a strip of verdict counts, then one line per result of the
    paper (its verdict as a coloured badge, the result in the paper's words) that opens on
    what we measured (numbers to ``digits`` significant digits), why, and the claims it
    rests on, linked to the ledger. Refuses missing or failed claims as
    :func:`findings_table_html` does."""
    by_id = check_findings(findings, records)
    esc = html.escape
    strip = "".join(
        f'<span class="attnbook-verdict attnbook-verdict-{v.replace(" ", "-")}">'
        f"{n} {esc(v)}</span>"
        for v, n in verdict_counts(findings).items()
        if n
    )
    rows = []
    for f in findings:
        links = _claim_links(f.claims, by_id, ledger_url, ", ")
        against = rules_out(f.claims, by_id)
        rows.append(
            f'<details class="attnbook-finding"><summary><span class="attnbook-verdict '
            f'attnbook-verdict-{f.verdict.replace(" ", "-")}">{esc(f.verdict)}</span> '
            f"{esc(f.result)}</summary><dl><dt>where</dt><dd>{esc(f.section)}</dd>"
            f"<dt>measured</dt><dd>{esc(fill(f.measured, by_id, digits=digits))}</dd>"
            f"<dt>why</dt><dd>{esc(f.why)}</dd>"
            + (
                f"<dt>rules out</dt><dd>{'<br>'.join(map(esc, against))}</dd>"
                if against
                else ""
            )
            + (f"<dt>claims</dt><dd>{links}</dd>" if links else "")
            + "</dl></details>"
        )
    return (
        f'<div class="attnbook-glance"><p class="attnbook-verdict-strip">{strip}</p>'
        + "".join(rows)
        + "</div>"
    )


def robustness(findings, sweep: dict) -> list[tuple[str, str, int | None, int | None]]:
    """Per claim named by ``findings``: ``(claim id, chapter, k, n)`` from a ``ledger-seeds``
    summary (:func:`attnbook.experiments.ledger_seeds.sweep_summary`); k and n are None
    for a claim the sweep has not run."""
    by_id = {cid: (chapter, c) for (chapter, cid), c in sweep["claims"].items()}
    out = []
    for cid in dict.fromkeys(c for f in findings for c in f.claims):
        chapter, c = by_id.get(cid, ("", None))
        out.append(
            (
                cid,
                chapter,
                None if c is None else c["passed"],
                None if c is None else c["n"],
            )
        )
    return out


@dataclass(frozen=True)
class FindingsPage:
    """The rows of a findings page and the book's own results (templates, one per result)."""

    rows: tuple[Finding, ...]
    own: tuple[str, ...] = ()


def load_findings(path: str | os.PathLike) -> FindingsPage:
    """Read and validate a findings file (``rows:`` of findings, optional ``own:`` results)."""
    import yaml

    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a path, not {type(path).__name__}")
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"path: {path} must hold a mapping with a list 'rows'")
    unknown = sorted(set(data) - {"rows", "own"})
    if unknown:
        raise ValueError(f"path: {path} has unknown keys {unknown}")
    rows = []
    for i, row in enumerate(data["rows"]):
        try:
            rows.append(Finding(**{**row, "claims": tuple(row.get("claims") or ())}))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{path}, row {i + 1}: {exc}") from None
    own = tuple(_text(t, f"own[{i}]") for i, t in enumerate(data.get("own") or []))
    return FindingsPage(tuple(rows), own)


@dataclass(frozen=True)
class PartFindings:
    """What a part's findings page shows: its rows (``page``), the ledger records of the part's
    chapters in this build (``records``) and those claims by id (``by_id``)."""

    page: FindingsPage
    records: list
    by_id: dict


def load_part(part: str, *, records: list[dict] | None = None) -> PartFindings:
    """The findings of ``part`` (``"focus"``, ``"copyhead"``, ``"pde"``): the rows of
    ``book/<part>/findings.yml`` and the ledger records that the part's chapters wrote in this
    build (``records`` defaults to :func:`attnbook.claims.load_records`)."""
    from . import claims

    if not isinstance(part, str) or not re.fullmatch(r"[a-z][a-z0-9_-]*", part):
        raise ValueError(
            f"part must name a folder of book/, e.g. 'focus', not {part!r}"
        )
    root = claims.find_book_root()
    if root is None:
        raise ValueError("no book checkout found above the working directory")
    path = root / "book" / part / "findings.yml"
    if not path.is_file():
        raise ValueError(f"part: {part!r} has no findings file ({path})")
    page = load_findings(path)
    records = claims.load_records() if records is None else records
    mine = [r for r in records if r["chapter"].startswith(f"{part}/")]
    return PartFindings(page, mine, claims_by_id(mine))


def robustness_table_html(findings, sweep: dict, held: dict | None = None) -> str:
    """The "How robust" table of a findings page: per claim its chapter and k/n seeds of the
    ``ledger-seeds`` sweep (:func:`robustness`), marked *stale* where the chapter changed
    after its points were made, and, given ``held``
    (:func:`attnbook.experiments.ledger_seeds.held_out_summary`), its chapter's held-out
    runs that failed, k/n current points; as HTML (a notebook's Markdown output is
    rendered as CommonMark, which has no tables)."""
    cell = 'style="padding:2px 8px"'
    chapters = sweep.get("chapters", {})
    held_ch = (held or {}).get("chapters", {})
    rows = []
    for cid, chapter, k, n in robustness(findings, sweep):
        fixed = f"{k}/{n}" if n else "not swept yet"
        if n and chapters.get(chapter, {}).get("stale"):
            fixed += " (stale: the chapter changed since)"
        h = held_ch.get(chapter)
        held_out = f"{h['k']}/{h['n']} failed" if h and h["n"] else "not run yet"
        if h and h.get("stale"):
            held_out += f" ({h['stale']} stale)"
        rows.append(
            f"<tr><td {cell}><code>{html.escape(cid)}</code></td>"
            f"<td {cell}>{html.escape(chapter or '—')}</td><td {cell}>{fixed}</td>"
            + (f"<td {cell}>{held_out}</td>" if held is not None else "")
            + "</tr>"
        )
    head = (
        f"<tr><th {cell}>claim</th><th {cell}>chapter</th><th {cell}>fixed seeds</th>"
        + (f"<th {cell}>held-out runs (chapter)</th>" if held is not None else "")
        + "</tr>"
    )
    return (
        '<table class="attnbook-robustness" style="font-size:0.85em">'
        + head
        + "".join(rows)
        + "</table>"
    )
