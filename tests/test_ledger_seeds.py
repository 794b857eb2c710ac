"""The ledger-seeds sweep: inputs of a chapter, stale points, the summary the ledger page shows."""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from attnbook import experiments as E
from attnbook import provenance
from attnbook.experiments import ledger_seeds as L
from attnbook.experiments import store

ROOT = Path(__file__).resolve().parents[1]


def test_chapter_inputs_follow_the_imports():
    inp = L.chapter_inputs("pde/particles", ROOT)
    assert "book/pde/particles.md" in inp
    # the ledger (every chapter opens one) and Part III's particle module
    assert "src/attnbook/claims.py" in inp and "src/attnbook/pde/particles.py" in inp
    assert "src/attnbook/pde/__init__.py" in inp  # the package above a module
    sha = hashlib.sha256((ROOT / "src/attnbook/claims.py").read_bytes()).hexdigest()
    assert inp["src/attnbook/claims.py"] == sha
    with pytest.raises(ValueError, match="no source file"):
        L.chapter_inputs("pde/no-such-chapter", ROOT)


def test_relative_imports_resolve_to_files():
    import ast

    tree = ast.parse("from .action import linear\nfrom .. import claims\nimport numpy")
    got = L._imports(tree, "attnbook.copyhead")
    assert {"attnbook.copyhead.action.linear", "attnbook.claims"} <= got
    assert not any(n.startswith("numpy") for n in got)


def test_asserting_cells_are_the_exercise_and_assert_cells():
    cells = L.asserting_cells("foundations/how-to-use", ROOT)
    text = (ROOT / "book/foundations/how-to-use.md").read_text()
    code = L._code_cells(text)
    assert cells and all(
        "assert" in code[i] or "exercises.check(" in code[i] for i in cells
    )


def test_sweep_mismatches_name_the_chapters_to_rerun():
    summary = {"chapters": {"a/b": {"ids": ["x", "y"]}, "c/d": {"ids": ["z"]}}}
    recs = [
        {"chapter": "a/b", "claims": [{"id": "x"}, {"id": "y"}]},
        {"chapter": "c/d", "claims": [{"id": "z2"}]},
        {"chapter": "e/f", "claims": [{"id": "w"}]},
        {"chapter": "g/h", "claims": []},
    ]
    out = L.sweep_mismatches(recs, summary)
    assert set(out) == {"c/d", "e/f"}
    assert "new: z2" in out["c/d"] and "no longer made: z" in out["c/d"]
    assert out["e/f"] == "not swept"


@dataclass(frozen=True)
class _Cfg:
    x: int = 1
    device: str = "cpu"
    dtype: str = "float64"


_FILES: dict[int, Path] = {}
_CALLS: list[int] = []


def _fn(cfg):
    _CALLS.append(cfg.x)
    return {"v": np.array([float(_FILES[cfg.x].read_text())])}


def _inputs(cfg):
    p = _FILES[cfg.x]
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()}


NAME = "test-inputs"
if NAME not in E._REGISTRY:
    E.register(
        E.Experiment(
            name=NAME,
            part="-",
            description="points that depend on a file each",
            function=_fn,
            config=_Cfg,
            scales={"smoke": E.Scale(axes={"x": (1, 2)})},
            inputs=_inputs,
        )
    )


def _two_input_files(tmp_path, monkeypatch):
    """A fake clean commit (changed by the caller through ``state``), one input file per
    point, and the run directory."""
    state = {"commit": "a" * 40, "dirty": False, "diff_sha256": None}
    monkeypatch.setattr(provenance, "git_state", lambda path=None: dict(state))
    for x in (1, 2):
        _FILES[x] = tmp_path / f"in{x}.txt"
        _FILES[x].write_text(str(x))
    return state, tmp_path / "run"


def test_a_point_whose_inputs_changed_is_stale_and_only_it_is_recomputed(
    tmp_path, monkeypatch
):
    from distributed import LocalCluster

    state, out = _two_input_files(tmp_path, monkeypatch)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as c:
        kw = dict(scheduler=c.scheduler_address, progress=False)
        rep = E.run(NAME, "smoke", out, **kw)
        assert rep.computed == 2 and not rep.stale
        meta = json.loads(next((out / "points").glob("*.json")).read_text())
        assert set(meta["inputs"]) <= {"in1.txt", "in2.txt"}
        _FILES[2].write_text("20")
        st = E.status(out)
        assert [s["axes"] for s in st["stale"]] == [{"x": 2}]
        # another commit: points with declared inputs certify themselves (no MixedCommits)
        state["commit"] = "b" * 40
        _CALLS.clear()
        rep = E.run(NAME, "smoke", out, **kw)
    assert rep.computed == 1 and _CALLS == [2]
    assert rep.stale[0]["changed"] == ["in2.txt"]
    assert E.status(out)["stale"] == []
    assert E.load(out)["v"].sel(x=2).values.tolist() == [20.0]


