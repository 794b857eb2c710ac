"""make test's executions handed to the book build (tools/executions.py), and CI's budget
report (tools/ci_budget.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import ci_budget  # noqa: E402
import executions  # noqa: E402

CHAPTER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A chapter

```{code-cell} ipython3
print("a")
print("b")
```

Some text.

```{code-cell} ipython3
:tags: [hide-input]
1 + 1
```
"""


def _msg(parent: str, msg_type: str, **content) -> dict:
    return {
        "header": {"msg_type": msg_type, "msg_id": f"{parent}-{msg_type}"},
        "parent_header": {"msg_id": parent},
        "msg_type": msg_type,
        "content": content,
    }


def _messages() -> list[dict]:
    """What a kernel sends for the two cells of CHAPTER (and one stray message)."""
    return [
        _msg("m1", "status", execution_state="busy"),
        _msg("m1", "stream", name="stdout", text="a\n"),
        _msg("m0", "stream", name="stdout", text="from an earlier run\n"),
        _msg("m1", "clear_output", wait=True),
        _msg("m1", "stream", name="stdout", text="b\n"),
        _msg("m1", "status", execution_state="idle"),
        _msg("m2", "execute_input", code="1 + 1", execution_count=0),
        _msg(
            "m2",
            "execute_result",
            data={"text/plain": "2"},
            metadata={},
            execution_count=0,
        ),
        _msg("m2", "status", execution_state="idle"),
        _msg("m2", "stream", name="stdout", text="after idle\n"),
    ]


@pytest.fixture
def book(tmp_path, monkeypatch):
    """A one-chapter book with a package tree, an archive and a data folder."""
    root = tmp_path / "repo"
    (root / "book" / "part").mkdir(parents=True)
    (root / "book" / "intro.md").write_text("# Intro\n")
    (root / "book" / "part" / "ch.md").write_text(CHAPTER)
    (root / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n  - file: book/part/ch\n"
    )
    (root / "src" / "attnbook").mkdir(parents=True)
    (root / "src" / "attnbook" / "mod.py").write_text("X = 1\n")
    (root / "results").mkdir()
    (root / "results" / "a.json").write_text("{}")
    (root / "requirements-lock.txt").write_text("numpy==2\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "text.txt").write_text("words")
    monkeypatch.setenv("ATTNBOOK_DATA_DIR", str(data))
    for var in ("ATTNBOOK_SEED", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS"):
        monkeypatch.delenv(var, raising=False)
    return root


def _kept(root: Path, ledger: Path) -> Path:
    """Keep an execution of the chapter as conftest.py does after nbval ran it."""
    import jupytext

    md = root / "book" / "part" / "ch.md"
    (ledger).mkdir(parents=True, exist_ok=True)
    executions.record_path(ledger, "part/ch").write_text(json.dumps({"claims": []}))
    nb = executions.executed_notebook(jupytext.read(str(md)), _messages(), ["m1", "m2"])
    key = executions.execution_key(md, root)
    return executions.save_executed(nb, ledger, "part/ch", key)


def test_outputs_are_built_as_nbclient_builds_them():
    import jupytext

    nb = jupytext.reads(CHAPTER, fmt="md:myst")
    out = executions.executed_notebook(nb, _messages(), ["m1", "m2"])
    first, second = [c for c in out.cells if c.cell_type == "code"]
    # clear_output(wait=True) drops "a" when "b" comes; the stray and late messages are not kept
    assert [o.get("text") for o in first.outputs] == ["b\n"]
    assert [c.execution_count for c in (first, second)] == [1, 2]
    assert second.outputs[0].output_type == "execute_result"
    assert second.outputs[0].execution_count == 2
    assert second.outputs[0].data["text/plain"] == "2"
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")  # a copy
    with pytest.raises(ValueError, match="1 cells executed, the notebook has 2"):
        executions.executed_notebook(nb, _messages(), ["m1"])


def test_the_key_moves_with_every_source_and_configuration(book, monkeypatch):
    md = book / "book" / "part" / "ch.md"
    base = executions.execution_key(md, book)
    assert executions.execution_key(md, book) == base
    changes = [
        lambda: md.write_text(CHAPTER + "\nmore\n"),
        lambda: (book / "src" / "attnbook" / "mod.py").write_text("X = 2\n"),
        lambda: (book / "results" / "a.json").write_text('{"a": 1}'),
        lambda: (book / "requirements-lock.txt").write_text("numpy==3\n"),
        lambda: monkeypatch.setenv("ATTNBOOK_SEED", "7"),
        lambda: monkeypatch.setenv("MKL_CBWR", "COMPATIBLE"),
        lambda: (
            Path(executions.os.environ["ATTNBOOK_DATA_DIR"]) / "text.txt"
        ).write_text("x"),
    ]
    keys = {base}
    for change in changes:
        change()
        key = executions.execution_key(md, book)
        assert key not in keys, (
            "a change of what the chapter computes from kept its key"
        )
        keys.add(key)
    # the executor is not a configuration: it is recorded, it changes no number
    monkeypatch.setenv("ATTNBOOK_EXECUTOR", "jupyter-book")
    assert executions.execution_key(md, book) == key


def test_handover_fills_the_cache_with_current_executions_only(book, tmp_path):
    from jupyter_cache import get_cache

    ledger, cache = tmp_path / "ledger", tmp_path / "cache"
    _kept(book, ledger)
    summary = executions.handover(ledger, cache, root=book, log=lambda *a: None)
    assert summary == {"handed": ["part/ch"], "execute": {}}
    # the book build's lookup: the chapter as myst-nb reads it finds the kept outputs
    md = book / "book" / "part" / "ch.md"
    jc = get_cache(str(cache))
    _, merged = jc.merge_match_into_notebook(executions._book_reading(md))
    code = [c for c in merged.cells if c.cell_type == "code"]
    assert [o.get("text") for o in code[0].outputs] == ["b\n"]
    assert code[1].outputs[0].data["text/plain"] == "2"
    assert executions.record_path(ledger, "part/ch").is_file()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("chapter", "sources or configuration changed"),
        ("package", "sources or configuration changed"),
        ("record", "its ledger record was replaced"),
        ("gone", "no kept execution"),
    ],
)
def test_a_stale_execution_is_executed_again_by_the_book(
    book, tmp_path, change, reason
):
    ledger, cache = tmp_path / "ledger", tmp_path / "cache"
    kept = _kept(book, ledger)
    record = executions.record_path(ledger, "part/ch")
    if change == "chapter":
        (book / "book" / "part" / "ch.md").write_text(CHAPTER.replace('"b"', '"c"'))
    elif change == "package":
        (book / "src" / "attnbook" / "new.py").write_text("")
    elif change == "record":
        record.write_text(json.dumps({"claims": [{"id": "other run"}]}))
    else:
        kept.unlink()
    summary = executions.handover(ledger, cache, root=book, log=lambda *a: None)
    assert summary["handed"] == []
    assert reason in summary["execute"]["part/ch"]
    assert not record.exists(), "the stale record must go: the book writes a fresh one"


