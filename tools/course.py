"""The course pages read against the chapters: which exercise each page sets, and whether the
pages agree with each other and with the exercises' own estimates.

The chapters declare every exercise as ``{exercise} Title (★★, 30 min)`` with a ``:label:``; a
checked exercise is one with a checker in :mod:`attnbook.exercises`. The course pages name
exercises by label (``{ref}`ex-…```, the session pages and the problem sets' checked parts) or
by title in italics (the problem sets' written parts). ``tests/test_course.py`` fails where:

- a page names an exercise that does not exist, or a session's homework item is missing from
  its problem set;
- a session's plan does not run from 0 to its length without gaps, or its lab is shorter than
  the exercises set in it (the core ones plus the longest track);
- a problem set's estimates (its table's times, plus each checked exercise's own) exceed the
  hours the page states;
- a checked exercise is never assigned, or the problem sets' list of the exercises no page sets
  is not exactly those;
- the syllabus does not link a chapter with exercises to its student notebook on Colab, or a
  session page the student notebooks of its chapters.

``python -m tools.course`` prints the numbers.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COURSE = Path("book") / "course"

__all__ = [
    "Exercise",
    "Session",
    "ProblemSet",
    "exercises",
    "sessions",
    "problem_sets",
    "unassigned_listed",
    "problems",
]

_EXERCISE = re.compile(
    r"^`{3,}\{exercise\}\s+(?P<title>.+?)\s+\((?P<stars>★+),\s*(?P<minutes>\d+)\s*min\)\s*\n"
    r":label:\s*(?P<label>\S+)",
    flags=re.M,
)
_REF = re.compile(r"\{ref\}`(ex-[^`]+)`")
_PLAN_ROW = re.compile(r"^\|\s*(\d+)–(\d+)\s*\|\s*([^|]+?)\s*\|", flags=re.M)
_BULLET = re.compile(
    r"^- \*\*(?P<name>[^*]+?):?\*\*:?(?P<body>.*?)(?=^- |\Z)", flags=re.M | re.S
)
_WRITTEN_ROW = re.compile(
    r"^\|\s*\d+\s*\|\s*\*(?P<title>[^|]+?)\*\s*\|\s*\{doc\}`(?P<doc>[^`]+)`\s*\|\s*\d+\s*\|"
    r"\s*(?P<minutes>\d+)\s*min\s*\|",
    flags=re.M,
)
_CHECKED_ROW = re.compile(
    r"^\|\s*\*(?P<title>[^|]+?)\*\s*\|\s*\{ref\}`(?P<label>ex-[^`]+)`\s*\|", flags=re.M
)
_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


@dataclass(frozen=True)
class Exercise:
    label: str
    title: str
    stars: int
    minutes: int
    chapter: str  # book/<part>/<chapter>, without .md
    checked: bool


@dataclass
class Session:
    number: int
    plan: list[tuple[int, int, str]]  # (start, end, format)
    bullets: dict[str, list[str]]  # bullet name → the labels it names, in order
    text: str = field(repr=False, default="")

    @property
    def length(self) -> int:
        return self.plan[-1][1] if self.plan else 0

    @property
    def lab_minutes(self) -> int:
        return sum(b - a for a, b, fmt in self.plan if fmt == "lab")


@dataclass
class ProblemSet:
    number: int
    written: list[tuple[str, int]]  # (title, minutes)
    checked: list[str]  # labels
    max_minutes: int


def exercises(root: Path = ROOT) -> dict[str, Exercise]:
    """Every exercise of the chapters, by label."""
    from attnbook.exercises import labels as checked_labels

    checked = set(checked_labels())
    out = {}
    for md in sorted((root / "book").rglob("*.md")):
        if "_build" in md.parts:
            continue
        text = md.read_text(encoding="utf-8")
        for m in _EXERCISE.finditer(text):
            label = m["label"]
            if label in out:
                raise ValueError(f"exercise label {label} twice ({md})")
            out[label] = Exercise(
                label=label,
                title=m["title"].strip(),
                stars=len(m["stars"]),
                minutes=int(m["minutes"]),
                chapter=md.relative_to(root).with_suffix("").as_posix(),
                checked=label in checked,
            )
    return out


def _section(text: str, heading: str) -> str:
    m = re.search(
        rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S
    )
    return m.group(1) if m else ""


def sessions(root: Path = ROOT) -> list[Session]:
    out = []
    for md in sorted((root / COURSE).glob("session-*.md")):
        text = md.read_text(encoding="utf-8")
        plan = [
            (int(a), int(b), fmt.strip())
            for a, b, fmt in _PLAN_ROW.findall(_section(text, "Plan"))
        ]
        bullets = {
            m["name"].strip(): _REF.findall(m["body"])
            for m in _BULLET.finditer(_section(text, "Exercises to set"))
        }
        out.append(Session(int(md.stem.split("-")[1]), plan, bullets, text))
    return out


def problem_sets(root: Path = ROOT) -> list[ProblemSet]:
    text = (root / COURSE / "problem-sets.md").read_text(encoding="utf-8")
    hours = re.search(r"takes (\w+) to (\w+) hours", text)
    if hours is None:
        raise ValueError(
            "problem-sets.md does not state its hours ('takes N to M hours')"
        )
    max_minutes = 60 * _WORDS[hours.group(2)]
    out = []
    for m in re.finditer(
        r"^## Problem set (\d+)\b.*?(?=^## |\Z)", text, flags=re.M | re.S
    ):
        body = m.group(0)
        out.append(
            ProblemSet(
                number=int(m.group(1)),
                written=[
                    (w["title"].strip(), int(w["minutes"]))
                    for w in _WRITTEN_ROW.finditer(body)
                ],
                checked=[c["label"] for c in _CHECKED_ROW.finditer(body)],
                max_minutes=max_minutes,
            )
        )
    return out


def unassigned_listed(root: Path = ROOT) -> list[str]:
    """The titles that problem-sets.md lists as set by no page."""
    text = (root / COURSE / "problem-sets.md").read_text(encoding="utf-8")
    section = _section(text, "Exercises no page sets")
    return [
        " ".join(t.split())
        for t in re.findall(r"\*([^*]+)\*", section.split("capstones", 1)[-1])
    ]


def problems(root: Path = ROOT) -> list[str]:
    """Every disagreement of the course pages with the chapters and with each other."""
    ex = exercises(root)
    by_title = {e.title: e for e in ex.values()}
    out = []
    pages = sorted((root / COURSE).glob("*.md")) + [root / "book" / "intro.md"]
    for page in pages:
        for label in _REF.findall(page.read_text(encoding="utf-8")):
            if label not in ex:
                out.append(f"{page.name}: names {label}, which no chapter defines")
    psets = {p.number: p for p in problem_sets(root)}
    in_sets = set()
    for p in psets.values():
        for title, _ in p.written:
            if title not in by_title:
                out.append(f"problem set {p.number}: no exercise is titled *{title}*")
            else:
                in_sets.add(by_title[title].label)
        for label in p.checked:
            if label not in ex:
                out.append(
                    f"problem set {p.number}: names {label}, which no chapter defines"
                )
            elif not ex[label].checked:
                out.append(
                    f"problem set {p.number}: {label} is in the checked part but has no checker"
                )
            in_sets.add(label)
        total = sum(m for _, m in p.written) + sum(
            ex[x].minutes for x in p.checked if x in ex
        )
        if total > p.max_minutes:  # the stated upper bound, e.g. "four to five hours"
            out.append(
                f"problem set {p.number}: {total} min by its estimates (written part plus the "
                f"checked exercises' own), over the stated {p.max_minutes // 60} hours"
            )
    for s in sessions(root):
        starts = [a for a, _, _ in s.plan]
        ends = [b for _, b, _ in s.plan]
        if not s.plan or starts[0] != 0 or starts[1:] != ends[:-1] or s.length != 90:
            out.append(
                f"session {s.number}: the plan does not run from 0 to 90 min without gaps"
            )
        # the lab's own exercises, plus the longest track (a pair does one); what is set "for
        # pairs that finish" is not counted
        core = sum(ex[x].minutes for x in s.bullets.get("In the lab", []) if x in ex)
        tracks = [
            sum(ex[x].minutes for x in xs if x in ex)
            for n, xs in s.bullets.items()
            if n.startswith("In the lab, track")
        ]
        need = core + max(tracks, default=0)
        if need > s.lab_minutes:
            out.append(
                f"session {s.number}: the lab's exercises take {need} min by their estimates, "
                f"the lab {s.lab_minutes} min"
            )
        for name, labels in s.bullets.items():
            m = re.match(r"Homework \(problem set (\d+)", name)
            if not m:
                continue
            p = psets.get(int(m.group(1)))
            for label in labels:
                if p is None or label not in in_sets_of(p, ex, by_title):
                    out.append(
                        f"session {s.number}: homework {label} is not in problem set {m.group(1)}"
                    )
    named = set(in_sets)
    for s in sessions(root):
        named |= {x for xs in s.bullets.values() for x in xs}
    for e in ex.values():
        if e.checked and e.label not in named:
            out.append(f"{e.label} ({e.chapter}) is checked but never assigned")
    out += student_link_problems(root)
    left_out = sorted(e.title for e in ex.values() if e.label not in named)
    listed = sorted(unassigned_listed(root))
    if listed != left_out:
        extra = sorted(set(listed) - set(left_out))
        missing = sorted(set(left_out) - set(listed))
        out.append(
            "problem-sets.md: 'Exercises no page sets' "
            + (f"lists {extra}, which a page sets or no chapter has; " if extra else "")
            + (f"omits {missing}" if missing else "")
        )
    return out


def student_link_problems(root: Path = ROOT) -> list[str]:
    """The syllabus must link every chapter with exercises to its student notebook on Colab,
    and each session page the student notebooks of the chapters it names (two clicks from the
    syllabus to a notebook without solutions)."""
    from tools import colab

    rel = colab.release(root)
    urls = {}
    for md in colab.notebook_chapters(root):
        if colab._has_exercises(md):
            doc = md.relative_to(root / "book").with_suffix("").as_posix()
            if not colab.student_path(md, root).is_file():
                continue  # `colab check` reports a missing student notebook
            urls[doc] = colab.student_colab_url(md, rel, root)
    out = []
    syllabus = (root / COURSE / "syllabus.md").read_text(encoding="utf-8")
    for doc, url in urls.items():
        if f"| {{doc}}`../{doc}` | [open on Colab]({url}) |" not in syllabus:
            out.append(
                f"syllabus.md: no row linking {doc} to its student notebook {url}"
            )
    for page in sorted((root / COURSE).glob("session-*.md")):
        text = page.read_text(encoding="utf-8")
        head = re.search(r"^\*Week \d.*?\*\n", text, flags=re.M | re.S)
        for doc in re.findall(r"\{doc\}`\.\./([^`]+)`", head.group(0) if head else ""):
            if doc in urls and f"({urls[doc]})" not in text:
                out.append(f"{page.name}: no link to the student notebook of {doc}")
    return out


def in_sets_of(
    p: ProblemSet, ex: dict[str, Exercise], by_title: dict[str, Exercise]
) -> set[str]:
    """The labels a problem set holds (its written part by title, its checked part by label)."""
    return {by_title[t].label for t, _ in p.written if t in by_title} | set(p.checked)


def main() -> int:
    ex = exercises()
    print(f"{len(ex)} exercises, {sum(e.checked for e in ex.values())} checked")
    for p in problem_sets():
        total = sum(m for _, m in p.written) + sum(
            ex[x].minutes for x in p.checked if x in ex
        )
        print(
            f"problem set {p.number}: {total} min (stated at most {p.max_minutes} min)"
        )
    for s in sessions():
        print(f"session {s.number}: lab {s.lab_minutes} min; bullets {list(s.bullets)}")
    found = problems()
    print("\n".join(found) if found else "the course pages agree")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
