"""Benchmark: the copy head's SGLD potential without host synchronisation (#23 item 8).

``marginal_potential`` now builds the attention matrix without finiteness checks
(``copyhead.model.scores_attention`` → ``attention.normalize_scores``; softmax straight from the
scores, linear attention through the product with the identity keys, as before) and marks a
failed Cholesky factor with NaN instead of reading it back, so a GPU can queue the steps back
to back. The checked path (``exact_action``: finiteness checks, ``G @ I`` as the score matrix, a
host read of the factor's status) is what the potential called before. Both give the same action
bit for bit (checked below). This script times value + gradient of both on the CPU and prints
the ratio checked / unchecked (above 1: the new potential is faster), for softmax and linear
heads at L = 16, 32, 64 with 16 chains. On a CUDA device (``--device cuda``) it also counts the
host synchronisations of one step with ``torch.cuda.set_sync_debug_mode``.

Run:  OMP_NUM_THREADS=1 .venv/bin/python bench/bench_copyhead_step.py [--repeats N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from attnbook.copyhead import action as A
from attnbook.copyhead import nested_statistics


def _time(fn, theta, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        th = theta.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(fn(th).sum(), th)
        if th.device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dev = torch.device(args.device)
    print(
        f"{'kind':8s} {'L':>4s} {'checked ms':>11s} {'potential ms':>13s} {'ratio':>6s}"
    )
    for kind in ("softmax", "linear"):
        for L in (16, 32, 64):
            stats = nested_statistics(
                np.array([4 * L * L]), L, 4, n_datasets=16, seed=0, dtype=torch.float64
            ).to(dev)
            d = L * L + (kind == "linear")
            theta = torch.randn(16, d, dtype=torch.float64, device=dev)
            pot = A.marginal_potential(stats, kind=kind)

            def checked(th, stats=stats, kind=kind, L=L):
                p = A.unpack(th, L)
                return A.exact_action(p["G"], stats, kind=kind, b=p["b"])

            assert torch.equal(checked(theta), pot(theta)), "the two paths differ"
            t_old = _time(checked, theta, args.repeats)
            t_new = _time(pot, theta, args.repeats)
            print(
                f"{kind:8s} {L:4d} {1e3 * t_old:11.3f} {1e3 * t_new:13.3f} "
                f"{t_old / t_new:6.2f}"
            )
            if dev.type == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
                th = theta.clone().requires_grad_(True)
                torch.autograd.grad(pot(th).sum(), th)
                torch.cuda.set_sync_debug_mode(0)


if __name__ == "__main__":
    main()
