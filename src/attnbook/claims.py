"""The claims ledger: every checkable statement of the book, asserted where it is made.

A chapter opens a :class:`Ledger` (``setup_chapter`` does) and states each claim with
:meth:`Ledger.check`, giving what was measured — one number, or ``samples=`` from a batched
ensemble of seeds, models or chains — and what it is compared with: an expected value with a
tolerance, or bounds. The check

* asserts the claim (raising :class:`ClaimFailed`, an ``AssertionError``, so nbval and the book
  build fail when a claim fails),
* shows the claim with its measured value, interval and margin on the page, and
* records it in a JSON file, one per chapter, that the ledger page of the book collects.

Every claim declares its **kind** (what it compares, :data:`KINDS`) and its **source** (where
the statement comes from, :data:`SOURCES`). The ledger enforces a few rules:

* with ``samples`` (at least :data:`MIN_SAMPLES` values) it records n, the mean, the standard
  error and a Student-t 95 % confidence interval of the mean, and asserts the criterion on the
  whole interval (equivalence, not overlap): bounds must hold for the whole interval, and an
  expected value holds when the whole interval lies inside ``expected ± tol``
  (``|mean − expected| + half-width ≤ tol``), so noise never helps a claim pass;
* every ``experiment`` and ``observation`` claim names its **null** (``null=``) or its
  **rival** (below): the value, or competing values, that the claim rules out (no effect, the plain −1/2 rate, the other
  direction). The ledger applies the same criterion to the null value itself, with **no
  interval** (a null is a value, not a measurement: were the claim's noise lent to it, a noisy
  measurement would buy its way out of a refusal), and refuses the claim (:class:`CannotDiscriminate`, a failure) when the
  null would pass too. Derivations and identities rule out a result of the quantity's own
  scale (``null=``; by default 0 for a non-zero expected value) and their tolerance must sit
  far below it: a discrimination of at least :data:`EXACT_DISCRIMINATION`, and, whatever
  null is named, a tolerance of at most :data:`IDENTITY_RTOL` (1 % for an identity, 5 % for a
  derivation) of a non-zero expected value;
* a claim about a law, a limit, a mechanism or a "which" names its strongest **rival**
  (``rival=(name, values)``): what a plausible wrong explanation — the perturbed theory, the
  flattening with no learning, a power law with a floor — predicts for the measured quantity,
  *computed in the chapter*. The claim is refused when a rival value meets the criterion (with
  no interval, as a null; so a passing claim's interval excludes every rival value); the page
  shows by how many half-widths of the interval it is excluded;
* bounds, and tolerances wider than round-off, need a reason (``note=``);
* an expected value written in the chapter as a literal with four or more significant digits
  is refused: expected values come from a closed form or a computation in the chapter, never
  from an earlier run.

One unit for every claim and every form: the **effect** ``|measured − null|`` (the distance
of the measured value from the nearest null). The **slack** of a criterion is the distance from
the measured value (the interval's nearest end, with samples) to the nearest bound of the
criterion (negative when it fails). Then

* the **margin** is ``slack / effect``: the share of the effect by which the claim holds (0: at
  the edge of failing);
* the **discrimination** is ``−(the null's slack) / effect``: the share of the effect by which
  the null fails the same criterion (≤ 0: the null passes too and the claim is refused).

For one bound the two add up to 1 on one number, and to 1 − half-width/effect with samples:
the criterion's edge splits the way from the interval's end to the null. A discrimination below :data:`LOOSE_DISCRIMINATION` is flagged "too
loose to inform": the criterion would also pass a result barely different from the null. An
exact criterion (an expected value with no tolerance, met exactly) has no margin.

Records are written to ``$ATTNBOOK_LEDGER_DIR`` when set, else to ``_build/ledger/`` beside the
book's ``_toc.yml`` (found by walking up from the working directory), else to a per-user cache
folder (e.g. on Colab). They are plain JSON: nothing is ever unpickled.
"""

from __future__ import annotations

import datetime as _dt
import functools
import html
import json
import math
import numbers
import os
import platform
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .results import file_sha256

__all__ = [
    "Claim",
    "ClaimFailed",
    "CannotDiscriminate",
    "Ledger",
    "find_book_root",
    "ledger_dir",
    "load_records",
    "chapter_source",
    "toc_chapters",
    "reads_ledger",
    "claim_anchor",
    "ledger_status",
    "ledger_table_html",
    "ledger_summary",
    "claim_slack",
    "KINDS",
    "SOURCES",
    "ledger_by_part_html",
    "claims_group_html",
    "MIN_SAMPLES",
    "LOOSE_DISCRIMINATION",
    "EXACT_DISCRIMINATION",
    "NULL_KINDS",
    "IDENTITY_RTOL",
]

