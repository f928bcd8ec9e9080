#!/usr/bin/env bash
# The one run on a lent GPU (issue 29), about 8 minutes: the machine's versions, the cuda
# target's tests on the device (all but the coverage table and the offline sm_90 compile,
# which CI runs), then the GPU benchmark. Everything lands in $OUT (default build/gpu):
# versions.txt, test_cuda.txt, bench_cuda.json and bench_cuda.txt.
#
#   bash benchmarks/gpu_check.sh          # from the repository root, on the GPU machine
#
# tegrad is pure Python: it runs from src/ with the machine's torch, triton and numpy.
# Without a GPU (no nvidia-smi) it is its own self-test: the interpreter, the benchmark's
# --smoke shapes.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu}
mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1 TEGRAD_CACHE_DIR="$OUT/cache" TEGRAD_GRAPH_CACHE=0
unset TRITON_INTERPRET
SMOKE=""
if ! command -v nvidia-smi >/dev/null; then
  export TRITON_INTERPRET=1
  SMOKE="--smoke --cases matmul1024,softmax_4096"
fi
PY=${PY:-python3}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "no GPU"
  $PY -c "import sys, torch, triton, numpy; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')"
} 2>&1 | tee "$OUT/versions.txt"
if $PY -c "import pytest, hypothesis, scipy" 2>/dev/null; then
  timeout 240 $PY -m pytest -o addopts= -q -p no:cacheprovider tests/test_cuda.py \
      -k "not coverage_cases and not sm_90" 2>&1 | tail -40 | tee "$OUT/test_cuda.txt"
else
  echo "pytest, hypothesis or scipy missing here: the tests were not run" | tee "$OUT/test_cuda.txt"
fi
# shellcheck disable=SC2086
timeout 330 $PY benchmarks/bench_cuda.py --budget 300 --case-timeout 90 $SMOKE \
    --json "$OUT/bench_cuda.json" 2>&1 | tail -80
