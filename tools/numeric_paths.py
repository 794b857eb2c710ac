"""Execute the chapters under MKL's other numeric paths and compare their claims.

torch's LAPACK and BLAS are MKL, and MKL picks a code path per CPU: a result from LAPACK (an
eigenvalue, a blow-up time) can differ in its last bit between two machines of the same kind
(an AMD and an Intel CPU with AVX-512, say). A claim must not depend on that bit. Two
environment variables switch MKL to another path on the same machine and so emulate another
CPU: ``MKL_CBWR=COMPATIBLE`` (MKL's conservative path, on every CPU) and
``MKL_ENABLE_INSTRUCTIONS=AVX2`` (MKL's AVX2 path, which differs from the default only on a CPU
whose default is AVX-512, i.e. where ``/proc/cpuinfo`` lists ``avx512f``).

``python tools/numeric_paths.py [--baseline DIR] [--jobs N] [--fraction F] [CHAPTER.md ...]``

1. Fingerprints each path (a few LAPACK and BLAS results, in a fresh interpreter) and keeps
   only those whose bits differ from the paths before it: a path that gives the default's
   bits would only repeat the default run (``--all-paths`` runs it anyway). The paths
   exercised, and those skipped, are printed.
2. Takes the default path's ledger from ``--baseline`` (``make test`` writes
   ``_build/ledger``) when it holds an up-to-date record of every chapter to run, made under
   the same seed; otherwise executes the chapters on the default path itself
   (``_build/ledger-path-default``).
3. Executes the chapters (default: every chapter, as ``make test-seeds`` does) with nbval under
   each other path, each with its own ``ATTNBOOK_LEDGER_DIR`` (``_build/ledger-path-<name>``).
4. Compares every claim with the default path's: it must pass on every path, and its measured
   value (and, with samples, both ends of its interval) must move by at most ``--fraction``
   of the claim's distance to failing on the default path (its slack: the distance from the
   value, or the interval's nearest end, to the nearest bound of the criterion). Prints, per
   path, the largest move in units of the slack and the claims that moved most.

Exits non-zero when a chapter fails under a path, a claim's pass/fail differs between paths, or
a value moves by more than the fraction of its slack.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
# this checkout's attnbook, as the chapters use it
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))
MKL_VARS = ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS")

#: A value may move between numeric paths by at most this fraction of its slack (its distance
#: to failing on the default path). Measured on the whole book (AMD EPYC, default = AVX2 path
#: against COMPATIBLE, 2026-12-01): of 240 claims 154 are equal bit for bit; the largest moves
#: are 0.028, 0.017 and 0.010 of the slack in identities checked to round-off (gf.velocity-*,
#: gf.energy-identity: a few 1e-15 of slacks of 1e-14 to 1e-13) and 0.027 and 0.010 in the
#: real-text chapter (trained on text: a last bit grows through training); every other claim
#: moves by under 0.003 of its slack. A tenth leaves 3.5 times the largest move measured and
#: still fails a claim that a last bit moves a tenth of the way to failing.
FRACTION = 0.1

# a few results of MKL's LAPACK and BLAS, printed bit for bit: equal prints, same path
_FINGERPRINT = """
import torch
g = torch.Generator().manual_seed(0)
x = torch.randn(96, 96, generator=g, dtype=torch.float64)
s = x @ x.T
out = [torch.linalg.eigvalsh(s), torch.linalg.solve(s + torch.eye(96, dtype=s.dtype), x),
       torch.linalg.cholesky(s + 96 * torch.eye(96, dtype=s.dtype)), x @ x]
print(" ".join(float(t.double().sum()).hex() for t in out))
"""


def candidate_paths(cpuinfo: str | None = None) -> list[tuple[str, dict[str, str]]]:
    """The numeric paths to try: name and the MKL variables that select each."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            cpuinfo = ""
    paths = [("default", {}), ("COMPATIBLE", {"MKL_CBWR": "COMPATIBLE"})]
    if "avx512f" in cpuinfo.split():
        paths.append(("AVX2", {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}))
    return paths


def path_env(extra: dict[str, str], ledger: Path | None = None) -> dict[str, str]:
    """This process's environment with the MKL path variables replaced by ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in MKL_VARS}
    env.update(extra)
    env.setdefault("OMP_NUM_THREADS", "1")
    if ledger is not None:
        env["ATTNBOOK_LEDGER_DIR"] = str(ledger)
    return env


def fingerprint(extra: dict[str, str]) -> str:
    """The bits of a few MKL results under the path ``extra`` selects (a fresh interpreter)."""
    done = subprocess.run(
        [sys.executable, "-c", _FINGERPRINT],
        env=path_env(extra),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def run_chapters(chapters: list[str], extra: dict, ledger: Path, jobs: int) -> int:
    """Execute ``chapters`` with nbval under a path, records into ``ledger``; pytest's status."""
    shutil.rmtree(ledger, ignore_errors=True)
    cmd = [sys.executable, "-m", "pytest", "-m", "not ledger", "--nbval-lax", "-q"]
    if jobs > 1:
        cmd += ["-n", str(jobs), "--dist", "loadfile"]
    return subprocess.run(
        cmd + chapters, cwd=ROOT, env=path_env(extra, ledger)
    ).returncode


