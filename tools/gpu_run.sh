#!/usr/bin/env bash
# Every chapter notebook once on a GPU runtime, as on Colab with a GPU (#25 item 7).
#
#   tools/gpu_run.sh prepare   here, where the data folder, git and the package index are:
#                              writes .gpu/ (git-ignored through .git/info/exclude): the wheels a
#                              GPU image with torch lacks (CPython 3.12, pinned by
#                              requirements-lock.txt), and the served folder of
#                              `python -m tools.colab_test --prepare` (excerpts, wheel of HEAD)
#   tools/gpu_run.sh run       on the GPU machine (no network), in a copy of the checkout with
#                              .gpu/ beside it: installs those wheels into its python, then
#                              `tools.colab_test --python` runs every notebook, each in a fresh
#                              kernel installed by its own install cell, JOBS at a time, and
#                              writes report.jsonl (times, errors, claim records) to $OUT
#
# POT's wheel is trimmed for the transfer: its BSP-OT extension (175 MB, unused by the book)
# is left out and its import made optional. Nothing else is changed.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
GPU_DIR=.gpu

case "$mode" in
prepare)
    PY=${PY:-.venv/bin/python}
    mkdir -p .git/info "$GPU_DIR/whl"
    grep -qx "/$GPU_DIR/" .git/info/exclude 2>/dev/null || echo "/$GPU_DIR/" >>.git/info/exclude
    # what attnbook, nbclient and ipykernel need beyond a torch image's packages
    names="asttokens comm dask debugpy distributed executing fastjsonschema ipykernel ipython
        ipython-pygments-lexers ipywidgets jedi jsonschema jsonschema-specifications
        jupyter-client jupyter-core jupyterlab-widgets jupytext locket matplotlib-inline
        mdit-py-plugins nbclient nbformat parso partd pexpect platformdirs pot prompt-toolkit
        psutil ptyprocess pure-eval pyzmq referencing rpds-py stack-data tblib tornado traitlets
        wcwidth widgetsnbextension zict"
    reqs=$(for n in $names; do grep -i "^$n==" requirements-lock.txt; done)
    rm -f "$GPU_DIR"/whl/*.whl
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$GPU_DIR/whl" $reqs
    pot=$(ls "$GPU_DIR"/whl/pot-*.whl)
    tmp=$(mktemp -d)
    (cd "$tmp" && unzip -q "$OLDPWD/$pot" && rm ot/bsp/bsp_wrap*.so &&
        sed -i 's/^from .bsp_wrap import bsp_solve_c, merge_bijections_c$/try:\n    from .bsp_wrap import bsp_solve_c, merge_bijections_c\nexcept ImportError:  # left out of this copy\n    bsp_solve_c = merge_bijections_c = None/' ot/bsp/bsp_ot.py &&
        sed -i '/bsp_wrap\|bsp_ot.py/d' pot-*.dist-info/RECORD &&
        rm "$OLDPWD/$pot" && zip -q -r "$OLDPWD/$pot" .)
    rm -rf "$tmp"
    "$PY" -m tools.colab_test --prepare "$GPU_DIR/served"
    du -sh "$GPU_DIR"
    ;;
run)
    PY=${PY:-python3}
    OUT=${OUT:-_build/gpu-run}
    mkdir -p "$OUT"
    export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/gpu.txt" 2>&1 || true
    if [ -z "${SKIP_WHEELS:-}" ]; then # SKIP_WHEELS=1: an environment that has them (a rehearsal)
        "$PY" -m pip install -q --no-deps --no-compile "$GPU_DIR"/whl/*.whl >"$OUT/pip.txt" 2>&1 ||
            { tail -20 "$OUT/pip.txt"; exit 1; }
    fi
    # the install cell's pip resolves the wheel's whole dependency tree, offline here; should the
    # image lack a package deep in it, the cell installs the wheel alone (and the log says so)
    if ! "$PY" -m pip install --dry-run -q "$GPU_DIR"/served/attnbook-*.whl >"$OUT/dryrun.txt" 2>&1; then
        echo "offline, the wheel's dependencies do not resolve (dryrun.txt): PIP_NO_DEPS=1"
        tail -5 "$OUT/dryrun.txt"
        export PIP_NO_DEPS=1
    fi
    "$PY" - <<'EOF' | tee "$OUT/env.txt"
import os, platform, sys, torch
dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
print(f"python {sys.version.split()[0]}; torch {torch.__version__} (CUDA {torch.version.cuda});"
      f" {dev}; {os.cpu_count()} CPUs; {platform.processor() or platform.machine()}")
EOF
    pyabs=$("$PY" -c "import sys; print(sys.executable)")
    # the runner imports attnbook from src/; each notebook's kernel installs the wheel itself
    PYTHONPATH=src OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$pyabs" -m tools.colab_test \
        --python "$pyabs" --served "$GPU_DIR/served" --jobs "${JOBS:-8}" \
        --timeout "${NB_TIMEOUT:-300}" --report "$OUT/report.jsonl" ${ONLY:+--only $ONLY} ${SEED:+--seed $SEED} \
        2>&1 | tee "$OUT/log.txt"
    ;;
*)
    echo "usage: tools/gpu_run.sh prepare|run" >&2
    exit 2
    ;;
esac
