"""The Triton kernels of ``scatter_req_token_ids``: ``scatter_req_token_ids_kernel`` (any strides) and
``scatter_req_token_ids_tiled_kernel`` (contiguous ``flat_in`` and pool rows; its docstring has its tiles).

Import this module only when a Triton launch is about to happen: Triton reads
``TRITON_INTERPRET`` when ``@triton.jit`` runs, i.e. at import of this module,
and ``INTERPRETED`` records which mode the kernels got. ``launch.plan`` picks one per launch.

Math of the strided kernel (one program per (request ``r``, column lane ``p``); ``P`` lanes)::

    row    = req_pool_indices[r];  start = offsets[r];  end = offsets[r + 1]
    n      = min(max(end - start, 0), C), exactly as shared_spec.reference.
             segment_lengths computes it in wrapping int64; 0 if row is outside [0, R)
    base, lo, hi = shared_spec.reference.written_columns(start, end, C, N):
             base = clip(start, -C, N); lo = max(-base, 0); hi = min(n, N - base),
             computed as n where base <= N - n, else N - base (no int64 overflow for any N)
             -- the request writes exactly the columns lo <= j < hi, reading
             flat_in[base + j]; lo, hi are in [0, C]
    for the tiles of BLOCK columns from lo's tile, lane p taking every P-th:
        j = tile + [0, BLOCK)
        where lo <= j < hi:  pool_out[row, j] = int32(flat_in[base + j])   (low 32 bits)

Windowed (``WINDOWED``, ``start_cols`` given; ``s = start_cols[r]``, one more scalar load)::

    base, lo, hi, shift = shared_spec.reference.windowed_columns(start, end, s, C, N), transcribed:
             shift = clip(s, 0, C); where s < 0 the request starts at start - s (empty where
             that passes 2**63 - 1), then written_columns(start', end, C - shift, N)
             -- in order (0 <= start <= end <= N), by selects alone (ordered_shifted): lo = 0 and
             s >= 0: base = start, hi = max(min(end - start, C - s), 0), shift = s
             s < 0:  base = start - s, hi = max(min(end - start + s, C), 0), shift = 0
    the same tiles over j, with the pool row's address moved by shift columns:
        where lo <= j < hi:  pool_out[row, shift + j] = int32(flat_in[base + j])

``WINDOWED`` False compiles the kernels as they are without it: ``start_cols_ptr`` and
``start_cols_stride`` are then None (Triton makes a None argument a constexpr: no parameter, no load).

All int64 arithmetic is per program, on scalars; the per-element work is the
int32 compares of a load mask and a store mask and two address computations (int64 only when ``WIDE``: a
column index times a stride could pass 2**31), without the stride multiplies
when ``UNIT`` (``flat_in`` and the pool's columns contiguous, as the launcher
knows from the strides); ``DENSE`` (``offsets`` and ``req_pool_indices``
contiguous) drops the multiplies before the scalar loads too; ``ONE`` (the
launch has a lane for every tile of the longest window) replaces the tile loop
of a window from column 0 by its one tile. Loads and stores are masked, every
argument may have any strides, a program whose lane has no tile in ``[lo,
hi)`` costs the two loads of the offsets, and one whose row is outside the
pool loads its tokens and stores nothing.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction


@triton.jit
def request_scalars(request, offsets_ptr, rows_ptr, n_rows, offsets_stride, rows_stride):
    """``(row_ok, row, start, end)`` of request ``request``: its three scalar loads (int64) and whether its row is in the pool.

    Strides passed as the literal 1 fold into the addresses.
    """
    row = tl.load(rows_ptr + request * rows_stride)
    start = tl.load(offsets_ptr + request * offsets_stride)
    end = tl.load(offsets_ptr + (request + 1) * offsets_stride)
    return (row >= 0) & (row < n_rows), row, start, end


# True when the kernels of this module run in Triton's interpreter (numpy on the CPU).
INTERPRETED = isinstance(request_scalars, InterpretedFunction)
# Interpreted, the tile loop is a while loop: Triton 3.6's interpreter turns range() bounds into ints from their
# 1-element arrays (int(array), which numpy 2.5 refuses; Triton 3.9 squeezes them first). Compiled, a range loop.
WHILE_LOOP: tl.constexpr = tl.constexpr(INTERPRETED)


@triton.jit
def in_order(start, end, n_tokens):
    """Whether ``0 <= start <= end <= N``: every valid batch's windows. There the module docstring's math gives
    ``base = start``, ``lo = 0`` and ``hi = min(end - start, C)``, and its dozens of int64 instructions would stand
    between the offsets' arrival and the first token load (the per-request-tile design has none of them)."""
    return (start >= 0) & (start <= end) & (end <= n_tokens)