def load_claims(ledger: Path) -> dict[tuple[str, str], dict]:
    """Every claim recorded in a ledger folder, by (chapter, claim id)."""
    out = {}
    for path in sorted(Path(ledger).glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        for claim in record["claims"]:
            out[record["chapter"], claim["id"]] = claim
    return out


def slack(claim: dict) -> float:
    """Distance to failing, as the ledger judges it (:func:`attnbook.claims.claim_slack`)."""
    from attnbook.claims import claim_slack

    return claim_slack(claim)


def moved(base: dict, other: dict) -> float:
    """Largest change of the measured value and the interval's ends between two records."""
    pairs = [(base["measured"], other["measured"])]
    if base.get("interval") and other.get("interval"):
        pairs += list(zip(base["interval"], other["interval"]))
    return max(abs(a - b) for a, b in pairs)


def compare(base: dict, other: dict, fraction: float) -> dict:
    """Compare the claims of one path with the default path's (both from :func:`load_claims`)."""
    rows, problems = [], []
    for key, b in base.items():
        o = other.get(key)
        name = f"{key[0]}: {key[1]}"
        if o is None:
            problems.append(f"{name}: not recorded (the chapter stopped before it)")
            continue
        if not (b["passed"] and o["passed"]):
            problems.append(
                f"{name}: passed {b['passed']} on the default path, {o['passed']} here"
            )
        delta, room = moved(b, o), slack(b)
        ratio = delta / room if room > 0 else (0.0 if delta == 0 else math.inf)
        rows.append((ratio, delta, room, name))
        if ratio > fraction:
            problems.append(
                f"{name}: moved {delta:.3g}, {ratio:.3g} of its slack {room:.3g} "
                f"(allowed {fraction:g})"
            )
    extra = sorted(set(other) - set(base))
    problems += [f"{c}: {i}: recorded here only" for c, i in extra]
    rows.sort(reverse=True)
    return {"rows": rows, "problems": problems}


def baseline_ok(baseline: Path, chapters: list[str]) -> str | None:
    """Why the ledger at ``baseline`` cannot serve as the default path's (None if it can)."""
    from attnbook.claims import ledger_status
    from attnbook.notebook import chapter_seed

    if not baseline.is_dir():
        return f"no ledger at {baseline}"
    if any(os.environ.get(v) for v in MKL_VARS):
        return "an MKL path variable is set here, so it may have been for that run too"
    status = ledger_status(ROOT, baseline)
    wanted = {chapter_id(c) for c in chapters}
    bad = sorted(wanted & set(status["missing"] + status["stale"]))
    if bad:
        return f"missing or stale records: {', '.join(bad)}"
    seeds = {r["seed"] for r in status["records"] if r["chapter"] in wanted}
    if seeds != {chapter_seed()}:
        return f"recorded under seed {sorted(seeds)}, this run uses {chapter_seed()}"
    return None


def chapter_id(path: str) -> str:
    rel = (ROOT / path).resolve().relative_to(ROOT / "book")
    return rel.with_suffix("").as_posix()


def all_chapters() -> list[str]:
    from attnbook.claims import toc_chapters

    return [f"book/{c}.md" for c in toc_chapters(ROOT)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("chapters", nargs="*", help="chapter .md files (default: all)")
    ap.add_argument("--baseline", type=Path, default=BUILD / "ledger")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--fraction", type=float, default=FRACTION)
    ap.add_argument(
        "--all-paths", action="store_true", help="run paths with equal bits"
    )
    args = ap.parse_args(argv)
    chapters = args.chapters or all_chapters()
    t_start = time.perf_counter()

    paths, seen, skipped = [], {}, []
    for name, extra in candidate_paths():
        fp = fingerprint(extra)
        if fp in seen and not args.all_paths:
            skipped.append(f"{name} (same bits as {seen[fp]} on this CPU)")
            continue
        seen.setdefault(fp, name)
        paths.append((name, extra))
    print("numeric paths exercised:", ", ".join(n for n, _ in paths))
    if skipped:
        print("skipped:", "; ".join(skipped))

    failed = False
    why = baseline_ok(args.baseline, chapters)
    if why is None:
        base_dir = args.baseline
        print(f"default path: the ledger of {base_dir}")
    else:
        base_dir = BUILD / "ledger-path-default"
        print(f"default path: executing the chapters ({why})")
        failed = run_chapters(chapters, {}, base_dir, args.jobs) != 0
    wanted = {chapter_id(c) for c in chapters}
    base = {k: v for k, v in load_claims(base_dir).items() if k[0] in wanted}

    for name, extra in paths[1:]:
        t0 = time.perf_counter()
        setting = " ".join(f"{k}={v}" for k, v in extra.items())
        print(f"== chapters under {name}: {setting}")
        ledger = BUILD / f"ledger-path-{name}"
        rc = run_chapters(chapters, extra, ledger, args.jobs)
        result = compare(base, load_claims(ledger), args.fraction)
        rows = result["rows"]
        same = sum(1 for r in rows if r[1] == 0)
        print(
            f"{name}: {len(rows)} claims compared in {time.perf_counter() - t0:.0f} s, "
            f"{same} bit for bit equal; largest move / slack "
            f"{rows[0][0]:.3g} ({rows[0][3]})"
            if rows
            else f"{name}: no claims compared"
        )
        for ratio, delta, room, name_ in rows[:8]:
            if delta:
                print(f"   {ratio:9.3g}  moved {delta:.3g}, slack {room:.3g}  {name_}")
        for p in result["problems"]:
            print("  FAIL", p)
        failed = failed or rc != 0 or bool(result["problems"]) or not rows
    print(
        f"numeric paths: {'failed' if failed else 'passed'} "
        f"({time.perf_counter() - t_start:.0f} s)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
