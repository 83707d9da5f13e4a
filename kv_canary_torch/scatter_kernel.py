"""The Triton kernels of ``scatter_req_token_ids``: ``scatter_kernel`` (any strides; program ``(r, p)`` is lane ``p``
of request ``r``'s window) and ``scatter_tiled_kernel`` (large batches of contiguous tokens and pool columns).

Import it only when a Triton launch is about to happen: ``@triton.jit`` reads ``TRITON_INTERPRET`` as this module
is imported, and ``INTERPRETED`` records which mode the kernels got.

Math (``P`` lanes on grid axis 1; ``s = start_cols[r]``, 0 unless ``WINDOWED``)::

    start, end, row = offsets[r], offsets[r + 1], req_pool_indices[r]
    base, lo, hi = shared_spec.reference.window(start, end, s, C, N)       (``window``, transcribed)
    the tiles lo + (p + k * P) * BLOCK + [0, BLOCK), k = 0, 1, ..., below hi:
        each column c < hi of the tile: pool_out[row, c] = int32(flat_in[base + c])    (its low 32 bits)
    nothing where row is outside [0, R)

The usual request (``0 <= start <= end <= N`` and ``0 <= s <= C``) takes a short branch, ``(base, lo, hi) =
(start - s, s, s + min(end - start, C - s))``: there ``t0, t1 = start, end`` and ``d = start - s`` lies in ``[-C,
N]`` without wrapping, so ``window`` gives ``base = d``, ``lo = clip(s, 0, C) = s`` and ``hi = clip(end - start + s,
0, C)``, which is that ``hi`` since ``end - start + s >= 0``.

Bounds: ``window`` gives ``0 <= lo <= hi <= C`` and ``base + c`` in ``[0, N)`` for ``lo <= c < hi``, so every load
reads inside ``flat_in``, and every store writes a column of row ``row``, which the row test keeps in ``[0, R)``.
``hi - lo <= min(C, N)``, so where ``ONE`` (the launch's ``P * BLOCK >= min(C, N)``) tile ``p`` is the lane's only
one. Columns, token indices and addresses are int64: none wraps for tensors that fit in memory. Integer parameters
are int64 by annotation and never specialized, pointers never on their alignment but the tiled kernel's pool, which
``launch`` hands it 16-byte aligned only (its cache relies on it).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

INTS = ("n_tokens", "n_rows", "width", "flat_stride", "offsets_stride", "rows_stride", "start_cols_stride",
        "stride_row", "stride_col")
POINTERS = ("flat_in_ptr", "offsets_ptr", "rows_ptr", "pool_ptr", "start_cols_ptr")
CONSTEXPRS = ("BLOCK", "ONE", "WINDOWED", "UNIT")
TILED_INTS = ("n_tokens", "n_rows", "width", "offsets_stride", "rows_stride", "stride_row")


@triton.jit
def window(start, end, first_col, width, n_tokens):
    """``shared_spec.reference.window`` on int64 scalars or vectors, exact in wrapping int64: ``(base, lo, hi)``."""
    t0 = tl.where(start < 0, 0, tl.where(start > n_tokens, n_tokens, start))
    t1 = tl.where(end < t0, t0, tl.where(end > n_tokens, n_tokens, end))
    d = start - first_col
    wrapped = ((start ^ first_col) & (start ^ d)) < 0
    clipped = tl.where(d < -width, -width, tl.where(d > n_tokens, n_tokens, d))
    base = tl.where(wrapped & (start < 0), -width, tl.where(wrapped, n_tokens, clipped))
    lo = tl.where(t0 - width >= base, width, tl.where(t0 < base, 0, t0 - base))
    hi = tl.where(t1 - width >= base, width, tl.where(t1 < base, 0, t1 - base))
    return base, lo, hi


INTERPRETED = isinstance(window, InterpretedFunction)


@triton.jit
def request_window(start, end, s, width, n_tokens):
    """``window``, with the usual request's short branch (the module docstring)."""
    if (start >= 0) & (start <= end) & (end <= n_tokens) & (s >= 0) & (s <= width):
        base = start - s
        lo = s
        hi = s + tl.minimum(end - start, width - s)
    else:
        base, lo, hi = window(start, end, s, width, n_tokens)
    return base, lo, hi


