"""The Triton kernel of ``assign_req_to_token_pool`` (``shared_spec.assignment``): prefix sum and copy in one launch.

Import this module only when a Triton launch is about to happen (``TRITON_INTERPRET`` is read when ``@triton.jit``
runs, as for ``triton_kernel``, whose window math this kernel reuses).

Grid ``(cdiv(bs, GROUP), SPLIT)`` (``launch.plan.assign_grid``: a function of ``bs`` alone); program ``(g, s)`` serves
the requests ``g * GROUP + [0, GROUP)``, and stops after their two loads where ``s * BLOCK`` is past a bound on their
cells (``C - clip(start, 0, C)`` each, ``min``-ed with a positive length, 0 for a zero one)::

    pt0   = sum of end - start over the requests before the group      -- a loop of PREFIX-wide blocks
    len   = end - start of the group's requests (int64, widened from int32; 0 past bs)
    pt    = pt0 + cumsum(len) - len                                    -- tl.cumsum within the group
    base, lo, hi, shift = the windowed scatter's window of each request (triton_kernel.clipped_window over
          offsets [pt, pt + len), start_cols = start; hi = 0 for a row outside the table)
    cnt   = max(hi - lo, 0); its cumsum over the group numbers the group's cells 0 .. total - 1
    for the blocks of BLOCK cells s, s + SPLIT, ...:
        cell k belongs to the request q with first_q <= k < first_q + cnt_q, column j = lo_q + k - first_q:
        req_to_token[row_q, shift_q + j] = int32(out_cache_loc[base_q + j])

Every launch constant is fixed (``GROUP``, ``PREFIX``, ``BLOCK``); ``bs``, the table's shape, ``len(out_cache_loc)``
and the strides are runtime arguments, never specialized, so a launch compiles nothing new for a new batch size
or table (one variant per combination of the four index dtypes, and of Triton's int32/int64 choice for an int
argument past 2**31). The prefix costs ``cdiv(g * GROUP, PREFIX)`` iterations of fixed width in program ``g``: one for
the first ``PREFIX / GROUP`` groups (``bs <= 1024``), ``O(bs^2 / GROUP)`` loads over the grid past that (run only by
programs with cells to write), where sglang's kernel loads a ``next_power_of_2(bs)``-wide block in each of ``bs``
programs (``O(bs^2)``) and compiles one kernel per ``bs`` bucket.
The copy packs the group's cells densely: a decode step's 16 one-token requests are one block, a long request's
cells are spread over the ``SPLIT`` programs of its group. Loads and stores are masked; ``out_cache_loc`` is read
only inside ``[0, N)``, the table only written inside ``[0, R) x [0, C)``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kv_canary_torch.launch.plan import ASSIGN_GROUP, assign_grid
from kv_canary_torch.triton_kernel import INT64_MAX, clipped_window

GROUP = ASSIGN_GROUP  # requests a program (the grid's rule, with the programs per group: launch.plan.assign_grid)
PREFIX = 1024  # lengths a prefix-loop iteration sums
BLOCK = 128  # cells a copy iteration writes


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


@triton.jit
def pick(onehot, values):
    """Per cell, its request's entry of ``values`` (``onehot`` [cells, GROUP]: one True per row, or none: 0)."""
    return tl.sum(tl.where(onehot, values[None, :], 0), axis=1)


@triton.jit(do_not_specialize=[
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
    GROUP: tl.constexpr, PREFIX: tl.constexpr, BLOCK: tl.constexpr,
):
    group = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1).to(tl.int64)
    first_request = group * GROUP
    r = first_request + tl.arange(0, GROUP)
    mine = r < bs
    start = tl.load(start_ptr + r * start_stride, mask=mine, other=0).to(tl.int64)
    end = tl.load(end_ptr + r * end_stride, mask=mine, other=0).to(tl.int64)
    length = end - start
    # A bound on the group's cells without the running sum: a request writes at most C - shift cells, none where its
    # length is 0, at most its length where that is positive; a negative length may still write (the wrapped running
    # sum can make its successor's segment [-1, 2**63 - 1]), so it gets C - shift. A program with no block under the
    # bound stops here, before the prefix loop (a decode step's groups have one block, the group's other programs none).
    room = width - tl.minimum(tl.maximum(start, 0), width)
    at_most = tl.sum(tl.where(length > 0, tl.minimum(length, room), tl.where(length == 0, 0, room)), axis=0)
    k0 = split * BLOCK
    if k0 < at_most:
        # The running sum before the group: fixed-width blocks of lengths, wrapping int64 as sglang's sum.
        pt0 = tl.zeros((), tl.int64)
        b = first_request - first_request
        while b < first_request:
            idx = b + tl.arange(0, PREFIX)
            m = idx < first_request
            s = tl.load(start_ptr + idx * start_stride, mask=m, other=0).to(tl.int64)
            e = tl.load(end_ptr + idx * end_stride, mask=m, other=0).to(tl.int64)
            pt0 += tl.sum(e - s, axis=0)
            b += PREFIX
        row = tl.load(rows_ptr + r * rows_stride, mask=mine, other=-1).to(tl.int64)
        pt = pt0 + tl.cumsum(length, axis=0) - length  # the windowed scatter's offsets[r]
        base, lo, hi, shift = vector_window(pt, pt + length, start, width, n_tokens)
        hi = tl.where(mine & (row >= 0) & (row < n_rows), hi, 0)
        count = tl.maximum(hi - lo, 0)
        ends = tl.cumsum(count, axis=0)  # cells of the group's requests up to and including each
        firsts = ends - count
        total = tl.sum(count, axis=0)
        # Cell k of request q reads out_cache_loc[base_q + lo_q + k - first_q] and writes the table's element offset
        # row_q * stride_row + (shift_q + lo_q + k - first_q) * stride_col: two per-request constants plus k (all small).
        token_at = base + lo - firsts
        cell_at = tl.where(hi > 0, row, 0) * stride_row + (shift + lo - firsts) * stride_col
        while k0 < total:
            k = k0 + tl.arange(0, BLOCK)
            owner = (firsts[None, :] <= k[:, None]) & (k[:, None] < ends[None, :])  # [cells, GROUP]: one True per cell < total
            valid = k < total
            ids = tl.load(loc_ptr + (pick(owner, token_at) + k) * loc_stride, mask=valid)
            tl.store(table_ptr + pick(owner, cell_at) + k * stride_col, ids.to(tl.int32), mask=valid)
            k0 += tl.num_programs(1) * BLOCK


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
        GROUP=GROUP, PREFIX=PREFIX, BLOCK=BLOCK,
    )
