"""Experiment (eighth session): the issue 15 ratios under other methods than do_bench's dirty flush.

- chained: one CUDA graph of 16 launches minus one of 1, per launch (no flush,
  no host in the timed span: how a CUDA-graph-captured serving step runs it);
- clean: a flush that reads 256 MB (clean lines) instead of zeroing it.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
from tune_triton import case_inputs, checked_runs, empty_kernel  # noqa: E402

from kv_canary.baseline_kernels import launch_per_request_tile  # noqa: E402
from kv_canary.bench import interleaved, parse_case, same_bytes_copy  # noqa: E402
from kv_canary_torch import triton_launch  # noqa: E402

FLUSH = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
CHAIN = 16


def chained_us(fn, replays=20) -> float:
    graphs = {}
    for n in (1, CHAIN):
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                fn()
        graphs[n] = g
    out = {}
    for n, g in graphs.items():
        g.replay()
        times = []
        for _ in range(replays):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            g.replay()
            e.record()
            times.append((s, e))
        torch.cuda.synchronize()
        out[n] = statistics.median(s.elapsed_time(e) for s, e in times) * 1e3
    return (out[CHAIN] - out[1]) / (CHAIN - 1)


def clean_us(fn, reps=60) -> float:
    times = []
    for _ in range(5):
        fn()
    for _ in range(reps):
        FLUSH.max()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        times.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in times) * 1e3


BIG = ["256x8192", "256x32768", "1024x2048", "4096x512", "256x8192r", "64x32768r", "256x32768a", "4096x4096a"]
SMALL = ["1x128", "1x512", "1x2048", "1x8192", "8x128", "8x512", "8x2048", "8x8192", "64x128", "64x512", "256x128"]


def main():
    failures = []
    start = time.perf_counter()
    scratch = torch.empty(1, device="cuda")
    for group, names in (("big", BIG), ("small", SMALL)):
        for name in names:
            case = parse_case(name)
            host, expected, inputs = case_inputs(case, "cuda")
            pool = inputs[3].clone()
            runs = checked_runs(case, {"library": lambda p: triton_launch.launch(*inputs[:3], p),
                                       "baseline": lambda p: launch_per_request_tile(*inputs[:3], p)},
                                inputs, expected, pool, failures)
            runs["copy"] = same_bytes_copy(torch, host[0].shape[0], "cuda")
            runs["empty"] = lambda: empty_kernel[(1,)](scratch)
            timers = {"chained": chained_us} | ({"clean": clean_us} if group == "big" else {})
            for tname, timer in timers.items():
                med = interleaved(runs, timer, 5)
                b, c, e = med["baseline"], med["copy"], med["empty"]
                print(f"{group} {name} {tname}: " + "  ".join(f"{n} {v:.2f}" for n, v in med.items())
                      + f" | library/baseline {med['library'] / b:.3f} library/copy {med['library'] / c:.3f}"
                      f" library-empty {med['library'] - e:+.2f}", flush=True)
    print("failures:", failures, f"done in {time.perf_counter() - start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
