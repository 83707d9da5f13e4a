"""A same-run baseline for the Triton kernel: the design of sglang's later kernel, written here.

The perf anchors describe sglang's later kernel as one program per (request,
1024-column tile), exiting early past the request's length, with no bs cap.
This is our own kernel of that design (valid inputs only: it has none of the
spec's memory-safety rules), so the benchmark can compare against it in the
same run instead of against figures measured on another day.
"""

from __future__ import annotations

import triton
import triton.language as tl

TILE = 1024


@triton.jit
def per_request_tile_kernel(flat_ptr, offsets_ptr, rows_ptr, pool_ptr, width, stride_row, BLOCK: tl.constexpr):
    request = tl.program_id(0)
    tile = tl.program_id(1)
    start = tl.load(offsets_ptr + request)
    end = tl.load(offsets_ptr + request + 1)
    row = tl.load(rows_ptr + request)
    n = tl.minimum(end - start, width)
    if tile * BLOCK < n:
        cols = tile * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n
        ids = tl.load(flat_ptr + start + cols, mask=mask)
        tl.store(pool_ptr + row * stride_row + cols, ids.to(tl.int32), mask=mask)


def launch_per_request_tile(flat_in, offsets, rows, pool):
    bs = rows.shape[0]
    width = pool.shape[1]
    per_request_tile_kernel[(bs, triton.cdiv(width, TILE))](flat_in, offsets, rows, pool, width, pool.stride(0), BLOCK=TILE)


def launch_sglang_style(flat_in, offsets, rows, pool):
    """The baseline as sglang's launcher calls its kernel: its Python argument checks, then ``kernel[grid](...)``.

    The checks are sglang's (4 ranks, 4 dtypes, the offsets length), so that
    this call's host time is what sglang's launcher costs per call: the
    host-time baseline of ``kv_canary.bench_host``.
    """
    import torch

    for name, tensor, rank, dtype in (("flat_in", flat_in, 1, torch.int64), ("offsets", offsets, 1, torch.int64),
                                      ("req_pool_indices", rows, 1, torch.int64), ("pool_out", pool, 2, torch.int32)):
        if tensor.dim() != rank:
            raise ValueError(f"{name} must be {rank}-D, got shape {tuple(tensor.shape)}")
        if tensor.dtype != dtype:
            raise TypeError(f"{name} must be {dtype}, got {tensor.dtype}")
    if int(offsets.shape[0]) != int(rows.shape[0]) + 1:
        raise ValueError(f"offsets length {offsets.shape[0]} != bs+1 ({rows.shape[0] + 1})")
    launch_per_request_tile(flat_in, offsets, rows, pool)
