#!/usr/bin/env bash
# One device call: GPU tests, the memory checker, the conformance matrix, then timings. Logs land in $OUT.
#   bash benchmarks/gpu_run.sh [all|final|gpu|tests|memcheck|check|tune|bench|mosaic|kernels|windowed|incremental|host|hostcost|step|cold] [limit seconds]
# `all` runs gpu (the GPU tests), memcheck, check and mosaic in that order (about 5 minutes on one H200);
# `final` runs gpu, memcheck, check, bench and kernels (about 8 minutes: what a closing note quotes);
# `tests` is the whole suite, CPU tests included.
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/kvc-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton, jax; print('torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, jax.devices())"
# step LIMIT CMD...: run CMD under a time limit, log it whole, show its tail, its exit status and wall time.
step() {
  local limit=$1; shift; echo "=== $* (limit ${limit}s)"; SECONDS=0
  timeout "$limit" "$@" >> "$OUT/log.txt" 2>&1; local rc=$?
  tail -n "${TAIL:-25}" "$OUT/log.txt"; echo "=== rc=$rc wall ${SECONDS}s"
}
run() {
  case "$1" in
    gpu) step "${2:-170}" python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider ${PYTEST_ARGS:-} ;;
    tests) step "${2:-400}" python3 -m pytest -q -x -p no:cacheprovider ${PYTEST_ARGS:-} ;;
    check) step "${2:-120}" python3 -m kv_canary.cli check ;;
    tune) step "${2:-300}" python3 benchmarks/tune_triton.py ;;
    bench) step "${2:-300}" python3 -m kv_canary.cli bench --write "$OUT/performance.md" ${BENCH_ARGS:-} ;;
    memcheck) step "${2:-540}" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 XLA_PYTHON_CLIENT_ALLOCATOR=platform \
      /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 \
      python3 benchmarks/memcheck_corpus.py --repeat 2 ${MEMCHECK_ARGS:-} ;;
    # Mosaic GPU: ptxas' register counts per variant, the per-call floor of each lowering (with the host's
    # profiler events), and the chained figures of a few cases against the Triton-lowered kernel.
    mosaic) step 120 python3 benchmarks/mosaic_registers.py
      step 120 python3 benchmarks/mosaic_launch_floor.py --one
      step "${2:-150}" python3 benchmarks/jax_kernel_times.py --no-profile --case 256x2048 --case 1024x2048 --case 4096x512 ;;
    # Every bench case, both JAX kernels: the chained figure beside the kernel's own duration from a profiler trace.
    kernels) step "${2:-240}" python3 benchmarks/jax_kernel_times.py ;;
    # The JAX windowed kernels (start_cols 0 and append) over the unwindowed ones, kernel durations from a trace.
    windowed) step "${2:-400}" python3 benchmarks/jax_windowed_kernel_times.py ;;
    # The torch incremental step: its host time by part, then the serving-step figures.
    incremental) step 120 python3 benchmarks/incremental_parts.py
      step "${2:-300}" python3 -m kv_canary.cli bench --incremental --json ;;
    host) step "${2:-120}" python3 -m kv_canary.cli bench --host ;;
    # Each Pallas lowering's host work per application (chained wall clock minus device clock), beside empty kernels'.
    hostcost) step "${2:-400}" python3 benchmarks/mosaic_host_cost.py ;;
    # A fresh process's first calls: after a short-lived process, after a killed one, on a machine that never ran it.
    cold) step "${2:-180}" python3 benchmarks/cold_start.py ;;
    # The scatter's marginal cost in a server-like jitted step, per implementation and the default.
    step) step "${2:-300}" python3 -m kv_canary.bench_step ;;
  esac
}
if [ "${1:-all}" = all ]; then
  for s in gpu memcheck check mosaic; do run "$s"; done
elif [ "$1" = final ]; then  # limits that keep the whole under the device's 10 minutes a command
  run gpu 150; run memcheck 90; run check 60; run bench 240; run kernels 200
else
  run "$1" "${2:-}"
fi
