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