#: What a claim compares: theory vs simulation or data; a symbolic result vs an independent
#: numeric computation; an exact identity checked numerically; a measured fact with no
#: theoretical value.
KINDS = ("experiment", "derivation", "identity", "observation")
#: Where a claim's statement comes from: the paper (or its summary) says it; our
#: reconstruction of the paper; derived in the book; measured here.
SOURCES = ("paper", "reconstructed", "derived", "measured")
#: The fewest samples a claim about a random quantity may rest on.
MIN_SAMPLES = 5
#: A discrimination below this is flagged "too loose to inform" on the page: the null misses
#: the criterion by less than a tenth of the effect.
LOOSE_DISCRIMINATION = 0.1
#: Derivations and identities: the tolerance must sit far below the quantity's own scale, i.e.
#: the null (a result of that scale) must miss the criterion by 99 % of the effect.
EXACT_DISCRIMINATION = 0.99
#: Derivations and identities: whatever null they name, the tolerance is at most this share
#: of a non-zero expected value (the quantity's own scale), so a far-away null cannot hide a
#: loose check. An identity holds to round-off or a discretisation error: 1 %. A derivation may
#: compare an asymptotic law with an exact computation at a finite size, whose correction its
#: note derives (a few per cent: 1/ln L, 1/V²): 5 %. A 30 % agreement is a trend, not either.
IDENTITY_RTOL = {"identity": 0.01, "derivation": 0.05}
#: The kinds that must name their null.
NULL_KINDS = ("experiment", "observation")
#: Tolerances at or below this (relative to max(1, |expected|)) count as round-off and need no
#: reason.
ROUNDOFF = 1e-6
CONFIDENCE = 0.95


class ClaimFailed(AssertionError):
    """A claim of the book did not hold for the measured value."""


class CannotDiscriminate(ClaimFailed):
    """A claim held, but its null would hold too: it cannot tell the effect from the null."""


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


def _to_samples(values) -> np.ndarray:
    from .validation import as_float64_array  # torch-backed: imported when samples come

    arr = as_float64_array(
        values, "samples", what="a 1-D array of numbers", finite=False
    )
    if arr.ndim != 1:
        raise ValueError(
            f"samples must be 1-D (one value per seed, model or chain), got shape "
            f"{arr.shape}"
        )
    if arr.size < MIN_SAMPLES:
        raise ValueError(
            f"samples needs at least {MIN_SAMPLES} values for an interval, got {arr.size}"
        )
    return arr


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    if x == 0 or (1e-3 <= abs(x) < 1e5):
        return f"{x:.6g}"
    return f"{x:.3e}"


def student_t_interval(samples, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Student-t confidence interval of the mean of ``samples`` (1-D, n ≥ 2)."""
    from scipy import stats

    x = np.asarray(samples, dtype=float)
    n = x.size
    mean = float(x.mean())
    se = float(x.std(ddof=1) / math.sqrt(n))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * se
    return mean - half, mean + half


_LITERAL = re.compile(r"(?<![\w.])(\d+\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)")


@functools.lru_cache(maxsize=64)
def _code_literals(path: str, mtime: float) -> tuple[tuple[float, float], ...]:
    """Float literals with ≥ 4 significant digits in a chapter's code: (value, half ulp)."""
    text = Path(path).read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, re.S))
    out = []
    for m in _LITERAL.finditer(code):
        lit = m.group(1)
        mant, _, exp = lit.lower().partition("e")
        digits = mant.replace(".", "").lstrip("0")
        if len(digits) < 4:
            continue
        decimals = len(mant.partition(".")[2])
        half = 0.5 * 10.0 ** (-decimals + (int(exp) if exp else 0))
        out.append((float(lit), half))
    return tuple(out)


