"""Findings pages: rows validated on construction, numbers filled from ledger records only."""

from pathlib import Path

import pytest

from attnbook.claims import ClaimFailed, Ledger, claim_anchor, load_records
from attnbook.findings import (
    VERDICTS,
    Finding,
    check_findings,
    claims_by_id,
    fill,
    findings_table_html,
    load_findings,
    load_part,
    robustness,
    robustness_table_html,
)

ROOT = Path(__file__).resolve().parents[1]


CHAPTER = (
    "foundations/attention-maps"  # a chapter of the book: the ledger checks it exists
)


def _records(tmp_path, *, fail=False):
    """Ledger records of a scratch ledger: two passing claims, and a failed one if asked."""
    ledger = Ledger(CHAPTER, title="a chapter", directory=tmp_path, seed=0)
    ledger.check(
        "x.rate",
        "a rate",
        0.5012,
        expected=0.5,
        rtol=0.01,
        null=0.0,
        rival=("a slower law", [0.45, 0.4]),
        kind="experiment",
        source="paper",
        note="integrator error",
    )
    ledger.check(
        "x.noisy",
        "a mean",
        samples=[1.0, 1.1, 0.9, 1.05, 0.95],
        expected=1.0,
        atol=0.5,
        null=3.0,
        kind="experiment",
        source="derived",
        note="five runs",
    )
    if fail:
        with pytest.raises(ClaimFailed):
            ledger.check(
                "x.bad",
                "a bad bound",
                2.0,
                upper=1.0,
                null=3.0,
                kind="observation",
                source="measured",
                note="for the test",
            )
    return load_records(tmp_path)


def _row(**kw):
    base = dict(
        result="a result",
        section="§1",
        measured="rate {x.rate}",
        verdict="reproduced",
        why="because",
        claims=("x.rate",),
    )
    base.update(kw)
    return Finding(**base)


def test_verdict_must_be_one_of_four():
    for v in VERDICTS:
        _row(verdict=v)
    with pytest.raises(ValueError, match="verdict"):
        _row(verdict="confirmed")


def test_rows_name_claims_unless_not_tested():
    with pytest.raises(ValueError, match="claims"):
        _row(claims=(), measured="nothing")
    _row(verdict="not tested", claims=(), measured="no valid measurement")
    with pytest.raises(TypeError, match="claims"):
        _row(claims="x.rate")
    with pytest.raises(ValueError, match="why"):
        _row(why="  ")


def test_placeholders_must_name_listed_claims():
    with pytest.raises(ValueError, match="x.other"):
        _row(measured="{x.rate} and {x.other}")


def test_fill_reads_the_records(tmp_path):
    by_id = claims_by_id(_records(tmp_path))
    assert fill("{x.rate|value}", by_id) == "0.5012"
    assert fill("{x.rate|expected}", by_id) == "0.5"
    assert "(n = 5)" in fill("{x.noisy}", by_id)
    assert fill("{x.noisy|n}", by_id) == "5"
    assert fill("{x.noisy|null}", by_id) == "3"
    assert fill("{x.rate|rival}", by_id) == "0.45 or 0.4"
    assert fill("{x.rate|rival}", by_id, digits=1) == "0.5 or 0.4"
    with pytest.raises(ValueError, match="no rival"):
        fill("{x.noisy|rival}", by_id)
    with pytest.raises(ValueError, match="x.missing"):
        fill("{x.missing}", by_id)
    with pytest.raises(ValueError, match="interval"):
        fill("{x.rate|interval}", by_id)
    with pytest.raises(ValueError, match="field"):
        fill("{x.rate|colour}", by_id)


def test_missing_and_failed_claims_are_refused(tmp_path):
    records = _records(tmp_path, fail=True)
    with pytest.raises(ValueError, match="x.gone"):
        check_findings([_row(claims=("x.gone",), measured="-")], records)
    with pytest.raises(ClaimFailed, match="x.bad"):
        check_findings([_row(claims=("x.bad",), measured="{x.bad}")], records)
    with pytest.raises(ClaimFailed, match="x.bad"):
        fill("{x.bad}", claims_by_id(records))
    with pytest.raises(ValueError, match="at least one"):
        check_findings([], records)
    with pytest.raises(TypeError, match="Finding"):
        check_findings(["a row"], records)


def test_table_links_each_claim_to_its_ledger_row(tmp_path):
    records = _records(tmp_path)
    table = findings_table_html([_row()], records)
    assert "0.5012" in table and "reproduced" in table
    assert f'#{claim_anchor(CHAPTER, "x.rate")}"' in table


def test_an_id_made_by_two_chapters_is_refused():
    rec = {
        "chapter": "a/b",
        "claims": [{"id": "x", "statement": "s", "measured": 1.0, "passed": True}],
    }
    with pytest.raises(ValueError, match="'x'"):
        claims_by_id([rec, {**rec, "chapter": "a/c"}])


def test_robustness_reads_the_sweep():
    sweep = {"claims": {(CHAPTER, "x.rate"): {"passed": 19, "n": 20}}}
    rows = robustness([_row(), _row(claims=("x.new",), measured="-")], sweep)
    assert rows == [("x.rate", CHAPTER, 19, 20), ("x.new", "", None, None)]


def test_robustness_table_is_one_html_row_per_claim():
    sweep = {"claims": {(CHAPTER, "x.rate"): {"passed": 19, "n": 20}}}
    text = robustness_table_html([_row(), _row(claims=("x.new",), measured="-")], sweep)
    assert text.startswith("<table") and text.count("<tr>") == 3  # head + 2 claims
    assert (
        "<code>x.rate</code>" in text and f"{CHAPTER}</td>" in text and "19/20" in text
    )
    assert "<code>x.new</code>" in text and "not swept yet" in text


