#!/usr/bin/env bash
# The GPU check in one device call, from the repository root: the GPU tests, kv-canary check, the memory checker
# (benchmarks/memcheck.py under compute-sanitizer), then kv-canary bench, which writes each part's figures into
# $OUT/performance.{md,json} as it ends (copy them to docs/). Each step's log: $OUT/<step>.log; a summary on stdout.
#   bash benchmarks/gpu_check.sh                # tests check memcheck bench, cut at BUDGET seconds (default 570)
#   bash benchmarks/gpu_check.sh bench          # the whole bench alone
#   bash benchmarks/gpu_check.sh tests check    # any steps, in the order given; memcheck-x64: JAX with int64
# Exit status: the number of steps that failed or were cut short.
set -u
OUT=${OUT:-$PWD/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
BUDGET=${BUDGET:-570}
START=$SECONDS
failed=0

step() {  # step NAME LIMIT COMMAND...: run COMMAND within LIMIT seconds and what is left of BUDGET
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - START)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -le 10 ]; then echo "=== $name: skipped, the budget is spent"; failed=$((failed + 1)); return; fi
  echo "=== $name: $* (limit ${limit}s)"
  local began=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 15 "$OUT/$name.log"
  echo "=== $name: exit $rc in $((SECONDS - began))s"
  [ "$rc" = 0 ] || failed=$((failed + 1))
}

sanitized() {  # every allocation its own, so that the sanitizer sees an access past an argument
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 XLA_PYTHON_CLIENT_ALLOCATOR=platform \
    /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 "$@"
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton, jax; print('torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, jax.devices())"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests check memcheck bench)
for s in "${steps[@]}"; do
  case "$s" in
    tests) step tests 200 python3 -m pytest -q -m gpu -x -p no:cacheprovider ;;
    check) step check 120 python3 -m kv_canary.cli check ;;
    memcheck) step memcheck 200 sanitized python3 benchmarks/memcheck.py ;;
    memcheck-x64) step memcheck-x64 200 sanitized python3 benchmarks/memcheck.py --x64 ;;
    bench) step bench 540 python3 -m kv_canary.cli bench --write "$OUT" ;;
    *) echo "unknown step $s (tests, check, memcheck, memcheck-x64, bench)"; exit 2 ;;
  esac
done
echo "=== $failed step(s) failed or cut short; logs in $OUT"
exit "$failed"