@dataclass
class Claim:
    """One checked claim: what was stated, what was measured, and whether it held."""

    id: str
    statement: str
    measured: float
    passed: bool
    kind: str = "experiment"
    source: str = "derived"
    expected: float | None = None
    rtol: float | None = None
    atol: float | None = None
    lower: float | None = None
    upper: float | None = None
    note: str | None = None
    n: int = 1
    std_err: float | None = None
    interval: list | None = None
    interval_method: str | None = None
    margin: float | None = None
    null: list | None = None
    effect: float | None = None
    discrimination: float | None = None
    refused: str | None = None
    rival_name: str | None = None
    rival: list | None = None
    rival_discrimination: float | None = None
    rival_excluded_by: float | None = None
    chapter: str | None = None
    seed: int | None = None
    checked_at: str = ""
    samples: list = field(default_factory=list)

    @property
    def too_loose(self) -> bool:
        return (
            self.discrimination is not None
            and self.discrimination < LOOSE_DISCRIMINATION
        )

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

    def null_text(self) -> str:
        """``0`` or ``−0.5, 0`` (the values the claim rules out), or ``""``."""
        return ", ".join(_fmt(v) for v in self.null or [])

    def measured_text(self) -> str:
        """``0.0806`` or ``0.0806 [0.0791, 0.0821] (n = 8)``."""
        if self.interval is None:
            return _fmt(self.measured)
        lo, hi = self.interval
        return f"{_fmt(self.measured)} [{_fmt(lo)}, {_fmt(hi)}] (n = {self.n})"

    def runs_meeting(self) -> tuple[int, int] | None:
        """``(k, n)``: how many of a claim's samples meet its criterion one by one (``None``
        for a claim on one number). The claim itself is judged on the interval of the mean;
        this says how many single runs show the effect as well."""
        if not self.samples or self.n < 2:
            return None
        v = np.asarray(self.samples, float)
        ok = np.isfinite(v)
        if self.expected is not None:
            tol = (self.atol or 0.0) + (self.rtol or 0.0) * abs(self.expected)
            ok &= np.abs(v - self.expected) <= tol
        if self.lower is not None:
            ok &= v >= self.lower
        if self.upper is not None:
            ok &= v <= self.upper
        return int(ok.sum()), int(v.size)

    def runs_text(self) -> str:
        """``7 of 8 runs meet it one by one`` for a claim on samples, else ``""``."""
        runs = self.runs_meeting()
        return "" if runs is None else f"{runs[0]} of {runs[1]} runs meet it one by one"

    def margin_text(self) -> str:
        if self.margin is None:
            return "n/a"
        return f"{self.margin:.3g}"

    def discrimination_text(self) -> str:
        if self.discrimination is None:
            return "n/a"
        text = f"{self.discrimination:.3g}"
        return text + " (too loose to inform)" if self.too_loose else text

    def rival_text(self) -> str:
        """``A scaled by 1.2 predicts −0.29: fails the criterion by 0.8 of its distance,
        6.1 half-widths outside the interval``, or ``""`` without a rival."""
        if not self.rival_name:
            return ""
        values = ", ".join(_fmt(v) for v in (self.rival or [])[:4])
        if len(self.rival or []) > 4:
            values += f", … ({len(self.rival)} values)"
        parts = []
        if self.rival_discrimination is not None:
            parts.append(
                f"fails the criterion by {self.rival_discrimination:.2g} of its distance"
            )
        if self.rival_excluded_by is not None:
            parts.append(
                f"{self.rival_excluded_by:.2g} half-widths outside the interval"
            )
        return f"{self.rival_name} predicts {values}" + (
            ": " + ", ".join(parts) if parts else ""
        )

    def chip_text(self) -> str:
        """The measured number to three significant digits, as a claim's chip shows it."""
        if self.measured is None or not np.isfinite(self.measured):
            return str(self.measured)
        value = float(self.measured)
        if value == int(value) and abs(value) < 1e6:
            return f"{int(value)}"
        return f"{value:.3g}"

    def _repr_html_(self) -> str:
        """A one-line chip (✔, the statement, the number) that opens on the evidence: the
        criterion, the null or rival, the interval, margin and discrimination, the note. A
        failed claim is shown open: a reader must not have to click to see what broke."""
        mark, cls = ("✔", "pass") if self.passed else ("✘", "fail")
        esc = html.escape
        rows = [
            ("measured", self.measured_text()),
            ("criterion", self.criterion()),
            ("null", self.null_text() or "none"),
            ("rival", self.rival_text()),
            ("margin", self.margin_text()),
            ("discrimination", self.discrimination_text()),
            ("kind · source", f"{self.kind} · {self.source}"),
            ("runs", self.runs_text()),
            ("note", self.note or ""),
            ("refused", self.refused or ""),
        ]
        body = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows if v)
        return (
            f'<details class="attnbook-claim attnbook-claim-{cls}"'
            + ("" if self.passed else " open")
            + f'><summary><span class="attnbook-claim-mark">{mark}</span> '
            f"{esc(self.statement)} <b>{esc(self.chip_text())}</b></summary>"
            f'<dl class="attnbook-claim-body"><dt>claim</dt><dd><code>{esc(self.id)}'
            f"</code></dd>{body}</dl></details>"
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
            f"[{mark}] {self.id}: {self.statement} — measured {self.measured_text()}, "
            f"expected {self.criterion()}, null {self.null_text() or 'none'}, "
            + (f"rival {self.rival_text()}, " if self.rival_name else "")
            + f"margin {self.margin_text()}, discrimination {self.discrimination_text()} "
            f"[{self.kind} · {self.source}]"
            + (f" — refused: {self.refused}" if self.refused else "")
        )


def claims_group_html(claims: list[Claim]) -> str:
    """The claims one cell checked, as one chip: a single claim is its own chip; several fold
    into one line (✔, how many hold) that opens on each claim's chip, so a cell that checks
    five facts costs the page one line, not five. A group holding a failed claim is open."""
    if not claims:
        raise ValueError("claims: at least one claim is needed")
    if len(claims) == 1:
        return claims[0]._repr_html_()
    failed = sum(not c.passed for c in claims)
    mark, cls = ("✔", "pass") if not failed else ("✘", "fail")
    head = (
        f"<b>{len(claims)} claims</b> hold here (open for each statement and its number)"
        if not failed
        else f"<b>{failed} of {len(claims)} claims</b> failed here"
    )
    return (
        f'<details class="attnbook-claim attnbook-claims attnbook-claim-{cls}"'
        + ("" if not failed else " open")
        + f'><summary><span class="attnbook-claim-mark">{mark}</span> {head}</summary>'
        + "".join(c._repr_html_() for c in claims)
        + "</details>"
    )


#: the claims the running cell has shown so far and the display they share (reset when a
#: cell starts: IPython's ``pre_run_cell`` event, which fires whether or not the runner keeps
#: history — nbval does not, so execution counts cannot tell cells apart)
_CELL: dict = {"claims": [], "handle": None, "shell": None}


def _new_cell(*_args) -> None:
    _CELL["claims"], _CELL["handle"] = [], None


