import json

import numpy as np
import pytest
import torch

from attnbook import claims
from attnbook.claims import ClaimFailed, Ledger


def test_check_passes_records_and_shows(tmp_path):
    led = Ledger(
        "foundations/attention-maps", title="Attention maps", directory=tmp_path
    )
    c = led.check(
        "a.close", "a number is close to pi", 3.14159, expected=np.pi, rtol=1e-5
    )
    assert (
        c.passed
        and c.criterion().startswith("≈ 3.14159")
        and "3.14159" in c._repr_html_()
    )
    led.check("a.bound", "an error is small", torch.tensor(1e-9), upper=1e-6)
    led.check("a.range", "a ratio is in range", np.float64(0.5), lower=0.4, upper=0.6)
    rec = json.loads((tmp_path / "foundations__attention-maps.json").read_text())
    assert [x["id"] for x in rec["claims"]] == ["a.close", "a.bound", "a.range"]
    assert rec["source_sha256"] and rec["title"] == "Attention maps"
    assert led.all_passed


def test_failed_claim_raises_and_is_recorded(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    with pytest.raises(ClaimFailed, match="measured 2"):
        led.check("b.fail", "two is below one", 2.0, upper=1.0)
    with pytest.raises(AssertionError):  # ClaimFailed is an AssertionError: nbval fails
        led.check("b.nan", "NaN never passes", float("nan"), upper=1.0)
    rec = led.record()
    assert [x["passed"] for x in rec["claims"]] == [False, False]
    assert not led.all_passed


def test_expected_defaults_to_tight_tolerance(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    led.check("c.exact", "exact", 1.0, expected=1.0)
    with pytest.raises(ClaimFailed):
        led.check("c.inexact", "inexact", 1.0 + 1e-6, expected=1.0)


def test_new_ledger_replaces_old_record(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    led.check("d.one", "one", 1.0, expected=1.0)
    Ledger("foundations/attention-maps", directory=tmp_path)
    assert claims.load_records(tmp_path)[0]["claims"] == []


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (
            dict(claim_id="", statement="s", measured=1.0, upper=1),
            ValueError,
            "claim_id",
        ),
        (
            dict(claim_id="x", statement="", measured=1.0, upper=1),
            ValueError,
            "statement",
        ),
        (dict(claim_id="x", statement="s", measured=1.0), ValueError, "criterion"),
        (
            dict(claim_id="x", statement="s", measured="big", upper=1),
            TypeError,
            "measured",
        ),
        (
            dict(claim_id="x", statement="s", measured=np.ones(3), upper=1),
            TypeError,
            "measured",
        ),
        (
            dict(claim_id="x", statement="s", measured=1.0, upper=1, source="rumour"),
            ValueError,
            "source",
        ),
        (
            dict(claim_id="x", statement="s", measured=1.0, expected=1, rtol=-1),
            ValueError,
            "rtol",
        ),
    ],
)
def test_bad_claims_are_refused(tmp_path, kwargs, exc, match):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    with pytest.raises(exc, match=match):
        led.check(**kwargs)


def test_duplicate_ids_and_bad_chapters(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    led.check("e", "s", 1.0, upper=2)
    with pytest.raises(ValueError, match="twice"):
        led.check("e", "s", 1.0, upper=2)
    with pytest.raises(ValueError, match="no source file"):
        Ledger("foundations/no-such-chapter", directory=tmp_path)
    with pytest.raises(ValueError, match="chapter"):
        Ledger("../etc/passwd", directory=tmp_path)


def test_ledger_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBOOK_LEDGER_DIR", str(tmp_path / "here"))
    assert claims.ledger_dir() == tmp_path / "here"


def test_table_html_marks_failures_and_stale(tmp_path):
    led = Ledger("foundations/attention-maps", title="AM", directory=tmp_path)
    led.check("f.ok", "fine", 0.0, upper=1)
    with pytest.raises(ClaimFailed):
        led.check("f.bad", "not fine", 2.0, upper=1)
    html = claims.ledger_table_html(
        claims.load_records(tmp_path), stale={"foundations/attention-maps"}
    )
    assert "✘ FAIL" in html and "(stale)" in html and "f.ok" in html
