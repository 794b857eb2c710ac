"""Where a number was computed: the source tree and the *numeric signature* of the process.

Two runs of the same code give the same bits only on the same numeric path: the same CPU
instruction set (MKL and OpenBLAS each pick a kernel per CPU; torch picks its vectorised
kernels by its CPU capability), the same library versions and builds, the same thread counts,
and the same environment variables that steer those choices (``MKL_CBWR``,
``MKL_ENABLE_INSTRUCTIONS``, ``OPENBLAS_CORETYPE``, ``ATEN_CPU_CAPABILITY``).
:func:`numeric_signature` records all of that as JSON; :func:`signature_key` hashes the fields
that decide bitwise equality, so that a re-check can demand equal bits where the keys agree and
stated tolerances where they do not (:mod:`attnbook.experiments.verify`).

:func:`git_state` tells the commit of the source tree attnbook is imported from and whether it
has uncommitted changes to tracked files. This is a base module: it imports nothing of
attnbook's, and torch, NumPy, SciPy and threadpoolctl only when a signature is asked for.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import subprocess
from pathlib import Path

__all__ = [
    "NUMERIC_ENV",
    "THREAD_ENV",
    "git_state",
    "git_commit",
    "load_numeric_libraries",
    "numeric_signature",
    "signature_key",
]

# environment variables that choose another kernel on the same machine (measured: MKL_CBWR and
# MKL_ENABLE_INSTRUCTIONS change MKL's results here; the others choose torch's and OpenBLAS's)
NUMERIC_ENV = (
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_DEBUG_CPU_TYPE",
    "OPENBLAS_CORETYPE",
    "ATEN_CPU_CAPABILITY",
)
# recorded, not keyed: what they change is the thread count in use, which the key holds itself
# (Dask's workers set them to 1 while a re-check in a shell may not, with the same counts in use)
THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "ATTNBOOK_DEVICE",
)
# the CPU features that decide which kernels MKL, OpenBLAS and torch dispatch to
_ISA_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512dq",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(
            ["git", "-C", str(cwd), *args], capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None


# what counts as the source tree: the whole checkout except the archived results
_CODE = (":(top)", ":(top,exclude)results")


def git_state(path=None) -> dict:
    """``{"commit", "dirty", "diff_sha256"}`` of the git checkout holding ``path``.

    ``path`` defaults to the folder attnbook is imported from. ``dirty`` is true when tracked
    files differ from the commit (untracked files do not count: they are not imported unless
    added); ``diff_sha256`` hashes ``git diff HEAD`` then, so that two dirty trees of one commit
    can be told apart. All three are ``None`` outside a git checkout (an installed wheel).
    The archives in ``results/`` are outputs, not code: remaking one deletes its tracked files
    first, which must not make the tree that computes it count as dirty.
    """
    here = Path(path) if path is not None else Path(__file__).resolve().parent
    none = {"commit": None, "dirty": None, "diff_sha256": None}
    head = _git(["rev-parse", "HEAD"], here)
    if head is None or head.returncode != 0:
        return none
    status = _git(["status", "--porcelain", "--untracked-files=no", "--", *_CODE], here)
    if status is None or status.returncode != 0:
        return {**none, "commit": head.stdout.decode().strip()}
    dirty = bool(status.stdout.strip())
    digest = None
    if dirty:
        diff = _git(["diff", "HEAD", "--no-color", "--no-ext-diff", "--", *_CODE], here)
        if diff is not None and diff.returncode == 0:
            digest = hashlib.sha256(diff.stdout).hexdigest()
    return {
        "commit": head.stdout.decode().strip(),
        "dirty": dirty,
        "diff_sha256": digest,
    }


def git_commit(path=None) -> str | None:
    """The commit of the source tree, with ``+dirty`` when tracked files changed (or ``None``)."""
    st = git_state(path)
    if st["commit"] is None:
        return None
    return st["commit"] + ("+dirty" if st["dirty"] else "")


def _cpu() -> dict:
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
                if model is not None and flags:
                    break
    except OSError:  # not Linux: the platform's own description
        pass
    return {
        "model": model or platform.processor() or platform.machine() or None,
        "machine": platform.machine(),
        "isa": [f for f in _ISA_FLAGS if f in flags],
    }


def _library_of(path: str) -> str:
    p = path.replace("\\", "/")
    for owner in ("numpy", "scipy", "torch", "sklearn"):
        if f"/{owner}.libs/" in p or f"/{owner}/" in p:
            return owner
    return Path(p).name.split(".")[0]


def load_numeric_libraries() -> None:
    """Import torch, NumPy and SciPy's linear algebra, so that their BLAS libraries are loaded.

    threadpoolctl sees (and limits) only loaded libraries: a signature or a thread limit taken
    before SciPy's BLAS loads would miss it, and differ from one taken after.
    """
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401
    import torch  # noqa: F401


@functools.cache
def _static() -> dict:
    """What cannot change within a process: the CPU, the builds and versions of the libraries."""
    load_numeric_libraries()
    import numpy as np
    import scipy
    import torch

    config = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([^\n]+?)(?: for |\n)", config)
    build = dict(re.findall(r"\b(BLAS_INFO|LAPACK_INFO)=([^,\s]+)", config))
    return {
        "cpu": _cpu(),
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "scipy": scipy.__version__,
            "torch": torch.__version__,
        },
        "torch_build": {
            "blas": build.get("BLAS_INFO"),
            "lapack": build.get("LAPACK_INFO"),
            "mkl": mkl.group(1).strip() if mkl else None,
            "cuda": torch.version.cuda,
        },
    }


def _blas() -> list[dict]:
    """NumPy's and SciPy's BLAS/LAPACK as threadpoolctl reports them (core and threads in use)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # a dependency; without it the signature says so
        return [{"library": "unknown", "internal_api": "threadpoolctl not installed"}]
    libs = []
    for info in threadpool_info():
        if info.get("user_api") != "blas":
            continue
        libs.append(
            {
                "library": _library_of(info.get("filepath", "")),
                "internal_api": info.get("internal_api"),
                "version": info.get("version"),
                "architecture": info.get("architecture"),
                "threading_layer": info.get("threading_layer"),
                "num_threads": info.get("num_threads"),
            }
        )
    return sorted(libs, key=lambda d: (d["library"], str(d["internal_api"])))