def _show(claim: Claim) -> None:
    """Display a claim on the page when running inside IPython (a notebook or the book build):
    the first claim of a cell is displayed, each further one updates that display to the
    cell's group (:func:`claims_group_html`)."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython comes with the book's toolchain
        return
    shell = get_ipython()
    if shell is None:
        return
    if _CELL["shell"] is not shell:
        shell.events.register("pre_run_cell", _new_cell)
        _CELL["shell"] = shell
        _new_cell()
    claim._displayed = True  # not shown again as a cell's result (_ipython_display_)
    _CELL["claims"].append(claim)
    data = {
        "text/html": claims_group_html(_CELL["claims"]),
        "text/plain": "\n".join(repr(c) for c in _CELL["claims"]),
    }
    if _CELL["handle"] is None:
        _CELL["handle"] = display(data, raw=True, display_id=True)
    else:
        _CELL["handle"].update(data, raw=True)


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


def _slack(center, half, exp, tol, lo, hi) -> float:
    """Distance to failing of a value ``center`` measured to ± ``half`` (0: one number): the
    least, over the criterion's parts, of the distance from the interval to the part's edge
    (negative when the part fails). An expected value wants the whole interval inside
    ``expected ± tol``; a bound wants the whole interval on its side."""
    slacks = []
    if exp is not None:
        slacks.append(tol - abs(center - exp) - half)
    if lo is not None:
        slacks.append(center - half - lo)
    if hi is not None:
        slacks.append(hi - center - half)
    return min(slacks)


def _judge(value, half, exp, tol, lo, hi, nulls):
    """``(passed, margin, effect, discrimination, null_passes)`` (see the module docstring).
    The nulls are values, judged with no interval: the claim's noise is not lent to them."""
    if not math.isfinite(value):
        return False, None, None, None, []
    slack = _slack(value, half, exp, tol, lo, hi)
    ok = slack >= 0
    if not nulls:
        return ok, None, None, None, []
    effects = [abs(value - v) for v in nulls]
    effect = min(effects)
    passing = [v for v in nulls if _slack(v, 0.0, exp, tol, lo, hi) >= 0]
    disc = _discrimination(value, nulls, exp, tol, lo, hi)
    if slack == 0 and half == 0 and exp is not None and tol == 0:
        margin = None  # an exact criterion met exactly
    elif effect > 0:
        margin = slack / effect
    else:
        margin = None
    return ok, margin, effect, disc, passing


def _discrimination(value, others, exp, tol, lo, hi) -> float | None:
    """The least, over ``others`` (nulls or a rival's values), of the share of the way from
    ``value`` to it by which it fails the criterion (each judged with no interval)."""
    discs = [
        -_slack(v, 0.0, exp, tol, lo, hi) / abs(value - v) if value != v else -math.inf
        for v in others
    ]
    disc = min(discs)
    return disc if math.isfinite(disc) else None


def _rival(rival, claim_id: str) -> tuple[str, list[float]] | None:
    """``(name, values)`` from ``rival=(name, value or values)``, checked."""
    if rival is None:
        return None
    if not isinstance(rival, tuple) or len(rival) != 2:
        raise TypeError(
            f"claim {claim_id!r}: rival must be a (name, values) pair: the rival "
            f"explanation's name and what it predicts for the measured quantity, "
            f"got {type(rival).__name__}"
        )
    name, values = rival
    if not isinstance(name, str) or not name.strip():
        raise ValueError(
            f"claim {claim_id!r}: the rival needs a name (a non-empty string)"
        )
    arr = np.asarray(values, dtype=float).reshape(-1)
    if arr.size == 0 or not np.isfinite(arr).all():
        raise ValueError(
            f"claim {claim_id!r}: the rival's values must be finite and at least one, "
            f"got {values!r}"
        )
    return name.strip(), [float(v) for v in arr]


def _judge_rival(measurement, rival, exp, tol, lo, hi):
    """``(discrimination, excluded_by, why_refused)`` of a rival: it must fail the criterion
    as a value (no interval); ``excluded_by`` is its least distance from the measurement in
    half-widths of the interval (None for one number)."""
    _name, values = rival
    value, half = measurement.value, measurement.half
    if not math.isfinite(value):
        return None, None, None
    passing = [v for v in values if _slack(v, 0.0, exp, tol, lo, hi) >= 0]
    disc = _discrimination(value, values, exp, tol, lo, hi)
    gap = min(abs(value - v) for v in values)
    excluded_by = gap / half if half > 0 else None
    # a rival inside the interval of a claim that holds meets the criterion too: this one
    # test also refuses a measurement that does not exclude the rival
    why = (
        f"the rival ({_name}) passes the same criterion: "
        + ", ".join(_fmt(v) for v in passing)
        if passing
        else None
    )
    return disc, excluded_by, why


def _criterion(expected, lower, upper):
    """``(expected, lower, upper)`` as floats (None where not given); at least one."""
    exp = None if expected is None else _to_float(expected, "expected")
    lo = None if lower is None else _to_float(lower, "lower")
    hi = None if upper is None else _to_float(upper, "upper")
    if exp is None and lo is None and hi is None:
        raise ValueError("give expected, lower or upper: a claim needs a criterion")
    return exp, lo, hi


def _tolerance(claim_id: str, exp, rtol, atol, samples):
    """``(rtol, tol)``: the checked ``rtol`` (``1e-9`` by default for one number with an
    expected value) and the absolute tolerance ``atol + rtol·|expected|`` (None without
    an expected value)."""
    for tol_, name in ((rtol, "rtol"), (atol, "atol")):
        if tol_ is not None and (
            not isinstance(tol_, numbers.Real) or isinstance(tol_, bool) or tol_ < 0
        ):
            raise ValueError(f"{name} must be a non-negative number, got {tol_!r}")
    if exp is None and (rtol is not None or atol is not None):
        raise ValueError("rtol and atol apply to expected: give expected too")
    if exp is not None and samples is not None and not (rtol or atol):
        raise ValueError(
            f"claim {claim_id!r}: with samples an expected value needs a tolerance "
            "(rtol= or atol=): the whole interval must lie inside expected ± tol"
        )
    if exp is not None and rtol is None and atol is None and samples is None:
        rtol = 1e-9
    tol = None if exp is None else (atol or 0.0) + (rtol or 0.0) * abs(exp)
    return rtol, tol


