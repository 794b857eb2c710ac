"""Rewrite ``results/ledger-seeds/README.md`` (or ``results/ledger-heldout/README.md``) from
the sweep itself.

Every number in it (points, commits, machines, compute time, claims and asserting cells held
at every seed, the per-chapter times) is read from the manifest, the points' metadata and
:func:`attnbook.experiments.ledger_seeds.sweep_summary`, so the README cannot drift from the
archive. It lives here rather than in ``attnbook.experiments.ledger_seeds`` because that
module is an input of every swept chapter: editing it would make every point stale.

    python tools/ledger_seeds_readme.py [results/ledger-seeds | results/ledger-heldout]
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

from attnbook.experiments.ledger_seeds import held_out_summary, sweep_summary
from attnbook.experiments.store import read_manifest, read_point_meta

ROOT = Path(__file__).resolve().parents[1]

INTRO = """\
# ledger-seeds (book scale) — every chapter under {n_seeds} fixed seeds

Each point executes one chapter's MyST source in a fresh kernel (every cell, as nbval does)
under `ATTNBOOK_SEED` = the point's seed and records, per claim, whether it held and its
measured value, interval, margin and discrimination; per asserting cell (an `assert` or an
`exercises.check`), whether it passed; every failing cell with its error; and the SHA-256 of
the chapter and of each package module it imports (a point whose inputs changed is *stale*).
The claims-ledger page reads it (k/n seeds per claim, the strip plot). The seeds are fixed and
not held out: claims have been restated after failing at one of them.

Made with (from the repository root, on the shared 2-core CPU):

```
attnbook run ledger-seeds --scale book --out results/ledger-seeds --workers 2
```

Chapters edited after their points were made are re-run alone with, e.g.,

```
attnbook run ledger-seeds --scale book --out results/ledger-seeds --only chapter=focus/real-text
```
"""

HELD_INTRO = """\
# ledger-heldout (book scale) — every chapter under {n_draws} held-out seeds

Each point executes one chapter's MyST source in a fresh kernel (every cell, as nbval does)
under a seed drawn from the chapter itself: the SHA-256 of the chapter's source and of every
package module it imports, with the draw's index, gives a seed in [10⁶, 10⁹)
(`attnbook.experiments.ledger_seeds.held_out_seed`). No such seed exists before the chapter's
last edit, so no claim can have been tuned to it; an edit turns the chapter's points stale
and draws new seeds on the next run. A point records what `ledger-seeds` records, and the seed.
The claims-ledger page and the findings pages read it (k/n runs that failed, with exact
Clopper–Pearson intervals); nothing here is edited to pass.

Made with (from the repository root, on the shared 2-core CPU):

```
attnbook run ledger-heldout --scale book --out results/ledger-heldout --workers 2
```
"""

HELD_OUTRO = """
Load it with `attnbook.experiments.ledger_seeds.held_out_summary()`; `attnbook status
results/ledger-heldout` lists unfinished and stale points. This README is written by
`python tools/ledger_seeds_readme.py results/ledger-heldout` from the archive.
"""

OUTRO = """
Load it with `attnbook.experiments.ledger_seeds.sweep_summary()`; `attnbook status
results/ledger-seeds` lists unfinished and stale points. This README is written by
`python tools/ledger_seeds_readme.py` from the archive.
"""


def _signature(meta: dict) -> dict:
    sig = meta.get("numeric_signature") or {}
    if isinstance(sig, str):  # older points store its repr
        try:
            sig = ast.literal_eval(sig)
        except (ValueError, SyntaxError):
            sig = {}
    return sig if isinstance(sig, dict) else {}


def _provenance(man: dict, metas: list[dict]) -> list[str]:
    """The points done, their compute time, commits and machines."""
    walls = [float(m.get("wall_s", 0.0)) for m in metas]
    commits = Counter((m.get("git_commit") or "?").split("+")[0][:12] for m in metas)
    machines = Counter()
    for m in metas:
        sig = _signature(m)
        cpu = (sig.get("cpu") or {}).get("model", "?")
        cap = (sig.get("torch") or {}).get("cpu_capability", "?")
        machines[(cpu, cap, m.get("signature_key", "?"))] += 1
    first = metas[0]
    points = (
        f"- {len(metas)}/{len(man['points'])} points; {sum(walls) / 3600:.2f} h of "
        f"compute (per chapter and seed: min {min(walls):.1f} s, max {max(walls):.1f} s)"
    )
    made = "- made at commit(s): " + ", ".join(
        f"`{c}` ({n} points)" for c, n in commits.most_common()
    )
    where = "; ".join(
        f"{cpu} (torch CPU capability {cap}; signature key `{key}`): {n} points"
        for (cpu, cap, key), n in machines.most_common()
    )
    versions = (
        f"attnbook {first.get('attnbook')}, torch {first.get('torch')}, NumPy "
        f"{first.get('numpy')}, Python {first.get('python')}"
    )
    return [points, made, f"- on {where}; {versions}"]


def _times(man: dict, metas: list[dict], what: str) -> list[str]:
    """The per-chapter median compute time of one point, as a table."""
    head = (
        "\nPer chapter, the compute time of one seed (median, s), measured with two "
        "chapters (and often a\nCI run) sharing the 2 cores: these are times under load, "
        "not a chapter's time alone:\n"
    )
    lines = [head, f"| chapter | {what} | median s |\n| --- | --- | --- |"]
    per: dict[str, list[float]] = {}
    done = [p for p in man["points"] if p["hash"] in {m["_hash"] for m in metas}]
    for p, m in zip(done, metas):
        per.setdefault(man["axes"]["chapter"][p["index"][0]], []).append(
            float(m.get("wall_s", 0.0))
        )
    for chapter, ws in per.items():
        lines.append(f"| `{chapter}` | {len(ws)} | {statistics.median(ws):.1f} |")
    return lines


def _metas(directory: Path, man: dict) -> list[dict]:
    """The finished points' metadata, in manifest order (``_hash`` added)."""
    out = []
    for p in man["points"]:
        try:
            m = read_point_meta(directory, p["hash"])
        except FileNotFoundError:
            continue
        if m:
            out.append({**m, "_hash": p["hash"]})
    return out


