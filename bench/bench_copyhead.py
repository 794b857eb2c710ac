"""Benchmark: batched SGLD and batched Adam for the copy head, side by side with the baselines.

1. chains × steps per second of ``attnbook.sgld.sample`` (all chains in one batched tensor) against
   the ``devinterp`` package's SGLD optimiser, on the same model and data: the posterior of the
   attention scores G of a linear copy head (readout integrated out exactly), L = 16, V = 4,
   P = 256. Like with like: devinterp's optimiser is given the *same batched tensor* (all chains
   as one parameter, one optimiser), and — for reference — one optimiser per chain in a loop.
   Then the statistics: the mean and variance of |m| (sign-invariant) from both samplers on the
   same posterior, compared in units of their Monte Carlo errors.
2. Adam on 64 copy-head networks (G and the readout W) in one batched run
   (``attnbook.train.adam``) against a Python loop of 64 ``torch.optim.Adam`` runs.

Run:  OMP_NUM_THREADS=1 .venv/bin/python bench/bench_copyhead.py [--quick]
(``devinterp`` is installed with ``pip install --no-deps devinterp``: only its ``optim``
module is used.) Timings on a shared machine are noisy; the ratios are the point.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch

from attnbook import sgld, train
from attnbook.copyhead import action as A
from attnbook.copyhead import copy_statistics, copy_task, init_params, loss
from attnbook.device import default_device


def bench_sgld(n_chains: int, n_steps: int, device) -> tuple[float, float]:
    L, V, P = 16, 4, 256
    X, Y = copy_task(P, L, V, seed=0, dtype=torch.float64, device=device)
    stats = copy_statistics(X, Y)
    potential = A.marginal_potential(stats, kind="linear")
    init = torch.randn(
        n_chains,
        L * L + 1,
        dtype=torch.float64,
        generator=torch.Generator().manual_seed(1),
    ).to(device)
    eta, thin = (
        0.01,
        10,
    )  # both samplers keep every 10th state: a sampler's output is draws
    t0 = time.perf_counter()
    sgld.sample(potential, init, step_size=eta, n_steps=n_steps, thin=thin, seed=0)
    ours = n_chains * n_steps / (time.perf_counter() - t0)

    try:
        from devinterp.optim.sgld import SGLD
    except ImportError:
        print(
            "devinterp is not installed (pip install --no-deps devinterp): skipping its SGLD"
        )
        return ours, float("nan"), float("nan")
    gen = torch.Generator(device=device).manual_seed(0)

    def run_devinterp(theta0):
        theta = torch.nn.Parameter(theta0.clone())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nbeta = 1: the loss *is* the potential
            opt = SGLD([theta], lr=eta, nbeta=1.0)
        kept = []
        for t in range(n_steps):
            if t % thin == 0:
                kept.append(theta.detach().clone())
            opt.zero_grad()
            potential(
                theta
            ).sum().backward()  # Δθ = −(η/2)∇U + N(0, η): the same update
            opt.step(noise_generator=gen)
        return torch.stack(kept)

    run_devinterp(init[:, :1].expand_as(init).clone())  # warm-up (first-call costs)
    t0 = time.perf_counter()
    run_devinterp(init)  # the same batched tensor: one parameter holds every chain
    batched = n_chains * n_steps / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for c in range(n_chains):  # one optimiser (one chain) at a time
        run_devinterp(init[c : c + 1])
    looped = n_chains * n_steps / (time.perf_counter() - t0)
    return ours, batched, looped


def compare_statistics(n_chains: int, n_steps: int, device) -> None:
    """Mean and variance of |m| from attnbook and devinterp SGLD on one posterior."""
    try:
        from devinterp.optim.sgld import SGLD
    except ImportError:
        print("devinterp is not installed: no statistics comparison")
        return
    L, V, P, eta, burn = 16, 4, 256, 0.002, n_steps // 4
    X, Y = copy_task(P, L, V, seed=0, dtype=torch.float64, device=device)
    potential = A.marginal_potential(copy_statistics(X, Y), kind="linear")
    gen = torch.Generator().manual_seed(2)
    init = 0.5 * torch.randn(n_chains, L * L + 1, dtype=torch.float64, generator=gen)
    init = init.to(device)
    ours = sgld.sample(potential, init, step_size=eta, n_steps=n_steps, seed=0)
    draws = {"attnbook": ours.samples[burn:]}
    theta = torch.nn.Parameter(init.clone())
    noise = torch.Generator(device=device).manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = SGLD([theta], lr=eta, nbeta=1.0)
    kept = []
    for t in range(n_steps):
        if t >= burn:
            kept.append(theta.detach().clone())
        opt.zero_grad()
        potential(theta).sum().backward()
        opt.step(noise_generator=noise)
    draws["devinterp"] = torch.stack(kept)
    summary = {}
    for name, x in draws.items():
        m = A.readouts(x)["m"]  # (draws, chains)
        mt = torch.as_tensor(m)[:, :, None]
        dev2 = (mt - mt.mean()) ** 2
        summary[name] = (
            float(mt.mean()),
            float(sgld.monte_carlo_se(mt)),
            float(dev2.mean()),
            float(sgld.monte_carlo_se(dev2)),
        )
        print(
            f"{name:>10}: ⟨|m|⟩ = {summary[name][0]:.4f} ± {summary[name][1]:.4f}, "
            f"var|m| = {summary[name][2]:.5f} ± {summary[name][3]:.5f}"
        )
    a, b = summary["attnbook"], summary["devinterp"]
    z_mean = (a[0] - b[0]) / (a[1] ** 2 + b[1] ** 2) ** 0.5
    z_var = (a[2] - b[2]) / (a[3] ** 2 + b[3] ** 2) ** 0.5
    print(f"difference in Monte Carlo errors: mean {z_mean:.2f}, variance {z_var:.2f}")


def bench_adam(n_models: int, n_steps: int, device) -> tuple[float, float]:
    L, V, P = 16, 4, 256
    X, Y = copy_task(P, L, V, batch_shape=(n_models,), seed=0, device=device)
    stats = copy_statistics(X, Y)
    params = init_params(
        n_models, L, V, g_scale=0.1, w_scale=0.1, seed=0, device=device
    )
    params.pop("b")

    def f(p):
        return loss(p, stats, kind="softmax")

    t0 = time.perf_counter()
    train.adam(f, params, n_steps=n_steps, lr=0.02)
    batched = time.perf_counter() - t0

    t0 = time.perf_counter()
    for n in range(n_models):  # the loop the batched run replaces
        st = copy_statistics(X[n : n + 1], Y[n : n + 1])
        p = {k: torch.nn.Parameter(v[n : n + 1].clone()) for k, v in params.items()}
        opt = torch.optim.Adam(p.values(), lr=0.02)
        for _ in range(n_steps):
            opt.zero_grad()
            loss(p, st, kind="softmax").sum().backward()
            opt.step()
    looped = time.perf_counter() - t0
    return batched, looped


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer steps (a smoke test)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    device = default_device()
    steps = 100 if args.quick else 500
    print(
        f"device: {device}, torch {torch.__version__}, threads {torch.get_num_threads()}"
    )
    print(
        "\n1) SGLD on the copy-head posterior of G (linear attention, L=16, V=4, P=256)"
    )
    print(
        f"{'chains':>8} {'steps':>6} {'attnbook':>10} {'devinterp, batched':>19} "
        f"{'devinterp, loop':>16}   (chain·step/s)"
    )
    for n_chains in (16, 64, 256):
        ours, batched, looped = bench_sgld(n_chains, steps, device)
        print(
            f"{n_chains:>8} {steps:>6} {ours:>10.0f} {batched:>19.0f} {looped:>16.0f}"
        )
    print("\n   the same posterior, 16 chains, 4000 steps at η = 0.002:")
    compare_statistics(16, 800 if args.quick else 4000, device)
    print("\n2) Adam, 64 softmax copy heads (G and W), L=16, V=4, P=256")
    batched, looped = bench_adam(64, steps // 2, device)
    print(
        f"batched (one run): {batched:.2f} s   loop of 64: {looped:.2f} s   speed-up {looped / batched:.1f}x"
    )


if __name__ == "__main__":
    main()
