"""The commit-derived seed of make test-seeds."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from commit_seed import commit_seed  # noqa: E402


def test_seed_is_derived_from_the_commit_and_outside_the_fixed_seeds():
    assert commit_seed("0" * 40) == 1000
    assert commit_seed("ffffffff" + "0" * 32) == 1000 + 0xFFFFFFFF % 10**6
    seeds = {commit_seed(f"{i:08x}" + "a" * 32) for i in range(0, 2**32, 2**26)}
    assert min(seeds) >= 1000  # never 0–2 (make test, test-seeds) nor 3–22 (the sweep)
    for bad in ("abc", "zzzzzzzz", None):
        with pytest.raises(ValueError, match="commit"):
            commit_seed(bad)


def test_the_script_prints_the_seed_of_head():
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools/commit_seed.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if head:
        assert out == str(commit_seed(head))