def _check_note(claim_id: str, note, exp, lo, hi, tol) -> None:
    """Bounds, and tolerances wider than round-off, need a reason in ``note``."""
    if note is not None:
        return
    if lo is not None or hi is not None:
        raise ValueError(
            f"claim {claim_id!r}: bounds need a reason; say in note= why the "
            "bound is where it is (theory, an interval, a physical scale)"
        )
    if tol is not None and tol > ROUNDOFF * max(1.0, abs(exp)):
        raise ValueError(
            f"claim {claim_id!r}: a tolerance wider than round-off needs a "
            "reason; say in note= where it comes from"
        )


@dataclass
class _Measurement:
    """The measured value of a claim, with its interval when it comes from samples."""

    value: float
    n: int
    half: float = 0.0
    std_err: float | None = None
    interval: list | None = None
    method: str | None = None
    values: list = field(default_factory=list)


def _measure(measured, samples) -> _Measurement:
    """The value (the mean of ``samples``, or ``measured``) and, for finite samples, the
    Student t interval of the mean."""
    if samples is None:
        return _Measurement(value=_to_float(measured, "measured"), n=1)
    arr = _to_samples(samples)
    values = [float(v) for v in arr]
    finite = bool(np.isfinite(arr).all())
    value = float(arr.mean()) if finite else float("nan")
    measurement = _Measurement(value=value, n=int(arr.size), values=values)
    if finite:
        measurement.std_err = float(arr.std(ddof=1) / math.sqrt(arr.size))
        measurement.interval = list(student_t_interval(arr))
        measurement.half = (measurement.interval[1] - measurement.interval[0]) / 2
        measurement.method = f"Student t, {CONFIDENCE:.0%} interval of the mean"
    return measurement