@triton.jit
def ordered_window(start, end, width):
    """``(base, lo, hi)`` of a window ``in_order``: ``(start, 0, min(end - start, C))``, ``lo`` an int64 as
    ``clipped_window``'s is."""
    return start, start - start, tl.minimum(end - start, width)


@triton.jit
def clipped_window(start, end, width, n_tokens):
    """``(base, lo, hi)`` for any int64 ``start``, ``end`` (the module docstring's math, exact in wrapping int64)."""
    diff = end - start  # wraps; see segment_lengths
    n = tl.where(end <= start, 0, tl.where((diff < 0) | (diff > width), width, diff))
    base = tl.minimum(tl.maximum(start, -width), n_tokens)
    lo = tl.where(base < 0, -base, 0)
    hi = tl.where(base <= n_tokens - n, n, n_tokens - base)  # min(n, N - base) without overflow (written_columns)
    return base, lo, hi


# 2**63 - 1: a start moved past it by a negative first column lies past every N (windowed_columns).
INT64_MAX: tl.constexpr = tl.constexpr(2**63 - 1)


@triton.jit
def in_row(start, end, first_col, width, n_tokens):
    """Whether a request takes ``windowed_window``'s short branch: an in-order window with ``0 <= s <= C``.

    There ``clip(s, 0, C) = s``, so ``shift = s`` itself and the short branch's ``hi = min(end - start, C - s)`` is
    as many dependent int64 steps after the loads as the unwindowed ``min(end - start, C)``; any other window (``s >
    C`` among them: empty, ``shift = C``) goes through the exact math, which computes its own ``shift``. (The strided
    kernel branches on ``in_order`` alone and folds ``s`` in by ``ordered_shifted``'s selects.)"""
    return in_order(start, end, n_tokens) & (first_col >= 0) & (first_col <= width)


@triton.jit
def ordered_shifted(start, end, first_col, width):
    """``(base, hi, shift)`` of a windowed request ``in_order`` (``0 <= start <= end <= N``, so ``n = end - start``
    lies in ``[0, N]``), for any int64 ``s``, with ``lo = 0``: ``windowed_columns``' answer by selects alone.

    ``s >= 0``: ``(start, max(min(n, C - s), 0), s)``; ``C - s`` cannot wrap, and ``hi`` is 0 for ``s >= C`` (the
    shifted row pointer is then never used). ``s < 0``: the columns ``[0, min(n + s, C))`` read from ``start - s``,
    so ``(start - s, max(min(n + s, C), 0), 0)``; ``n + s`` cannot wrap, and ``start - s`` wraps only where ``-s >
    2**63 - 1 - start >= N - start >= n``, where ``hi`` is 0 and ``base`` is never read. ``hi`` lies in ``[0, min(n,
    C)]``, as the unwindowed short branch's does (so ``ONE``'s one tile per lane holds, and ``hi`` fits int32 where
    ``WIDE`` is off)."""
    n = end - start
    behind = first_col < 0
    base = tl.where(behind, start - first_col, start)
    hi = tl.where(behind, tl.minimum(n + first_col, width), tl.minimum(n, width - first_col))
    return base, tl.maximum(hi, 0), tl.where(behind, 0, first_col)


