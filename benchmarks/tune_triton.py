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
import triton.language as tl

from kv_canary.baseline_kernels import launch_per_request_tile
from kv_canary.bench import make_inputs
from kv_canary_torch import triton_kernel as k
from kv_canary_torch.triton_launch import launch_shape
from shared_spec.reference import longest_window, scatter_reference

# (bs, seq, ragged, aligned): pools seq + 1 wide as in sglang's benchmark; aligned ones seq wide.
CASES = [(1, 128, False, False), (8, 8192, False, False), (64, 2048, False, False), (64, 8192, False, False),
         (256, 2048, False, False), (256, 8192, False, False), (256, 32768, False, False),
         (1024, 2048, False, False), (4096, 512, False, False), (256, 8192, True, False), (64, 32768, True, False),
         (256, 32768, False, True), (4096, 4096, False, True)]
# (BLOCK, num_warps, TARGET_PROGRAMS, STREAM), then the same with "interior" appended: the
# experimental contiguous variant below.
CONFIGS = [(256, 4, 4096, False), (1024, 4, 4096, False), (2048, 4, 4096, False), (4096, 8, 4096, False),
           (1024, 4, 4096, False, "interior"), (2048, 4, 4096, False, "interior"), (4096, 8, 4096, False, "interior")]
REPEATS = 5


@triton.jit
def interior_kernel(flat_in_ptr, offsets_ptr, rows_ptr, pool_ptr, n_tokens, n_rows, width, stride_row, BLOCK: tl.constexpr):
    """An experiment: the library kernel's math for contiguous ``flat_in`` and pool rows, 16-byte stores inside windows.

    Tiles are aligned to ``BLOCK`` in the pool's element offsets (not in each
    row's columns), so a tile that lies wholly inside the request's window is
    a run of whole 16-byte groups of an aligned pool: it is loaded and stored
    without a mask, the stores four int32 at a time. The (at most two) tiles
    at the window's edges take the masked path. Same cells as the library
    kernel: interior tiles lie in ``[lo, hi)``, edge tiles are masked to it.
    """
    request = tl.program_id(0).to(tl.int64)
    lane = tl.program_id(1)
    lanes = tl.num_programs(1)
    row_ok, row, base, lo, hi = k.request_window(request, offsets_ptr, rows_ptr, n_tokens, n_rows, width, 1, 1)
    row_off = tl.where(row_ok, row, 0) * stride_row
    for t in range((row_off + lo) // BLOCK + lane, (row_off + hi + BLOCK - 1) // BLOCK, lanes):
        cell = tl.multiple_of(t * BLOCK, BLOCK)  # the tile's first cell, from pool_ptr
        col = cell - row_off  # its column in the row (may lie before lo)
        if (col >= lo) & (col + BLOCK <= hi):
            ids = tl.load(flat_in_ptr + (base + col) + tl.arange(0, BLOCK))
            tl.store(pool_ptr + cell + tl.arange(0, BLOCK), ids.to(tl.int32))
        else:
            cols = col + tl.arange(0, BLOCK)
            mask = (cols >= lo) & (cols < hi)
            ids = tl.load(flat_in_ptr + base + cols, mask=mask)
            tl.store(pool_ptr + row_off + cols, ids.to(tl.int32), mask=mask)


def launch(inputs, pool, block, warps, target, stream, variant=None):
    flat_in, offsets, rows, _ = inputs
    bs, n_tokens = rows.shape[0], flat_in.shape[0]
    n_rows, width = pool.shape
    lanes = min(-(-longest_window(width, n_tokens) // block) + (variant == "interior"), -(-target // bs))
    if variant == "interior":
        assert pool.stride(1) == 1 and flat_in.stride(0) == 1
        interior_kernel[(bs, lanes)](flat_in, offsets, rows, pool, n_tokens, n_rows, width, pool.stride(0),
                                     BLOCK=block, num_warps=warps)
        return
    k.scatter_req_token_ids_kernel[(bs, lanes)](
        flat_in, offsets, rows, pool, n_tokens, n_rows, width, 1, 1, 1, pool.stride(0), pool.stride(1),
        BLOCK=block, WIDE=False, STREAM=stream, num_warps=warps,
    )


def main():
    summary = {}
    for case in CASES:
        host = make_inputs(*case[:3], aligned=case[3])
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
        chosen = launch_shape(case[0], host[3].shape[1], host[0].shape[0])
        summary[case] = {c: med[c] / base for c in CONFIGS}
        best = min(CONFIGS, key=med.get)
        print(f"{case}: baseline {base:.2f} us; chosen {chosen} {med.get(chosen, float('nan')):.2f}; "
              f"best {best} {med[best]:.2f}; ratios " + " ".join(f"{med[c] / base:.2f}" for c in CONFIGS), flush=True)
    for c in CONFIGS:
        ratios = [summary[case][c] for case in CASES]
        print(f"config {c}: worst ratio to baseline {max(ratios):.3f}, mean {statistics.mean(ratios):.3f}")


if __name__ == "__main__":
    main()
