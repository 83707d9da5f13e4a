"""The Triton kernel of ``assign_req_to_token_pool`` (``shared_spec.assignment``): prefix sum and copy in one launch.

Import this module only when a Triton launch is about to happen (``TRITON_INTERPRET`` is read when ``@triton.jit``
runs, as for ``triton_kernel``, whose window math this kernel reuses).

Grid ``(cdiv(bs, GROUP), SPLIT)`` (``launch.plan.assign_grid``: a function of ``bs`` alone); program ``(g, s)``
serves the requests ``q = g * GROUP + [0, GROUP)`` as the rows of a ``[GROUP, BLOCK]`` block, one request a row,
``BLOCK`` of its columns a row, and takes every ``SPLIT``-th chunk of ``BLOCK`` columns from chunk ``s``. Program
``(g, 0)`` issues every load of its group at once (nothing it loads waits on another); a program ``(g, s > 0)``
stops after two loads where ``s * BLOCK`` is past a bound on the longest window of the group (``min(len, C -
clip(start, 0, C))`` each)::

    len   = clip(end - start, 0, N) of each request (the spec's length: exact, ``clipped_length``)
    pt0   = sum of len over the requests before the group      -- one SMALL-wide block where the group lies among
                                                                  the first SMALL requests, else a loop of
                                                                  PREFIX-wide blocks
    pt    = pt0 + cumsum(len) - len                            -- tl.cumsum within the group
    base, lo, hi, shift = the windowed scatter's window of each request (vector_window over offsets
          [pt, pt + len), start_cols = start; hi = lo for a row outside the table)
    for the chunks c = s, s + SPLIT, ... (the first unconditionally, masked; the rest while c * BLOCK < max(hi - lo)):
        j = lo_q + c * BLOCK + [0, BLOCK), where j < hi_q:
        req_to_token[row_q, shift_q + j] = int32(out_cache_loc[base_q + j])

The running sum never wraps: lengths lie in ``[0, N]`` and the spec refuses ``bs * N >= 2**63``
(``shared_spec.assignment``), so ``pt`` lies in ``[0, bs * N]``. The first chunk is peeled out of the loop, so that
a one-chunk group (a decode step's) loads its slots without waiting for the reduction the loop's test needs.

No cell needs a search for its request (each row of the block is one request), so a decode step's group of
``GROUP`` one-token requests is one chunk of one program, and a long request's chunks spread over the ``SPLIT``
programs of its group. Every launch constant is fixed (``GROUP``, ``PREFIX``, ``SMALL``, ``BLOCK``); ``bs``, the table's
shape, ``len(out_cache_loc)``, the strides and the pointers are never specialized, so a launch compiles nothing new
for a new batch size, table or alignment (one variant per combination of the four index dtypes, and of Triton's
int32/int64 choice for an int argument past 2**31). The prefix costs one ``SMALL``-wide block in the groups of the
first ``SMALL`` requests, ``cdiv(g * GROUP, PREFIX)`` ``PREFIX``-wide ones in program ``g`` past them (a block's
instructions grow with its width, masked lanes included), ``O(bs^2 / GROUP)`` loads over the
grid past that (run only by programs with columns to write), where sglang's kernel loads a
``next_power_of_2(bs)``-wide block in each of ``bs`` programs (``O(bs^2)``) and compiles one kernel per ``bs``
bucket. Loads and stores are masked; ``out_cache_loc`` is read only inside ``[0, N)``, the table only written
inside ``[0, R) x [0, C)``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kv_canary_torch.launch.plan import ASSIGN_GROUP, assign_grid
from kv_canary_torch.triton_kernel import INT64_MAX, clipped_window

GROUP = ASSIGN_GROUP  # requests a program (the grid's rule, with the programs per group: launch.plan.assign_grid)
PREFIX = 1024  # lengths a prefix-loop iteration sums
SMALL = 256  # lengths the one block of a group among the first SMALL requests sums
BLOCK = 32  # columns of a request a chunk writes
CONSTEXPRS = {"GROUP": GROUP, "PREFIX": PREFIX, "SMALL": SMALL, "BLOCK": BLOCK}  # what every launch compiles in


@triton.jit
def clipped_length(start, end, n_tokens):
    """``clip(end - start, 0, N)`` for any int64 ``start``, ``end``, exactly: where ``end > start`` the true
    difference lies in ``(0, 2**64)`` and is ``end - start`` modulo ``2**64`` read unsigned, so one unsigned min
    clips it (``shared_spec.assignment.windows``' lengths)."""
    clipped = tl.minimum((end - start).to(tl.uint64, bitcast=True), n_tokens.to(tl.uint64))
    return tl.where(end > start, clipped.to(tl.int64, bitcast=True), 0)


@triton.jit
def vector_window(start, end, first_col, width, n_tokens):
    """``(base, lo, hi, shift)`` of ``shared_spec.reference.windowed_columns`` on vectors of requests (the general
    branch of ``triton_kernel.windowed_window``, all selects: exact in wrapping int64 for every value)."""
    shift = tl.minimum(tl.maximum(first_col, 0), width)
    behind = first_col < 0
    back = tl.where(behind, first_col, 0)
    past = behind & (start > INT64_MAX + back)  # start - s > 2**63 - 1
    moved = tl.where(behind & ~past, start - back, start)
    base, lo, hi = clipped_window(moved, end, width - shift, n_tokens)
    return base, tl.where(past, 0, lo), tl.where(past, 0, hi), shift


@triton.jit(do_not_specialize=[
    "rows_ptr", "table_ptr", "start_ptr", "end_ptr", "loc_ptr",
    "bs", "n_tokens", "n_rows", "width", "rows_stride", "start_stride", "end_stride", "loc_stride", "stride_row",
    "stride_col",
])
def assign_kernel(
    rows_ptr,  # *int32|int64 req_pool_indices, element stride rows_stride
    table_ptr,  # *int32 req_to_token, R x C, element strides (stride_row, stride_col)
    start_ptr,  # *int32|int64 start_offset
    end_ptr,  # *int32|int64 end_offset
    loc_ptr,  # *int32|int64 out_cache_loc, N entries
    bs, n_tokens, n_rows, width,
    rows_stride, start_stride, end_stride, loc_stride, stride_row, stride_col,
    GROUP: tl.constexpr, PREFIX: tl.constexpr, BLOCK: tl.constexpr, SMALL: tl.constexpr,
):
    group = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1).to(tl.int64)
    first_request = group * GROUP
    r = first_request + tl.arange(0, GROUP)
    mine = r < bs
    start = tl.load(start_ptr + r * start_stride, mask=mine, other=0).to(tl.int64)
    end = tl.load(end_ptr + r * end_stride, mask=mine, other=0).to(tl.int64)
    if split == 0:
        # The group's first chunk: its loads (the prefix's, the rows') wait on nothing, so they are in flight with
        # the group's two (a decode step's only program of a group, as short a chain of loads as sglang's).
        copy_group(rows_ptr, table_ptr, start_ptr, end_ptr, loc_ptr, start, end, r, mine, first_request, split * BLOCK,
                   n_tokens, n_rows, width, rows_stride, start_stride, end_stride, loc_stride, stride_row, stride_col,
                   PREFIX, BLOCK, SMALL)
    else:
        # A bound on the group's longest window without the running sum: a request writes at most its length, and at
        # most C - shift columns. A program with no chunk under the bound stops here, before the prefix (a decode
        # step's groups have one chunk).
        room = width - tl.minimum(tl.maximum(start, 0), width)
        at_most = tl.max(tl.minimum(clipped_length(start, end, n_tokens), room), axis=0)
        if split * BLOCK < at_most:
            copy_group(rows_ptr, table_ptr, start_ptr, end_ptr, loc_ptr, start, end, r, mine, first_request,
                       split * BLOCK, n_tokens, n_rows, width, rows_stride, start_stride, end_stride, loc_stride,
                       stride_row, stride_col, PREFIX, BLOCK, SMALL)