def _refusal(ok, null_passes, kind: str, disc, exp=None, tol=None) -> str | None:
    """Why a claim that holds is refused (a null passes too, or a derivation's
    tolerance is not far below the quantity's scale), or None."""
    if ok and null_passes:
        return (
            "cannot discriminate: the null "
            + ", ".join(_fmt(v) for v in null_passes)
            + " passes the same criterion"
        )
    if ok and kind not in NULL_KINDS and (disc or 0.0) < EXACT_DISCRIMINATION:
        return (
            f"the tolerance does not sit far below the quantity's own scale: the null "
            f"misses by {disc:.3g} of the effect, {EXACT_DISCRIMINATION} needed"
        )
    cap = IDENTITY_RTOL.get(kind)
    if ok and cap is not None and exp and tol > cap * abs(exp) * (1 + 1e-12):
        return (
            f"a {kind} keeps an identity tolerance whatever its null: "
            f"{_fmt(tol)} is {tol / abs(exp):.3g} of the expected value, at most "
            f"{cap:.3g} allowed"
        )
    return None


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
    seed:
        The chapter's seed (recorded with every claim; ``make test-seeds`` varies it).
    """

    def __init__(
        self,
        chapter: str,
        *,
        title: str | None = None,
        directory: str | os.PathLike | None = None,
        seed: int | None = None,
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
        self.seed = seed
        self.claims: list[Claim] = []
        self._t0 = time.perf_counter()
        src = chapter_source(chapter)
        if src is not None and not src.is_file():
            raise ValueError(f"chapter {chapter!r} has no source file {src}")
        self.source_sha256 = file_sha256(src) if src is not None else None
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
        measured=None,
        *,
        samples=None,
        expected=None,
        rtol: float | None = None,
        atol: float | None = None,
        lower=None,
        upper=None,
        null=None,
        rival=None,
        kind: str,
        source: str,
        note: str | None = None,
    ) -> Claim:
        """Assert a claim, show it and record it.

        Give either ``measured`` (one number) or ``samples`` (one value per seed, model or
        chain of a batched run; at least :data:`MIN_SAMPLES`). The claim holds when every
        criterion given holds:

        * ``expected``: ``|x − expected| ≤ atol + rtol·|expected|`` (default ``rtol = 1e-9``
          for one number); with samples the whole 95 % interval must lie inside
          ``expected ± tol`` (``|mean − expected| + half-width ≤ tol``), so samples need a
          tolerance;
        * ``lower`` / ``upper``: ``x ≥ lower`` / ``x ≤ upper``; with samples the whole
          interval must satisfy them.

        ``null`` is the value (or a sequence of values) the claim rules out: required for
        ``experiment`` and ``observation`` claims unless they name a ``rival`` (whose values
        are then what they rule out); for derivations and identities it defaults
        to 0 (a result of the quantity's own scale) when ``expected`` is non-zero, and must be
        given otherwise (e.g. the size a residual would have if the identity were false). The
        same criterion is applied to each null value with no interval; a claim that a null
        passes too is refused (:class:`CannotDiscriminate`), and so is a derivation or
        identity whose discrimination is below :data:`EXACT_DISCRIMINATION` or whose
        tolerance exceeds its kind's :data:`IDENTITY_RTOL` of a non-zero expected value.

        ``rival=(name, values)``: the strongest rival explanation and what it predicts for the
        measured quantity, computed in the chapter (one value, or several: per model, per
        size, per perturbation). The claim is refused when a rival value meets the criterion
        (judged with no interval; a rival inside the interval of a claim that holds meets
        it too, so the measurement must exclude every rival value).

        ``kind`` is one of :data:`KINDS`, ``source`` one of :data:`SOURCES`. Bounds, and
        tolerances wider than round-off, need a reason in ``note``. Raises
        :class:`ClaimFailed` when the claim does not hold (after recording it as failed), and
        ``ValueError`` / ``TypeError`` for a malformed claim.
        """
        self._check_fields(claim_id, statement, kind, source, note)
        if (measured is None) == (samples is None):
            raise ValueError("give exactly one of measured (one number) or samples")
        exp, lo, hi = _criterion(expected, lower, upper)
        rtol, tol = _tolerance(claim_id, exp, rtol, atol, samples)
        _check_note(claim_id, note, exp, lo, hi, tol)
        if exp is not None:
            self._refuse_copied(claim_id, exp)
        rival = _rival(rival, claim_id)
        nulls = self._nulls(claim_id, null, kind, exp, has_rival=rival is not None)

        measurement = _measure(measured, samples)
        # with no null, the rival's values are what the claim rules out: the margin and
        # discrimination are measured against them
        ruled_out = nulls or (rival[1] if rival is not None else [])
        ok, margin, effect, disc, null_passes = _judge(
            measurement.value, measurement.half, exp, tol, lo, hi, ruled_out
        )
        refused = _refusal(ok, null_passes if nulls else [], kind, disc, exp, tol)
        rival_disc = rival_by = None
        if rival is not None:
            rival_disc, rival_by, rival_why = _judge_rival(
                measurement, rival, exp, tol, lo, hi
            )
            if ok and refused is None:
                refused = rival_why
        claim = Claim(
            id=claim_id,
            statement=statement,
            measured=measurement.value,
            passed=bool(ok) and refused is None,
            kind=kind,
            source=source,
            expected=exp,
            rtol=rtol,
            atol=atol,
            lower=lo,
            upper=hi,
            note=note,
            n=measurement.n,
            std_err=measurement.std_err,
            interval=measurement.interval,
            interval_method=measurement.method,
            margin=margin,
            null=nulls,
            effect=effect,
            discrimination=disc,
            refused=refused,
            rival_name=None if rival is None else rival[0],
            rival=None if rival is None else rival[1],
            rival_discrimination=rival_disc,
            rival_excluded_by=rival_by,
            chapter=self.chapter,
            seed=self.seed,
            checked_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            samples=measurement.values,
        )
        self.claims.append(claim)
        self._write()
        _show(claim)
        if refused is not None:
            raise CannotDiscriminate(repr(claim))
        if not claim.passed:
            raise ClaimFailed(repr(claim))
        return claim

    def _check_fields(self, claim_id, statement, kind, source, note) -> None:
        """Refuse a malformed or repeated id, an empty statement or note, an unknown
        kind or source."""
        if not isinstance(claim_id, str) or not claim_id.strip():
            raise ValueError("claim_id must be a non-empty string")
        if any(c.id == claim_id for c in self.claims):
            raise ValueError(
                f"claim_id {claim_id!r} is used twice in chapter {self.chapter!r}"
            )
        if not isinstance(statement, str) or not statement.strip():
            raise ValueError("statement must be a non-empty string")
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; expected one of {KINDS}")
        if source not in SOURCES:
            raise ValueError(f"unknown source {source!r}; expected one of {SOURCES}")
        if note is not None and (not isinstance(note, str) or not note.strip()):
            raise ValueError(
                "note must be a non-empty string (the reason for the bounds)"
            )

    @staticmethod
    def _nulls(
        claim_id: str, null, kind: str, exp: float | None, has_rival: bool = False
    ) -> list[float]:
        if null is None:
            if kind in NULL_KINDS and has_rival:
                return []  # the rival is what it rules out
            if kind in NULL_KINDS:
                raise ValueError(
                    f"claim {claim_id!r}: an {kind} claim must name its null (null=) or "
                    "its rival (rival=): the value, or values, it rules out (no effect, "
                    "a competing law's value, the other direction)"
                )
            if exp is None or exp == 0:
                raise ValueError(
                    f"claim {claim_id!r}: {'an' if kind[0] in 'aeio' else 'a'} {kind} with "
                    "no non-zero expected value must "
                    "name its null (null=): the size the quantity would have if the "
                    "result were false (its own scale)"
                )
            return [0.0]
        values = (
            list(null)
            if isinstance(null, (list, tuple)) or getattr(null, "ndim", 0) == 1
            else [null]
        )
        if not values:
            raise ValueError(f"claim {claim_id!r}: null must not be empty")
        out = [_to_float(v, "null") for v in values]
        if not all(math.isfinite(v) for v in out):
            raise ValueError(f"claim {claim_id!r}: null must be finite, got {null!r}")
        return out

    def _refuse_copied(self, claim_id: str, expected: float) -> None:
        src = chapter_source(self.chapter)
        if src is None or not src.is_file():
            return
        for lit, half in _code_literals(str(src), src.stat().st_mtime):
            if abs(expected - lit) <= half * (1 + 1e-9):
                raise ValueError(
                    f"claim {claim_id!r}: expected={expected!r} is the literal {lit!r} "
                    "written in the chapter. Expected values come from a closed form or "
                    "a computation in this chapter, never from an earlier run."
                )

    def _write(self) -> None:
        import torch  # imported late: the ledger itself needs no torch

        from .provenance import numeric_signature

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
            "seed": self.seed,
            "numeric_signature": numeric_signature(),
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


#: The ledger page itself: executed last, it makes no claims of its own.
LEDGER_CHAPTER = "reference/claims-ledger"
#: The page name of each part's findings page (``focus/findings``), which reads the ledger.
FINDINGS_PAGE = "findings"


def reads_ledger(chapter: str) -> bool:
    """Whether a page reads the ledger instead of adding to it: the ledger page and each
    part's findings page. Such pages make no claims, run after every chapter (pytest marker
    ``ledger``) and are left out of :func:`toc_chapters`."""
    return chapter == LEDGER_CHAPTER or chapter.rsplit("/", 1)[-1] == FINDINGS_PAGE


def _toc_files(entry) -> list[str]:
    out = []
    if isinstance(entry, dict):
        for key in ("root", "file"):
            if isinstance(entry.get(key), str):
                out.append(entry[key])
        for key in ("parts", "chapters", "sections"):
            for sub in entry.get(key) or []:
                out.extend(_toc_files(sub))
    elif isinstance(entry, list):
        for sub in entry:
            out.extend(_toc_files(sub))
    return out


def _is_executable(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return False
    return "kernelspec:" in text[3:].split("\n---", 1)[0]


def toc_chapters(root: str | os.PathLike | None = None) -> list[str]:
    """Chapter ids (``focus/condensation``) of the executable pages of ``_toc.yml``, in order.

    Read from the table of contents with a YAML parser; the pages that read the ledger (the
    ledger page, the findings pages) are left out.
    """
    import yaml

    root = find_book_root() if root is None else Path(root)
    if root is None:
        raise FileNotFoundError("no _toc.yml found here or above: run inside the book")
    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text(encoding="utf-8"))
    ids = []
    for entry in _toc_files(toc):
        path = Path(root) / entry
        path = path if path.suffix else path.with_suffix(".md")
        if not path.is_file() or not _is_executable(path):
            continue
        rel = path.resolve().relative_to((Path(root) / "book").resolve())
        cid = rel.with_suffix("").as_posix()
        if not reads_ledger(cid):
            ids.append(cid)
    return ids


def ledger_status(
    root: str | os.PathLike | None = None, directory: str | os.PathLike | None = None
) -> dict:
    """Which chapters' claims are recorded, stale (source changed since) or missing.

    Returns ``records`` (in book order), ``expected`` (the chapter ids of the table of
    contents), ``missing`` and ``stale``.
    """
    root = find_book_root() if root is None else Path(root)
    records = load_records(directory)
    by_chapter = {r["chapter"]: r for r in records}
    expected = toc_chapters(root)
    missing, stale = [], []
    for cid in expected:
        rec = by_chapter.get(cid)
        if rec is None:
            missing.append(cid)
        elif rec.get("source_sha256") != file_sha256(chapter_source(cid, Path(root))):
            stale.append(cid)
    order = {c: i for i, c in enumerate(expected)}
    records.sort(key=lambda r: order.get(r["chapter"], len(order)))
    return {
        "records": records,
        "expected": expected,
        "missing": missing,
        "stale": stale,
    }


def _claims_of(records: list[dict]) -> list[Claim]:
    return [Claim(**c) for rec in records for c in rec["claims"]]


def claim_slack(record: dict) -> float:
    """A recorded claim's distance to failing (negative when it fails): from the measured
    value, or the interval's nearest end, to the nearest edge of its criterion."""
    value, interval = record["measured"], record.get("interval")
    half = (interval[1] - interval[0]) / 2 if interval else 0.0
    exp = record.get("expected")
    tol = None
    if exp is not None:
        tol = (record.get("atol") or 0.0) + (record.get("rtol") or 0.0) * abs(exp)
    if exp is None and record.get("lower") is None and record.get("upper") is None:
        return math.inf
    return _slack(value, half, exp, tol, record.get("lower"), record.get("upper"))