def test_load_part_keeps_the_parts_own_records(tmp_path):
    for chapter, cid in (("copyhead/copy-task", "x.one"), ("focus/focus", "y.one")):
        ledger = Ledger(chapter, title="a chapter", directory=tmp_path, seed=0)
        ledger.check(
            cid, "a rate", 0.5012, expected=0.5, rtol=0.01, null=0.0,
            kind="experiment", source="derived", note="integrator error",
        )  # fmt: skip
    part = load_part("copyhead", records=load_records(tmp_path))
    assert part.page.rows
    assert {r["chapter"] for r in part.records} == {"copyhead/copy-task"}
    assert set(part.by_id) == {"x.one"}
    for bad in ("../focus", "Focus", ""):
        with pytest.raises(ValueError, match="part"):
            load_part(bad, records=[])
    with pytest.raises(ValueError, match="no findings file"):
        load_part("foundations", records=[])


@pytest.mark.parametrize(
    "path", sorted(ROOT.glob("book/*/findings.yml")), ids=lambda p: p.parent.name
)
def test_every_findings_file_has_valid_rows(path):
    """Each row has one of the four verdicts and names a claim, or says why it is untested;
    every placeholder names one of its row's claims (load_findings refuses the rest)."""
    page = load_findings(path)
    assert page.rows
    assert all(r.claims or r.verdict == "not tested" for r in page.rows)
    assert (ROOT / "book" / path.parent.name / "findings.md").is_file()


def test_a_bad_findings_file_names_the_row(tmp_path):
    bad = tmp_path / "findings.yml"
    bad.write_text(
        "rows:\n- {result: r, section: s, measured: m, verdict: ok, why: w}\n"
    )
    with pytest.raises(ValueError, match="row 1: verdict"):
        load_findings(bad)
    bad.write_text("rows: []\nextra: 1\n")
    with pytest.raises(ValueError, match="extra"):
        load_findings(bad)
    with pytest.raises(TypeError, match="path"):
        load_findings(3)


def test_findings_at_a_glance_rounds_counts_and_folds(tmp_path):
    """The glance view: verdict counts first, one line per result that opens on the numbers
    (3 significant digits), the reason and the claims; a failed claim is refused."""
    from attnbook.findings import findings_glance_html, verdict_counts

    rows = [
        _row(),
        _row(verdict="differs", measured="mean {x.noisy}", claims=("x.noisy",)),
        _row(verdict="not tested", claims=(), measured="nothing valid"),
    ]
    counts = verdict_counts(rows)
    assert counts == {
        "reproduced": 1,
        "reproduced with caveat": 0,
        "differs": 1,
        "not tested": 1,
    }
    page = findings_glance_html(rows, _records(tmp_path))
    strip = page.split("</p>", 1)[0]
    assert "1 reproduced" in strip and "1 differs" in strip and "caveat" not in strip
    assert page.count('<details class="attnbook-finding">') == 3
    assert "rate 0.501" in page and "0.5012" not in page  # rounded to 3 digits
    assert "(n = 5)" in page and claim_anchor(CHAPTER, "x.rate") in page
    assert fill("{x.rate}", claims_by_id(_records(tmp_path)), digits=2) == "0.5"
    with pytest.raises(ValueError, match="digits"):
        fill("{x.rate}", claims_by_id(_records(tmp_path)), digits=0)
    with pytest.raises(ClaimFailed):
        findings_glance_html(
            [_row(measured="{x.bad}", claims=("x.bad",))],
            _records(tmp_path / "f", fail=True),
        )


def test_rows_say_what_their_claims_rule_out(tmp_path):
    from attnbook.findings import findings_glance_html, findings_table_html, rules_out

    by_id = claims_by_id(_records(tmp_path))
    lines = rules_out(("x.rate", "x.noisy"), by_id)
    # the rival, with what it predicts and by how far the measurement excludes it
    assert lines[0].startswith("x.rate: a slower law predicts 0.45, 0.4")
    assert lines[0].endswith("fails the criterion by 0.88 of its distance")
    # no rival: the null and by how much it misses the criterion
    assert lines[1].startswith("x.noisy: null 3") and "of the effect" in lines[1]
    rows = [_row(), _row(measured="mean {x.noisy}", claims=("x.noisy",))]
    glance = findings_glance_html(rows, _records(tmp_path / "g"))
    assert glance.count("<dt>rules out</dt>") == 2 and "a slower law" in glance
    table = findings_table_html(rows, _records(tmp_path / "t"))
    assert "<th" in table and ">rules out</th>" in table and "a slower law" in table


def test_robustness_table_marks_stale_points_and_shows_held_out_runs():
    sweep = {
        "claims": {(CHAPTER, "x.rate"): {"passed": 20, "n": 20}},
        "chapters": {CHAPTER: {"stale": True}},
    }
    held = {"chapters": {CHAPTER: {"n": 7, "k": 1, "stale": 1}}}
    text = robustness_table_html([_row()], sweep, held)
    assert "20/20 (stale: the chapter changed since)" in text
    assert "1/7 failed (1 stale)" in text and "held-out" in text
    fresh = {**sweep, "chapters": {CHAPTER: {"stale": False}}}
    plain = robustness_table_html([_row()], fresh)
    assert "stale" not in plain and "held-out" not in plain
