"""Experiment (eighth session): every program prefetches an equal share of flat_in into L2 before it reads its offsets.

The token loads that follow the offsets then hit L2: the dependent DRAM round
trip is overlapped with the prefetch. Variants of the library kernels with a
PREFETCH constexpr (0 none, 1 prefetch.global.L2, 2 prefetch.global.L2::evict_last).
"""

from __future__ import annotations

import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, "benchmarks")
from tune_triton import bench_us, case_inputs, checked_runs, empty_kernel, launch_floor  # noqa: E402

from kv_canary.baseline_kernels import launch_per_request_tile  # noqa: E402
from kv_canary.bench import interleaved, parse_case, same_bytes_copy  # noqa: E402
from kv_canary_torch import triton_kernel as k  # noqa: E402
from kv_canary_torch import triton_launch  # noqa: E402
from shared_spec.reference import longest_window  # noqa: E402

LINES = tl.constexpr(64)


@triton.jit
def prefetch_share(flat_in_ptr, n_tokens, q, programs, MODE: tl.constexpr):
    """Program ``q`` of ``programs`` asks L2 for tokens ``[q * chunk, min((q + 1) * chunk, N))``: one prefetch per 128-byte line."""
    chunk = (n_tokens + programs - 1) // programs
    start = q * chunk
    end = tl.minimum(start + chunk, n_tokens)
    for s in range(start, end, 16 * LINES):
        at = s + tl.arange(0, LINES).to(tl.int64) * 16
        ok = (at < end).to(tl.int32)
        if MODE == 1:
            tl.inline_asm_elementwise(
                "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.b32 $0, 0; }",
                "=r,l,r", [flat_in_ptr + at, ok], dtype=tl.int32, is_pure=False, pack=1)
        else:
            tl.inline_asm_elementwise(
                "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2::evict_last [$1]; mov.b32 $0, 0; }",
                "=r,l,r", [flat_in_ptr + at, ok], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit(do_not_specialize=["n_tokens", "n_rows", "width", "offsets_stride", "rows_stride", "stride_row"])
def tiled_pf(flat_in_ptr, offsets_ptr, rows_ptr, pool_ptr, n_tokens, n_rows, width, offsets_stride, rows_stride,
             stride_row, BLOCK: tl.constexpr, PREFETCH: tl.constexpr):
    request = tl.program_id(0).to(tl.int64)
    if PREFETCH:
        tiles = tl.num_programs(1)
        prefetch_share(flat_in_ptr, n_tokens, request * tiles + tl.program_id(1), tl.num_programs(0).to(tl.int64) * tiles,
                       PREFETCH)
    row_ok, row, base, lo, hi = k.request_window(
        request, offsets_ptr, rows_ptr, n_tokens, n_rows, width, offsets_stride, rows_stride
    )
    row_off = tl.where(row_ok, row, 0) * stride_row
    cell = tl.multiple_of(((row_off + lo) // BLOCK + tl.program_id(1)) * BLOCK, BLOCK)
    col = cell - row_off
    if (col >= lo) & (col + BLOCK <= hi):
        ids = tl.load(flat_in_ptr + (base + col) + tl.arange(0, BLOCK))
        tl.store(pool_ptr + cell + tl.arange(0, BLOCK), ids.to(tl.int32))
    elif col < hi:
        i = tl.arange(0, BLOCK)
        first = tl.maximum(lo - col, 0).to(tl.int32)
        end = tl.minimum(hi - col, BLOCK).to(tl.int32)
        head, tail = (first + 3) // 4, end // 4
        ids = tl.load(flat_in_ptr + (base + col) + i, mask=(i >= first) & (i < end))
        group = i // 4
        tl.store(pool_ptr + cell + i, ids.to(tl.int32), mask=(group >= head) & (group < tail))
        j = tl.arange(0, 8)
        at = tl.where(j < 4, first + j, tail * 4 + j - 4)
        ends = (at >= first) & (at < end) & ((j >= 4) | (at < head * 4))
        tl.store(pool_ptr + cell + at, tl.load(flat_in_ptr + (base + col) + at, mask=ends).to(tl.int32), mask=ends)


@triton.jit(do_not_specialize=["n_tokens", "n_rows", "width", "stride_row"])
def lanes_pf(flat_in_ptr, offsets_ptr, rows_ptr, pool_ptr, n_tokens, n_rows, width, stride_row, BLOCK: tl.constexpr,
             PREFETCH: tl.constexpr):
    """The strided kernel for contiguous arguments (unit strides), with the prefetch."""
    request = tl.program_id(0).to(tl.int64)
    lane = tl.program_id(1)
    lanes = tl.num_programs(1)
    if PREFETCH:
        prefetch_share(flat_in_ptr, n_tokens, request * lanes + lane, tl.num_programs(0).to(tl.int64) * lanes, PREFETCH)
    row_ok, row, base, lo, hi = k.request_window(request, offsets_ptr, rows_ptr, n_tokens, n_rows, width, 1, 1)
    flat_row = flat_in_ptr + base
    pool_row = pool_ptr + tl.where(row_ok, row, 0) * stride_row
    lo_c = lo.to(tl.int32)
    hi_c = hi.to(tl.int32)
    for tile in range((lo_c // BLOCK + lane) * BLOCK, hi_c, lanes * BLOCK):
        cols = tile + tl.arange(0, BLOCK)
        mask = (cols >= lo_c) & (cols < hi_c)
        tl.store(pool_row + cols, tl.load(flat_row + cols, mask=mask).to(tl.int32), mask=mask)


def launch_like_launcher(flat_in, offsets, rows, pool, prefetch):
    """The launcher's choice of kernel and shape (tiled or lanes), on the copies above."""
    bs, n_tokens, (n_rows, width) = rows.shape[0], flat_in.shape[0], pool.shape
    longest = longest_window(width, n_tokens)
    block, warps, target, _ = triton_launch.launch_shape(bs, width, n_tokens)
    tiles = triton.cdiv(longest, block) + 1
    if triton_launch.tiled((block, warps, target, False), 1, 1, bs, tiles, triton.cdiv(n_tokens, block)):
        tiled_pf[(bs, tiles)](flat_in, offsets, rows, pool, n_tokens, n_rows, width, 1, 1, pool.stride(0),
                              BLOCK=block, PREFETCH=prefetch, num_warps=triton_launch.TILED_WARPS)
    else:
        lanes = min(triton.cdiv(longest, block), triton.cdiv(target, bs))
        lanes_pf[(bs, lanes)](flat_in, offsets, rows, pool, n_tokens, n_rows, width, pool.stride(0), BLOCK=block,
                              PREFETCH=prefetch, num_warps=warps)


BIG = ["256x8192", "256x32768", "1024x2048", "4096x512", "256x8192r", "64x32768r", "256x32768a", "4096x4096a"]
SMALL = ["1x128", "1x512", "1x2048", "1x8192", "8x128", "8x512", "8x2048", "8x8192", "64x128", "64x512", "256x128",
         "64x2048", "256x512"]


def main(argv):
    failures = []
    start = time.perf_counter()
    scratch = torch.empty(1, device="cuda")
    for group, names, rounds, reps in (("big", BIG, 5, 2), ("small", SMALL, 9, 1)):
        for name in names:
            case = parse_case(name)
            host, expected, inputs = case_inputs(case, "cuda")
            tokens = host[0].shape[0]
            pool = inputs[3].clone()
            launches = {"baseline": lambda p: launch_per_request_tile(*inputs[:3], p),
                        "library": lambda p: triton_launch.launch(*inputs[:3], p)}
            launches |= {f"pf{m}": (lambda p, m=m: launch_like_launcher(*inputs[:3], p, m)) for m in (0, 1, 2)}
            runs = checked_runs(case, launches, inputs, expected, pool, failures)
            if group == "big":
                runs["copy"] = same_bytes_copy(torch, tokens, "cuda")
            else:
                runs["empty"] = lambda: empty_kernel[(1,)](scratch)
                runs["floor"] = lambda: launch_floor(*inputs[:3], pool)
            for rep in range(reps):
                med = interleaved(runs, bench_us, rounds)
                ref = med["baseline"] if group == "big" else med["empty"]
                how = "ratio to baseline" if group == "big" else "excess over empty"
                print(f"{group} {name} rep {rep} ({how}): " + "  ".join(
                    f"{n} {us:.2f} ({us / ref:.3f})" if group == "big" else f"{n} {us:.2f} ({us - ref:+.2f})"
                    for n, us in med.items()), flush=True)
    print("failures:", failures, f"done in {time.perf_counter() - start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
