"""``make test-colab``: run every generated Colab notebook as Colab would.

1. a fresh virtual environment (``python -m venv``) with the CPU build of torch and only the
   packages Colab ships that the book relies on (numpy, scipy, sympy, matplotlib, tqdm,
   ipywidgets, pyyaml, ipykernel) plus nbclient to drive the notebooks — no attnbook, no POT;
2. the data excerpts built from a local data folder (``$ATTNBOOK_DATA_DIR``), and the archived
   sweeps of ``results/`` (``$ATTNBOOK_RESULTS_URL``), served by an
   HTTP server on 127.0.0.1 (``$ATTNBOOK_DATA_URL``); the notebooks run in an empty folder
   with no ``ATTNBOOK_DATA_DIR`` and no ``../shared`` in reach;
3. each notebook installs attnbook through its own install cell, pointed by
   ``$ATTNBOOK_INSTALL`` at the wheel of this checkout's HEAD (built as ``make release-dry``
   builds the release's, served beside the data; commit first: HEAD is what gets installed).
   The first notebook installs it into the fresh environment, the others find it there; the
   install cell's time is reported for both;
4. every notebook is executed with nbclient, and every claim it records must pass (checked
   here from the records; the claims-ledger notebook itself lists the claims of a book build
   and needs a checkout, so it is not executed here).

Usage: ``python -m tools.colab_test [--venv DIR] [--jobs N] [--only part/chapter ...]``.

On a GPU runtime (``tools/gpu_run.sh``), ``--python PY`` runs the notebooks in an existing
environment instead of a fresh venv (its torch is the CUDA build; attnbook is uninstalled first,
so the install cell installs it), ``--served DIR`` takes the excerpts and the wheel from a folder
prepared where the data and git are (``--prepare DIR`` makes it), and ``--report FILE`` writes
every notebook's time and error and every claim record as JSON, one line per notebook as it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from attnbook.claims import reads_ledger

ROOT = Path(__file__).resolve().parents[1]

#: what Colab ships that the book relies on (attnbook's other dependencies come through the
#: install cell); nbclient only drives the notebooks
COLAB_PACKAGES = [
    "numpy",
    "scipy",
    "sympy",
    "matplotlib",
    "tqdm",
    "ipywidgets",
    "pyyaml",
    "ipykernel",
    "nbclient",
    "nbformat",
]
TORCH = os.environ.get("TORCH_CPU", "torch==2.13.0")

# runs inside the fresh environment: execute one notebook, print a JSON line
_RUNNER = r"""
import json, sys, time
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
path, cwd, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3])
nb = nbformat.read(path, as_version=4)
t0 = time.perf_counter()
error = None
try:
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": cwd}}).execute()
except CellExecutionError as exc:
    error = str(exc)[-4000:]
# the install cell's time, from nbclient's record of when it started and ended
timing = nb.cells[0].get("metadata", {}).get("execution", {})
try:
    from datetime import datetime
    t = [datetime.fromisoformat(timing[k].replace("Z", "+00:00"))
         for k in ("iopub.execute_input", "shell.execute_reply")]
    install_s = (t[1] - t[0]).total_seconds()
except (KeyError, ValueError):
    install_s = None
print(json.dumps({"notebook": path, "wall_s": time.perf_counter() - t0, "error": error,
                  "install_s": install_s}))
"""


def _run(cmd):
    print("+", " ".join(map(str, cmd)), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}")


def make_venv(venv: Path) -> Path:
    """A fresh virtual environment with torch (CPU) and what Colab ships; its python."""
    py = venv / "bin" / "python"
    if venv.exists():
        import shutil

        shutil.rmtree(venv)
    _run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(py), "-m", "pip", "install", "--quiet"]
    _run(pip + [TORCH])
    _run(pip + COLAB_PACKAGES)
    return py


@contextlib.contextmanager
def serve(folder: Path):
    """Serve ``folder`` over HTTP on 127.0.0.1; yields the base URL."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(folder), **k)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def head_wheel(folder: Path, root: Path = ROOT) -> Path:
    """The wheel of this checkout's HEAD (as ``make release-dry`` builds it) in ``folder``:
    what the install cell installs in this test, as it installs the release's wheel on Colab."""
    from tools.release import build_wheel, uncommitted_src

    if uncommitted_src(root):
        print("note: uncommitted changes in src/ are not tested (HEAD is)")
    return build_wheel(folder, root=root)


_REPORT_LOCK = threading.Lock()


