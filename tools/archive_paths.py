"""Measure how far archived points move on other numeric paths of this machine.

For each archive of ``results/``, re-run a few quick points (those the re-check test may pick,
plus the longest under 15 s) in fresh processes under each path of :data:`PATHS` — MKL's default
kernel, ``MKL_CBWR=COMPATIBLE``, ``MKL_ENABLE_INSTRUCTIONS=AVX2`` and an everything-AVX2 path
(MKL, torch's own kernels and OpenBLAS) — and report per output the largest absolute and
relative difference from the archive and, for outputs with an ensemble dimension (model, chain,
draw), the largest difference of the ensemble mean in standard errors. The re-check specs of
``attnbook.experiments`` (``recheck=``) are sized from these numbers.

    python tools/archive_paths.py results [--only NAME ...] [--json OUT.json]

One child process per (archive, path) computes all of that archive's chosen points, with one
torch and one BLAS thread, as the runner's workers do.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PATHS = {
    "default": {},
    "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
    "MKL_ENABLE_INSTRUCTIONS=AVX2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "AVX2 everywhere": {
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "OPENBLAS_CORETYPE": "Haswell",
    },
}
ENSEMBLE_DIMS = ("model", "chain", "draw")
MAX_POINTS = 6


def chosen_points(directory: Path) -> list[dict]:
    """Up to MAX_POINTS of the test's quick points (spread evenly), plus the longest point under
    15 s when it is not among them."""
    from attnbook.experiments import store, verify

    man = store.read_manifest(directory)
    quick = verify.quick_points(directory)
    step = max(1, len(quick) // MAX_POINTS)
    picked = quick[::step][:MAX_POINTS]
    wall = {
        p["hash"]: store.read_point_meta(directory, p["hash"])["wall_s"]
        for p in man["points"]
    }
    spec, _ = verify.recheck_spec(man)
    if not (spec and spec.shorten):
        under = [p for p in man["points"] if wall[p["hash"]] <= verify.QUICK_S]
        if under:
            longest = max(under, key=lambda p: wall[p["hash"]])
            if longest not in picked:
                picked.append(longest)
    return picked


def child(name: str, configs_path: str, out: str) -> None:
    from attnbook.experiments import verify

    configs = json.loads(Path(configs_path).read_text())
    for h, config in configs.items():
        arrays, sig = verify.compute(name, config, threads=1)
        np.savez(Path(out) / f"{h}.npz", **arrays)
    (Path(out) / "signature.json").write_text(json.dumps(sig))


def _stats(got: np.ndarray, want: np.ndarray, dims: list[str]) -> dict:
    g, w = got.astype(np.float64), want.astype(np.float64)
    nonfinite = int(
        ((np.isnan(g) != np.isnan(w)) | (np.isinf(g) != np.isinf(w))).sum()
        + (np.isinf(g) & np.isinf(w) & (np.sign(g) != np.sign(w))).sum()
    )
    both = np.isfinite(g) & np.isfinite(w)
    d = np.abs(g - w)[both]
    scale = np.abs(w)[both]
    rel = np.where(
        scale > 0, d / np.where(scale > 0, scale, 1), np.where(d > 0, np.inf, 0)
    )
    out = {
        "max_abs": float(d.max()) if d.size else 0.0,
        "max_rel": float(rel.max()) if rel.size else 0.0,
        "max_abs_over_scale": float(d.max() / scale.max())
        if d.size and scale.max() > 0
        else 0.0,
        "n_differ": int((got != want).sum()) - int((np.isnan(g) & np.isnan(w)).sum()),
        "nonfinite_mismatch": nonfinite,
        "size": int(got.size),
    }
    for dim in ENSEMBLE_DIMS:
        if dim in dims and got.ndim == len(dims):
            ax = dims.index(dim)
            fin = np.isfinite(w) & np.isfinite(g)
            n = fin.sum(ax)
            with np.errstate(invalid="ignore", divide="ignore"):
                g0, w0 = np.where(fin, g, 0), np.where(fin, w, 0)
                mg, mw = g0.sum(ax) / n, w0.sum(ax) / n
                vg = np.where(fin, (g0 - np.expand_dims(mg, ax)) ** 2, 0).sum(ax) / (
                    n - 1
                )
                vw = np.where(fin, (w0 - np.expand_dims(mw, ax)) ** 2, 0).sum(ax) / (
                    n - 1
                )
                se = np.sqrt((vg + vw) / n)
                dm = np.abs(mg - mw)
                z = np.where(se > 0, dm / se, np.where(dm > 0, np.inf, 0))
            keep = n > 1
            out["ensemble_dim"] = dim
            out["max_mean_diff_in_se"] = (
                float(np.nanmax(z[keep])) if keep.any() else 0.0
            )
            out["max_mean_rel"] = (
                float(np.nanmax((dm / np.abs(mw))[keep & (mw != 0)]))
                if (keep & (mw != 0)).any()
                else 0.0
            )
    return out


def measure(directory: Path) -> dict:
    from attnbook.experiments import store, verify

    man = store.read_manifest(directory)
    spec, _ = verify.recheck_spec(man)
    points = chosen_points(directory)
    configs = {}
    for p in points:
        cfg = dict(p["config"])
        if spec and spec.shorten:
            cfg.update(spec.shorten)
        configs[p["hash"]] = cfg
    report = {"points": [p["index"] for p in points], "paths": {}}
    for label, env in PATHS.items():
        with tempfile.TemporaryDirectory(prefix="numeric-paths-") as tmp:
            cfg_path = Path(tmp) / "configs.json"
            cfg_path.write_text(json.dumps(configs))
            child_env = {**os.environ, **env}
            child_env["PYTHONPATH"] = os.pathsep.join(
                [str(ROOT / "src"), str(ROOT), child_env.get("PYTHONPATH", "")]
            )
            code = "import sys; from tools.archive_paths import child; child(*sys.argv[1:])"
            res = subprocess.run(
                [sys.executable, "-c", code, man["experiment"], str(cfg_path), tmp],
                env=child_env,
                capture_output=True,
                text=True,
            )
            if res.returncode != 0:
                raise RuntimeError(res.stderr[-3000:])
            sig = json.loads((Path(tmp) / "signature.json").read_text())
            per_output: dict[str, dict] = {}
            for p in points:
                want = store.read_point(directory, p["hash"])
                with np.load(Path(tmp) / f"{p['hash']}.npz") as z:
                    got = {k: z[k] for k in z.files}
                names = (
                    spec.shortened_outputs if spec and spec.shorten else sorted(want)
                )
                for k in names:
                    dims = list(man.get("outputs_dims", {}).get(k, []))
                    s = _stats(got[k], want[k], dims)
                    old = per_output.get(k)
                    if old is None:
                        per_output[k] = s
                    else:
                        for key, v in s.items():
                            if isinstance(v, (int, float)) and key != "size":
                                old[key] = max(old[key], v)
            report["paths"][label] = {
                "signature_key": sig["key"],
                "cpu_capability": sig["torch"]["cpu_capability"],
                "openblas": [b.get("architecture") for b in sig["blas"]],
                "outputs": per_output,
            }
        print(f"  {directory.name}: {label} done", file=sys.stderr, flush=True)
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--only", nargs="*", default=None, help="archive names")
    ap.add_argument("--json", type=Path, default=None, help="write the report here")
    args = ap.parse_args(argv)
    out = {}
    for man in sorted(args.results.glob("*/manifest.json")):
        if args.only and man.parent.name not in args.only:
            continue
        out[man.parent.name] = measure(man.parent)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1))
    for name, rep in out.items():
        print(f"== {name} (points {rep['points']})")
        for label, path in rep["paths"].items():
            worst = {
                k: (s["max_rel"], s["max_abs"], s.get("max_mean_diff_in_se"))
                for k, s in path["outputs"].items()
                if s["max_abs"] > 0 or s["nonfinite_mismatch"]
            }
            print(f"  {label:<30} {len(worst)} output(s) moved")
            for k, (rel, ab, z) in worst.items():
                zs = f", mean Δ {z:.2g} SE" if z is not None else ""
                print(f"    {k:<24} max rel {rel:.2g}, max abs {ab:.2g}{zs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
