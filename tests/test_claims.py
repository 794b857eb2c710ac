import json

import numpy as np
import pytest
import torch
from scipy import stats

from attnbook import claims
from attnbook.claims import ClaimFailed, Ledger
from attnbook.notebook import chapter_seed

EXACT = dict(kind="identity", source="derived")
BOUND = dict(kind="experiment", source="measured", note="a stated scale")


def test_check_passes_records_and_shows(tmp_path):
    led = Ledger("foundations/attention-maps", title="AM", directory=tmp_path, seed=7)
    c = led.check(
        "a.close",
        "close to pi",
        3.14159,
        expected=np.pi,
        rtol=1e-5,
        note="5 digits",
        **EXACT,
    )
    assert c.passed and c.criterion().startswith("≈ 3.14159")
    assert "3.14159" in c._repr_html_() and "margin" in c._repr_html_()
    led.check("a.bound", "an error is small", torch.tensor(1e-9), upper=1e-6, **BOUND)
    led.check("a.range", "in range", np.float64(0.5), lower=0.4, upper=0.6, **BOUND)
    rec = json.loads((tmp_path / "foundations__attention-maps.json").read_text())
    assert [x["id"] for x in rec["claims"]] == ["a.close", "a.bound", "a.range"]
    assert rec["source_sha256"] and rec["title"] == "AM" and rec["seed"] == 7
    first = rec["claims"][0]
    for key in ("kind", "source", "n", "interval", "margin"):
        assert key in first
    assert first["n"] == 1 and first["interval"] is None
    assert led.all_passed