def prepare_served(folder: Path) -> None:
    """The folder ``--served`` takes: the data excerpts and the wheel of HEAD, made here (where
    the data folder and git are) for a runtime that has neither."""
    from attnbook.data import find_data_dir
    from attnbook.download import build_excerpts

    data_dirs = [d for d in find_data_dir() if d.is_dir()]
    if not data_dirs:
        raise SystemExit(
            "no local data folder: set ATTNBOOK_DATA_DIR (see README, Data)"
        )
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    build_excerpts(folder, data_dir=data_dirs[0])
    print(f"served folder {folder}: {head_wheel(folder).name} and the excerpts")


def _execute(
    py: Path, nb: Path, cwd: Path, env: dict, timeout: int, report: Path | None = None
) -> dict:
    result = _execute_one(py, nb, cwd, env, timeout)
    # one line per notebook as it ends: a run cut off keeps the rest
    if report is not None:
        ledger = Path(env["ATTNBOOK_LEDGER_DIR"])
        chapter = nb.relative_to(ROOT / "book").with_suffix("").as_posix()
        records = [
            rec
            for p in sorted(ledger.glob("*.json"))
            if (rec := json.loads(p.read_text())).get("chapter") == chapter
        ]
        with _REPORT_LOCK, open(report, "a", encoding="utf-8") as fh:
            fh.write(
                json.dumps({**result, "chapter": chapter, "records": records}) + "\n"
            )
    print(
        f"{nb.relative_to(ROOT / 'book')}: {result['wall_s']:.1f} s "
        f"{'FAILED' if result['error'] else 'ok'}",
        flush=True,
    )
    return result


