"""The Triton kernel of ``assign_req_to_token_pool``: the running sum and the copy in one launch, no host sync.

Import it only when a Triton launch is about to happen (as ``scatter_kernel``, whose ``window`` it shares).

Grid ``(cdiv(bs, GROUP), SPLIT)``; program ``(g, q)`` serves requests ``r = g * GROUP + [0, GROUP)``, one request
a row of a ``[GROUP, BLOCK]`` block, and takes every ``SPLIT``-th chunk of ``BLOCK`` columns from chunk ``q``::

    len_r = clip(end_offset[r] - start_offset[r], 0, N)     (``length``: reference.assign_lengths, exact)
    pt0   = sum of len over the requests before the group    (one SMALL-wide block where the group lies among
                                                              the first SMALL requests, else PREFIX-wide blocks)
    pt_r  = pt0 + cumsum(len)_r - len_r
    base, lo, hi = window(pt_r, pt_r + len_r, start_offset[r], C, N)     (hi = lo for a row outside [0, R))
    j in each chunk, where lo + j < hi:  req_to_token[row_r, lo + j] = int32(out_cache_loc[base + lo + j])

This is the windowed scatter with ``offsets = [0, cumsum(len)]`` and ``start_cols = start_offset``
(``reference.assign_windows``; the reference saturates the sum at ``N``, which changes no window: a segment from
``pt >= N`` reads nothing either way). No sum wraps: ``len_r`` lies in ``[0, N]`` and the spec refuses ``bs * N >=
2**63``. The bounds are the scatter's (``window``): ``out_cache_loc`` is read inside ``[0, N)`` and the table
written inside ``[0, R) x [0, C)``. A program ``(g, q > 0)`` first bounds the group's widest window without the sum
(a request writes at most ``min(len, C - clip(start, 0, C))`` columns) and stops where its first chunk lies past it:
a decode step's groups are one chunk of program ``(g, 0)``. The first chunk is peeled off the loop, so that a
one-chunk group loads its slots without waiting on the loop's reduction.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kv_canary_torch.scatter_kernel import window

INTS = ("bs", "n_tokens", "n_rows", "width", "rows_stride", "start_stride", "end_stride", "loc_stride",
        "stride_row", "stride_col")
POINTERS = ("rows_ptr", "table_ptr", "start_ptr", "end_ptr", "loc_ptr")
GROUP = 16  # requests a program
PREFIX = 1024  # lengths a prefix-loop iteration sums
SMALL = 256  # lengths the one block of a group among the first SMALL requests sums
BLOCK = 32  # columns of a request a chunk writes
CONSTEXPRS = {"GROUP": GROUP, "PREFIX": PREFIX, "SMALL": SMALL, "BLOCK": BLOCK}
NAMES, VALUES = tuple(CONSTEXPRS), tuple(CONSTEXPRS.values())  # as the launch passes them


@triton.jit
def length(start, end, n_tokens):
    """``clip(end - start, 0, N)`` exactly (``reference.assign_lengths``): where ``end > start`` but the difference
    wrapped negative, the true one is past any ``N``."""
    d = end - start
    return tl.where(end > start, tl.where((d < 0) | (d > n_tokens), n_tokens, d), 0)


@triton.jit
def lengths_before(start_ptr, end_ptr, b, first_request, n_tokens, start_stride, end_stride, WIDTH: tl.constexpr):
    """The sum of the lengths of requests ``b + [0, WIDTH)`` below ``first_request``."""
    idx = b + tl.arange(0, WIDTH)
    before = idx < first_request
    s = tl.load(start_ptr + idx * start_stride, mask=before, other=0).to(tl.int64)
    e = tl.load(end_ptr + idx * end_stride, mask=before, other=0).to(tl.int64)
    return tl.sum(length(s, e, n_tokens), axis=0)


@triton.jit
def copy_chunk(table_ptr, loc_ptr, token_at, cell_at, width_q, c0, loc_stride, stride_col, BLOCK: tl.constexpr):
    """Chunk ``c0`` of the group's windows: ``j = c0 + [0, BLOCK)`` where ``j < width_q``: ``table[cell_at + j *
    stride_col] = int32(out_cache_loc[(token_at + j) * loc_stride])`` (``[GROUP, BLOCK]``)."""
    j = c0 + tl.arange(0, BLOCK)[None, :]
    m = j < width_q
    ids = tl.load(loc_ptr + (token_at + j) * loc_stride, mask=m)
    tl.store(table_ptr + cell_at + j * stride_col, ids.to(tl.int32), mask=m)


@triton.jit
def copy_group(rows_ptr, table_ptr, start_ptr, end_ptr, loc_ptr, start, end, r, mine, first_request, c0,
               n_tokens, n_rows, width, rows_stride, start_stride, end_stride, loc_stride, stride_row, stride_col,
               PREFIX: tl.constexpr, BLOCK: tl.constexpr, SMALL: tl.constexpr):
    """This program's chunks of the group's requests ``r`` (``mine``: ``r < bs``), from column chunk ``c0``."""
    row = tl.load(rows_ptr + r * rows_stride, mask=mine, other=-1).to(tl.int64)
    pt0 = tl.zeros((), tl.int64)
    if (first_request > 0) & (first_request <= SMALL):
        pt0 = lengths_before(start_ptr, end_ptr, first_request - first_request, first_request, n_tokens,
                             start_stride, end_stride, SMALL)
    else:
        b = first_request - first_request
        while b < first_request:
            pt0 += lengths_before(start_ptr, end_ptr, b, first_request, n_tokens, start_stride, end_stride, PREFIX)
            b += PREFIX
    n = length(start, end, n_tokens)
    pt = pt0 + tl.cumsum(n, axis=0) - n
    base, lo, hi = window(pt, pt + n, start, width, n_tokens)
    row_ok = mine & (row >= 0) & (row < n_rows)
    hi = tl.where(row_ok, hi, lo)
    token_at = (base + lo)[:, None]
    cell_at = (tl.where(row_ok, row, 0) * stride_row + lo * stride_col)[:, None]
    width_q = (hi - lo)[:, None]
    copy_chunk(table_ptr, loc_ptr, token_at, cell_at, width_q, c0, loc_stride, stride_col, BLOCK)
    c0 += tl.num_programs(1).to(tl.int64) * BLOCK
    widest = tl.max(hi - lo, axis=0)
    while c0 < widest:
        copy_chunk(table_ptr, loc_ptr, token_at, cell_at, width_q, c0, loc_stride, stride_col, BLOCK)
        c0 += tl.num_programs(1).to(tl.int64) * BLOCK


@triton.jit(do_not_specialize=INTS, do_not_specialize_on_alignment=POINTERS)
def assign_kernel(
    rows_ptr,  # *int32|int64 req_pool_indices
    table_ptr,  # *int32 req_to_token, R x C
    start_ptr,  # *int32|int64 start_offset
    end_ptr,  # *int32|int64 end_offset
    loc_ptr,  # *int32|int64 out_cache_loc, N slots
    bs: tl.int64, n_tokens: tl.int64, n_rows: tl.int64, width: tl.int64,
    rows_stride: tl.int64, start_stride: tl.int64, end_stride: tl.int64, loc_stride: tl.int64,
    stride_row: tl.int64, stride_col: tl.int64,
    GROUP: tl.constexpr, PREFIX: tl.constexpr, SMALL: tl.constexpr, BLOCK: tl.constexpr,
):
    bs = bs.to(tl.int64)  # interpreted, an int is int32 or int64 by its value
    n_tokens = n_tokens.to(tl.int64)
    n_rows = n_rows.to(tl.int64)
    width = width.to(tl.int64)
    first_request = tl.program_id(0).to(tl.int64) * GROUP
    c0 = tl.program_id(1).to(tl.int64) * BLOCK
    r = first_request + tl.arange(0, GROUP)
    mine = r < bs
    start = tl.load(start_ptr + r * start_stride, mask=mine, other=0).to(tl.int64)
    end = tl.load(end_ptr + r * end_stride, mask=mine, other=0).to(tl.int64)
    if c0 == 0:
        copy_group(rows_ptr, table_ptr, start_ptr, end_ptr, loc_ptr, start, end, r, mine, first_request, c0,
                   n_tokens, n_rows, width, rows_stride, start_stride, end_stride, loc_stride, stride_row,
                   stride_col, PREFIX, BLOCK, SMALL)
    else:
        room = width - tl.minimum(tl.maximum(start, 0), width)
        if c0 < tl.max(tl.minimum(length(start, end, n_tokens), room), axis=0):
            copy_group(rows_ptr, table_ptr, start_ptr, end_ptr, loc_ptr, start, end, r, mine, first_request, c0,
                       n_tokens, n_rows, width, rows_stride, start_stride, end_stride, loc_stride, stride_row,
                       stride_col, PREFIX, BLOCK, SMALL)
