"""Experiment (eighth session): L2 eviction hints on the tiled kernel, and what do_bench's dirty flush costs.

Timers: ``dirty`` = do_bench (its flush is a 256 MB zero_, which leaves the L2
full of dirty lines); ``dirty_loop`` = my own loop with the same zero_ flush;
``clean_loop`` = my loop flushing by reading 256 MB (clean lines); ``warm`` = no flush.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, "benchmarks")
from tune_triton import bench_us, case_inputs, checked_runs, launch_tiled  # noqa: E402

from kv_canary.baseline_kernels import launch_per_request_tile  # noqa: E402
from kv_canary.bench import interleaved, parse_case, same_bytes_copy  # noqa: E402
from kv_canary_torch import triton_kernel as k  # noqa: E402


@triton.jit(do_not_specialize=["n_tokens", "n_rows", "width", "offsets_stride", "rows_stride", "stride_row"])
def hinted_kernel(flat_in_ptr, offsets_ptr, rows_ptr, pool_ptr, n_tokens, n_rows, width, offsets_stride, rows_stride,
                  stride_row, BLOCK: tl.constexpr, LOAD_EVICT: tl.constexpr, LOAD_CACHE: tl.constexpr,
                  STORE_EVICT: tl.constexpr, STORE_CACHE: tl.constexpr, DEMOTE: tl.constexpr):
    request = tl.program_id(0).to(tl.int64)
    row_ok, row, base, lo, hi = k.request_window(
        request, offsets_ptr, rows_ptr, n_tokens, n_rows, width, offsets_stride, rows_stride
    )
    row_off = tl.where(row_ok, row, 0) * stride_row
    cell = tl.multiple_of(((row_off + lo) // BLOCK + tl.program_id(1)) * BLOCK, BLOCK)
    col = cell - row_off
    if (col >= lo) & (col + BLOCK <= hi):
        ids = tl.load(flat_in_ptr + (base + col) + tl.arange(0, BLOCK), eviction_policy=LOAD_EVICT,
                      cache_modifier=LOAD_CACHE)
        tl.store(pool_ptr + cell + tl.arange(0, BLOCK), ids.to(tl.int32), eviction_policy=STORE_EVICT,
                 cache_modifier=STORE_CACHE)
        if DEMOTE:
            demote(flat_in_ptr + (base + col) + tl.arange(0, BLOCK), ids)
    elif col < hi:
        i = tl.arange(0, BLOCK)
        first = tl.maximum(lo - col, 0).to(tl.int32)
        end = tl.minimum(hi - col, BLOCK).to(tl.int32)
        head, tail = (first + 3) // 4, end // 4
        ids = tl.load(flat_in_ptr + (base + col) + i, mask=(i >= first) & (i < end), eviction_policy=LOAD_EVICT,
                      cache_modifier=LOAD_CACHE)
        group = i // 4
        tl.store(pool_ptr + cell + i, ids.to(tl.int32), mask=(group >= head) & (group < tail),
                 eviction_policy=STORE_EVICT, cache_modifier=STORE_CACHE)
        j = tl.arange(0, 8)
        at = tl.where(j < 4, first + j, tail * 4 + j - 4)
        ends = (at >= first) & (at < end) & ((j >= 4) | (at < head * 4))
        tl.store(pool_ptr + cell + at, tl.load(flat_in_ptr + (base + col) + at, mask=ends).to(tl.int32), mask=ends)


@triton.jit
def demote(ptrs, ids):
    """applypriority evict_normal on every 128-byte line that ``ptrs`` (the tile's token addresses) meet, after ``ids`` arrived."""
    first = (tl.arange(0, ids.shape[0]) == 0).to(tl.int32)
    tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b64 a, t; and.b64 t, $1, 127; setp.eq.b64 p, t, 0; setp.ne.or.b32 p, $3, 0, p; "
        "setp.eq.or.s64 p, $2, -9223372036854775808, p; and.b64 a, $1, -128; "
        "@p applypriority.global.L2::evict_normal [a], 128; mov.b32 $0, 0; }",
        "=r,l,l,r", [ptrs, ids, first], dtype=tl.int32, is_pure=False, pack=1)


HINTS = {  # name -> (load evict, load cache, store evict, store cache, demote)
    "ld_ef": ("evict_first", "", "", "", False),
    "ld_el": ("evict_last", "", "", "", False),
    "ld_el_demote": ("evict_last", "", "", "", True),
    "ld_el_st_el": ("evict_last", "", "evict_last", "", False),
    "st_el": ("", "", "evict_last", "", False),
    "ld_el_st_ef": ("evict_last", "", "evict_first", "", False),
}


