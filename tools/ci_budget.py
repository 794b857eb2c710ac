"""CI's time against its budget: each step's time, the total, and README's table from them.

``.ci/run`` appends one line per step to a steps file
(``<step>\\t<start>\\t<end>\\t<exit status>``, the times in seconds since the epoch) and, when it
ends (passed or not), prints the report::

    python3 tools/ci_budget.py report _build/ci/steps.tsv

A submission lands only when CI passes within 90 minutes on the 2-core machine; the budget is
half of that (:data:`BUDGET_S`), so a busy machine or a slower CPU still lands. Over budget is
reported in a line of its own (``OVER BUDGET``), not failed: the hard limit is the 90 minutes.
README's table of CI's times is written from the same file, never typed::

    python3 tools/ci_budget.py readme _build/ci/steps.tsv [--readme README.md]

Standard library only: CI runs it with the system Python before and after the venv exists.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import re
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
#: CI's budget on the 2-core machine: half of the 90 minutes a run may take.
BUDGET_S = 45 * 60
#: README's table of CI's times stands between these two lines.
BEGIN = "<!-- ci-times: written by `python3 tools/ci_budget.py readme` -->"
END = "<!-- /ci-times -->"


class Step(NamedTuple):
    """One step of CI: its name, when it started and ended (epoch seconds), its exit status."""

    name: str
    start: int
    end: int
    status: int

    @property
    def seconds(self) -> int:
        return self.end - self.start


def read_steps(path: Path) -> list[Step]:
    """The steps in the order they were written."""
    steps = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 4:
            raise ValueError(
                f"{path}:{n}: expected 'step<TAB>start<TAB>end<TAB>status', got {line!r}"
            )
        try:
            step = Step(parts[0], int(parts[1]), int(parts[2]), int(parts[3]))
        except ValueError:
            raise ValueError(
                f"{path}:{n}: times and status must be integers: {line!r}"
            ) from None
        if step.end < step.start:
            raise ValueError(f"{path}:{n}: the step ends before it starts: {line!r}")
        steps.append(step)
    return steps


def wall_seconds(steps: list[Step]) -> int:
    """The time the steps took together: the union of their intervals, so that two steps run
    side by side count once."""
    total, reach = 0, None
    for step in sorted(steps, key=lambda s: s.start):
        if reach is None or step.start >= reach:
            total += step.seconds
            reach = step.end
        elif step.end > reach:
            total += step.end - reach
            reach = step.end
    return total


def _alongside(step: Step, steps: list[Step]) -> list[str]:
    return [
        o.name
        for o in steps
        if o is not step and o.start < step.end and step.start < o.end
    ]


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's word for it."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.processor() or "unknown CPU"
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    model = match.group(1).strip() if match else platform.processor() or "unknown CPU"
    return model + (" with AVX-512" if re.search(r"\bavx512f\b", text) else "")


def _minutes(seconds: int) -> str:
    return f"{seconds // 60}:{seconds % 60:02d}"


def report(steps: list[Step], budget_s: int = BUDGET_S) -> tuple[str, bool]:
    """The printed report and whether the run stayed within ``budget_s``."""
    total = wall_seconds(steps)
    width = max([len(step.name) for step in steps] + [5])
    lines = [
        f"== CI's time against its budget ({budget_s // 60} min on the 2-core machine)"
    ]
    for step in steps:
        notes = []
        if step.status != 0:
            notes.append(f"FAILED (exit {step.status})")
        if beside := _alongside(step, steps):
            notes.append("alongside " + ", ".join(beside))
        lines.append(
            f"{step.name:{width}s} {step.seconds:6d} s  {_minutes(step.seconds):>6s}"
            + ("  " + "; ".join(notes) if notes else "")
        )
    within = total <= budget_s
    failed = [step.name for step in steps if step.status != 0]
    lines.append(
        f"{'total':{width}s} {total:6d} s  {_minutes(total):>6s}  of {budget_s} s "
        f"({100 * total / budget_s:.0f} %): {'within budget' if within else 'OVER BUDGET'}"
        + (f"; the run FAILED at {failed[0]}" if failed else "")
    )
    return "\n".join(lines), within


def readme_table(
    steps: list[Step], cpu: str, date: str, budget_s: int = BUDGET_S
) -> str:
    """README's table of CI's times (between :data:`BEGIN` and :data:`END`)."""
    total = wall_seconds(steps)
    failed = [step.name for step in steps if step.status != 0]
    rows = [
        BEGIN,
        f"| step of CI | time on the 2-core machine (fresh clone, {date}, {cpu}) |",
        "| --- | --- |",
    ]
    for step in steps:
        beside = _alongside(step, steps)
        rows.append(
            f"| `{step.name}` | {step.seconds} s ({_minutes(step.seconds)})"
            + (f", alongside `{'`, `'.join(beside)}`" if beside else "")
            + " |"
        )
    rows.append(
        f"| **total** | **{total} s ({_minutes(total)})** of the budget of {budget_s // 60} min"
        + (f"; failed: {', '.join(failed)}" if failed else "")
        + " |"
    )
    rows.append(END)
    return "\n".join(rows)


def write_readme(readme: Path, table: str) -> None:
    text = readme.read_text(encoding="utf-8")
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{readme} has no table between {BEGIN!r} and {END!r}")
    readme.write_text(text[:start] + table + text[end + len(END) :], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("report", "readme"))
    parser.add_argument("steps", type=Path, help="the steps file .ci/run writes")
    parser.add_argument("--budget", type=int, default=BUDGET_S, help="seconds")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--date", default=dt.date.today().isoformat())
    args = parser.parse_args(argv)
    if args.budget <= 0:
        parser.error("--budget must be a positive number of seconds")
    steps = read_steps(args.steps)
    if args.command == "report":
        text, _ = report(steps, args.budget)
        print(text)
        return 0
    write_readme(args.readme, readme_table(steps, cpu_model(), args.date, args.budget))
    print(f"{args.readme}: CI's table written from {args.steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