def readme(directory: Path) -> str:
    man = read_manifest(directory)
    if man.get("experiment") == "ledger-heldout":
        return heldout_readme(directory, man)
    summary = sweep_summary(directory)
    metas = _metas(directory, man)
    claims = summary["claims"]
    checks = summary["checks"]
    held = sum(c["passed"] == c["n"] for c in claims.values())
    cells = sum(c["passed"] == c["n"] for c in checks.values())
    seeds = summary["seeds"]
    stale = sorted(ch for ch, v in summary["chapters"].items() if v["stale"])
    lines = [INTRO.format(n_seeds=len(seeds))]
    lines.append(
        f"- axes: `chapter` = the {len(man['axes']['chapter'])} executable chapters of "
        "`_toc.yml` (the pages that read the ledger left out); `seed` = "
        f"{min(seeds)}–{max(seeds)}"
    )
    lines += _provenance(man, metas)
    lines.append(
        f"- result: {held}/{len(claims)} claims and {cells}/{len(checks)} asserting cells "
        "held at every seed"
    )
    lines.append(
        "- chapters edited since their points were made (stale: re-run them with `--only`): "
        + (", ".join(f"`{c}`" for c in stale) if stale else "none")
    )
    lines += _times(man, metas, "seeds")
    return "\n".join(lines) + "\n" + OUTRO


def heldout_readme(directory: Path, man: dict) -> str:
    summary = held_out_summary(directory)
    metas = _metas(directory, man)
    lines = [HELD_INTRO.format(n_draws=len(man["axes"]["draw"]))]
    lines.append(
        f"- axes: `chapter` = the {len(man['axes']['chapter'])} executable chapters of "
        f"`_toc.yml`; `draw` = 0–{max(man['axes']['draw'])} (the seed is the point's own)"
    )
    lines += _provenance(man, metas)
    for label, key in (("chapter runs", "runs"), ("whole-book draws", "book")):
        r = summary[key]
        lo, hi = r["interval"]
        lines.append(
            f"- {label} that failed a claim or a cell: {r['k']}/{r['n']} (current points; "
            f"95 % Clopper–Pearson {lo:.1%}–{hi:.1%})"
        )
    failed = [q for q in summary["points"] if q["failed"] and not q["stale"]]
    for q in failed:
        lines.append(f"  - `{q['chapter']}` at seed {q['seed']}: {'; '.join(q['why'])}")
    stale = sorted({q["chapter"] for q in summary["points"] if q["stale"]})
    lines.append(
        "- chapters edited since their points were made (stale, to be redrawn): "
        + (", ".join(f"`{c}`" for c in stale) if stale else "none")
    )
    lines += _times(man, metas, "seeds")
    return "\n".join(lines) + "\n" + HELD_OUTRO


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", nargs="?", default=str(ROOT / "results/ledger-seeds"))
    ap.add_argument("--check", action="store_true", help="fail if the README differs")
    args = ap.parse_args(argv)
    directory = Path(args.directory).resolve()
    text = readme(directory)
    path = directory / "README.md"
    if args.check:
        same = path.is_file() and path.read_text() == text
        print("README is current" if same else f"{path} differs from the archive")
        return 0 if same else 1
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(path)  # atomic: a reader never sees half a README
    print(json.dumps({"written": str(path), "points": len(text.splitlines())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
