"""Unit tests of tools/numeric_paths.py: the paths it picks and how it compares two ledgers."""

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import numeric_paths  # noqa: E402


def _claim(measured, interval=None, passed=True, **criterion):
    return {"measured": measured, "interval": interval, "passed": passed, **criterion}


def test_candidate_paths_add_avx2_only_with_avx512():
    names = [n for n, _ in numeric_paths.candidate_paths("flags : fpu sse avx2\n")]
    assert names == ["default", "COMPATIBLE"]
    paths = dict(numeric_paths.candidate_paths("flags : avx2 avx512f avx512bw\n"))
    assert paths["AVX2"] == {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    assert paths["COMPATIBLE"] == {"MKL_CBWR": "COMPATIBLE"} and paths["default"] == {}


def test_path_env_replaces_the_mkl_variables(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    env = numeric_paths.path_env({"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, Path("/x"))
    assert "MKL_CBWR" not in env and env["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    assert env["ATTNBOOK_LEDGER_DIR"] == "/x"


def test_slack_is_the_distance_to_the_nearest_bound():
    assert math.isclose(numeric_paths.slack(_claim(0.3, upper=0.5)), 0.2)
    # samples: the interval's nearest end counts; the whole interval must sit inside ± tol
    assert math.isclose(
        numeric_paths.slack(_claim(0.3, [0.2, 0.4], lower=0.0, upper=0.5)), 0.1
    )
    near = _claim(1.01, [1.0, 1.02], expected=1.0, rtol=0.05)
    assert math.isclose(numeric_paths.slack(near), 0.05 - 0.01 - 0.01)
    assert numeric_paths.slack(_claim(2.0, expected=2.0, atol=0.5)) == 0.5


def test_compare_flags_moves_flips_and_missing_claims():
    base = {
        ("c", "still"): _claim(0.3, upper=0.5),
        ("c", "moves"): _claim(0.3, upper=0.5),
        ("c", "flips"): _claim(0.3, upper=0.5),
        ("c", "gone"): _claim(0.3, upper=0.5),
    }
    other = {
        ("c", "still"): _claim(0.3 + 1e-16, upper=0.5),
        ("c", "moves"): _claim(0.35, upper=0.5),
        ("c", "flips"): _claim(0.6, upper=0.5, passed=False),
    }
    result = numeric_paths.compare(base, other, fraction=0.1)
    text = "\n".join(result["problems"])
    assert "c: moves: moved 0.05" in text and "c: flips: passed True" in text
    assert "c: gone: not recorded" in text and "c: still" not in text
    assert result["rows"][0][3] == "c: flips"  # sorted by the move over the slack
