#!/usr/bin/env bash
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/kvc-out}"; mkdir -p "$OUT"
python3 benchmarks/jax_kernel_times.py --events --case 256x2048 --case 4096x512 --block 4096 > $OUT/events.txt 2>&1
grep -v "warn" $OUT/events.txt | cut -c1-190 | head -120
MOSAIC_GPU_DUMP_PTXAS=1 python3 benchmarks/jax_kernel_times.py --no-profile --impl mosaic --case 256x2048 --block 4096 > $OUT/ptxas.txt 2>&1
grep -i "registers\|spill\|stack\|smem\|ptxas info" $OUT/ptxas.txt | sort | uniq -c | head
timeout 280 python3 benchmarks/jax_kernel_times.py --no-profile --block 1024 --block 2048 --block 4096 --block 8192 2>&1 | grep -v warn | tee $OUT/sweep.txt