@triton.jit
def copy_tile(flat_at, pool_at, tile, hi, stored_hi, flat_stride, stride_col, BLOCK: tl.constexpr,
              UNIT: tl.constexpr):
    """Columns ``tile + i``, ``i`` in ``[0, BLOCK)``: ``pool_at[c] = int32(flat_at[c])``, loaded below ``hi``,
    stored below ``stored_hi`` (``hi``, or ``lo`` for a row outside the pool: nothing). The masks compare int32
    ``i`` with the counts clamped to ``[0, BLOCK]``; ``UNIT`` (both strides 1) adds ``i`` to the pointers unscaled."""
    i = tl.arange(0, BLOCK)
    loaded = tl.maximum(tl.minimum(hi - tile, BLOCK), 0).to(tl.int32)
    stored = tl.maximum(tl.minimum(stored_hi - tile, BLOCK), 0).to(tl.int32)
    if UNIT:
        ids = tl.load(flat_at + tile + i, mask=i < loaded)
        tl.store(pool_at + tile + i, ids.to(tl.int32), mask=i < stored)
    else:
        cols = tile + i
        ids = tl.load(flat_at + cols * flat_stride, mask=i < loaded)
        tl.store(pool_at + cols * stride_col, ids.to(tl.int32), mask=i < stored)


@triton.jit(do_not_specialize=INTS, do_not_specialize_on_alignment=POINTERS)
def scatter_kernel(
    flat_in_ptr,  # *int64, N token ids
    offsets_ptr,  # *int64, bs + 1 segment bounds
    rows_ptr,  # *int64, bs pool rows
    pool_ptr,  # *int32, R x C
    start_cols_ptr,  # *int64, bs first columns; None unless WINDOWED
    n_tokens: tl.int64, n_rows: tl.int64, width: tl.int64,  # N, R, C
    flat_stride: tl.int64, offsets_stride: tl.int64, rows_stride: tl.int64, start_cols_stride: tl.int64,
    stride_row: tl.int64, stride_col: tl.int64,  # element strides
    BLOCK: tl.constexpr,  # columns a tile
    ONE: tl.constexpr,  # P * BLOCK >= min(C, N): one tile a lane, no loop
    WINDOWED: tl.constexpr,  # start_cols given
    UNIT: tl.constexpr,  # flat_stride == stride_col == 1
):
    # Interpreted, an int is int32 or int64 by its value; compiled, int64 by annotation (a no-op here).
    n_tokens = n_tokens.to(tl.int64)
    n_rows = n_rows.to(tl.int64)
    width = width.to(tl.int64)
    r = tl.program_id(0).to(tl.int64)  # requests on axis 0: up to 2**31 - 1 programs
    start = tl.load(offsets_ptr + r * offsets_stride)
    end = tl.load(offsets_ptr + (r + 1) * offsets_stride)
    row = tl.load(rows_ptr + r * rows_stride)  # beside the offsets: one round trip to memory, not two
    if WINDOWED:
        s = tl.load(start_cols_ptr + r * start_cols_stride)
    else:
        s = tl.zeros((), tl.int64)
    base, lo, hi = request_window(start, end, s, width, n_tokens)
    first = lo + tl.program_id(1) * BLOCK
    if first < hi:
        row_ok = (row >= 0) & (row < n_rows)
        flat_at = flat_in_ptr + base * flat_stride
        pool_at = pool_ptr + tl.where(row_ok, row, 0) * stride_row
        stored_hi = tl.where(row_ok, hi, lo)
        if ONE:
            copy_tile(flat_at, pool_at, first, hi, stored_hi, flat_stride, stride_col, BLOCK, UNIT)
        else:
            for tile in range(first, hi, tl.num_programs(1).to(tl.int64) * BLOCK):
                copy_tile(flat_at, pool_at, tile, hi, stored_hi, flat_stride, stride_col, BLOCK, UNIT)


