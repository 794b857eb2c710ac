"""Particle steps per second: attnbook.pde.simulate (torch) vs a straightforward NumPy RK4.

Both integrate the softmax particle system x_i' = V sum_j softmax_j(<A x_i, x_j>) x_j with RK4
(h = 0.01) in float64 on the same initial cloud, and both results are compared. The NumPy
baseline is the equations written directly (full n x n matrices, np.exp, row sums). Run:

    OMP_NUM_THREADS=1 python bench/bench_pde_particles.py [--steps 20] [--device cpu|cuda]

Timings on a shared machine are noisy; the script reports the best of --repeat runs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from attnbook.device import default_device
from attnbook.pde import sample_gaussian, simulate


def numpy_velocity(x, A, V):
    S = x @ A.T @ x.T
    S -= S.max(axis=1, keepdims=True)
    W = np.exp(S)
    W /= W.sum(axis=1, keepdims=True)
    return W @ x @ V.T


def numpy_rk4(x, A, V, h, steps):
    for _ in range(steps):
        k1 = numpy_velocity(x, A, V)
        k2 = numpy_velocity(x + h / 2 * k1, A, V)
        k3 = numpy_velocity(x + h / 2 * k2, A, V)
        k4 = numpy_velocity(x + h * k3, A, V)
        x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x


def best_of(fn, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--device", default=None)
    args = ap.parse_args()
    dev = default_device(args.device)
    if dev.type == "cpu":
        torch.set_num_threads(1)
    d, h = 2, 0.01
    A = np.array([[0.5, 0.2], [-0.1, 0.3]])
    V = np.array([[1.0, 0.1], [0.0, 0.9]])
    print(
        f"softmax particles, d={d}, RK4 h={h}, {args.steps} steps, float64, device={dev}"
    )
    print(
        f"{'n':>6} {'numpy steps/s':>14} {'attnbook steps/s':>17} {'ratio':>7} {'max |diff|':>11}"
    )
    for n in args.sizes:
        x0 = sample_gaussian(n, np.zeros(d), np.eye(d), seed=0)
        t = np.array([0.0, h * args.steps])
        t_np, x_np = best_of(
            lambda: numpy_rk4(x0.numpy(), A, V, h, args.steps), args.repeat
        )
        t_pt, traj = best_of(
            lambda: simulate(
                x0.to(dev), t, kind="softmax", A=A, V=V, step_size=h, progress=False
            ),
            args.repeat,
        )
        diff = np.abs(traj[-1].cpu().numpy() - x_np).max()
        print(
            f"{n:>6} {args.steps / t_np:>14.1f} {args.steps / t_pt:>17.1f} {t_np / t_pt:>6.2f}x {diff:>11.2e}"
        )


if __name__ == "__main__":
    main()