@triton.jit
def windowed_window(start, end, first_col, width, n_tokens):
    """``(base, lo, hi, shift)`` of a windowed request for any int64 ``start``, ``end``, ``first_col`` (``s``):
    ``shared_spec.reference.windowed_columns`` transcribed, exact in wrapping int64; a window ``in_row`` takes the
    short branch (``base = start``, ``lo = 0``, ``hi = min(end - start, C - shift)``)."""
    if in_row(start, end, first_col, width, n_tokens):
        shift = first_col
        base, lo, hi = ordered_window(start, end, width - shift)
    else:
        shift = tl.minimum(tl.maximum(first_col, 0), width)
        behind = first_col < 0
        back = tl.where(behind, first_col, 0)
        past = behind & (start > INT64_MAX + back)  # start - s > 2**63 - 1; the sum lies in [-1, 2**63 - 1]
        moved = tl.where(behind & ~past, start - back, start)
        base, lo, hi = clipped_window(moved, end, width - shift, n_tokens)
        lo = tl.where(past, 0, lo)
        hi = tl.where(past, 0, hi)
    return base, lo, hi, shift


@triton.jit
def request_window(request, offsets_ptr, rows_ptr, n_tokens, n_rows, width, offsets_stride, rows_stride):
    """``(row_ok, row, base, lo, hi)`` of request ``request``, on int64 scalars (the module docstring's math).

    ``hi`` is 0 when the row is outside ``[0, R)``, so such a request writes
    nothing; ``row`` is then to be used only through ``row_ok``. A window
    ``in_order`` takes the short branch.
    """
    row_ok, row, start, end = request_scalars(request, offsets_ptr, rows_ptr, n_rows, offsets_stride, rows_stride)
    if in_order(start, end, n_tokens):
        base, lo, hi = ordered_window(start, end, width)
    else:
        base, lo, hi = clipped_window(start, end, width, n_tokens)
    hi = tl.where(row_ok, hi, 0)
    return row_ok, row, base, lo, hi


@triton.jit
def request_windowed(request, offsets_ptr, rows_ptr, start_cols_ptr, n_tokens, n_rows, width, offsets_stride,
                     rows_stride, start_cols_stride):
    """``(row_ok, row, base, lo, hi, shift)`` of windowed request ``request`` (``windowed_window``), ``hi`` 0 for a
    row outside ``[0, R)`` as in ``request_window``."""
    row_ok, row, start, end = request_scalars(request, offsets_ptr, rows_ptr, n_rows, offsets_stride, rows_stride)
    first_col = tl.load(start_cols_ptr + request * start_cols_stride)
    base, lo, hi, shift = windowed_window(start, end, first_col, width, n_tokens)
    hi = tl.where(row_ok, hi, 0)
    return row_ok, row, base, lo, hi, shift


