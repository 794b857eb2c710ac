"""Particle steps per second of attnbook.pde.simulate, against NumPy and against the floor.

For every attention kind, float64 and float32, d = 2 and d > 2, the script times RK4 steps
(h = 0.01) of ``attnbook.pde.simulate`` and reports:

* ``steps/s`` — RK4 steps per second (four velocity evaluations each);
* ``numpy`` — for softmax, the same RK4 written directly in NumPy (full n x n matrices,
  ``np.exp``, row sums), its steps per second and the ratio attnbook / NumPy, and the largest
  difference between the two end states;
* ``floor`` — the measured time of two n x n matrix products and one exp over n² entries, the
  least work any softmax-like velocity needs, timed in the same run on the same device (on a
  CPU the faster of torch's and NumPy's exp); the
  column ``floor %`` is that time over the time of one velocity evaluation inside
  ``simulate`` (100 % = no overhead beyond the floor).
* for Sinkhorn, ``cold ms`` — one velocity evaluation from zero potentials (``pde.velocity``),
  to compare with the warm-started evaluations inside ``simulate``.

Run::

    OMP_NUM_THREADS=1 python bench/bench_pde_particles.py [--steps 10] [--device cpu|cuda]

Timings on a shared machine are noisy; the script reports the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from attnbook.device import default_device
from attnbook.pde import KINDS, sample_gaussian, simulate, velocity


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


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def best_of(fn, repeat, dev):
    best, out = float("inf"), None
    for _ in range(repeat):
        _sync(dev)
        t0 = time.perf_counter()
        out = fn()
        _sync(dev)
        best = min(best, time.perf_counter() - t0)
    return best, out


def floor_seconds(x, A, repeat, dev):
    """Two n x n matmuls and one exp over n² entries: S = (x A^T) x^T, E = exp(S), E @ x."""

    def work():
        S = (x @ A.T) @ x.T
        return torch.exp(S) @ x

    def work_numpy():  # on a CPU, NumPy's exp is the faster one (the velocity uses it)
        xn, An = x.numpy(), A.numpy()
        return torch.from_numpy(np.exp((xn @ An.T) @ xn.T) @ xn)

    fns = [work, work_numpy] if dev.type == "cpu" else [work]
    for fn in fns:
        fn()  # warm-up
    return min(best_of(fn, max(3, repeat), dev)[0] for fn in fns)


def layer_for(kind, d, dtype, dev):
    rng = np.random.default_rng(0)
    A = 0.3 * rng.normal(size=(d, d)) / np.sqrt(d)
    V = np.eye(d) + 0.1 * rng.normal(size=(d, d))
    if kind == "multihead":
        return A, V, dict(A=np.stack([A, -A.T]), V=np.stack([V, 0.5 * V]))
    if kind == "l2":
        return A, V, dict(Q=A, K=np.eye(d), V=V)
    return A, V, dict(A=A, V=V)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--kinds", nargs="+", default=list(KINDS))
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--device", default=None)
    args = ap.parse_args()
    dev = default_device(args.device)
    if dev.type == "cpu":
        torch.set_num_threads(1)
    h = 0.01
    print(f"RK4 h={h}, {args.steps} steps, device={dev}, best of {args.repeat}")
    head = (
        f"{'kind':>9} {'dtype':>7} {'d':>2} {'n':>5} {'steps/s':>9} {'numpy/s':>8} "
        f"{'ratio':>6} {'max|diff|':>9} {'eval ms':>8} {'floor ms':>8} {'floor %':>7} "
        f"{'cold ms':>8}"
    )
    print(head)
    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        for d in args.dims:
            for kind in args.kinds:
                for n in args.sizes:
                    A, V, layer = layer_for(kind, d, dtype, dev)
                    x0 = sample_gaussian(n, np.zeros(d), np.eye(d), seed=0).to(dtype)
                    xd = x0.to(dev)
                    t = np.array([0.0, h * args.steps])

                    def run(xd=xd, t=t, kind=kind, layer=layer):
                        return simulate(
                            xd, t, kind=kind, step_size=h, progress=False, **layer
                        )

                    t_pt, traj = best_of(run, args.repeat, dev)
                    eval_s = t_pt / (4 * args.steps)
                    fl = floor_seconds(
                        xd,
                        torch.as_tensor(A, dtype=dtype, device=dev),
                        args.repeat,
                        dev,
                    )
                    np_s = diff = float("nan")
                    if kind == "softmax":
                        xn = x0.numpy()
                        t_np, x_np = best_of(
                            lambda xn=xn: numpy_rk4(
                                xn,
                                A.astype(xn.dtype),
                                V.astype(xn.dtype),
                                h,
                                args.steps,
                            ),
                            args.repeat,
                            dev,
                        )
                        np_s = args.steps / t_np
                        diff = float(np.abs(traj[-1].cpu().numpy() - x_np).max())
                    cold = float("nan")
                    if kind == "sinkhorn":
                        cold = best_of(
                            lambda: velocity(xd, kind=kind, **layer), args.repeat, dev
                        )[0]
                    steps_s = args.steps / t_pt
                    print(
                        f"{kind:>9} {dtype_name:>7} {d:>2} {n:>5} {steps_s:>9.1f} "
                        f"{np_s:>8.1f} {steps_s / np_s:>5.2f}x {diff:>9.1e} "
                        f"{1e3 * eval_s:>8.2f} {1e3 * fl:>8.2f} {100 * fl / eval_s:>6.0f}% "
                        f"{1e3 * cold:>8.2f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