def test_only_recomputes_the_selected_stale_points(tmp_path, monkeypatch):
    from distributed import LocalCluster

    state, out = _two_input_files(tmp_path, monkeypatch)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as c:
        kw = dict(scheduler=c.scheduler_address, progress=False)
        E.run(NAME, "smoke", out, **kw)
        for x in (1, 2):  # a shared edit: both points stale
            _FILES[x].write_text(str(10 * x))
        _CALLS.clear()
        rep = E.run(NAME, "smoke", out, only={"x": ["2"]}, **kw)
        assert _CALLS == [2] and rep.computed == 1 and rep.left_out == 1
        assert [s["axes"] for s in E.status(out)["stale"]] == [{"x": 1}]
        with pytest.raises(ValueError, match="x=\\[3\\]"):
            E.run(NAME, "smoke", out, only={"x": [3]}, **kw)
        with pytest.raises(ValueError, match="unknown axes"):
            E.run(NAME, "smoke", out, only={"y": [1]}, **kw)


def test_load_keeps_text_outputs_of_an_unfinished_sweep(tmp_path):
    man = {
        "axes": {"x": [1, 2]},
        "points": [{"index": [0], "hash": "h0"}, {"index": [1], "hash": "h1"}],
        "experiment": "t",
        "scale": "smoke",
        "device": "cpu",
        "dtype": "float64",
    }
    (tmp_path / "points").mkdir()
    (tmp_path / store.MANIFEST).write_text(json.dumps(man))
    rs = store.RunStore(tmp_path, man)
    rs.write("h0", {"claim": np.array(["a.one", "a.two"])}, {})
    ds = store.load(tmp_path)
    assert ds["claim"].values.tolist() == [["a.one", "a.two"], ["", ""]]


def test_ledger_seeds_is_registered_over_the_books_chapters():
    from attnbook.claims import toc_chapters

    exp = E.get("ledger-seeds")
    book = exp.scale("book")
    assert list(book.axes["chapter"]) == toc_chapters(ROOT)
    assert book.axes["seed"] == L.SWEEP_SEEDS and len(L.SWEEP_SEEDS) >= 20
    assert not {0, 1, 2} & set(L.SWEEP_SEEDS)  # the seeds make test and test-seeds run
    assert exp.inputs is not None and exp.recheck is not None


def test_verify_rechecks_only_points_whose_inputs_are_current(tmp_path, monkeypatch):
    """A stale point ran other code than today's, so verify must not pick it; with every
    point stale there is nothing to re-check and verify says so."""
    from distributed import LocalCluster

    from attnbook.experiments import verify

    state, out = _two_input_files(tmp_path, monkeypatch)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as c:
        E.run(NAME, "smoke", out, scheduler=c.scheduler_address, progress=False)
    assert sorted(p["index"][0] for p in verify.quick_points(out)) == [0, 1]
    _FILES[1].write_text("10")  # point x = 1 is stale now
    assert [p["index"][0] for p in verify.quick_points(out)] == [1]
    for commit in ("0" * 40, "1" * 40, "2" * 40):  # whatever the commit picks
        assert verify.choose_point(out, commit=commit)[0]["index"] == [1]
    _FILES[2].write_text("20")
    with pytest.raises(ValueError, match="every point is stale"):
        verify.quick_points(out)


def test_the_archived_sweeps_readme_is_written_from_the_archive():
    from tools import ledger_seeds_readme

    archive = Path(__file__).resolve().parents[1] / "results" / "ledger-seeds"
    text = ledger_seeds_readme.readme(archive)
    summary = L.sweep_summary(archive)
    held = sum(c["passed"] == c["n"] for c in summary["claims"].values())
    assert f"{held}/{len(summary['claims'])} claims" in text
    # the committed README is what the tool writes (rerun it after every sweep)
    assert (archive / "README.md").read_text() == text