# Nothing is specialized on integer values: N, R and C change from call to call
# and specializing (value 1, divisibility by 16) would only multiply compiled
# variants -- and the host launcher (launch.dispatch) relies on one
# specialization per device and block shape. Stores stay scalar but coalesced
# either way: the mask depends on per-request data, so Triton cannot prove
# groups of lanes uniform enough to vectorize them.
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
    start_cols_ptr,  # *int64, bs first columns, element stride start_cols_stride; None unless WINDOWED
    start_cols_stride,  # None unless WINDOWED (a stride of 1 Triton specializes to a constant)
    BLOCK: tl.constexpr,  # columns per tile
    WIDE: tl.constexpr,  # column offsets need int64 (C * stride or C + lanes * BLOCK >= 2**31)
    UNIT: tl.constexpr,  # flat_stride == stride_col == 1: addresses are a base plus the lane's offsets
    DENSE: tl.constexpr,  # offsets_stride == rows_stride == 1: the request's scalars at request and request + 1
    ONE: tl.constexpr,  # lanes * BLOCK >= min(C, N): a window from column 0 gives each lane one tile at most
    WINDOWED: tl.constexpr,  # start_cols given: the window shifted per request (module docstring)
):
    # bs on axis 0: up to 2**31 - 1 programs (axes 1 and 2 stop at 65535).
    request = tl.program_id(0).to(tl.int64)
    if DENSE:  # no stride multiply before the loads the whole program waits on
        offsets_stride = 1
        rows_stride = 1
    start = tl.load(offsets_ptr + request * offsets_stride)
    end = tl.load(offsets_ptr + (request + 1) * offsets_stride)
    if WINDOWED:
        first_col = tl.load(start_cols_ptr + request * start_cols_stride)
        # An in-order window (every valid batch's) as the unwindowed one's short branch, its first column folded
        # in by selects (ordered_shifted): the branch waits on the offsets alone, as the unwindowed kernel's
        # does, not on s too. Any other one through windowed_window's exact math.
        if in_order(start, end, n_tokens):
            base, hi, shift = ordered_shifted(start, end, first_col, width)
            lanes_copy(flat_in_ptr, rows_ptr + request * rows_stride, n_rows, shifted(pool_ptr, shift, stride_col, UNIT),
                       stride_row, base, start - start, hi, flat_stride, stride_col, BLOCK, WIDE, UNIT, True, ONE)
        else:
            base, lo, hi, shift = windowed_window(start, end, first_col, width, n_tokens)
            lanes_copy(flat_in_ptr, rows_ptr + request * rows_stride, n_rows, shifted(pool_ptr, shift, stride_col, UNIT),
                       stride_row, base, lo, hi, flat_stride, stride_col, BLOCK, WIDE, UNIT, False, False)
    # Two copies of the tile loop: the usual window starts at column 0 (no lower bound to mask, no division to
    # find the first tile, and one tile per lane where ONE), any other one is clipped first.
    elif in_order(start, end, n_tokens):
        base, lo, hi = ordered_window(start, end, width)
        lanes_copy(flat_in_ptr, rows_ptr + request * rows_stride, n_rows, pool_ptr, stride_row, base, lo, hi,
                   flat_stride, stride_col, BLOCK, WIDE, UNIT, True, ONE)
    else:
        base, lo, hi = clipped_window(start, end, width, n_tokens)
        lanes_copy(flat_in_ptr, rows_ptr + request * rows_stride, n_rows, pool_ptr, stride_row, base, lo, hi,
                   flat_stride, stride_col, BLOCK, WIDE, UNIT, False, False)


@triton.jit
def shifted(pool_ptr, shift, stride_col, UNIT: tl.constexpr):
    """The pool pointer moved ``shift`` columns (int64), without the multiply where ``UNIT``: where the pool's column
    ``j`` of a window starts."""
    if UNIT:
        moved = pool_ptr + shift
    else:
        moved = pool_ptr + shift * stride_col
    return moved