def test_an_earlier_build_leaves_nothing_in_the_cache(book, tmp_path):
    from jupyter_cache import get_cache

    ledger, cache = tmp_path / "ledger", tmp_path / "cache"
    _kept(book, ledger)
    executions.handover(ledger, cache, root=book, log=lambda *a: None)
    shutil.rmtree(ledger)
    assert (
        executions.handover(ledger, cache, root=book, log=lambda *a: None)["handed"]
        == []
    )
    assert get_cache(str(cache)).list_cache_records() == []


def test_only_a_clean_run_of_an_unchanged_tree_is_kept(monkeypatch):
    """conftest.py keeps an execution only when every cell ran, none failed in pytest, the
    kernel reported no error and the key at the end is the key at the start."""
    import importlib.util

    import jupytext

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)

    class File:
        timed_out = False
        _failed = False
        _language_info = {"name": "python"}
        path = ROOT / "book" / "foundations" / "attention-maps.md"

    nb = jupytext.reads(CHAPTER, fmt="md:myst")
    key = executions.execution_key(File.path)
    saved = []
    monkeypatch.setattr(executions, "save_executed", lambda *a, **k: saved.append(a))

    def kept(**change) -> bool:
        saved.clear()
        f = File()
        attrs = {
            "nb": nb,
            "_key": key,
            "_msg_ids": ["m1", "m2"],
            "_messages": _messages(),
            "_collected_text": File.path.read_text(encoding="utf-8"),
        }
        f.__dict__.update({**attrs, **change})
        conftest._keep_execution(f)
        return bool(saved)

    assert kept()  # every cell ran, no error
    assert saved[0][2] == "foundations/attention-maps" and saved[0][3] == key
    assert saved[0][0].metadata["language_info"] == {"name": "python"}
    error = _msg("m2", "error", ename="ClaimFailed", evalue="", traceback=[])
    assert not kept(_messages=_messages() + [error])  # the kernel reported an error
    assert not kept(_msg_ids=["m1"])  # a cell never ran
    assert not kept(_failed=True)  # a cell failed in pytest
    assert not kept(timed_out=True)
    assert not kept(_key="another tree")  # a source changed while the chapter ran
    # edited between collection and the run (the key, taken at the run's start, is the new
    # text's, but the cells that ran were the old text's)
    assert not kept(_collected_text="the chapter as it was collected")


def test_handover_removes_records_of_pages_no_longer_in_the_book(book, tmp_path):
    ledger, cache = tmp_path / "ledger", tmp_path / "cache"
    _kept(book, ledger)
    gone = executions.record_path(ledger, "part/removed")
    gone.write_text("{}")
    executions.handover(ledger, cache, root=book, log=lambda *a: None)
    assert not gone.exists()
    assert executions.record_path(ledger, "part/ch").is_file()


