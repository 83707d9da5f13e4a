"""Tuning sweep for the Triton kernel's launch shape (GPU), against a same-run baseline.

    python benchmarks/tune_triton.py

For each case of a subset of the benchmark grid, times every candidate
(BLOCK, num_warps, TARGET_PROGRAMS, STREAM) and the per-request-tile baseline
(kv_canary.baseline_kernels) with do_bench (median, L2 flushed), REPEATS rounds
interleaved so that drift hits all alike, and reports each one's median of
rounds as a ratio to the baseline. Every variant is checked against the
reference once. SMALL and LARGE in kv_canary_torch/triton_launch.py come from here.
"""

from __future__ import annotations

import statistics

import numpy as np
import torch
import triton

from kv_canary.baseline_kernels import launch_per_request_tile
from kv_canary.bench import make_inputs
from kv_canary_torch import triton_kernel as k
from kv_canary_torch.triton_launch import launch_shape
from shared_spec.reference import longest_window, scatter_reference

CASES = [(1, 128, False), (1, 8192, False), (8, 8192, False), (64, 512, False), (64, 2048, False), (64, 8192, False),
         (256, 2048, False), (256, 8192, False), (256, 32768, False), (1024, 2048, False), (4096, 512, False),
         (256, 8192, True), (64, 32768, True)]
CONFIGS = [(256, 4, 4096, False), (512, 4, 4096, False), (1024, 4, 4096, False), (1024, 4, 65536, False),
           (2048, 4, 4096, False), (2048, 8, 8192, False), (4096, 8, 4096, False), (1024, 4, 65536, True)]
REPEATS = 5


def launch(inputs, pool, block, warps, target, stream):
    flat_in, offsets, rows, _ = inputs
    bs, n_tokens = rows.shape[0], flat_in.shape[0]
    n_rows, width = pool.shape
    lanes = min(-(-longest_window(width, n_tokens) // block), -(-target // bs))
    k.scatter_req_token_ids_kernel[(bs, lanes)](
        flat_in, offsets, rows, pool, n_tokens, n_rows, width, 1, 1, 1, pool.stride(0), pool.stride(1),
        BLOCK=block, WIDE=False, STREAM=stream, num_warps=warps,
    )


def main():
    summary = {}
    for case in CASES:
        host = make_inputs(*case)
        expected = scatter_reference(*host)
        inputs = tuple(torch.from_numpy(x).cuda() for x in host)
        pool = inputs[3].clone()
        runs = {c: (lambda c=c: launch(inputs, pool, *c)) for c in CONFIGS}
        runs["baseline"] = lambda: launch_per_request_tile(*inputs[:3], pool)
        for c in CONFIGS:
            check = inputs[3].clone()
            launch(inputs, check, *c)
            assert np.array_equal(check.cpu().numpy(), expected), (case, c)
        times = {name: [] for name in runs}
        for _ in range(REPEATS):
            for name, fn in runs.items():
                times[name].append(triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3)
        med = {name: statistics.median(t) for name, t in times.items()}
        base = med["baseline"]
        chosen = launch_shape(case[0], case[1] + 1, host[0].shape[0])
        summary[case] = {c: med[c] / base for c in CONFIGS}
        best = min(CONFIGS, key=med.get)
        print(f"{case}: baseline {base:.2f} us; chosen {chosen} {med.get(chosen, float('nan')):.2f}; "
              f"best {best} {med[best]:.2f}; ratios " + " ".join(f"{med[c] / base:.2f}" for c in CONFIGS), flush=True)
    for c in CONFIGS:
        ratios = [summary[case][c] for case in CASES]
        print(f"config {c}: worst ratio to baseline {max(ratios):.3f}, mean {statistics.mean(ratios):.3f}")


if __name__ == "__main__":
    main()
