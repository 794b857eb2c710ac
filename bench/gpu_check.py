"""A prepared GPU check: ceilings, each part's big kernel, and every experiment on CUDA vs CPU.

    python bench/gpu_check.py          # CUDA when present (under 8 minutes on one H200)
    python bench/gpu_check.py --cpu    # the same code paths on the CPU at tiny sizes (tests)

1. Ceilings: dense matmul FLOP/s (float64, float32, bfloat16) and memory bandwidth (a large
   device-to-device copy, bytes read + written per second).
2. Kernels, each with its throughput and its fraction of the matmul ceiling of its dtype
   (FLOPs counted by ``torch.utils.flop_counter.FlopCounterMode``):
   Part III — the softmax particle velocity ``pde.velocity`` (mm + exp + mm) and the same field
   through ``torch.nn.functional.scaled_dot_product_attention`` (q = xAᵀ, k = x, v = xVᵀ,
   scale 1), for n up to 65 536, checked against each other;
   Part II — SGLD chain-steps/s on the copy head's exact marginal (``sgld.sample``), and batched
   Adam model-steps/s (``train.adam``);
3. Every registered experiment at ``smoke`` scale on CUDA and on the CPU, compared (largest
   relative difference of every output; on a CPU-only machine the CPU run is repeated).

Prints one table. Sizes that do not fit in memory are reported as ``OOM`` and skipped.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from attnbook import experiments as E  # noqa: E402
from attnbook import pde, sgld, train  # noqa: E402
from attnbook.copyhead import action, copy_statistics, copy_task  # noqa: E402

ROWS: list[tuple[str, ...]] = []


def row(section, item, size, device, value, fraction="", check=""):
    ROWS.append((section, item, size, device, value, fraction, check))
    print(" | ".join(str(x) for x in ROWS[-1]), file=sys.stderr, flush=True)


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


MIN_TIME = [0.3]  # seconds of repeats per measurement (shorter in --cpu mode)


def timeit(fn, device, min_time=None, max_reps=50) -> float:
    """Seconds per call: one warm-up, then repeat until ``min_time`` has passed."""
    min_time = MIN_TIME[0] if min_time is None else min(min_time, MIN_TIME[0])
    fn()
    sync(device)
    reps, t0 = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        sync(device)
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time or reps >= max_reps:
            return elapsed / reps


def flops_of(fn) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def fmt_rate(x, unit):
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def is_oom(err: BaseException) -> bool:
    return (
        isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()
    )


def free(device):
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


# ---- 1. ceilings ------------------------------------------------------------------------------
def ceilings(device, sizes) -> dict:
    peak = {}
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        n = sizes["matmul"]
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        s = timeit(lambda: a @ b, device)
        peak[dtype] = 2 * n**3 / s
        row(
            "ceiling",
            f"matmul {str(dtype)[6:]}",
            f"{n}²",
            device,
            fmt_rate(peak[dtype], "FLOP/s"),
        )
    n_bytes = sizes["bandwidth"]
    x = torch.empty(n_bytes // 4, device=device)
    y = torch.empty_like(x)
    s = timeit(lambda: y.copy_(x), device)
    peak["bandwidth"] = 2 * n_bytes / s
    row(
        "ceiling",
        "bandwidth (copy)",
        f"{n_bytes / 2**20:.0f} MiB",
        device,
        fmt_rate(peak["bandwidth"], "B/s"),
    )
    free(device)
    return peak


# ---- 2. kernels -------------------------------------------------------------------------------
def sdpa_velocity(x, A, V):
    """The softmax particle velocity through fused attention: softmax(xAᵀxᵀ) x Vᵀ."""
    q = (x @ A.T)[None, None]
    return torch.nn.functional.scaled_dot_product_attention(
        q, x[None, None], (x @ V.T)[None, None], scale=1.0
    )[0, 0]


def velocity_kernels(device, sizes, peak):
    d = 8
    gen = torch.Generator().manual_seed(0)
    A = (torch.randn(d, d, generator=gen) / d).to(device)
    V = torch.eye(d).to(device)
    for dtype in (torch.float64, torch.float32):
        for n in sizes["velocity_n"]:
            if dtype == torch.float64 and n > sizes["velocity_f64_max"]:
                continue
            x = (0.5 * torch.randn(n, d, generator=gen)).to(device, dtype)
            Ad, Vd = A.to(dtype), V.to(dtype)
            size = f"n={n} d={d} {str(dtype)[6:]}"
            ref = None
            for name, fn in (
                ("pde.velocity", lambda: pde.velocity(x, kind="softmax", A=Ad, V=Vd)),
                ("velocity SDPA", lambda: sdpa_velocity(x, Ad, Vd)),
            ):
                try:
                    flops = (
                        4.0 * n * n * d
                    )  # two (n×n×d) products; exp/normalise not counted
                    s = timeit(fn, device, min_time=0.2, max_reps=10)
                    out = fn()
                except RuntimeError as err:
                    if not is_oom(err):
                        raise
                    row("Part III", name, size, device, "OOM")
                    free(device)
                    continue
                check = ""
                if ref is None:
                    ref = out
                else:
                    err_ = float((out - ref).abs().max() / ref.abs().max())
                    check = f"rel diff vs pde.velocity {err_:.1e}"
                rate = flops / s
                row(
                    "Part III",
                    name,
                    size,
                    device,
                    f"{1 / s:.3g} evals/s ({fmt_rate(rate, 'FLOP/s')})",
                    f"{rate / peak[dtype]:.1%}",
                    check,
                )
            free(device)


def _copy_potential(n, L, V, kind, device, dtype=torch.float32):
    X, Y = copy_task(4 * L, L, V, batch_shape=(n,), seed=0, dtype=dtype, device=device)
    pot = action.marginal_potential(copy_statistics(X, Y), kind=kind)
    cols = L * L + (kind == "linear")
    theta0 = 0.1 * torch.randn(
        n, cols, generator=torch.Generator().manual_seed(1), dtype=dtype
    )
    return pot, theta0.to(device)


def copyhead_kernels(device, sizes, peak):
    L, V, n_steps = sizes["copy_L"], sizes["copy_V"], sizes["copy_steps"]
    for kind in ("linear", "softmax"):
        n = sizes["copy_chains"]
        pot, theta0 = _copy_potential(n, L, V, kind, device)

        def grad_step():
            th = theta0.clone().requires_grad_(True)
            torch.autograd.grad(pot(th).sum(), th)

        per_step = flops_of(grad_step)
        t0 = time.perf_counter()
        res = sgld.sample(pot, theta0, step_size=1e-3, n_steps=n_steps, seed=0)
        sync(device)
        s = time.perf_counter() - t0
        finite = bool(torch.isfinite(res.samples).all())
        rate = per_step * n_steps / s
        row(
            "Part II",
            f"SGLD {kind}",
            f"{n} chains L={L} V={V}",
            device,
            f"{n * n_steps / s:.3g} chain-steps/s",
            f"{rate / peak[torch.float32]:.1%}",
            "finite" if finite else "NON-FINITE",
        )
        t0 = time.perf_counter()
        hist = train.adam(
            lambda p: pot(p["theta"]), {"theta": theta0}, n_steps=n_steps, lr=1e-2
        )
        sync(device)
        s = time.perf_counter() - t0
        rate = per_step * n_steps / s
        row(
            "Part II",
            f"Adam {kind}",
            f"{n} models L={L} V={V}",
            device,
            f"{n * n_steps / s:.3g} model-steps/s",
            f"{rate / peak[torch.float32]:.1%}",
            "finite" if np.isfinite(hist.final_loss).all() else "NON-FINITE",
        )
        free(device)


# ---- 3. experiments on CUDA vs CPU ------------------------------------------------------------
def max_rel_diff(a: dict, b: dict) -> float:
    worst = 0.0
    for k in a:
        x, y = np.asarray(a[k], float), np.asarray(b[k], float)
        both_inf = np.isinf(x) & np.isinf(y) & (np.sign(x) == np.sign(y))
        both_nan = np.isnan(x) & np.isnan(y)
        ok = ~(both_inf | both_nan)
        if not ok.any():
            continue
        scale = max(float(np.abs(y[ok]).max()), 1e-300)
        worst = max(worst, float(np.abs(x[ok] - y[ok]).max()) / scale)
    return worst


def experiments_check(device, all_points: bool):
    torch.set_num_threads(1)
    for name in E.names():
        if E.get(name).part == "book":
            continue  # ledger-seeds executes chapters: each chooses its own device
        points = E.get(name).points("smoke")
        if not all_points:
            points = points[:1]
        t_cpu = t_dev = 0.0
        worst = 0.0
        for _, cfg in points:
            c = E.config_dict(cfg)
            t0 = time.perf_counter()
            on_cpu = E.run_point(name, {**c, "device": "cpu"})
            t_cpu += time.perf_counter() - t0
            t0 = time.perf_counter()
            on_dev = E.run_point(name, {**c, "device": device})
            sync(device)
            t_dev += time.perf_counter() - t0
            worst = max(worst, max_rel_diff(on_dev, on_cpu))
        other = "cpu (again)" if device == "cpu" else device
        row(
            "experiments",
            name,
            f"smoke, {len(points)} point(s)",
            f"cpu vs {other}",
            f"cpu {t_cpu:.2f} s, {other} {t_dev:.2f} s",
            "",
            f"max rel diff {worst:.1e}",
        )


SIZES = {
    "cuda": dict(
        matmul=8192,
        bandwidth=2**32,
        velocity_n=(1024, 4096, 16384, 65536),
        velocity_f64_max=16384,
        copy_chains=4096,
        copy_L=16,
        copy_V=8,
        copy_steps=200,
    ),
    "cpu": dict(
        matmul=256,
        bandwidth=2**23,
        velocity_n=(256, 1024),
        velocity_f64_max=1024,
        copy_chains=16,
        copy_L=6,
        copy_V=3,
        copy_steps=20,
    ),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--cpu", action="store_true", help="CPU at tiny sizes even if CUDA is present"
    )
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    sizes = SIZES[device]
    t0 = time.perf_counter()
    if device == "cpu":
        torch.set_num_threads(1)
        MIN_TIME[0] = 0.05
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU (tiny sizes)"
    print(f"# gpu_check on {name}; torch {torch.__version__}", flush=True)
    peak = ceilings(device, sizes)
    velocity_kernels(device, sizes, peak)
    copyhead_kernels(device, sizes, peak)
    experiments_check(device, all_points=device == "cuda")
    header = (
        "section",
        "item",
        "size",
        "device",
        "throughput / time",
        "of ceiling",
        "check",
    )
    widths = [max(len(str(r[i])) for r in [header, *ROWS]) for i in range(len(header))]
    line = "-+-".join("-" * w for w in widths)
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print(line)
    for r in ROWS:
        print(" | ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    print(f"# total {time.perf_counter() - t0:.1f} s", flush=True)
    return 1 if any("NON-FINITE" in r[-1] for r in ROWS) else 0


if __name__ == "__main__":
    sys.exit(main())
