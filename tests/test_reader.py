"""The reader's page: verification folded, no end-of-chapter ledger tables (issue 48)."""

import re
from pathlib import Path

from tools import fold_checks

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("foundations", "focus", "copyhead", "pde")


def _chapters():
    return [
        p
        for part in PARTS
        for p in sorted((ROOT / "book" / part).glob("*.md"))
        if "kernelspec:" in p.read_text(encoding="utf-8")
    ]


def test_every_check_cell_of_a_chapter_is_folded():
    missing = {
        p.relative_to(ROOT).as_posix(): fold_checks.unfolded(
            p.read_text(encoding="utf-8")
        )
        for p in _chapters()
    }
    missing = {k: v for k, v in missing.items() if v}
    assert not missing, f"run `python tools/fold_checks.py` on: {missing}"


def test_no_chapter_ends_in_the_ledger_table():
    """The claims table belongs to the ledger and findings pages, not to a chapter's end."""
    shown = [
        p.name
        for p in _chapters()
        if re.search(r"^ch\.ledger\s*$", p.read_text(encoding="utf-8"), re.M)
    ]
    assert not shown


def test_the_fold_rule():
    assert fold_checks.is_check("import numpy as np\nfrom attnbook import att\n")
    assert fold_checks.is_check('ch.ledger.check("a", "b", 1.0, upper=2)')
    assert fold_checks.is_check("assert x < 1, 'too large'")
    assert not fold_checks.is_check("x = np.linspace(0, 1)\nplt.plot(x, x)")
    assert not fold_checks.is_check("%matplotlib inline")
    text = "```{code-cell} ipython3\nassert 1\n```\n"
    folded = fold_checks.fold(text)
    assert folded == "```{code-cell} ipython3\n:tags: [hide-input]\n\nassert 1\n```\n"
    assert fold_checks.unfolded(folded) == []
    yaml = "```{code-cell} ipython3\n---\ntags: [remove-output]\n---\nassert 1\n```\n"
    assert "tags: [remove-output, hide-input]" in fold_checks.fold(yaml)
    solution = "```{solution-start} ex\n```\n" + text + "```{solution-end}\n```\n"
    assert fold_checks.unfolded(solution) == []  # a solution's code is its answer
