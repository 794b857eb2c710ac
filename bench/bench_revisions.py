"""Speed of this tree against an earlier revision: the pde benchmark and the focus training loop.

A change that should cost nothing (one kernel for three, one training loop for three) is
checked here: the same benchmark runs on the package of ``--base`` (checked out in a temporary
git worktree) and on this working tree, alternately, ``--rounds`` times, in fresh processes on
one thread. For each row the script prints the best of the rounds for each tree and the ratio
(> 1: this tree is faster). On a shared machine a single run moves by ±7 %; the interleaving
and the best-of make the ratio comparable, not exact.

1. ``bench_pde_particles.py`` (this tree's script, run on both packages): RK4 steps per
   second of ``attnbook.pde.simulate`` for the kinds, sizes and dtypes asked.
2. ``focus.gradient_descent``: microseconds per step on the exact population loss
   (``d`` tokens, ``n_models`` models), the fixed cost of a call subtracted (a run of 1 step
   and one of 401).

Run::

    OMP_NUM_THREADS=1 python bench/bench_revisions.py [--base REV] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the last commit with pde's own softmax paths and focus's own loops (issue #27's "before")
BEFORE_ONE_KERNEL = "d947638"

GD_PROBE = """
import sys, timeit, torch
from attnbook.focus import init_params
from attnbook.focus.population import gradient_descent
from attnbook.markov import perturbed_chain
torch.set_num_threads(1)
for d, m in [(4, 1), (8, 16)]:
    P = perturbed_chain(d, 0.4, 0.05, 0.5)
    p = init_params(d, d, n_models=m, seed=0, dtype=torch.float64)
    def run(n):
        return min(timeit.repeat(
            lambda: gradient_descent(p, P, lr=0.1, n_steps=n, record_every=50),
            number=1, repeat=7))
    print("gd", d, m, 1e6 * (run(401) - run(1)) / 400)
"""


def _run(src: Path, args: list[str]) -> str:
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout


def _rows(text: str) -> dict:
    """``{row key: value}``: pde rows (kind dtype d n -> steps/s), gd rows (-> us/step)."""
    rows = {}
    for line in text.splitlines():
        p = line.split()
        if len(p) > 8 and p[0] in ("softmax", "l2", "sinkhorn", "sigmoid", "linear"):
            rows[("pde",) + tuple(p[:4])] = float(p[4])
        elif len(p) == 4 and p[0] == "gd":
            rows[("gd", p[1], p[2])] = float(p[3])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--base",
        default=BEFORE_ONE_KERNEL,
        help="the revision to compare with (default: the last before the one attention "
        "kernel and the one training loop)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", nargs="+", default=["256", "1024"])
    ap.add_argument("--dims", nargs="+", default=["2", "8"])
    ap.add_argument("--kinds", nargs="+", default=["softmax", "l2"])
    args = ap.parse_args()
    pde = [str(ROOT / "bench" / "bench_pde_particles.py"), "--sizes", *args.sizes]
    pde += [
        "--dims",
        *args.dims,
        "--kinds",
        *args.kinds,
        "--steps",
        "10",
        "--repeat",
        "5",
    ]
    best = defaultdict(dict)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            [
                "git",
                "-C",
                str(ROOT),
                "worktree",
                "add",
                "--detach",
                str(base),
                args.base,
            ],
            check=True,
            capture_output=True,
        )
        try:
            for r in range(args.rounds):
                for name, src in (("base", base / "src"), ("this", ROOT / "src")):
                    print(f"round {r + 1}/{args.rounds}: {name}", file=sys.stderr)
                    rows = _rows(_run(src, pde) + _run(src, ["-c", GD_PROBE]))
                    for key, v in rows.items():
                        old = best[key].get(name)
                        faster = old is None or (
                            v > old if key[0] == "pde" else v < old
                        )
                        best[key][name] = v if faster else old
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                check=False,
            )
    print(
        f"base = {args.base}; best of {args.rounds} interleaved rounds; ratio > 1: faster"
    )
    for key in sorted(best):
        b, t = best[key].get("base"), best[key].get("this")
        if b is None or t is None:
            continue
        what, unit = (key[1:], "steps/s") if key[0] == "pde" else (key[1:], "us/step")
        ratio = t / b if key[0] == "pde" else b / t
        label = " ".join((key[0],) + what)
        print(f"{label:28s} base {b:9.1f} this {t:9.1f} {unit:8s} ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