def _execute_one(py: Path, nb: Path, cwd: Path, env: dict, timeout: int) -> dict:
    proc = subprocess.run(
        [str(py), "-c", _RUNNER, str(nb), str(cwd), str(timeout)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"notebook": str(nb), "wall_s": 0.0, "error": proc.stderr[-4000:]}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    from tools import colab

    parser = argparse.ArgumentParser(prog="python -m tools.colab_test")
    parser.add_argument("--venv", type=Path, default=None)
    parser.add_argument("--reuse-venv", action="store_true")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS", "2")))
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--only", nargs="*", default=None, help="chapter ids")
    parser.add_argument(
        "--python", type=Path, default=None, help="an existing environment's python"
    )
    parser.add_argument(
        "--served", type=Path, default=None, help="a --prepare'd folder"
    )
    parser.add_argument(
        "--prepare", type=Path, default=None, help="write the served folder and stop"
    )
    parser.add_argument("--report", type=Path, default=None, help="JSON lines out")
    parser.add_argument(
        "--seed", type=int, default=None, help="every chapter's seed (ATTNBOOK_SEED)"
    )
    args = parser.parse_args(argv)
    if args.prepare is not None:
        prepare_served(args.prepare)
        return 0

    t_start = time.perf_counter()
    chapters = colab.notebook_chapters(ROOT)
    ids = [md.relative_to(ROOT / "book").with_suffix("").as_posix() for md in chapters]
    problems = colab.check(ROOT)
    if problems:
        print("\n".join(problems))
        return 1
    selected = [
        i for i in ids if not reads_ledger(i) and (not args.only or i in args.only)
    ]
    from attnbook.data import find_data_dir
    from attnbook.download import EXCERPTS, build_excerpts

    with tempfile.TemporaryDirectory(prefix="attnbook-colab-test-") as tmp:
        tmp = Path(tmp)
        venv = args.venv or tmp / "venv"
        py = venv / "bin" / "python"
        # an existing runtime (a GPU's): attnbook comes by the install cell, as on Colab
        if args.python is not None:
            py, venv = args.python, args.python.parent.parent
            subprocess.run(
                [str(py), "-m", "pip", "uninstall", "--quiet", "--yes", "attnbook"],
                capture_output=True,
            )
        elif not (args.reuse_venv and py.is_file()):
            make_venv(venv)
        else:  # as fresh as Colab: the notebooks' install cell installs attnbook
            _run([str(py), "-m", "pip", "uninstall", "--quiet", "--yes", "attnbook"])
        t_venv = time.perf_counter() - t_start
        if args.served is not None:
            shutil.copytree(args.served, tmp / "served")
            wheels = sorted((tmp / "served").glob("attnbook-*.whl"))
            if len(wheels) != 1:
                print(f"{args.served} holds {len(wheels)} attnbook wheels, not one")
                return 1
            wheel = wheels[0]
        else:
            data_dirs = [d for d in find_data_dir() if d.is_dir()]
            if not data_dirs:
                print("no local data folder: set ATTNBOOK_DATA_DIR (see README, Data)")
                return 1
            build_excerpts(tmp / "served", data_dir=data_dirs[0])
            wheel = head_wheel(tmp / "served")
        # the archived sweeps, served as the repository serves them at the release's tag
        shutil.copytree(ROOT / "results", tmp / "served" / "results")
        work = tmp / "work"
        work.mkdir()
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("ATTNBOOK_", "PYTHON", "VIRTUAL_ENV", "JUPYTER"))
        }
        env.update(
            PATH=f"{venv / 'bin'}:{env.get('PATH', '')}",
            HOME=str(tmp / "home"),
            XDG_CACHE_HOME=str(tmp / "cache"),
            ATTNBOOK_CACHE_DIR=str(tmp / "cache" / "data"),
            ATTNBOOK_LEDGER_DIR=str(tmp / "ledger"),
            ATTNBOOK_EXECUTOR="colab-test",
            MPLBACKEND="agg",
            OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        )
        if args.seed is not None:
            env["ATTNBOOK_SEED"] = str(args.seed)
        print(
            "every notebook under "
            + (
                f"ATTNBOOK_SEED={args.seed}"
                if args.seed is not None
                else "its default seed"
            ),
            flush=True,
        )
        results = []
        with serve(tmp / "served") as url:
            env["ATTNBOOK_DATA_URL"] = url
            env["ATTNBOOK_RESULTS_URL"] = url.rstrip("/") + "/results/"
            env["ATTNBOOK_INSTALL"] = url + wheel.name
            # the longest notebooks first after the one that installs: two workers end together
            from tools.executions import expected_seconds

            expected = expected_seconds(ROOT)
            order = selected[:1] + sorted(
                selected[1:], key=lambda i: -expected.get(i, 0.0)
            )
            nbs = [ROOT / "book" / f"{i}.ipynb" for i in order]
            run = functools.partial(
                _execute,
                py,
                cwd=work,
                env=env,
                timeout=args.timeout,
                report=args.report,
            )
            if nbs:  # the first notebook installs attnbook; the others find it there
                results.append(run(nbs[0]))
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max(1, args.jobs)) as pool:
                results += list(pool.map(run, nbs[1:]))
        ledger = tmp / "ledger"
        records = [json.loads(p.read_text()) for p in sorted(ledger.glob("*.json"))]
        downloaded = sorted(p.name for p in (tmp / "cache" / "data").glob("*.txt"))
        if "focus/real-text" in selected:  # its data came from the loopback server
            expected = sorted(ex.filename for ex in EXCERPTS.values())
            if downloaded != expected:
                results.append(
                    {
                        "notebook": str(ROOT / "book" / "focus" / "real-text.ipynb"),
                        "wall_s": 0.0,
                        "error": f"excerpts downloaded {downloaded}, expected {expected}",
                    }
                )

    failed = [r for r in results if r["error"]]
    recorded = {rec["chapter"] for rec in records}
    failed += [
        {
            "notebook": str(ROOT / "book" / f"{i}.ipynb"),
            "wall_s": 0.0,
            "error": "no record",
        }
        for i in selected
        if i not in recorded
    ]
    claims = [c for rec in records for c in rec.get("claims", [])]
    bad = [f"{rec['chapter']}: {c['id']}" for rec in records for c in rec["claims"]]
    bad = [b for b, c in zip(bad, claims) if not c.get("passed")]
    print(f"\n{'notebook':45s} {'wall_s':>7s} {'install_s':>9s}  result")
    for r in results:
        name = Path(r["notebook"]).relative_to(ROOT / "book").as_posix()
        inst = r.get("install_s")
        inst = "" if inst is None else f"{inst:9.1f}"
        print(
            f"{name:45s} {r['wall_s']:7.1f} {inst:>9s}  {'FAILED' if r['error'] else 'ok'}"
        )
    for r in failed:
        print(f"\n== {r['notebook']} failed:\n{r['error']}")
    total = time.perf_counter() - t_start
    print(
        f"\n{len(results)} notebooks, {len(failed)} failed; {len(claims)} claims recorded, "
        f"{len(bad)} failed; environment {t_venv:.0f} s, total {total:.0f} s"
    )
    installs = [r["install_s"] for r in results if r.get("install_s") is not None]
    if (
        installs
    ):  # the first notebook installs into the fresh venv, the others find it there
        later = sorted(installs[1:])
        print(
            f"install cell: {installs[0]:.1f} s in the fresh environment"
            + (
                f"; {later[len(later) // 2]:.1f} s median (max {later[-1]:.1f} s) in the "
                f"{len(later)} later notebooks"
                if later
                else ""
            )
        )
    if bad:
        print("failed claims:", *bad, sep="\n  ")
    return 1 if failed or bad or not results else 0


if __name__ == "__main__":
    sys.exit(main())