def numeric_signature(*, device: str | None = None, git: bool = True) -> dict:
    """The numeric signature of this process, as plain JSON.

    ``cpu`` (model from ``/proc/cpuinfo``, else the platform's; architecture; the vector
    instruction sets present), ``torch`` (its CPU capability — the kernels it dispatches to —
    its BLAS/LAPACK and MKL build, its intra-op threads), ``blas`` (NumPy's and SciPy's
    libraries from threadpoolctl: core, version, kernel architecture, threads), ``env`` (the
    variables of :data:`NUMERIC_ENV` and :data:`THREAD_ENV`, ``None`` when unset), ``versions``
    (Python, NumPy, SciPy, torch), ``gpu`` for a CUDA ``device``, and with ``git`` the source
    tree's ``git_commit`` and ``dirty`` flag. ``key`` is :func:`signature_key` of the rest.
    """
    import torch

    static = _static()
    sig = {
        "cpu": static["cpu"],
        "torch": {
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            **static["torch_build"],
            "threads": torch.get_num_threads(),
        },
        "blas": _blas(),
        "env": {k: os.environ.get(k) for k in (*NUMERIC_ENV, *THREAD_ENV)},
        "versions": static["versions"],
    }
    if (
        device is not None
        and str(device).startswith("cuda")
        and torch.cuda.is_available()
    ):
        props = torch.cuda.get_device_properties(torch.device(device))
        sig["gpu"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "cudnn": torch.backends.cudnn.version(),
        }
    if git:
        st = git_state()
        sig["git_commit"], sig["dirty"] = st["commit"], st["dirty"]
    sig["key"] = signature_key(sig)
    return sig


def signature_key(sig: dict) -> str:
    """16 hex digits over the fields of ``sig`` that decide bitwise equality.

    In: the CPU, torch's capability, build and threads, each BLAS (core, version, kernel,
    threads), the variables of :data:`NUMERIC_ENV`, the versions and the GPU. Out: the git
    commit and dirty flag (code is compared by commit, separately), timestamps, host names and
    the thread variables of :data:`THREAD_ENV` (their effect, the threads in use, is in).
    """
    if not isinstance(sig, dict):
        raise TypeError("sig must be a numeric signature (a dict)")
    env = sig.get("env") or {}
    keyed = {
        "cpu": sig.get("cpu"),
        "torch": sig.get("torch"),
        "blas": sig.get("blas"),
        "env": {k: env.get(k) for k in NUMERIC_ENV},
        "versions": sig.get("versions"),
        "gpu": sig.get("gpu"),
    }
    text = json.dumps(keyed, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
