"""Rewrite ``results/ledger-seeds/README.md`` from the sweep itself.

Every number in it (points, commits, machines, compute time, claims and asserting cells held
at every seed, the per-chapter times) is read from the manifest, the points' metadata and
:func:`attnbook.experiments.ledger_seeds.sweep_summary`, so the README cannot drift from the
archive. It lives here rather than in ``attnbook.experiments.ledger_seeds`` because that
module is an input of every swept chapter: editing it would make every point stale.

    python tools/ledger_seeds_readme.py [results/ledger-seeds]
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

from attnbook.experiments.ledger_seeds import sweep_summary
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


def readme(directory: Path) -> str:
    man = read_manifest(directory)
    summary = sweep_summary(directory)
    metas = [read_point_meta(directory, p["hash"]) for p in man["points"]]
    metas = [m for m in metas if m]
    n_points = len(man["points"])
    walls = [float(m.get("wall_s", 0.0)) for m in metas]
    commits = Counter((m.get("git_commit") or "?").split("+")[0][:12] for m in metas)
    machines = Counter()
    for m in metas:
        sig = _signature(m)
        cpu = (sig.get("cpu") or {}).get("model", "?")
        cap = (sig.get("torch") or {}).get("cpu_capability", "?")
        machines[(cpu, cap, m.get("signature_key", "?"))] += 1
    first = metas[0]
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
    lines.append(
        f"- {len(metas)}/{n_points} points; {sum(walls) / 3600:.2f} h of compute (per "
        f"chapter and seed: min {min(walls):.1f} s, max {max(walls):.1f} s)"
    )
    lines.append(
        "- made at commit(s): "
        + ", ".join(f"`{c}` ({n} points)" for c, n in commits.most_common())
    )
    lines.append(
        "- on "
        + "; ".join(
            f"{cpu} (torch CPU capability {cap}; signature key `{key}`): {n} points"
            for (cpu, cap, key), n in machines.most_common()
        )
        + f"; attnbook {first.get('attnbook')}, torch {first.get('torch')}, NumPy "
        f"{first.get('numpy')}, Python {first.get('python')}"
    )
    lines.append(
        f"- result: {held}/{len(claims)} claims and {cells}/{len(checks)} asserting cells "
        "held at every seed"
    )
    lines.append(
        "- chapters edited since their points were made (stale: re-run them with `--only`): "
        + (", ".join(f"`{c}`" for c in stale) if stale else "none")
    )
    lines.append(
        "\nPer chapter, the compute time of one seed (median, s), measured with two chapters "
        "(and often a\nCI run) sharing the 2 cores: these are times under load, not a "
        "chapter's time alone:\n"
    )
    lines.append("| chapter | seeds | median s |\n| --- | --- | --- |")
    per: dict[str, list[float]] = {}
    for p, m in zip(man["points"], metas):
        per.setdefault(man["axes"]["chapter"][p["index"][0]], []).append(
            float(m.get("wall_s", 0.0))
        )
    for chapter, ws in per.items():
        lines.append(f"| `{chapter}` | {len(ws)} | {statistics.median(ws):.1f} |")
    return "\n".join(lines) + "\n" + OUTRO


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
