#!/usr/bin/env bash
# One device call: GPU tests, the conformance matrix, then timings. Logs land in $OUT.
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/kvc-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton, jax; print('torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, jax.devices())"
step() { local limit=$1; shift; echo "=== $* (limit ${limit}s)"; timeout "$limit" "$@" 2>&1 | tee -a "$OUT/log.txt" | tail -n "${TAIL:-25}"; }
case "${1:-all}" in
  tests) step "${2:-400}" python3 -m pytest -q -x -p no:cacheprovider ${PYTEST_ARGS:-} ;;
  check) step 120 python3 -m kv_canary.cli check ;;
  tune) step "${2:-300}" python3 benchmarks/tune_triton.py ;;
  bench) step "${2:-300}" python3 -m kv_canary.cli bench --write "$OUT/performance.md" ${BENCH_ARGS:-} ;;
  memcheck) step "${2:-540}" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 XLA_PYTHON_CLIENT_ALLOCATOR=platform \
    /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 python3 benchmarks/memcheck_corpus.py ${MEMCHECK_ARGS:-} ;;
esac