@triton.jit
def copy_group(rows_ptr, table_ptr, start_ptr, end_ptr, loc_ptr, start, end, r, mine, first_request, c0,
               n_tokens, n_rows, width, rows_stride, start_stride, end_stride, loc_stride, stride_row, stride_col,
               PREFIX: tl.constexpr, BLOCK: tl.constexpr, SMALL: tl.constexpr):
    """This program's chunks of the group's requests ``r`` (``mine``: ``r < bs``; ``start``, ``end`` loaded), from
    column chunk ``c0`` (the module docstring's loop)."""
    row = tl.load(rows_ptr + r * rows_stride, mask=mine, other=-1).to(tl.int64)
    # The running sum before the group: one SMALL-wide block of lengths where it covers them, else PREFIX-wide
    # blocks (none for group 0).
    pt0 = tl.zeros((), tl.int64)
    if (first_request > 0) & (first_request <= SMALL):
        pt0 = lengths_before(start_ptr, end_ptr, first_request - first_request, first_request, n_tokens, start_stride,
                             end_stride, SMALL)
    else:
        b = first_request - first_request
        while b < first_request:
            pt0 += lengths_before(start_ptr, end_ptr, b, first_request, n_tokens, start_stride, end_stride, PREFIX)
            b += PREFIX
    length = clipped_length(start, end, n_tokens)
    pt = pt0 + tl.cumsum(length, axis=0) - length  # the windowed scatter's offsets[r]
    base, lo, hi, shift = vector_window(pt, pt + length, start, width, n_tokens)
    row_ok = mine & (row >= 0) & (row < n_rows)
    hi = tl.where(row_ok, hi, lo)
    # Request q's column j reads out_cache_loc[base_q + j] and writes the table's element offset
    # row_q * stride_row + (shift_q + j) * stride_col.
    token_at = (base + lo)[:, None]
    cell_at = (tl.where(row_ok, row, 0) * stride_row + (shift + lo) * stride_col)[:, None]
    width_q = (hi - lo)[:, None]
    # The first chunk before the loop's test (its reduction off the chain of a one-chunk group); masked, so a
    # program whose chunk is past every window stores nothing.
    copy_chunk(table_ptr, loc_ptr, token_at, cell_at, width_q, c0, loc_stride, stride_col, BLOCK)
    c0 += tl.num_programs(1) * BLOCK
    longest = tl.max(hi - lo, axis=0)  # hi >= lo (written_columns)
    while c0 < longest:
        copy_chunk(table_ptr, loc_ptr, token_at, cell_at, width_q, c0, loc_stride, stride_col, BLOCK)
        c0 += tl.num_programs(1) * BLOCK