def test_two_chapters_with_the_same_code_are_not_handed_over(book, tmp_path):
    import jupytext

    ledger, cache = tmp_path / "ledger", tmp_path / "cache"
    _kept(book, ledger)
    twin = book / "book" / "part" / "twin.md"
    twin.write_text(CHAPTER.replace("# A chapter", "# Its twin"))
    (book / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n"
        "  - file: book/part/ch\n  - file: book/part/twin\n"
    )
    executions.record_path(ledger, "part/twin").write_text(json.dumps({"claims": []}))
    nb = executions.executed_notebook(
        jupytext.read(str(twin)), _messages(), ["m1", "m2"]
    )
    executions.save_executed(
        nb, ledger, "part/twin", executions.execution_key(twin, book)
    )
    summary = executions.handover(ledger, cache, root=book, log=lambda *a: None)
    assert summary["handed"] == []
    assert "part/twin" in summary["execute"]["part/ch"]
    assert "part/ch" in summary["execute"]["part/twin"]


# ---- CI's budget --------------------------------------------------------------------------


def test_the_budget_report_sums_the_steps_and_flags_an_overrun(tmp_path):
    steps = tmp_path / "steps.tsv"
    steps.write_text("make test\t0\t600\t0\nmake book\t600\t800\t0\n")
    text, within = ci_budget.report(ci_budget.read_steps(steps), budget_s=2700)
    assert within and "800 s" in text and "within budget" in text
    steps.write_text("make test\t0\t2000\t0\nmake book\t2000\t2800\t2\n")
    text, within = ci_budget.report(ci_budget.read_steps(steps), budget_s=2700)
    assert not within and "OVER BUDGET" in text and "FAILED (exit 2)" in text
    assert "the run FAILED at make book" in text
    steps.write_text("make test 600 0\n")
    with pytest.raises(ValueError, match="steps.tsv:1"):
        ci_budget.read_steps(steps)
    steps.write_text("make test\t10\t5\t0\n")
    with pytest.raises(ValueError, match="ends before it starts"):
        ci_budget.read_steps(steps)


def test_steps_side_by_side_count_once_in_the_total():
    S = ci_budget.Step
    steps = [
        S("make book", 0, 100, 0),
        S("make test-browser", 100, 450, 0),
        S("make pdf", 100, 400, 0),
        S("make test-colab", 460, 500, 0),
    ]
    assert ci_budget.wall_seconds(steps) == 100 + 350 + 40
    text, _ = ci_budget.report(steps, budget_s=2700)
    assert "alongside make pdf" in text and "alongside make test-browser" in text
    assert ci_budget.wall_seconds([S("a", 0, 10, 0), S("b", 2, 5, 0)]) == 10


def test_readme_table_is_written_from_the_steps(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{ci_budget.BEGIN}\nold\n{ci_budget.END}\nafter\n")
    steps = [
        ci_budget.Step("make test", 0, 610, 0),
        ci_budget.Step("make book", 610, 705, 0),
    ]
    ci_budget.write_readme(readme, ci_budget.readme_table(steps, "A CPU", "2026-12-07"))
    text = readme.read_text()
    assert (
        "old" not in text and text.startswith("before\n") and text.endswith("after\n")
    )
    assert "| `make test` | 610 s (10:10) |" in text and "**705 s (11:45)**" in text
    other = tmp_path / "other.md"
    other.write_text("no markers\n")
    with pytest.raises(ValueError, match="no table"):
        ci_budget.write_readme(other, "")


def test_ci_runs_the_readme_command_and_reports_its_budget():
    run = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "\nstep test\n" in run and "`make test`" in readme
    assert "\nside_by_side test-browser pdf\n" in run
    for target in (
        "test-seeds",
        "test-numeric-paths",
        "book",
        "test-colab",
        "release-dry",
    ):
        assert f"\nstep {target}" in run, target
    assert "tools/ci_budget.py report" in run
    assert ci_budget.BEGIN in readme and ci_budget.END in readme


@pytest.mark.slow  # a pytest run of its own: seconds
def test_chapters_are_scheduled_first_and_longest_first(tmp_path):
    """conftest.py orders the chapters by their expected time (the archived ledger-seeds
    sweep's median, or the last execution here), ahead of the unit tests, so that two xdist
    workers end together instead of one waiting out a long chapter alone."""
    import subprocess

    expected = executions.expected_seconds(ROOT)
    short, long = sorted(
        ["foundations/how-to-use", "copyhead/softmax-attention"],
        key=lambda c: expected[c],
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "--nbval-lax",
            "tests/test_commit_seed.py",
            f"book/{short}.md",
            f"book/{long}.md",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    files = []
    for line in done.stdout.splitlines():
        if "::" in line and (name := line.split("::")[0]) not in files:
            files.append(name)
    assert files == [f"book/{long}.md", f"book/{short}.md", "tests/test_commit_seed.py"]