def ledger_summary(records: list[dict], *, n_smallest: int = 10) -> dict:
    """Counts per kind and per source, claims with samples, the margins and the smallest of
    them (experiments and observations: a derivation's or identity's margin is ≈ 0 by
    design), the weakest discrimination, the claims too loose to inform, those refused and
    those that name a computed rival."""
    cs = _claims_of(records)
    by_kind = {k: sum(c.kind == k for c in cs) for k in KINDS}
    by_source = {s: sum(c.source == s for c in cs) for s in SOURCES}
    # derivations and identities sit at a margin ≈ 0 by design (a tolerance below 1 % of
    # their scale): the claims nearest to failing are the experiments and observations
    with_margin = sorted(
        (c for c in cs if c.margin is not None and c.kind in NULL_KINDS),
        key=lambda c: c.margin,
    )
    with_disc = sorted(
        (c for c in cs if c.discrimination is not None),
        key=lambda c: c.discrimination,
    )
    return {
        "n_claims": len(cs),
        "n_passed": sum(c.passed for c in cs),
        "n_with_samples": sum(c.n > 1 for c in cs),
        "by_kind": by_kind,
        "by_source": by_source,
        "margins": [c.margin for c in with_margin],
        "smallest_margins": with_margin[:n_smallest],
        "weakest_discrimination": with_disc[:n_smallest],
        "too_loose": [c for c in cs if c.too_loose],
        "refused": [c for c in cs if c.refused],
        "with_rival": [c for c in cs if c.rival_name],
    }


def claim_anchor(chapter: str, claim_id: str) -> str:
    """The HTML id of a claim's row in the ledger table (``claim-focus-condensation-x``)."""
    return "claim-" + re.sub(r"[^A-Za-z0-9_-]+", "-", f"{chapter}-{claim_id}")


def _seeds_cell(seeds: dict, chapter: str, claim_id: str, cell: str) -> str:
    k_n = seeds.get((chapter, claim_id))
    if k_n is None:
        return f"<td {cell}>not swept</td>"
    k, n = k_n
    colour = "#1a7f37" if k == n else "#cf222e"
    return f'<td {cell} style="color:{colour};white-space:nowrap">{k}/{n} seeds</td>'


