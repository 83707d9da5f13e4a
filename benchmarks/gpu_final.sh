#!/usr/bin/env bash
# One device call for a session's closing checks: GPU tests (timed), memcheck corpus, conformance matrix,
# Mosaic GPU timing and registers. Each step has its own limit; logs land in $OUT.
set -u
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/kvc-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton, jax; print('torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__)"
SECONDS=0
timeout 160 python3 -m pytest -q -m gpu -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1; echo "gpu tests rc=$?"
echo "gpu tests wall: ${SECONDS} s"; SECONDS=0; tail -n 15 $OUT/gpu_tests.txt
timeout 250 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 XLA_PYTHON_CLIENT_ALLOCATOR=platform \
  /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 python3 benchmarks/memcheck_corpus.py --per-launch 128 > $OUT/memcheck.txt 2>&1
echo "memcheck rc=$? wall: ${SECONDS} s"; grep -v "^\s*$" $OUT/memcheck.txt | tail -n 8
timeout 80 python3 -m kv_canary.cli check --strict > $OUT/check.txt 2>&1; echo "check rc=$?"; tail -n 14 $OUT/check.txt
MOSAIC_GPU_DUMP_PTXAS=1 timeout 70 python3 benchmarks/jax_kernel_times.py --no-profile --mark --case 256x2048 --case 1024x2048 --case 64x8192 > $OUT/mosaic.txt 2>&1
grep "^#\|Used\|tok=" $OUT/mosaic.txt | uniq -c | cut -c1-200 | head -30