def test_the_held_out_archives_readme_is_written_from_the_archive():
    from tools import ledger_seeds_readme

    archive = ROOT / "results" / "ledger-heldout"
    text = ledger_seeds_readme.readme(archive)
    runs = L.held_out_summary(archive)["runs"]
    assert (
        f"chapter runs that failed a claim or a cell: {runs['k']}/{runs['n']}" in text
    )
    assert (archive / "README.md").read_text() == text


def test_held_out_seeds_come_from_the_inputs_and_avoid_the_fixed_seeds():
    digest = hashlib.sha256(b"a chapter and its modules").hexdigest()
    # by hand: the first 8 bytes (little-endian) of SHA-256("<digest>:<draw>")
    h = hashlib.sha256(f"{digest}:3".encode()).digest()
    assert L.held_out_seed(digest, 3) == 10**6 + int.from_bytes(h[:8], "little") % (
        10**9 - 10**6
    )
    seeds = [L.held_out_seed(digest, d) for d in range(50)]
    assert len(set(seeds)) == 50 and all(10**6 <= s < 10**9 for s in seeds)
    other = hashlib.sha256(b"one byte edited").hexdigest()
    assert L.held_out_seed(other, 3) != L.held_out_seed(digest, 3)
    with pytest.raises(ValueError, match="digest"):
        L.held_out_seed("abc", 0)
    with pytest.raises(ValueError, match="draw"):
        L.held_out_seed(digest, -1)
    exp = E.get("ledger-heldout")
    assert list(exp.scale("book").axes["draw"]) == list(range(L.HELD_OUT_DRAWS))
    assert exp.inputs is not None and exp.recheck is not None


def _held_out_archive(tmp_path, chapters, points):
    """A held-out archive by hand: ``points`` maps (chapter, draw) to (failed, stale)."""
    man = {
        "axes": {"chapter": list(chapters), "draw": [0, 1, 2]},
        "points": [
            {"index": [i, d], "hash": f"h{i}{d}"}
            for i in range(len(chapters))
            for d in range(3)
        ],
        "experiment": "ledger-heldout",
        "scale": "book",
        "device": "cpu",
        "dtype": "float64",
    }
    (tmp_path / "points").mkdir()
    (tmp_path / store.MANIFEST).write_text(json.dumps(man))
    rs = store.RunStore(tmp_path, man)
    for (chapter, d), (failed, stale) in points.items():
        inputs = {} if stale else L.chapter_inputs(chapter, ROOT)
        rs.write(
            f"h{chapters.index(chapter)}{d}",
            {
                "claim": np.array(["a.one", "a.two"]),
                "claim_passed": np.array([True, not failed]),
                "failed_cell": np.array([], dtype=np.int64),
                "failed_error": np.array([], dtype=str),
                "seed": np.int64(10**6 + d),
            },
            {"inputs": inputs, "git_commit": "c" * 40},
        )
    return tmp_path


def test_held_out_summary_counts_current_points_with_exact_intervals(tmp_path):
    from scipy.stats import beta

    chapters = ["foundations/how-to-use", "pde/gradient-flow"]
    pts = {
        (chapters[0], 0): (False, False),
        (chapters[1], 0): (False, False),
        (chapters[0], 1): (True, False),  # fails: draw 1 fails the book
        (chapters[1], 1): (False, False),
        (chapters[0], 2): (False, False),
        (chapters[1], 2): (True, True),  # stale: neither its failure nor draw 2 counts
    }
    out = L.held_out_summary(_held_out_archive(tmp_path, chapters, pts), ROOT)
    assert (out["runs"]["k"], out["runs"]["n"]) == (1, 5)
    assert (out["book"]["k"], out["book"]["n"]) == (1, 2)
    lo, hi = out["runs"]["interval"]
    assert lo == pytest.approx(beta.ppf(0.025, 1, 5)) and hi == pytest.approx(
        beta.ppf(0.975, 2, 4)
    )
    assert out["chapters"][chapters[1]] == {"n": 2, "k": 0, "stale": 1}
    bad = [q for q in out["points"] if q["failed"] and not q["stale"]]
    assert [(q["chapter"], q["seed"], q["why"]) for q in bad] == [
        (chapters[0], 10**6 + 1, ["claim a.two"])
    ]
    empty = L.held_out_summary(tmp_path / "none", ROOT, missing_ok=True)
    assert empty["runs"]["n"] == 0 and empty["book"]["interval"] == (0.0, 1.0)