#: the book's parts, by the folder of their chapters, in reading order
PART_TITLES = {
    "foundations": "Foundations",
    "focus": "Part I — Focus and dilution",
    "copyhead": "Part II — The copy head as a phase transition",
    "pde": "Part III — Transformers as a mean-field PDE",
    "course": "Course",
}


def ledger_by_part_html(
    records: list[dict],
    *,
    stale: set[str] | None = None,
    seeds: dict | None = None,
) -> str:
    """The ledger folded by part, then by chapter: each line says how many claims held (and
    flags failed or stale ones), and opens on the chapter's table (:func:`ledger_table_html`).
    A part with a failed or stale claim is shown open. A link to a claim's row opens the
    folds around it (browsers expand a ``<details>`` that holds a link's target)."""
    stale = stale or set()
    parts: dict[str, list[dict]] = {}
    for rec in records:
        parts.setdefault(rec["chapter"].split("/", 1)[0], []).append(rec)
    order = list(PART_TITLES) + sorted(set(parts) - set(PART_TITLES))
    out = []
    for part in order:
        recs = parts.get(part)
        if not recs:
            continue
        lines, part_bad, part_n = [], 0, 0
        for rec in recs:
            n = len(rec["claims"])
            bad = sum(not c["passed"] for c in rec["claims"])
            is_stale = rec["chapter"] in stale
            part_n += n
            part_bad += bad + (n if is_stale else 0)
            verdict = f"{bad} failed" if bad else ("stale" if is_stale else "all held")
            lines.append(
                '<details class="attnbook-ledger-chapter"'
                + (" open" if bad or is_stale else "")
                + f"><summary><b>{html.escape(rec.get('title', rec['chapter']))}</b> "
                f"<code>{html.escape(rec['chapter'])}</code> — {n} claims, {verdict}"
                "</summary>"
                + ledger_table_html([rec], show_chapter=False, stale=stale, seeds=seeds)
                + "</details>"
            )
        title = PART_TITLES.get(part, part)
        verdict = "all held" if not part_bad else "some failed or are stale"
        out.append(
            '<details class="attnbook-ledger-part"'
            + (" open" if part_bad else "")
            + f"><summary>{html.escape(title)}: {part_n} claims in {len(recs)} "
            f"chapters, {verdict}</summary>" + "".join(lines) + "</details>"
        )
    return '<div class="attnbook-ledger-parts">' + "".join(out) + "</div>"


def ledger_table_html(
    records: list[dict],
    *,
    show_chapter: bool = True,
    stale: set[str] | None = None,
    seeds: dict | None = None,
) -> str:
    """An HTML table of the claims in ``records``: one row per claim, grouped by chapter.

    ``seeds`` (optional) maps ``(chapter, claim id)`` to ``(k, n)``: the claim held under k of
    the n seeds of the ``ledger-seeds`` sweep (a column "seeds")."""
    stale = stale or set()
    cell = 'style="padding:3px 6px;vertical-align:top"'
    cols = (
        "claim",
        "measured",
        "expected",
        "null",
        "margin",
        "discrimination",
        "kind · source",
        "status",
    ) + (("seeds",) if seeds is not None else ())
    head = "<tr>" + "".join(f"<th {cell}>{c}</th>" for c in cols) + "</tr>"
    rows = []
    for rec in records:
        is_stale = rec["chapter"] in stale
        if show_chapter:
            extra = (
                " — <i>stale: the chapter changed after these claims were recorded</i>"
                if is_stale
                else ""
            )
            seed = rec.get("seed")
            seed_text = f" · seed {seed}" if seed is not None else ""
            rows.append(
                f'<tr><td colspan="{len(cols)}" {cell}><b>'
                f"{html.escape(rec.get('title', rec['chapter']))}</b> "
                f"<code>{html.escape(rec['chapter'])}</code>{seed_text}{extra}</td></tr>"
            )
        for c in rec["claims"]:
            claim = Claim(**c)
            ok = claim.passed and not is_stale
            status = ("✔ pass" if claim.passed else "✘ FAIL") + (
                " (stale)" if is_stale else ""
            )
            colour = "#1a7f37" if ok else "#cf222e"
            note = f"<br><small>{html.escape(claim.note)}</small>" if claim.note else ""
            rows.append(
                f'<tr id="{claim_anchor(rec["chapter"], claim.id)}">'
                f"<td {cell}><code>{html.escape(claim.id)}</code><br>"
                f"{html.escape(claim.statement)}{note}</td>"
                f"<td {cell}>{html.escape(claim.measured_text())}"
                + (
                    f"<br><small>{html.escape(claim.runs_text())}</small>"
                    if claim.runs_text()
                    else ""
                )
                + f"</td><td {cell}>{html.escape(claim.criterion())}</td>"
                f"<td {cell}>{html.escape(claim.null_text())}</td>"
                f"<td {cell}>{html.escape(claim.margin_text())}</td>"
                f"<td {cell}>{html.escape(claim.discrimination_text())}</td>"
                f"<td {cell}>{html.escape(claim.kind)} · {html.escape(claim.source)}</td>"
                f'<td {cell} style="color:{colour};white-space:nowrap">{status}</td>'
                + (
                    _seeds_cell(seeds, rec["chapter"], claim.id, cell)
                    if seeds is not None
                    else ""
                )
                + "</tr>"
            )
    return (
        '<table class="attnbook-ledger" style="font-size:0.85em;border-collapse:collapse">'
        + head
        + "".join(rows)
        + "</table>"
    )
