"""The Triton kernel of ``scatter_req_token_ids``.

Import this module only when a Triton launch is about to happen: Triton reads
``TRITON_INTERPRET`` when ``@triton.jit`` runs, i.e. at import of this module,
and ``INTERPRETED`` records which mode the kernel got.

Math (one program per (request ``r``, column-tile lane ``p``); ``P`` lanes)::

    row    = req_pool_indices[r]
    start  = offsets[r];  end = offsets[r + 1]
    n      = 0                                   if row < 0 or row >= R
           = min(max(end - start, 0), C)         otherwise, computed as
             shared_spec.reference.segment_lengths does: wrapping int64
             diff = end - start; end <= start -> 0; diff < 0 (wrapped) or
             diff > C -> C; else diff
    for tile start c0 in p*BLOCK, (p+P)*BLOCK, ... while c0 < n:
        j = c0 + [0, BLOCK)                      (int64)
        t = start + j                            (wrapping int64; a wrapped t is negative)
        where j < n and 0 <= t < N:
            pool_out[row, j] = int32(flat_in[t]) (truncation: the low 32 bits)

Addresses are int64 (``row * stride_row`` and ``j * stride_col`` can pass
2**31), every argument may have any strides (pool_out a column slice of a
wider pool, the 1-D inputs strided views), every
load and store is masked, and a program whose lane starts past ``n`` (or whose
row is outside the pool) does no tile at all: it costs three scalar loads.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

# Columns per tile: 1024 int32 stores (4 KiB) and 1024 int64 loads (8 KiB) per
# step, 8 elements per thread at NUM_WARPS = 4 -- wide enough for a long
# prefill segment to stream at full bandwidth, small enough that a decode step
# (one token per request) wastes only masked lanes, not memory traffic.
BLOCK = 1024
# 4 warps = 128 threads: the kernel is memory-bound with no reuse, so more warps
# per program only raise the cost of the many programs that exit at once.
NUM_WARPS = 4


# Nothing is specialized on integer values: N, R and C change from call to call
# and specializing (value 1, divisibility by 16) would only multiply compiled
# variants -- and the host launcher (triton_launch._FastLaunch) relies on one
# specialization per device. Stores stay scalar but coalesced either way: the
# mask depends on per-request data, so Triton cannot prove groups of lanes
# uniform enough to vectorize them, and a stride-1 multiply costs nothing next
# to the memory traffic.
@triton.jit(
    do_not_specialize=[
        "n_tokens", "n_rows", "width", "flat_stride", "offsets_stride", "rows_stride", "stride_row", "stride_col",
    ]
)
def scatter_req_token_ids_kernel(
    flat_in_ptr,  # *int64, N token ids, element stride flat_stride
    offsets_ptr,  # *int64, bs + 1 segment bounds, element stride offsets_stride
    rows_ptr,  # *int64, bs pool rows, element stride rows_stride
    pool_ptr,  # *int32, R x C with element strides (stride_row, stride_col)
    n_tokens,  # N
    n_rows,  # R
    width,  # C
    flat_stride,
    offsets_stride,
    rows_stride,
    stride_row,
    stride_col,
    BLOCK: tl.constexpr,
):
    # bs on axis 0: up to 2**31 - 1 programs (axes 1 and 2 stop at 65535).
    request = tl.program_id(0).to(tl.int64)
    lane = tl.program_id(1)
    lanes = tl.num_programs(1)

    row = tl.load(rows_ptr + request * rows_stride)
    start = tl.load(offsets_ptr + request * offsets_stride)
    end = tl.load(offsets_ptr + (request + 1) * offsets_stride)
    diff = end - start  # wraps; see segment_lengths
    n = tl.where(end <= start, 0, tl.where((diff < 0) | (diff > width), width, diff))
    n = tl.where((row >= 0) & (row < n_rows), n, 0)

    first = lane.to(tl.int64) * BLOCK
    for c0 in range(first, n, lanes * BLOCK):
        cols = c0 + tl.arange(0, BLOCK).to(tl.int64)
        tokens = start + cols  # wraps past 2**63 - 1 into negatives: masked out below
        mask = (cols < n) & (tokens >= 0) & (tokens < n_tokens)
        ids = tl.load(flat_in_ptr + tokens * flat_stride, mask=mask)
        # row and cols are int64, so the address math is int64 whatever the strides.
        tl.store(pool_ptr + row * stride_row + cols * stride_col, ids.to(tl.int32), mask=mask)


# True when the kernel above runs in Triton's interpreter (numpy on the CPU).
INTERPRETED = isinstance(scatter_req_token_ids_kernel, InterpretedFunction)