@triton.jit
def lanes_copy(flat_in_ptr, row_at, n_rows, pool_ptr, stride_row, base, lo, hi, flat_stride, stride_col,
               BLOCK: tl.constexpr, WIDE: tl.constexpr, UNIT: tl.constexpr,
               FROM_ZERO: tl.constexpr, ONE: tl.constexpr):
    """This program's lane of ``pool[row, j] = int32(flat_in[base + j])`` for ``lo <= j < hi`` (``lo == 0`` when
    ``FROM_ZERO``), ``row = *row_at`` written only where it is in ``[0, n_rows)``.

    Lane ``p`` of ``P`` (grid axis 1) takes every ``P``-th tile of ``BLOCK`` columns from ``lo``'s tile; ``ONE``
    (only with ``FROM_ZERO``, where ``P * BLOCK >= hi``) says that is tile ``p`` alone. The row is loaded only by a
    lane with a tile, after the test, as the per-request-tile design does: an idle program costs the two offsets'
    loads. Its check bounds the stores alone, so the token loads (inside ``flat_in`` whatever the row) need not
    wait for it; a row outside the pool costs its tokens' loads and writes nothing.
    """
    lane = tl.program_id(1)
    if WIDE:
        lo_c = lo
        hi_c = hi
    else:
        lo_c = lo.to(tl.int32)
        hi_c = hi.to(tl.int32)
    if FROM_ZERO:
        first = lane * BLOCK
    else:
        first = (lo_c // BLOCK + lane) * BLOCK
    if first < hi_c:
        row = tl.load(row_at)
        row_ok = (row >= 0) & (row < n_rows)
        pool_row = pool_ptr + tl.where(row_ok, row, 0) * stride_row
        stored_hi = tl.where(row_ok, hi_c, 0)
        if UNIT:
            flat_row = flat_in_ptr + base  # int64 scalar offsets
        else:
            flat_row = flat_in_ptr + base * flat_stride
        if ONE:
            copy_tile(flat_row, pool_row, first, lo_c, hi_c, stored_hi, flat_stride, stride_col, BLOCK, UNIT, FROM_ZERO)
        elif WHILE_LOOP:
            tile = first
            while tile < hi_c:
                copy_tile(flat_row, pool_row, tile, lo_c, hi_c, stored_hi, flat_stride, stride_col, BLOCK, UNIT,
                          FROM_ZERO)
                tile += tl.num_programs(1) * BLOCK
        else:
            for tile in range(first, hi_c, tl.num_programs(1) * BLOCK):
                copy_tile(flat_row, pool_row, tile, lo_c, hi_c, stored_hi, flat_stride, stride_col, BLOCK, UNIT,
                          FROM_ZERO)


@triton.jit
def copy_tile(flat_row, pool_row, tile, lo_c, hi_c, stored_hi, flat_stride, stride_col, BLOCK: tl.constexpr,
              UNIT: tl.constexpr, FROM_ZERO: tl.constexpr):
    """Columns ``tile + [0, BLOCK)`` of the window ``[lo_c, hi_c)``: loads its tokens, stores ``pool_row[j] =
    int32(flat_row[j])`` for those below ``stored_hi`` (``hi_c``, or 0 for a row outside the pool)."""
    cols = tile + tl.arange(0, BLOCK)
    if FROM_ZERO:
        loaded = cols < hi_c
        stored = cols < stored_hi
    else:
        loaded = (cols >= lo_c) & (cols < hi_c)
        stored = (cols >= lo_c) & (cols < stored_hi)
    if UNIT:  # one scalar base per tile plus constant lane offsets, instead of a multiply per element
        flat_at = flat_row + cols
        pool_at = pool_row + cols
    else:
        flat_at = flat_row + cols * flat_stride
        pool_at = pool_row + cols * stride_col
    ids = tl.load(flat_at, mask=loaded)
    tl.store(pool_at, ids.to(tl.int32), mask=stored)


@triton.jit(do_not_specialize=["n_tokens", "n_rows", "width", "offsets_stride", "rows_stride", "stride_row"])
def scatter_req_token_ids_tiled_kernel(
    flat_in_ptr,  # *int64, N token ids, contiguous
    offsets_ptr,  # *int64, bs + 1 segment bounds, element stride offsets_stride
    rows_ptr,  # *int64, bs pool rows, element stride rows_stride
    pool_ptr,  # *int32, R x C, row stride stride_row, columns contiguous
    n_tokens,  # N
    n_rows,  # R
    width,  # C
    offsets_stride,
    rows_stride,
    stride_row,
    start_cols_ptr,  # *int64, bs first columns, element stride start_cols_stride; None unless WINDOWED
    start_cols_stride,  # None unless WINDOWED
    BLOCK: tl.constexpr,  # cells per tile
    DENSE: tl.constexpr,  # offsets_stride == rows_stride == 1, as in the strided kernel
    WINDOWED: tl.constexpr,  # start_cols given (module docstring): the row's cells from column shift
):
    """The same cells as ``scatter_req_token_ids_kernel``, for contiguous ``flat_in`` and pool rows: one program per aligned tile.

    Math (program ``(r, t)``; the window ``(row_ok, row, base, lo, hi)`` of
    request ``r`` as in the module docstring; ``row_off = row * stride_row + shift``, ``shift`` 0 unless
    ``WINDOWED``: the flat offset of the window's column ``j = 0``)::

        cell = (floor((row_off + lo) / BLOCK) + t) * BLOCK   -- a multiple of BLOCK
        col  = cell - row_off                                 -- the tile's first column
        cells cell + [0, BLOCK) are columns shift + col + [0, BLOCK) of the row:
        where lo <= j < hi:  pool_out[row, shift + j] = int32(flat_in[base + j])

    The tiles are aligned to ``BLOCK`` in the pool's flat element offsets, not
    in the row's columns (sglang's pools are ``context + 1`` wide, so rows
    start anywhere): tile 0 holds the window's first cell, and a window of
    ``hi - lo <= min(C, N)`` columns meets at most ``cdiv(min(C, N), BLOCK) +
    1`` of them (the grid's axis 1). So:

    - a tile wholly inside ``[lo, hi)`` loads and stores without a mask, and
      its stores, a multiple of ``BLOCK`` cells into a 16-byte aligned pool,
      become 16-byte vectors (the int64 loads keep 8-byte accesses: ``base +
      col`` has no known alignment);
    - a tile that meets an edge (``col < hi``; ``col > lo - BLOCK`` holds for
      every tile) writes its cells ``[first, end) = [max(lo - col, 0),
      min(hi - col, BLOCK))`` in two parts: the whole groups of 4 cells inside
      them through a mask constant over each group, so these stores are 16-byte
      vectors too, and the at most 3 cells before the first whole group and
      after the last through 8 lanes that load their tokens again (lanes of
      that part may name one cell twice, with one value);
    - a tile past ``hi`` -- every tile of an empty window, or of a row outside
      the pool, where ``hi = 0`` -- does nothing after the three scalar loads.

    Every address is an int64 scalar plus ``[0, BLOCK)``, so no ``WIDE``
    variant is needed; masks compare int32 lanes against bounds clipped to
    ``[0, BLOCK]``. Measured on the H200 (benchmarks/tune_triton.py, 2026-11-30):
    0.87-1.01x the per-request-tile baseline at 1M tokens and more, where the
    strided kernel read 1.00-1.13x in the same run; the vector stores of edge
    tiles (2026-11-30) took 0.95x the time of masked scalar ones at 4096 x
    512 and 0.98x at 1024 x 2048 (medians of five runs), the same elsewhere.
    """
    request = tl.program_id(0).to(tl.int64)
    if DENSE:  # the strides as literals: no multiply before the scalar loads
        offsets_stride = 1
        rows_stride = 1
    if WINDOWED:
        row_ok, row, base, lo, hi, shift = request_windowed(request, offsets_ptr, rows_ptr, start_cols_ptr, n_tokens,
                                                            n_rows, width, offsets_stride, rows_stride,
                                                            start_cols_stride)
        row_off = tl.where(row_ok, row, 0) * stride_row + shift
    else:
        row_ok, row, base, lo, hi = request_window(request, offsets_ptr, rows_ptr, n_tokens, n_rows, width,
                                                   offsets_stride, rows_stride)
        row_off = tl.where(row_ok, row, 0) * stride_row
    cell = tl.multiple_of(((row_off + lo) // BLOCK + tl.program_id(1)) * BLOCK, BLOCK)  # row_off + lo >= 0
    col = cell - row_off
    if (col >= lo) & (col + BLOCK <= hi):
        ids = tl.load(flat_in_ptr + (base + col) + tl.arange(0, BLOCK))
        tl.store(pool_ptr + cell + tl.arange(0, BLOCK), ids.to(tl.int32))
    elif col < hi:
        i = tl.arange(0, BLOCK)
        first = tl.maximum(lo - col, 0).to(tl.int32)
        end = tl.minimum(hi - col, BLOCK).to(tl.int32)
        head, tail = (first + 3) // 4, end // 4  # the whole groups of 4 cells: head <= group < tail
        ids = tl.load(flat_in_ptr + (base + col) + i, mask=(i >= first) & (i < end))
        group = i // 4
        tl.store(pool_ptr + cell + i, ids.to(tl.int32), mask=(group >= head) & (group < tail))
        j = tl.arange(0, 8)
        at = tl.where(j < 4, first + j, tail * 4 + j - 4)
        ends = (at >= first) & (at < end) & ((j >= 4) | (at < head * 4))
        tl.store(pool_ptr + cell + at, tl.load(flat_in_ptr + (base + col) + at, mask=ends).to(tl.int32), mask=ends)
