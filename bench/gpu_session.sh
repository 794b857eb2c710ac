#!/usr/bin/env bash
# The prepared GPU session: Part II's large-L SGLD sweep (the `paper` scale of
# copyhead-sgld-crossover, archived as results/copyhead-sgld-crossover) and the GPU ratios of
# the Part I and Part II benchmarks. Run from the repository root on a CUDA machine:
#
#     OUT=gpu-out bash bench/gpu_session.sh
#
# Packages missing there (a bare image with PyTorch) travel as wheels in .whl/ (see
# CONTRIBUTING.md, "A GPU session"); the sweep's points are written as they finish, so a run
# cut by SWEEP_S keeps the points that finished.
set -u
OUT=${OUT:-gpu-out}
SWEEP_S=${SWEEP_S:-380}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
{
    date -u
    nvidia-smi -L
    python3 -c "import torch, dask; print('torch', torch.__version__, 'dask', dask.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee "$OUT/machine.txt"

echo "== copyhead-sgld-crossover, paper scale (L = 64, 128, 256), up to ${SWEEP_S} s"
SECONDS=0
timeout "$SWEEP_S" python3 -m attnbook run copyhead-sgld-crossover --scale paper \
    --out results/copyhead-sgld-crossover --device cuda --workers 3 --no-progress 2>&1 |
    tee "$OUT/sweep.log"
echo "sweep: ${SECONDS} s" | tee -a "$OUT/sweep.log"
tar -cf "$OUT/copyhead-sgld-crossover.tar" results/copyhead-sgld-crossover

echo "== bench_focus: 32-seed ensemble vs a loop of 32 models, on the GPU"
timeout 120 python3 -c "
import sys, torch
sys.path.insert(0, 'bench')
import bench_focus
torch.set_num_threads(1)
bench_focus.bench_ensemble(False, torch.device('cuda'))
" 2>&1 | tee "$OUT/bench_focus.log"

echo "== bench_copyhead on the GPU (devinterp from the carried wheel)"
timeout 150 python3 bench/bench_copyhead.py 2>&1 | tee "$OUT/bench_copyhead.log"