@triton.jit(do_not_specialize=TILED_INTS, do_not_specialize_on_alignment=POINTERS[:3])
def scatter_tiled_kernel(
    flat_in_ptr,  # *int64, N token ids, contiguous
    offsets_ptr,  # *int64, bs + 1 segment bounds
    rows_ptr,  # *int64, bs pool rows
    pool_ptr,  # *int32, R x C, columns contiguous, 16-byte aligned (launch checks it)
    n_tokens: tl.int64, n_rows: tl.int64, width: tl.int64,
    offsets_stride: tl.int64, rows_stride: tl.int64, stride_row: tl.int64,
    BLOCK: tl.constexpr,  # cells a tile
):
    """The same cells as ``scatter_kernel`` (unwindowed), one program per tile of ``BLOCK`` cells aligned in the
    pool's flat element offsets: program ``(r, t)`` with ``row_off = row * stride_row``::

        cell = (floor((row_off + lo) / BLOCK) + t) * BLOCK     a multiple of BLOCK: 16-byte aligned in the pool
        col  = cell - row_off                                   the tile's first column
        where lo <= col + i < hi:  pool[cell + i] = int32(flat_in[base + col + i]),  i in [0, BLOCK)

    Tile 0 holds the window's first cell, and a window of ``hi - lo <= min(C, N)`` columns meets at most
    ``cdiv(min(C, N), BLOCK) + 1`` tiles (grid axis 1). A tile inside ``[lo, hi)`` loads and stores unmasked: its
    stores are 16-byte vectors. An edge tile stores its whole groups of 4 cells through a mask constant over each
    group (vectors too) and the at most 3 cells at each end through 8 lanes that load their tokens again. A tile
    past ``hi`` (every tile of an empty window, or of a row outside the pool, where ``hi = lo``) stops after the
    scalar loads. Bounds: every cell stored is a column of ``[lo, hi)`` of a row in ``[0, R)``, every token read
    lies in ``[0, N)`` (``window``'s bounds).
    """
    r = tl.program_id(0).to(tl.int64)
    n_tokens = n_tokens.to(tl.int64)
    width = width.to(tl.int64)
    start = tl.load(offsets_ptr + r * offsets_stride)
    end = tl.load(offsets_ptr + (r + 1) * offsets_stride)
    base, lo, hi = request_window(start, end, tl.zeros((), tl.int64), width, n_tokens)
    row = tl.load(rows_ptr + r * rows_stride)
    row_ok = (row >= 0) & (row < n_rows)
    hi = tl.where(row_ok, hi, lo)
    row_off = tl.where(row_ok, row, 0) * stride_row
    cell = tl.multiple_of(((row_off + lo) // BLOCK + tl.program_id(1)) * BLOCK, BLOCK)  # row_off + lo >= 0
    col = cell - row_off
    i = tl.arange(0, BLOCK)
    if (col >= lo) & (col + BLOCK <= hi):
        tl.store(pool_ptr + cell + i, tl.load(flat_in_ptr + (base + col) + i).to(tl.int32))
    elif col < hi:
        first = tl.maximum(lo - col, 0).to(tl.int32)
        last = tl.minimum(hi - col, BLOCK).to(tl.int32)
        head, tail = (first + 3) // 4, last // 4  # the whole groups of 4 cells: head <= group < tail
        ids = tl.load(flat_in_ptr + (base + col) + i, mask=(i >= first) & (i < last))
        group = i // 4
        tl.store(pool_ptr + cell + i, ids.to(tl.int32), mask=(group >= head) & (group < tail))
        j = tl.arange(0, 8)
        at = tl.where(j < 4, first + j, tail * 4 + j - 4)
        ends = (at >= first) & (at < last) & ((j >= 4) | (at < head * 4))
        tl.store(pool_ptr + cell + at, tl.load(flat_in_ptr + (base + col) + at, mask=ends).to(tl.int32), mask=ends)