@triton.jit
def lengths_before(start_ptr, end_ptr, b, first_request, n_tokens, start_stride, end_stride, WIDTH: tl.constexpr):
    """The sum of the lengths of the requests ``b + [0, WIDTH)`` below ``first_request`` (one masked block)."""
    idx = b + tl.arange(0, WIDTH)
    before = idx < first_request
    s = tl.load(start_ptr + idx * start_stride, mask=before, other=0).to(tl.int64)
    e = tl.load(end_ptr + idx * end_stride, mask=before, other=0).to(tl.int64)
    return tl.sum(clipped_length(s, e, n_tokens), axis=0)


@triton.jit
def copy_chunk(table_ptr, loc_ptr, token_at, cell_at, width_q, c0, loc_stride, stride_col, BLOCK: tl.constexpr):
    """Chunk ``c0`` of the group's windows: ``j = c0 + [0, BLOCK)`` past each request's ``lo``, where ``j <
    width_q``: ``table[cell_at + j] = int32(out_cache_loc[token_at + j])`` (element offsets, ``[GROUP, BLOCK]``)."""
    j = c0 + tl.arange(0, BLOCK)[None, :]
    m = j < width_q
    ids = tl.load(loc_ptr + (token_at + j) * loc_stride, mask=m)
    tl.store(table_ptr + cell_at + j * stride_col, ids.to(tl.int32), mask=m)


def launch(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size: int):
    """One launch over checked tensors on the current device (nothing when ``batch_size`` is 0: None); no host sync.

    Returns what Triton's launch returns (its compiled kernel). The arguments after the five pointers are the
    ``ASSIGN_INTS`` ints in the order ``native.cpp``'s ``assign_plan`` passes them."""
    grid = assign_grid(batch_size)
    if grid is None:
        return None
    n_rows, width = req_to_token.shape
    stride_row, stride_col = req_to_token.stride()
    return assign_kernel[grid](
        req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
        batch_size, out_cache_loc.shape[0], n_rows, width,
        req_pool_indices.stride(0), start_offset.stride(0), end_offset.stride(0), out_cache_loc.stride(0),
        stride_row, stride_col,
        **CONSTEXPRS,
    )