def launch_hinted(hint, flat_in, offsets, rows, pool, block=1024, warps=2):
    bs, n_tokens, (n_rows, width) = rows.shape[0], flat_in.shape[0], pool.shape
    tiles = triton.cdiv(min(width, n_tokens), block) + 1
    le, lc, se, sc, demote_ = HINTS[hint]
    hinted_kernel[(bs, tiles)](flat_in, offsets, rows, pool, n_tokens, n_rows, width, offsets.stride(0),
                               rows.stride(0), pool.stride(0), BLOCK=block, LOAD_EVICT=le, LOAD_CACHE=lc,
                               STORE_EVICT=se, STORE_CACHE=sc, DEMOTE=demote_, num_warps=warps)


FLUSH = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")


def loop_us(fn, flush, reps=60) -> float:
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(5):
        fn()
    for i in range(reps):
        if flush == "dirty":
            FLUSH.zero_()
        elif flush == "clean":
            FLUSH.max()  # reads 256 MB: the L2 left with clean lines
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


TIMERS = {
    "dirty": bench_us,
    "clean_loop": lambda fn: loop_us(fn, "clean"),
}


@triton.jit
def hinted_copy(src, dst, n, BLOCK: tl.constexpr, LOAD_EVICT: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i, mask=i < n, eviction_policy=LOAD_EVICT).to(tl.int32), mask=i < n)


def after_effect(cases, reps=40):
    """L2 left to later work: clean flush, the scatter, read B once, then time a second read of B (40 MB)."""
    props = torch.cuda.get_device_properties(0)
    print("L2 bytes", getattr(props, "L2_cache_size", "?"))
    big = torch.ones(40 * 2**20 // 4, dtype=torch.int32, device="cuda")
    for case in cases:
        host, expected, inputs = case_inputs(case, "cuda")
        pool = inputs[3].clone()
        fns = {"none": lambda: None, "tiled": lambda: launch_tiled(*inputs[:3], pool, 1024, 2)}
        fns |= {h: (lambda h=h: launch_hinted(h, *inputs[:3], pool)) for h in ("ld_el", "ld_el_demote", "ld_ef")}
        res = {}
        for name, fn in fns.items():
            times = []
            for _ in range(reps):
                FLUSH.max()
                fn()
                big.max()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                big.max()
                e.record()
                times.append((s, e))
            torch.cuda.synchronize()
            res[name] = statistics.median(s.elapsed_time(e) for s, e in times) * 1e3
        print(f"after-effect {case}: second read of 40 MB, us: " + "  ".join(f"{n} {v:.2f}" for n, v in res.items()),
              flush=True)


def copy_floor_hinted(cases):
    for case in cases:
        host, expected, inputs = case_inputs(case, "cuda")
        flat_in = inputs[0]
        n = flat_in.shape[0]
        dst = torch.empty(n, dtype=torch.int32, device="cuda")
        runs = {"copy_plain": lambda: hinted_copy[(triton.cdiv(n, 1024),)](flat_in, dst, n, BLOCK=1024, LOAD_EVICT="", num_warps=4),
                "copy_el": lambda: hinted_copy[(triton.cdiv(n, 1024),)](flat_in, dst, n, BLOCK=1024, LOAD_EVICT="evict_last", num_warps=4),
                "copy_ef": lambda: hinted_copy[(triton.cdiv(n, 1024),)](flat_in, dst, n, BLOCK=1024, LOAD_EVICT="evict_first", num_warps=4),
                "torch_copy": same_bytes_copy(torch, n, "cuda")}
        for tname, timer in TIMERS.items():
            med = interleaved(runs, timer, 5)
            print(f"copies {case} {tname:<10} " + "  ".join(f"{k_} {v:.2f}" for k_, v in med.items()), flush=True)

CASES = ["256x8192", "256x32768", "1024x2048", "4096x512", "256x8192r", "64x32768r", "256x32768a", "4096x4096a"]


def main(argv):
    cases = [parse_case(c) for c in (argv or CASES)]
    timers = TIMERS
    failures = []
    start = time.perf_counter()
    for case in cases:
        host, expected, inputs = case_inputs(case, "cuda")
        tokens = host[0].shape[0]
        pool = inputs[3].clone()
        launches = {"baseline": lambda p: launch_per_request_tile(*inputs[:3], p),
                    "tiled": lambda p: launch_tiled(*inputs[:3], p, 1024, 2)}
        launches |= {h: (lambda p, h=h: launch_hinted(h, *inputs[:3], p)) for h in HINTS}
        runs = checked_runs(case, launches, inputs, expected, pool, failures)
        runs["copy"] = same_bytes_copy(torch, tokens, "cuda")
        for tname, timer in timers.items():
            med = interleaved(runs, timer, 5)
            b = med["baseline"]
            print(f"{case} {tname:<10} " + "  ".join(f"{n} {us:.2f} ({us / b:.3f})" for n, us in med.items()),
                  flush=True)
    copy_floor_hinted(cases[:4])
    after_effect(cases[:1] + cases[2:3])
    print("failures:", failures, f"done in {time.perf_counter() - start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