def test_samples_give_a_student_t_interval(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    x = np.random.default_rng(1).normal(2.0, 0.3, size=12)
    c = led.check("s.mean", "mean near 2", samples=x, expected=2.0, **BOUND)
    half = stats.t.ppf(0.975, 11) * x.std(ddof=1) / np.sqrt(12)
    assert c.n == 12 and c.measured == pytest.approx(x.mean())
    assert c.interval == pytest.approx([x.mean() - half, x.mean() + half])
    assert c.std_err == pytest.approx(x.std(ddof=1) / np.sqrt(12))
    # margin: slack to the edge of (interval ∪ tolerance), in units of the half-width
    assert c.margin == pytest.approx((half - abs(x.mean() - 2.0)) / half)


def test_bounds_hold_on_the_whole_interval(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    x = np.array([1.0, 1.2, 0.8, 1.1, 0.9])  # mean 1, interval about ±0.2
    led.check("i.ok", "above 0.5", samples=x, lower=0.5, **BOUND)
    # every draw and the mean are above 0.85, but the interval is not
    with pytest.raises(ClaimFailed):
        led.check("i.bad", "above 0.85", samples=x, lower=0.85, **BOUND)
    # an expected value outside interval + tolerance fails
    with pytest.raises(ClaimFailed):
        led.check("i.far", "near 1.5", samples=x, expected=1.5, **BOUND)
    with pytest.raises(ClaimFailed):  # a diverged member fails the claim
        led.check("i.nan", "nan", samples=[1, 2, np.nan, 3, 4], lower=0, **BOUND)


def test_failed_claim_raises_and_is_recorded(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    with pytest.raises(ClaimFailed, match="measured 2"):
        led.check("b.fail", "two is below one", 2.0, upper=1.0, **BOUND)
    with pytest.raises(AssertionError):  # ClaimFailed is an AssertionError: nbval fails
        led.check("b.nan", "NaN never passes", float("nan"), upper=1.0, **BOUND)
    rec = led.record()
    assert [x["passed"] for x in rec["claims"]] == [False, False]
    assert not led.all_passed


def test_expected_defaults_to_tight_tolerance(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    led.check("c.exact", "exact", 1.0, expected=1.0, **EXACT)
    with pytest.raises(ClaimFailed):
        led.check("c.inexact", "inexact", 1.0 + 1e-6, expected=1.0, **EXACT)


def test_margins(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    c = led.check("m.tol", "t", 1.02, expected=1.0, rtol=0.1, note="n", **EXACT)
    assert c.margin == pytest.approx(0.8)
    c = led.check("m.loose", "l", 0.05, upper=10.0, **BOUND)
    assert c.margin == pytest.approx(199.0) and c.too_loose
    assert "too loose" in c.margin_text()
    s = claims.ledger_summary(claims.load_records(tmp_path))
    assert s["n_claims"] == 2 and s["by_kind"]["identity"] == 1
    assert [x.id for x in s["too_loose"]] == ["m.loose"]
    assert s["smallest_margins"][0].id == "m.tol"


def test_new_ledger_replaces_old_record(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    led.check("d.one", "one", 1.0, expected=1.0, **EXACT)
    Ledger("foundations/attention-maps", directory=tmp_path)
    assert claims.load_records(tmp_path)[0]["claims"] == []


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(claim_id="", measured=1.0, upper=1, **BOUND), ValueError, "claim_id"),
        (dict(statement="", measured=1.0, upper=1, **BOUND), ValueError, "statement"),
        (dict(measured=1.0, **BOUND), ValueError, "criterion"),
        (dict(measured="big", upper=1, **BOUND), TypeError, "measured"),
        (dict(measured=np.ones(3), upper=1, **BOUND), TypeError, "measured"),
        (
            dict(measured=1.0, upper=1, kind="guess", source="derived", note="n"),
            ValueError,
            "kind",
        ),
        (
            dict(measured=1.0, upper=1, kind="identity", source="rumour", note="n"),
            ValueError,
            "source",
        ),
        (dict(measured=1.0, expected=1, rtol=-1, **EXACT), ValueError, "rtol"),
        (dict(measured=1.0, upper=2, **EXACT), ValueError, "reason"),
        (dict(measured=1.0, expected=1, rtol=0.1, **EXACT), ValueError, "reason"),
        (dict(samples=[1.0, 2.0], upper=3, **BOUND), ValueError, "at least 5"),
        (dict(samples=np.ones((5, 2)), upper=3, **BOUND), ValueError, "1-D"),
        (
            dict(measured=1.0, samples=np.ones(5), upper=3, **BOUND),
            ValueError,
            "exactly one",
        ),
        (dict(measured=1.0, rtol=0.1, upper=3, **BOUND), ValueError, "expected"),
    ],
)
def test_bad_claims_are_refused(tmp_path, kwargs, exc, match):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    kwargs = {"claim_id": "x", "statement": "s", **kwargs}
    with pytest.raises(exc, match=match):
        led.check(**kwargs)


def test_expected_copied_from_a_run_is_refused(tmp_path):
    # attention-maps.md has code; any literal of ≥ 4 significant digits there is refused
    import re

    src = claims.chapter_source("foundations/attention-maps").read_text()
    code = "\n".join(re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", src, re.S))
    lits = [m for m in re.findall(r"(?<![\w.])(\d+\.\d{4,})", code)]
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    if lits:
        with pytest.raises(ValueError, match="earlier run"):
            led.check("k.copied", "c", float(lits[0]), expected=float(lits[0]), **EXACT)
    # a short closed-form number is fine
    led.check("k.half", "h", 0.5, expected=0.5, **EXACT)


def test_duplicate_ids_and_bad_chapters(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    led.check("e", "s", 1.0, upper=2, **BOUND)
    with pytest.raises(ValueError, match="twice"):
        led.check("e", "s", 1.0, upper=2, **BOUND)
    with pytest.raises(ValueError, match="no source file"):
        Ledger("foundations/no-such-chapter", directory=tmp_path)
    with pytest.raises(ValueError, match="chapter"):
        Ledger("../etc/passwd", directory=tmp_path)


def test_ledger_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBOOK_LEDGER_DIR", str(tmp_path / "here"))
    assert claims.ledger_dir() == tmp_path / "here"


def test_seed_from_environment(monkeypatch):
    monkeypatch.delenv("ATTNBOOK_SEED", raising=False)
    assert chapter_seed() == 0 and chapter_seed(4) == 4
    monkeypatch.setenv("ATTNBOOK_SEED", "3")
    assert chapter_seed() == 3
    monkeypatch.setenv("ATTNBOOK_SEED", "three")
    with pytest.raises(ValueError, match="ATTNBOOK_SEED"):
        chapter_seed()
    with pytest.raises(ValueError, match="seed"):
        chapter_seed(-1)


def test_table_html_marks_failures_and_stale(tmp_path):
    led = Ledger("foundations/attention-maps", title="AM", directory=tmp_path)
    led.check("f.ok", "fine", 0.5, upper=1, **BOUND)
    with pytest.raises(ClaimFailed):
        led.check("f.bad", "not fine", 2.0, upper=1, **BOUND)
    html = claims.ledger_table_html(
        claims.load_records(tmp_path), stale={"foundations/attention-maps"}
    )
    assert "✘ FAIL" in html and "(stale)" in html and "f.ok" in html
    assert "margin" in html and "experiment · measured" in html


def test_toc_chapters_and_status(tmp_path):
    ids = claims.toc_chapters()
    assert "foundations/attention-maps" in ids and "reference/claims-ledger" not in ids
    assert all(not i.endswith("index") for i in ids)
    status = claims.ledger_status(directory=tmp_path)
    assert "foundations/attention-maps" in status["missing"]


def test_exact_claims_have_no_margin(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    c = led.check("x.zero", "no residual", 0, expected=0, atol=0, **EXACT)
    assert c.margin is None and c.margin_text() == "n/a"
    s = claims.ledger_summary(claims.load_records(tmp_path))
    assert s["smallest_margins"] == []
