"""Part I benchmark: why the book integrates the exact population flow, and why it batches seeds.

1. **Population flow vs finite-sample SGD at equal trajectory error.** Reference: the exact
   population flow at tight tolerance. Error of a run: the largest gap, over the recorded times,
   between the population loss along the run and along the reference (the same initial weights).
   For a target error we time the cheapest population-flow tolerance that reaches it and the
   cheapest SGD configuration (batch, context) that reaches it, and print the ratio.
2. **Batched ensemble vs a Python loop of models.** 32 seeds trained together in one
   vectorised module against 32 separate models trained one after another (same work, the
   same code with ``n_models=1``). A step of these tiny models is mostly fixed per-call cost
   (Python, kernel dispatch), paid once per step by the ensemble and once per model by the
   loop; the ratio is bounded by how little of the step grows with the number of models, so
   it falls when the single-model step gets faster. The benchmark prints both step times.

Run:  OMP_NUM_THREADS=1 .venv/bin/python bench/bench_focus.py [--quick]
Timings on a shared machine are noisy; the ratios are what matters.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from attnbook.device import default_device
from attnbook.focus import (
    MarkovWindows,
    OneLayerTransformer,
    Params,
    population_flow,
    population_loss,
    train,
)
from attnbook.markov import perturbed_chain


def traj_error(W, ref, P):
    """max_t |L(theta_run(t)) - L(theta_ref(t))| (population loss, so no sampling noise)."""
    L_run = population_loss(*(torch.as_tensor(x) for x in W), P).numpy()
    return float(np.max(np.abs(L_run - ref.loss)))


def bench_flow_vs_sgd(quick: bool, device):
    P = perturbed_chain(4, 0.7, 0.04, 0.5)
    d, m, eps, lr = 4, 8, 1e-2, 0.25
    T = 60.0 if quick else 100.0
    steps = int(round(T / lr))
    model0 = OneLayerTransformer(
        d, m, n_models=1, eps=eps, seed=0, dtype=torch.float64, device="cpu"
    )
    start = Params(*(x[0] for x in model0.params()))
    rec = np.arange(0, steps + 1, 10)
    t_eval = rec * lr
    ref = population_flow(start, P, T, t_eval=t_eval, rtol=1e-11, atol=1e-13)
    print(
        f"\n[1] population flow vs finite-sample SGD  (d={d}, m={m}, eps={eps}, horizon t={T:g}, "
        f"SGD lr={lr}, {steps} steps; device for SGD: {device})"
    )
    print(
        f"    reference: BDF rtol 1e-11, loss {ref.loss[0]:.4f} -> {ref.loss[-1]:.4f}"
    )
    flows = []
    for rtol in (1e-2, 1e-3, 1e-4, 1e-6):
        t0 = time.perf_counter()
        r = population_flow(start, P, T, t_eval=t_eval, rtol=rtol, atol=rtol * 1e-3)
        wall = time.perf_counter() - t0
        flows.append((rtol, traj_error([r.W0, r.W1, r.WQ, r.WK], ref, P), wall))
        print(
            f"    flow  rtol={rtol:7.0e}            error {flows[-1][1]:9.2e}   time {wall:7.3f} s"
        )
    sgds = []
    configs = (
        [(64, 16), (256, 32), (1024, 64)]
        if quick
        else [(64, 16), (256, 32), (1024, 64), (2048, 128)]
    )
    for batch, context in configs:
        model = OneLayerTransformer(
            d, m, n_models=1, eps=eps, seed=0, dtype=torch.float32, device=device
        )
        with torch.no_grad():
            for mine, src in zip((model.W0, model.W1, model.WQ, model.WK), start):
                mine.copy_(src[None].to(mine))
        sampler = MarkovWindows(P, batch=batch, context=context, seed=1, device=device)
        t0 = time.perf_counter()
        res = train(
            model, sampler, n_steps=steps, lr=lr, record_steps=rec, progress=False
        )
        wall = time.perf_counter() - t0
        err = traj_error(
            [res.W0[:, 0], res.W1[:, 0], res.WQ[:, 0], res.WK[:, 0]], ref, P
        )
        sgds.append(((batch, context), err, wall))
        print(
            f"    SGD   batch={batch:5d} context={context:4d} error {err:9.2e}   time {wall:7.3f} s"
        )
    # the ratio at each SGD configuration's error: cheapest flow reaching that error
    print(
        "    ratio (time of SGD / time of the cheapest flow with error <= SGD's error):"
    )
    best = None
    for cfg, err, wall in sgds:
        ok = [f for f in flows if f[1] <= err]
        if not ok:
            print(
                f"      SGD {cfg}: no flow tolerance tried is that loose (flow is always better)"
            )
            continue
        tf = min(f[2] for f in ok)
        ratio = wall / tf
        best = ratio if best is None else min(best, ratio)
        print(
            f"      SGD batch,context={cfg}: error {err:.2e}: "
            f"SGD {wall:.2f} s / flow {tf:.3f} s = {ratio:6.1f}x"
        )
    return best


def bench_ensemble(quick: bool, device):
    P = perturbed_chain(4, 0.7, 0.04, 0.5)
    n, steps, batch, context = 32, (50 if quick else 100), 64, 32
    print(
        f"\n[2] batched ensemble of {n} seeds vs a loop of {n} models "
        f"({steps} SGD steps, batch {batch}, context {context}, device {device})"
    )

    def fit(n_models, seed, n_steps):
        """Train ``n_models`` seeds as one batched model (the same code for 1 and for n)."""
        model = OneLayerTransformer(
            4,
            8,
            n_models=n_models,
            eps=1e-2,
            seed=seed,
            dtype=torch.float32,
            device=device,
        )  # float32: the dtype a GPU run would use
        windows = MarkovWindows(
            P, batch=batch, context=context, n_models=n_models, seed=seed, device=device
        )
        train(model, windows, n_steps=n_steps, lr=0.25, record_every=10, progress=False)

    # warm-up: torch's first calls (kernel selection, lazy imports) are not part of either cost
    for k in (1, n):
        fit(k, 0, 5)

    def timed(fits):
        t0 = time.perf_counter()
        for n_models, seed in fits:
            fit(n_models, seed, steps)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    def run_ensemble():
        return timed([(n, 0)])

    def run_loop():
        return timed([(1, seed) for seed in range(n)])

    # the best of 3 repeats of each, alternated so that both see the same spells of load: on
    # a shared machine a short run is easily hit by a neighbour's burst, and the ensemble's
    # run is much shorter than the loop's
    t_ens, t_loop = np.inf, np.inf
    for _ in range(3):
        t_ens = min(t_ens, run_ensemble())
        t_loop = min(t_loop, run_loop())
    print(
        f"    ensemble {t_ens:7.2f} s   loop {t_loop:7.2f} s   speed-up {t_loop / t_ens:5.1f}x"
    )
    print(
        f"    per SGD step: {n} seeds {1e3 * t_ens / steps:.3f} ms, "
        f"one seed {1e3 * t_loop / (n * steps):.3f} ms (model and sampler set-up included)"
    )
    return t_loop / t_ens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="smaller sizes (about a minute on a CPU)"
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    device = default_device()
    r1 = bench_flow_vs_sgd(args.quick, device)
    r2 = bench_ensemble(args.quick, device)
    print("\nsummary:")
    print(
        f"  finite-sample SGD needs {r1:.1f}x the time of the exact flow at equal trajectory error"
        if r1 is not None
        else "  no SGD configuration reached any flow tolerance's error"
    )
    print(
        f"  batched ensemble of 32 seeds is {r2:.1f}x faster than a loop of 32 models"
    )


if __name__ == "__main__":
    main()
