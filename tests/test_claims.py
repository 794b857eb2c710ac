import json

import numpy as np
import pytest
import torch
from scipy import stats

from attnbook import claims
from attnbook.claims import ClaimFailed, Ledger
from attnbook.notebook import chapter_seed

EXACT = dict(kind="identity", source="derived")
BOUND = dict(kind="experiment", source="measured", note="a stated scale", null=10.0)


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
    c = led.check("s.mean", "mean near 2", samples=x, expected=2.0, atol=0.5, **BOUND)
    half = stats.t.ppf(0.975, 11) * x.std(ddof=1) / np.sqrt(12)
    assert c.n == 12 and c.measured == pytest.approx(x.mean())
    assert c.interval == pytest.approx([x.mean() - half, x.mean() + half])
    assert c.std_err == pytest.approx(x.std(ddof=1) / np.sqrt(12))
    # margin: the interval's distance to the edge of expected ± tol, in units of the effect
    effect = abs(x.mean() - 10.0)
    assert c.effect == pytest.approx(effect)
    assert c.margin == pytest.approx((0.5 - abs(x.mean() - 2.0) - half) / effect)


def test_runs_meeting_counts_single_samples_against_the_criterion(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    low = dict(BOUND, null=0.0)
    # a mean well above the bound, with two single runs below it
    x = np.array([2.0, 2.1, 1.9, 2.05, 0.9, 2.2, 1.95, 0.95, 2.1, 2.0, 2.05, 1.98])
    c = led.check("r.lower", "above 0.5 on average", samples=x, lower=0.5, **low)
    assert c.runs_meeting() == (12, 12)
    c = led.check("r.lower1", "above 1 on average", samples=x, lower=1.0, **low)
    assert c.runs_meeting() == (10, 12) and c.runs_text().startswith("10 of 12")
    c = led.check(
        "r.band", "near 2", samples=x, expected=2.0, atol=1.5, upper=2.15, **low
    )
    assert c.runs_meeting() == (11, 12)  # 2.2 is above the upper bound
    one = led.check("r.one", "one number", 3.0, lower=1.0, **low)
    assert one.runs_meeting() is None and one.runs_text() == ""
    assert "10 of 12 runs" in led.claims[1]._repr_html_()


def test_noise_never_helps_a_claim_pass(tmp_path):
    # five samples with sd 5 around 0.37: the interval is wider than any sensible tolerance,
    # so neither 0.37 nor 0 is "confirmed" (the old overlap rule confirmed both)
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    rng = np.random.default_rng(3)
    x = 0.37 + 5 * rng.standard_normal(5)
    for i, target in enumerate((0.37, 0.0)):
        with pytest.raises(ClaimFailed):
            led.check(f"n.{i}", "s", samples=x, expected=target, atol=0.1, **BOUND)
    # the same centre with a tight spread passes: the interval lies inside ± tol
    tight = 0.37 + 0.01 * rng.standard_normal(20)
    led.check("n.tight", "s", samples=tight, expected=0.37, atol=0.1, **BOUND)
    with pytest.raises(ValueError, match="tolerance"):
        led.check("n.notol", "s", samples=tight, expected=0.37, **BOUND)


def test_a_claim_the_null_passes_too_is_refused(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    base = dict(kind="experiment", source="derived", note="n")
    # π − 1/d against log π, 0.0064 apart, under a bound of 0.01: cannot discriminate
    d, pi = 5, 0.9
    with pytest.raises(claims.CannotDiscriminate, match="cannot discriminate"):
        led.check(
            "r.close",
            "s",
            pi - 1 / d,
            expected=pi - 1 / d,
            atol=0.01,
            null=pi - 1 / d - 0.0064,
            **base,
        )
    rec = led.record()["claims"][-1]
    assert not rec["passed"] and "cannot discriminate" in rec["refused"]
    # a ratio "≤ 1" on one number when no effect is a ratio of 1: the null passes (1 ≤ 1)
    with pytest.raises(claims.CannotDiscriminate):
        led.check("r.sign", "s", 0.5, upper=1.0, null=1.0, **base)
    # with samples the null is still a value, judged with no interval: on the bound, it
    # passes, so a sign claim must set its bound away from the null (not only on its side)
    x = 0.5 + 0.01 * np.arange(-3, 4)
    with pytest.raises(claims.CannotDiscriminate, match="the null 1 passes"):
        led.check("r.sign-samples", "s", samples=x, upper=1.0, null=1.0, **base)
    c = led.check("r.sign-moved", "s", samples=x, upper=0.95, null=1.0, **base)
    assert c.passed and c.discrimination == pytest.approx(0.1) and not c.too_loose
    # several nulls: each must fail
    with pytest.raises(claims.CannotDiscriminate, match="0.45"):
        led.check("r.many", "s", 0.5, lower=0.4, null=[0.0, 0.45], **base)
    # experiments and observations must name a null
    with pytest.raises(ValueError, match="null"):
        led.check(
            "r.none",
            "s",
            0.5,
            upper=1.0,
            kind="observation",
            source="measured",
            note="n",
        )


def test_derivations_need_a_tolerance_far_below_their_scale(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    c = led.check("d.ok", "s", 2.0 + 1e-12, expected=2.0, rtol=1e-9, **EXACT)
    assert c.null == [0.0] and c.discrimination > 0.99
    with pytest.raises(claims.CannotDiscriminate, match="own scale"):
        led.check("d.wide", "s", 2.0, expected=2.0, rtol=0.05, note="n", **EXACT)
    with pytest.raises(ValueError, match="null"):  # a residual needs its scale
        led.check("d.res", "s", 1e-16, upper=1e-12, note="n", **EXACT)
    c = led.check("d.res2", "s", 1e-16, upper=1e-12, null=1.0, note="n", **EXACT)
    assert c.discrimination == pytest.approx(1 - 1e-12, rel=1e-9)


@pytest.mark.parametrize("sd", [0.0, 0.01, 0.1, 0.3, 1.0])
def test_noise_does_not_buy_a_claim_out_of_its_null(tmp_path, sd):
    """Expected 0.37 ± 0.5 with null 0: the null lies inside the tolerance, so the claim is
    refused at any noise level (the null is judged with no interval)."""
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    base = dict(kind="experiment", source="measured", note="n", null=0.0)
    rng = np.random.default_rng(3)
    x = 0.37 + sd * rng.standard_normal(64)
    with pytest.raises(ClaimFailed):  # refused, or failed outright when noise is large
        if sd == 0.0:
            led.check("z.one", "s", 0.37, expected=0.37, atol=0.5, **base)
        else:
            led.check("z.samples", "s", samples=x, expected=0.37, atol=0.5, **base)
    rec = led.record()["claims"][-1]
    assert not rec["passed"]
    if sd <= 0.1:  # the interval fits the tolerance: only the null refuses it
        assert "cannot discriminate" in rec["refused"]


@pytest.mark.parametrize("null", [None, 0.0, 10.0, 1e6, [1e6, -1e6]])
def test_an_identity_at_thirty_percent_is_refused_whatever_its_null(tmp_path, null):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    kw = {} if null is None else {"null": null}
    for kind in ("identity", "derivation"):
        with pytest.raises(claims.CannotDiscriminate):
            led.check(
                f"id.{kind}",
                "s",
                1.1,
                expected=1.0,
                rtol=0.3,
                note="n",
                kind=kind,
                source="derived",
                **kw,
            )
        assert not led.record()["claims"][-1]["passed"]
    # the same agreement at 1 % with a far null holds
    c = led.check(
        "id.ok", "s", 1.001, expected=1.0, rtol=0.005, note="n", **EXACT, **kw
    )
    assert c.passed


def test_a_claim_its_rival_passes_is_refused(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    base = dict(kind="experiment", source="measured", note="n", null=0.0)
    x = -0.5 + 0.02 * np.arange(-4, 5)  # mean −0.5, interval about ±0.05
    # the rival meets the criterion (a sign claim θ ≤ −0.2): refused, whatever the interval
    with pytest.raises(
        claims.CannotDiscriminate, match="rival .A scaled by 1.2. passes"
    ):
        led.check(
            "v.pass",
            "s",
            samples=x,
            upper=-0.2,
            rival=("A scaled by 1.2", -0.3),
            **base,
        )
    # one of its values inside the tolerance (here inside the measured interval): refused
    near = dict(samples=x, expected=-0.5, atol=0.07, **base)
    with pytest.raises(claims.CannotDiscriminate, match="power law.*-0.46"):
        led.check("v.inside", "s", rival=("a power law", [-0.9, -0.46]), **near)
    # excluded: recorded with its name, values, discrimination and distance in half-widths
    c = led.check("v.ok", "s", rival=("a power law", [-0.9, -0.7]), **near)
    half = (c.interval[1] - c.interval[0]) / 2
    assert c.passed and c.rival_name == "a power law" and c.rival == [-0.9, -0.7]
    assert c.rival_excluded_by == pytest.approx(0.2 / half)
    assert c.rival_discrimination == pytest.approx((0.2 - 0.07) / 0.2)
    assert "a power law predicts -0.9, -0.7" in c._repr_html_()
    rec = json.loads(led.path.read_text())["claims"][-1]
    assert rec["rival_name"] == "a power law" and rec["rival"] == [-0.9, -0.7]
    with pytest.raises(TypeError, match="rival"):
        led.check("v.bad", "s", samples=x, upper=-0.2, rival=-0.3, **base)
    # a rival alone stands for the null: margin and discrimination are measured against it
    nobase = {k: v for k, v in base.items() if k != "null"}
    c = led.check("v.alone", "s", samples=x, upper=-0.3, rival=("r", -0.1), **nobase)
    assert c.passed and c.null == [] and c.effect == pytest.approx(0.4)
    assert c.discrimination == pytest.approx(0.2 / 0.4) == c.rival_discrimination
    with pytest.raises(claims.CannotDiscriminate, match="rival .r. passes"):
        led.check(
            "v.alone-bad", "s", samples=x, upper=-0.3, rival=("r", -0.35), **nobase
        )
    with pytest.raises(ValueError, match="null.*or its rival"):
        led.check("v.neither", "s", samples=x, upper=-0.3, **nobase)
    with pytest.raises(ValueError, match="rival"):
        led.check("v.nan", "s", samples=x, upper=-0.2, rival=("r", np.nan), **base)


def test_bounds_hold_on_the_whole_interval(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    x = np.array([1.0, 1.2, 0.8, 1.1, 0.9])  # mean 1, interval about ±0.2
    led.check("i.ok", "above 0.5", samples=x, lower=0.5, **{**BOUND, "null": 0.0})
    # every draw and the mean are above 0.85, but the interval is not
    with pytest.raises(ClaimFailed):
        led.check("i.bad", "above 0.85", samples=x, lower=0.85, **BOUND)
    # an expected value outside interval + tolerance fails
    with pytest.raises(ClaimFailed):
        led.check("i.far", "near 1.5", samples=x, expected=1.5, atol=0.1, **BOUND)
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


def test_margins_in_units_of_the_effect(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    exp = dict(kind="experiment", source="derived", note="n")
    # expected 1 ± 0.1, null 0: margin (0.1 − 0.02)/1.02, discrimination (1 − 0.1)/1.02
    c = led.check("m.tol", "t", 1.02, expected=1.0, rtol=0.1, null=0.0, **exp)
    assert c.margin == pytest.approx(0.08 / 1.02)
    assert c.discrimination == pytest.approx(0.9 / 1.02)
    # one bound on one number: margin + discrimination = 1, whatever the form
    c = led.check("m.loose", "l", 0.05, upper=9.5, null=10.0, **exp)
    assert c.margin + c.discrimination == pytest.approx(1.0) and c.too_loose
    assert "too loose" in c.discrimination_text()
    s = claims.ledger_summary(claims.load_records(tmp_path))
    assert s["n_claims"] == 2 and s["by_kind"]["experiment"] == 2
    assert [x.id for x in s["too_loose"]] == ["m.loose"]
    assert s["smallest_margins"][0].id == "m.tol"
    assert s["weakest_discrimination"][0].id == "m.loose"


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
    assert claims.claim_slack(led.record()["claims"][-1]) == pytest.approx(-1.0)
    html = claims.ledger_table_html(
        claims.load_records(tmp_path), stale={"foundations/attention-maps"}
    )
    assert "✘ FAIL" in html and "(stale)" in html and "f.ok" in html
    assert "margin" in html and "experiment · measured" in html


def test_toc_chapters_and_status(tmp_path):
    ids = claims.toc_chapters()
    assert "foundations/attention-maps" in ids and "reference/claims-ledger" not in ids
    # the pages that read the ledger make no claims of their own
    assert claims.reads_ledger("focus/findings") and claims.reads_ledger(
        "reference/claims-ledger"
    )
    assert not claims.reads_ledger("focus/findings-extra")
    assert not any(claims.reads_ledger(i) for i in ids)
    assert all(not i.endswith("index") for i in ids)
    status = claims.ledger_status(directory=tmp_path)
    assert "foundations/attention-maps" in status["missing"]


def test_exact_claims_have_no_margin(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path)
    c = led.check("x.zero", "no residual", 0, expected=0, atol=0, null=1, **EXACT)
    assert c.margin is None and c.margin_text() == "n/a"
    s = claims.ledger_summary(claims.load_records(tmp_path))
    assert s["smallest_margins"] == []


def test_a_claim_renders_as_a_chip_that_opens_on_its_evidence(tmp_path):
    """A passing claim is one closed line (✔, statement, the number to 3 digits) whose
    details hold the criterion, null, interval and note; a failing one is shown open."""
    import re

    led = Ledger("foundations/attention-maps", title="AM", directory=tmp_path, seed=7)
    ok = led.check("a.ok", "an error is small", 1.23456e-9, upper=1e-6, **BOUND)
    page = ok._repr_html_()
    summary = re.search(r"<summary>(.*?)</summary>", page).group(1)
    assert (
        page.startswith('<details class="attnbook-claim') and " open" not in page[:60]
    )
    assert "✔" in summary and "an error is small" in summary and "1.23e-09" in summary
    folded = page.split("</summary>", 1)[1]
    assert "≤" not in summary and f"≤ {ok.criterion()[2:]}" in folded  # the criterion
    assert "a stated scale" in folded and "<dt>null</dt>" in folded
    with pytest.raises(ClaimFailed):
        led.check("a.bad", "too large", 2.0, upper=1.0, **BOUND)
    bad = led.claims[-1]._repr_html_()
    assert " open>" in bad[:80] and "✘" in bad


def test_the_ledger_page_folds_by_part_and_chapter(tmp_path):
    """One fold per part, one per chapter inside it, each line counting the claims; a
    chapter with a failed claim, and its part, are shown open."""
    led = Ledger("focus/focus", title="Focus", directory=tmp_path, seed=0)
    led.check("f.ok", "fine", 0.5, upper=1.0, **BOUND)
    with pytest.raises(ClaimFailed):
        led.check("f.bad", "broken", 2.0, upper=1.0, **BOUND)
    ok = Ledger("foundations/attention-maps", title="AM", directory=tmp_path, seed=0)
    ok.check("a.ok", "fine", 0.5, upper=1.0, **BOUND)
    page = claims.ledger_by_part_html(claims.load_records(tmp_path))
    assert page.count('class="attnbook-ledger-part"') == 2
    assert page.index("Foundations") < page.index("Part I")  # the book's order
    assert "Foundations: 1 claims in 1 chapters, all held</summary>" in page
    assert '<details class="attnbook-ledger-part" open><summary>Part I' in page
    assert "2 claims, 1 failed" in page and "1 claims, all held" in page
    assert (
        claims.claim_anchor("focus/focus", "f.bad") in page
    )  # rows keep their anchors
    stale = claims.ledger_by_part_html(
        claims.load_records(tmp_path), stale={"foundations/attention-maps"}
    )
    assert "1 claims, stale" in stale


@pytest.mark.slow
def test_a_cells_claims_fold_into_one_chip_in_a_kernel(tmp_path):
    """In a kernel run without history (as nbval runs chapters), the claims one cell checks
    share one display: one claim is its chip, three fold into one line that opens on the three
    chips; the next cell starts a display of its own."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    setup = (
        "from attnbook.claims import Ledger\n"
        f"led = Ledger('foundations/attention-maps', directory={str(tmp_path)!r}, seed=0)\n"
        f"kw = {BOUND!r}"
    )
    three = "\n".join(
        f"led.check('g.c{i}', 'claim number {i}', 0.{i}, upper=1.0, **kw)"
        for i in (1, 2, 3)
    )
    one = "led.check('g.alone', 'a lone claim', 0.5, upper=1.0, **kw)"
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(c) for c in (setup, three, one)]
    )
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3")
    client.execute()
    html = [
        [
            o["data"]["text/html"]
            for o in cell.outputs
            if "text/html" in o.get("data", {})
        ]
        for cell in nb.cells
    ]
    assert html[0] == []
    (group,) = html[1]
    assert group.startswith('<details class="attnbook-claim attnbook-claims')
    assert "<b>3 claims</b> hold here" in group.split("</summary>", 1)[0]
    assert all(
        f"claim number {i}" in group.split("</summary>", 1)[1] for i in (1, 2, 3)
    )
    (alone,) = html[2]
    assert "attnbook-claims" not in alone and "a lone claim" in alone


def test_a_group_with_a_failed_claim_is_open(tmp_path):
    led = Ledger("foundations/attention-maps", directory=tmp_path, seed=0)
    led.check("g.ok", "fine", 0.5, upper=1.0, **BOUND)
    with pytest.raises(ClaimFailed):
        led.check("g.bad", "too large", 2.0, upper=1.0, **BOUND)
    page = claims.claims_group_html(led.claims)
    head = page.split("</summary>", 1)[0]
    assert " open>" in head and "✘" in head and "1 of 2 claims</b> failed" in head
    with pytest.raises(ValueError, match="claims"):
        claims.claims_group_html([])
