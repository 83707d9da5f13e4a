"""Tuning sweep for the Triton kernel (GPU): launch shapes and contiguous variants, against a same-run baseline.

    python benchmarks/tune_triton.py                  # one H200: about 2 minutes (--budget caps the sweep)
    python benchmarks/tune_triton.py --copy-floor     # the copy floor alone: about 30 s
    python benchmarks/tune_triton.py --no-floor --case 4096x512 --config tiled/1024/2 --config library/512/4
    python benchmarks/tune_triton.py --no-floor --timer chained   # the sweep in CUDA graphs, inputs warm
    TRITON_INTERPRET=1 python benchmarks/tune_triton.py --check-only   # no GPU needed

Floor (first, short): for a few cases of at most 64K tokens, an empty kernel,
``floor_kernel`` (the least any correct kernel does), the library kernel at
the launcher's shape and the baseline, timed alike; printed with each one's
excess over the empty kernel. It shows how far "at most 1 us above an empty
kernel" is from what a kernel must do at all.

Copy floor (``--copy-floor``, instead of the rest): for the cases of at least
1M tokens, the device-time target (``TARGET_RATIO`` times the baseline) beside
copies of the same bytes with and without a dependent read of the offsets
first (``copy_kernel``): where the target is below the dependent copy, no
kernel that reads a request's bounds before its tokens meets it.

Sweep: for each of CASES (or the ``--case`` ones), every config of CONFIGS, the per-request-tile
baseline (kv_canary.baseline_kernels) and a same-bytes copy (as ``kv-canary
bench`` times it: one int32 copy of 6 bytes per token) are timed with
``do_bench`` (median of one call replayed from a CUDA graph, so that the
host's launch is out of the figure; L2 flushed, warmup 10 ms, rep 40 ms) or,
with ``--timer chained``, back to back in CUDA graphs with no flush
(``kv_canary.bench.chained_us``: the regime of a captured serving step),
REPEATS rounds interleaved so that drift hits all alike (each round starting
one run later: ``kv_canary.bench.interleaved``); a figure is the median over
rounds. Printed per case: each config's us and its ratios to the baseline and
to the copy; at the end, per config, the worst and mean ratio to the baseline
over the cases of at least 1M (2**20) tokens and over all cases.

Every config (and the baseline, the floor kernel) is checked against
``scatter_reference`` once per case before timing; one that fails or raises
is reported, left out of that case's timing, and the exit status is 1.
``--check-only`` runs all of it on tiny cases with a wall clock in place of
``do_bench``: on a CPU through Triton's interpreter, to catch mistakes before
GPU time is spent. The variants' correctness on adversarial inputs is
tests/benchmarks/test_tune_triton_variants.py.

Variants (all compute the library kernel's cells -- ``request_window`` gives
``(row_ok, row, base, lo, hi)`` and a request writes exactly ``pool[row, j] =
int32(flat_in[base + j])`` for ``lo <= j < hi``, reading only ``flat_in[0,
N)``; all but ``library`` need ``flat_in`` and the pool's rows contiguous):

- ``library``: the library's strided kernel (``scatter_req_token_ids_kernel``,
  any strides), lanes looping over tiles.
- ``interior``: lanes loop over tiles aligned to BLOCK in the pool's flat
  offsets; tiles inside the window unmasked (16-byte stores), edges masked.
- ``tiled``: the same tiles, one program each (grid axis 1 = tile), no loop:
  the library's ``scatter_req_token_ids_tiled_kernel``, which the launcher
  runs for contiguous large batches since this sweep (2026-11-30), and only
  for windows of ``TILED_MIN_TILES`` tiles or more since 2026-11-30's
  chained sweep (``--timer chained``).
- ``srcaligned``: lanes loop over tiles aligned to BLOCK in ``flat_in``'s
  offsets; interior loads unmasked (16-byte int64 pairs), stores unaligned.
- ``switch``: ``interior`` when the longest window has at least
  SWITCH_COLUMNS columns, else the library kernel at the launcher's shape.
- ``flat``: programs over ``flat_in``'s tokens rather than over requests,
  the tokens loaded beside the offsets instead of after them (``flat_kernel``;
  needs the offsets and rows contiguous too).

The floor also times ``flat`` 1024/4 and the tiled kernel 1024/2 (the
launcher's kernel for contiguous large batches).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import NamedTuple

import numpy as np
import torch
import triton
import triton.language as tl

from kv_canary.baseline_kernels import launch_per_request_tile
from kv_canary.bench import chained_us as bench_chained_us, interleaved, make_inputs, parse_case, same_bytes_copy
from kv_canary_torch import triton_kernel as k
from kv_canary_torch.launch import dispatch, plan as launch_plan
from kv_canary_torch.launch.plan import launch_shape
from shared_spec.reference import longest_window, scatter_reference

# (bs, seq, ragged, aligned): pools seq + 1 wide as in sglang's benchmark; aligned ones seq wide
# (a multiple of 128). The cases of 1M tokens or more first: if the budget runs out, small ones go.
CASES = [(256, 8192, False, False), (256, 32768, False, False), (1024, 2048, False, False),
         (4096, 512, False, False), (256, 8192, True, False), (64, 32768, True, False),
         (256, 32768, False, True), (4096, 4096, False, True),
         (1, 128, False, False), (8, 8192, False, False), (64, 2048, False, False), (64, 8192, False, False),
         (256, 2048, False, False)]
FLOOR_CASES = [(1, 128, False, False), (8, 8192, False, False), (64, 512, False, False), (256, 128, False, False)]
# --check-only: tiny, but with a window long enough for interior tiles at BLOCK 2048 (4501 columns).
CHECK_CASES = [(1, 5, False, False), (3, 700, True, False), (1, 4500, False, False), (4, 256, False, True)]
BIG = 2**20  # tokens: the cases the 10% target is about
REPEATS = 5
TARGET_PROGRAMS = 4096  # lanes = min(tiles of the longest window, cdiv(TARGET_PROGRAMS, bs)), as the launcher
SWITCH_COLUMNS = 2048
# Whether the kernels run in Triton's interpreter, as a constexpr for flat_kernel (which has no inline asm there).
INTERPRETED_TUNE: tl.constexpr = tl.constexpr(k.INTERPRETED)
# copy_kernel's tile: 1024 tokens over 4 warps, 16-byte accesses both ways.
COPY_BLOCK, COPY_WARPS = 1024, 4
# The device-time target at 1M tokens and more: this times the same-run baseline.
TARGET_RATIO = 0.90


class Config(NamedTuple):
    variant: str  # a key of VARIANTS
    block: int
    warps: int

    @property
    def name(self) -> str:
        return f"{self.variant} {self.block}/{self.warps}"


CONFIGS = [
    Config("library", 256, 4), Config("library", 1024, 4), Config("library", 2048, 4),
    Config("interior", 1024, 4), Config("interior", 2048, 4),
    Config("tiled", 1024, 4), Config("tiled", 2048, 4), Config("tiled", 2048, 8),
    Config("srcaligned", 1024, 4), Config("srcaligned", 2048, 4), Config("srcaligned", 2048, 8),
    Config("switch", 1024, 4),  # interior 1024/4 from SWITCH_COLUMNS on
]

# Integer arguments are not specialized (as in the library kernel): one compile
# per config rather than one per case; no variant's code depends on them.
INTS = ["n_tokens", "n_rows", "width", "stride_row"]


@triton.jit(do_not_specialize=INTS)
def interior_kernel(flat_in_ptr, offsets_ptr, rows_ptr, pool_ptr, n_tokens, n_rows, width, stride_row, BLOCK: tl.constexpr):
    """The library kernel's math for contiguous ``flat_in`` and pool rows, 16-byte stores inside windows.

    Tiles are aligned to ``BLOCK`` in the pool's element offsets (not in each
    row's columns), so a tile that lies wholly inside the request's window is
    a run of whole 16-byte groups of an aligned pool: it is loaded and stored
    without a mask, the stores four int32 at a time. The (at most two) tiles
    at the window's edges take the masked path. Same cells as the library
    kernel: interior tiles lie in ``[lo, hi)``, edge tiles are masked to it.
    """
    request = tl.program_id(0).to(tl.int64)
    lane = tl.program_id(1)
    lanes = tl.num_programs(1)
    row_ok, row, base, lo, hi = k.request_window(request, offsets_ptr, rows_ptr, n_tokens, n_rows, width, 1, 1)
    row_off = tl.where(row_ok, row, 0) * stride_row
    for t in range((row_off + lo) // BLOCK + lane, (row_off + hi + BLOCK - 1) // BLOCK, lanes):
        cell = tl.multiple_of(t * BLOCK, BLOCK)  # the tile's first cell, from pool_ptr
        col = cell - row_off  # its column in the row (may lie before lo)
        if (col >= lo) & (col + BLOCK <= hi):
            ids = tl.load(flat_in_ptr + (base + col) + tl.arange(0, BLOCK))
            tl.store(pool_ptr + cell + tl.arange(0, BLOCK), ids.to(tl.int32))
        else:
            cols = col + tl.arange(0, BLOCK)
            mask = (cols >= lo) & (cols < hi)
            ids = tl.load(flat_in_ptr + base + cols, mask=mask)
            tl.store(pool_ptr + row_off + cols, ids.to(tl.int32), mask=mask)


@triton.jit
def range_mask(first, end, BLOCK: tl.constexpr):
    """``first <= i < end`` for ``i`` in ``[0, BLOCK)``, compared on int32 lanes (the int64 bounds clipped to ``[0, BLOCK]`` first)."""
    i = tl.arange(0, BLOCK)
    return (i >= tl.maximum(first, 0).to(tl.int32)) & (i < tl.minimum(end, BLOCK).to(tl.int32))


@triton.jit(do_not_specialize=INTS)
def srcaligned_kernel(flat_in_ptr, offsets_ptr, rows_ptr, pool_ptr, n_tokens, n_rows, width, stride_row, BLOCK: tl.constexpr):
    """``interior``'s lanes loop with tiles aligned to ``BLOCK`` in ``flat_in``'s element offsets: wide loads.

    Column ``j`` reads token ``base + j``, so the window is the tokens ``[first,
    last) = [base + lo, base + max(hi, lo))``, with ``0 <= first <= last <= N``
    (``lo = max(-base, 0)``, ``hi <= N - base``). Tiles are the aligned runs
    ``src + [0, BLOCK)``, ``src = t * BLOCK``, that meet it; lane ``p`` of ``P``
    takes every ``P``-th from the first. A tile inside the window is loaded
    unmasked -- int64 pairs, 16 bytes, as it starts a multiple of ``BLOCK``
    tokens into a 16-byte aligned ``flat_in`` -- and stored unmasked at columns
    ``src - base + [0, BLOCK)`` (no known alignment: 4-byte stores). Edge tiles
    are masked to ``[first, last)``, i.e. columns ``[lo, hi)``.
    """
    request = tl.program_id(0).to(tl.int64)
    lane = tl.program_id(1)
    lanes = tl.num_programs(1)
    row_ok, row, base, lo, hi = k.request_window(request, offsets_ptr, rows_ptr, n_tokens, n_rows, width, 1, 1)
    first = base + lo
    last = base + tl.maximum(hi, lo)  # an empty window stays empty, and every bound below is >= 0
    pool_row = pool_ptr + tl.where(row_ok, row, 0) * stride_row
    for t in range(first // BLOCK + lane, (last + BLOCK - 1) // BLOCK, lanes):
        src = tl.multiple_of(t * BLOCK, BLOCK)
        col = src - base  # the tile's first column (may lie before lo)
        if (src >= first) & (src + BLOCK <= last):
            ids = tl.load(flat_in_ptr + src + tl.arange(0, BLOCK))
            tl.store(pool_row + col + tl.arange(0, BLOCK), ids.to(tl.int32))
        else:
            mask = range_mask(first - src, last - src, BLOCK)
            ids = tl.load(flat_in_ptr + src + tl.arange(0, BLOCK), mask=mask)
            tl.store(pool_row + col + tl.arange(0, BLOCK), ids.to(tl.int32), mask=mask)


@triton.jit(do_not_specialize=INTS)
def floor_kernel(flat_in_ptr, offsets_ptr, rows_ptr, pool_ptr, n_tokens, n_rows, width, stride_row):
    """The least any correct kernel does per request, with cold caches: its three scalars, then one token.

    One program per request: ``request_window``'s three loads (offsets[r],
    offsets[r + 1], rows[r]), then, where ``lo == 0 < hi``, ``pool[row, 0] =
    int32(flat_in[base])``. Not a scatter, but it writes only what the spec
    writes: ``lo == 0`` means ``0 <= start = base``, and ``hi > 0`` means the
    row is in the pool, the segment non-empty and ``start < N``, so the spec's
    column 0 of that row is ``flat_in[start]``. Every other cell is untouched.
    """
    request = tl.program_id(0).to(tl.int64)
    row_ok, row, base, lo, hi = k.request_window(request, offsets_ptr, rows_ptr, n_tokens, n_rows, width, 1, 1)
    if (lo == 0) & (hi > 0):
        tl.store(pool_ptr + row * stride_row, tl.load(flat_in_ptr + base).to(tl.int32))


@triton.jit(do_not_specialize=["n_tokens", "bs"])
def copy_kernel(flat_in_ptr, offsets_ptr, pool_ptr, n_tokens, bs, BLOCK: tl.constexpr, DEPENDENT: tl.constexpr):
    """The scatter's bytes as one contiguous copy: ``pool.flat[i] = int32(flat_in[i])`` for ``i < N``, 16-byte accesses.

    Not a scatter: the floor of a kernel that moves the same bytes (8 read and
    4 written per token) in the most favourable layout, both sides aligned.
    ``DEPENDENT``: program ``p`` first reads ``offsets[p % bs]`` and moves its
    tokens by ``min(start, 0)`` -- 0 for the bench's batches, which the
    compiler cannot know -- so its loads wait for that read, as every kernel
    that reads a request's bounds before its tokens does (the library's, the
    baseline's). Only for batches whose offsets are all >= 0 and whose pool
    has at least ``N`` cells (every ``make_inputs`` batch): the alignment hint
    is a promise that holds only there.
    """
    p = tl.program_id(0).to(tl.int64)
    first = p * BLOCK
    if DEPENDENT:
        first += tl.minimum(tl.load(offsets_ptr + p % bs), 0)
    first = tl.multiple_of(first, BLOCK)
    i = first + tl.arange(0, BLOCK)
    if first + BLOCK <= n_tokens:
        tl.store(pool_ptr + i, tl.load(flat_in_ptr + i).to(tl.int32))
    else:
        mask = i < n_tokens
        tl.store(pool_ptr + i, tl.load(flat_in_ptr + i, mask=mask).to(tl.int32), mask=mask)


@triton.jit(do_not_specialize=INTS + ["bs"])
def flat_kernel(flat_in_ptr, offsets_ptr, rows_ptr, pool_ptr, n_tokens, n_rows, width, stride_row, bs,
                BLOCK: tl.constexpr, SPAN: tl.constexpr):
    """Tokens loaded before their request is known: program ``p`` owns the tokens ``[p * BLOCK, (p + 1) * BLOCK)``.

    Its aligned int64 loads (16-byte vectors) go out at once, beside one load of
    all ``bs + 1`` offsets and ``bs`` rows (``SPAN``, a power of two, >= ``bs +
    1``). Where the offsets are *sorted and inside* ``[0, N]`` (checked by
    every program on what it loaded), request ``r`` owns the tokens
    ``[offsets[r], offsets[r + 1])`` and token ``t`` is column ``t -
    offsets[r]`` of its row -- the spec's cells, since then ``base = start``,
    ``lo = 0`` and ``hi = min(end - start, C)``; the program stores its tokens
    for each request that meets its chunk (``r_first .. r_last``, from counts
    of the offsets). Otherwise (any unsorted or out-of-range offset) program
    ``p`` writes the requests ``p, p + G, ...`` (``G`` programs) by their
    windows, as the strided kernel does: the same cells for any values.
    Requests that name one row may write in any order: a cell both write
    holds one of their values, as the spec allows. ``bs < 2**16`` (the counts
    are packed in 16-bit fields).

    The design that could go below the copy floor of a kernel that reads a
    request's bounds before its tokens (``--copy-floor``). Measured on the H200
    (2026-11-30, ``docs/performance-notes.md``): no faster than the tiled
    kernel where ``bs <= 256``, and slower the larger ``bs``, as every program
    reads all the offsets; not taken.
    """
    p = tl.program_id(0).to(tl.int64)
    c0 = tl.multiple_of(p * BLOCK, BLOCK)
    t = c0 + tl.arange(0, BLOCK)
    q = tl.arange(0, SPAN)
    offs = tl.load(offsets_ptr + q, mask=q <= bs, other=0)
    nxt = tl.load(offsets_ptr + q + 1, mask=q < bs, other=0)
    rows = tl.load(rows_ptr + q, mask=q < bs, other=-1)
    if c0 + BLOCK <= n_tokens:  # unmasked, so the loads are 16-byte vectors
        ids = tl.load(flat_in_ptr + t)
    else:
        ids = tl.load(flat_in_ptr + t, mask=t < n_tokens, other=0)
    if not INTERPRETED_TUNE:
        # An opaque use, so that the compiler cannot sink the token loads past the offsets' checks (it did:
        # without this the loads waited for the offsets, and the kernel took 1.1-2x its time with it).
        ids = tl.inline_asm_elementwise("mov.b64 $0, $1;", "=l,l", [ids], dtype=tl.int64, is_pure=False, pack=1)
    # One reduction: the number of bad offsets (unsorted, or outside [0, N]) in bits 32 and up, and
    # how many request ends are <= c0 (r_first) and < c0 + BLOCK (r_last + 1) in two 16-bit fields.
    ends = (q >= 1) & (q <= bs)
    bad = ((q < bs) & (nxt < offs)) | ((q <= bs) & ((offs < 0) | (offs > n_tokens)))
    packed = tl.sum(tl.where(bad, 1 << 32, 0) + tl.where(ends & (offs <= c0), 1, 0)
                    + tl.where(ends & (offs < c0 + BLOCK), 1 << 16, 0))
    if (packed >> 32) == 0:
        r_first = (packed & 0xFFFF).to(tl.int32)
        r_last = tl.minimum(((packed >> 16) & 0xFFFF).to(tl.int32), bs - 1)
        for r in range(r_first, r_last + 1):
            start = tl.load(offsets_ptr + r)  # cached: every offset was just loaded
            end = tl.load(offsets_ptr + r + 1)
            row = tl.load(rows_ptr + r)
            ok = (row >= 0) & (row < n_rows)
            end = tl.where(ok, tl.minimum(end, start + width), start)  # the row's cells, up to the width
            j = t - start
            mask = (t >= start) & (t < end)
            tl.store(pool_ptr + tl.where(ok, row, 0) * stride_row + j, ids.to(tl.int32), mask=mask)
    else:
        for request in range(p, bs, tl.num_programs(0)):
            row_ok, w_row, base, lo, hi = k.request_window(request, offsets_ptr, rows_ptr, n_tokens, n_rows, width, 1, 1)
            pool_row = pool_ptr + tl.where(row_ok, w_row, 0) * stride_row
            for col in range(lo, hi, BLOCK):
                cols = col + tl.arange(0, BLOCK)
                m = cols < hi
                tl.store(pool_row + cols, tl.load(flat_in_ptr + base + cols, mask=m).to(tl.int32), mask=m)


@triton.jit
def empty_kernel(x_ptr):
    """Does nothing: do_bench's floor on this machine (as ``empty_kernel_us`` in kv_canary/bench.py)."""
    pass


# -- launchers: (flat_in, offsets, rows, pool, block, warps); nothing is launched when no cell can be written


def _sizes(flat_in, rows, pool):
    """``(bs, N, R, C)``, or None when no cell can be written (the launcher launches nothing then)."""
    sizes = (rows.shape[0], flat_in.shape[0], *pool.shape)
    return sizes if min(sizes) > 0 else None


def _contiguous_sizes(flat_in, rows, pool):
    sizes = _sizes(flat_in, rows, pool)
    assert sizes is None or flat_in.stride(0) == 1 and pool.stride(1) == 1, "a contiguous-only variant"
    return sizes


def _lanes(bs, longest, block, extra=0):
    """Lanes per request: the window's tiles (``extra`` more where tiles are not aligned to it), under TARGET_PROGRAMS."""
    return min(triton.cdiv(longest, block) + extra, triton.cdiv(TARGET_PROGRAMS, bs))


def launch_library(flat_in, offsets, rows, pool, block, warps):
    """The library kernel at launch shape (block, warps), lanes as the launcher computes them."""
    sizes = _sizes(flat_in, rows, pool)
    if sizes is None:
        return
    bs, n_tokens, n_rows, width = sizes
    longest = longest_window(width, n_tokens)
    lanes = _lanes(bs, longest, block)
    wide = width * max(pool.stride(1), flat_in.stride(0), 1) >= 2**31 or width + lanes * block >= 2**31
    k.scatter_req_token_ids_kernel[(bs, lanes)](
        flat_in, offsets, rows, pool, n_tokens, n_rows, width, flat_in.stride(0), offsets.stride(0), rows.stride(0),
        pool.stride(0), pool.stride(1), None, None, BLOCK=block, WIDE=wide,
        UNIT=flat_in.stride(0) == 1 and pool.stride(1) == 1, DENSE=offsets.stride(0) == 1 and rows.stride(0) == 1,
        ONE=lanes * block >= longest, WINDOWED=False, num_warps=warps,
    )


def _launch_aligned_loop(kernel, flat_in, offsets, rows, pool, block, warps):
    sizes = _contiguous_sizes(flat_in, rows, pool)
    if sizes is None:
        return
    bs, n_tokens, n_rows, width = sizes
    lanes = _lanes(bs, longest_window(width, n_tokens), block, extra=1)
    kernel[(bs, lanes)](flat_in, offsets, rows, pool, n_tokens, n_rows, width, pool.stride(0),
                        BLOCK=block, num_warps=warps)


def launch_interior(flat_in, offsets, rows, pool, block, warps):
    _launch_aligned_loop(interior_kernel, flat_in, offsets, rows, pool, block, warps)


def launch_srcaligned(flat_in, offsets, rows, pool, block, warps):
    _launch_aligned_loop(srcaligned_kernel, flat_in, offsets, rows, pool, block, warps)


def launch_tiled(flat_in, offsets, rows, pool, block, warps):
    sizes = _contiguous_sizes(flat_in, rows, pool)
    if sizes is None:
        return
    bs, n_tokens, n_rows, width = sizes
    tiles = triton.cdiv(longest_window(width, n_tokens), block) + 1  # alignment can add one
    assert tiles < 2**16, "grid axis 1 stops at 65535"
    # The library's tiled kernel (kv_canary_torch.triton_kernel), which came out of this sweep.
    k.scatter_req_token_ids_tiled_kernel[(bs, tiles)](
        flat_in, offsets, rows, pool, n_tokens, n_rows, width, offsets.stride(0), rows.stride(0), pool.stride(0), None, None,
        BLOCK=block, DENSE=offsets.stride(0) == 1 and rows.stride(0) == 1, WINDOWED=False, num_warps=warps,
    )


def launch_switch(flat_in, offsets, rows, pool, block, warps, columns=SWITCH_COLUMNS):
    """``interior`` at (block, warps) when the longest window has ``columns`` columns or more, else the library kernel at the launcher's shape."""
    if longest_window(pool.shape[1], flat_in.shape[0]) >= columns:
        launch_interior(flat_in, offsets, rows, pool, block, warps)
    else:
        shape = launch_shape(rows.shape[0], pool.shape[1], flat_in.shape[0])
        launch_library(flat_in, offsets, rows, pool, shape[0], shape[1])


def launch_floor(flat_in, offsets, rows, pool):
    sizes = _contiguous_sizes(flat_in, rows, pool)
    if sizes is not None:
        floor_kernel[(sizes[0],)](flat_in, offsets, rows, pool, *sizes[1:], pool.stride(0))


def launch_copy(flat_in, offsets, pool, dependent: bool, block: int = COPY_BLOCK, warps: int = COPY_WARPS):
    """``copy_kernel`` over the batch's tokens (see its docstring for the batches it is meant for)."""
    n_tokens, bs = flat_in.shape[0], offsets.shape[0] - 1
    assert pool.is_contiguous() and pool.numel() >= n_tokens and bs > 0
    copy_kernel[(triton.cdiv(n_tokens, block),)](flat_in, offsets, pool, n_tokens, bs, BLOCK=block, DEPENDENT=dependent,
                                                 num_warps=warps)


def launch_flat(flat_in, offsets, rows, pool, block, warps):
    sizes = _contiguous_sizes(flat_in, rows, pool)
    if sizes is None:
        return
    bs, n_tokens, n_rows, width = sizes
    assert offsets.stride(0) == 1 and rows.stride(0) == 1, "a contiguous-only variant"
    assert bs < 2**16, "flat_kernel packs request counts in 16 bits"
    span = max(16, triton.next_power_of_2(bs + 1))
    flat_kernel[(triton.cdiv(n_tokens, block),)](flat_in, offsets, rows, pool, n_tokens, n_rows, width, pool.stride(0), bs,
                                                 BLOCK=block, SPAN=span, num_warps=warps)


VARIANTS = {
    "library": launch_library, "interior": launch_interior, "tiled": launch_tiled,
    "srcaligned": launch_srcaligned, "switch": launch_switch, "flat": launch_flat,
}


def run_config(config: Config, inputs, pool) -> None:
    VARIANTS[config.variant](*inputs[:3], pool, config.block, config.warps)


# -- checks and timing


def problem_with(launch, inputs, expected, partial=False) -> str | None:
    """None if ``launch(pool)`` on a copy of ``inputs``' pool leaves ``expected``, else what went wrong.

    ``partial``: every cell it changes must hold ``expected``'s value (the floor kernel writes a subset).
    """
    pool = inputs[3].clone()
    try:
        launch(pool)
        got = pool.cpu().numpy()
    except Exception as error:  # a variant that does not compile: reported, the others still run
        return f"raised {type(error).__name__}: {str(error)[-300:]}"
    wrong = got != expected
    if partial:
        wrong &= got != inputs[3].cpu().numpy()
    if wrong.any():
        return f"{int(wrong.sum())} cells differ from the reference, first at {np.argwhere(wrong)[0].tolist()}"
    return None


def checked_runs(case, launches: dict, inputs, expected, pool, failures: list, partial=()) -> dict:
    """``{name: run}`` for each of ``launches`` (``name -> launch(pool)``) that leaves ``expected`` (``problem_with``).

    Each run launches on ``pool``; a launch that fails its check is printed
    and appended to ``failures`` as ``(case, label, problem)`` instead (a
    ``Config`` name is labelled by its ``.name``). The names in ``partial``
    are checked as writing a subset (the floor kernel).
    """
    runs = {}
    for name, launch in launches.items():
        problem = problem_with(launch, inputs, expected, partial=name in partial)
        if problem:
            label = getattr(name, "name", name)
            failures.append((case, label, problem))
            print(f"  CHECK FAILED {case} {label}: {problem}", flush=True)
        else:
            runs[name] = lambda launch=launch: launch(pool)
    return runs


def bench_us(fn) -> float:
    """Device us of one call: do_bench's median (it flushes the L2 before each call) of ``fn`` replayed from a CUDA graph.

    Replayed, so that every run costs the host the same few microseconds: the
    configs are launched from Python (``kernel[grid]``, tens of microseconds on
    the host with Triton 3.6), and launched directly their figures were
    host-bound up to 2M tokens (16-25 us where the baseline read 5-13,
    2026-12-01) instead of measuring their kernels.
    """
    fn()  # nothing compiles during capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=10, rep=40, return_mode="median") * 1e3


def chained_us(fn) -> float:
    """Device us of one call in a chain (``--timer chained``): CUDA graphs of 16 calls and of 1, no flush (kv_canary.bench)."""
    return bench_chained_us(torch, {"fn": fn})["fn"]


def wall_us(fn) -> float:
    """Wall us of one call (``--check-only``: exercises the report, measures nothing of interest)."""
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e6


def case_inputs(case, device):
    host = make_inputs(*case[:3], aligned=case[3])
    return host, scatter_reference(*host), tuple(torch.from_numpy(x).to(device) for x in host)


def floor(cases, device, timer, rounds: int) -> list:
    """The latency floor at small sizes (module docstring); returns the failed checks."""
    failures = []
    scratch = torch.empty(1, device=device)
    tiled_block, tiled_warps = launch_plan.LARGE[0], launch_plan.TILED_WARPS  # the launcher's tiled kernel
    print("latency floor: device us, and in brackets the excess over the empty kernel", flush=True)
    for case in cases:
        host, expected, inputs = case_inputs(case, device)
        block, warps = launch_shape(host[2].shape[0], host[3].shape[1], host[0].shape[0])[:2]
        launches = {  # name -> launch(pool)
            "floor": lambda p: launch_floor(*inputs[:3], p),
            f"library {block}/{warps}": lambda p: launch_library(*inputs[:3], p, block, warps),
            "baseline": lambda p: launch_per_request_tile(*inputs[:3], p),
            "flat 1024/4": lambda p: launch_flat(*inputs[:3], p, 1024, 4),
            f"tiled {tiled_block}/{tiled_warps}": lambda p: launch_tiled(*inputs[:3], p, tiled_block, tiled_warps),
        }
        pool = inputs[3].clone()
        runs = {"empty": lambda: empty_kernel[(1,)](scratch)}
        runs |= checked_runs(case, launches, inputs, expected, pool, failures, partial=("floor",))
        med = interleaved(runs, timer, rounds)
        empty = med["empty"]
        print(f"  {case} {host[0].shape[0]} tokens: empty {empty:.2f}; "
              + ", ".join(f"{name} {us:.2f} (+{us - empty:.2f})" for name, us in med.items() if name != "empty"),
              flush=True)
    return failures


def copy_floor(cases, device, timer, rounds: int, big_tokens: int = BIG) -> list:
    """What bounds the scatter at large sizes: copies of its bytes beside the library and the baseline; returns the failed checks.

    Per case of at least ``big_tokens`` tokens, interleaved: an empty kernel, the same-bytes torch copy (as
    ``kv-canary bench`` times it), ``copy_kernel`` (the bytes in the scatter's
    own types, aligned both ways), the same after a dependent read of the
    offsets, the library launcher and the per-request-tile baseline. Printed
    with ``TARGET_RATIO`` times the baseline, the time the target allows: where
    that is below a copy's, no kernel meets the target in this run's method.
    """
    failures = []
    scratch = torch.empty(1, device=device)
    print(f"copy floor: device us; target = {TARGET_RATIO} x baseline", flush=True)
    for case in cases:
        host, expected, inputs = case_inputs(case, device)
        tokens = host[0].shape[0]
        if tokens < big_tokens:
            continue
        flat_in, offsets, rows = inputs[:3]
        pool = inputs[3].clone()
        runs = {"empty": lambda: empty_kernel[(1,)](scratch), "torch copy": same_bytes_copy(torch, tokens, device),
                "copy": lambda: launch_copy(flat_in, offsets, pool, False),
                "dependent copy": lambda: launch_copy(flat_in, offsets, pool, True)}
        launches = {"library": lambda p: dispatch.launch(flat_in, offsets, rows, p),
                    "baseline": lambda p: launch_per_request_tile(flat_in, offsets, rows, p)}
        runs |= checked_runs(case, launches, inputs, expected, pool, failures)
        copied = pool.clone()
        launch_copy(flat_in, offsets, copied, True)
        if not np.array_equal(copied.view(-1)[:tokens].cpu().numpy(), host[0].astype(np.int32)):
            failures.append((case, "dependent copy", "wrong cells"))
        med = interleaved(runs, timer, rounds)
        line = f"  {case} {tokens} tokens: " + ", ".join(f"{name} {us:.2f}" for name, us in med.items())
        if "baseline" in med:
            target = TARGET_RATIO * med["baseline"]
            line += f"; target {target:.2f}, target - dependent copy {target - med['dependent copy']:+.2f}"
            line += f", target - torch copy {target - med['torch copy']:+.2f}"
        print(line, flush=True)
    return failures


def sweep(cases, device, timer, rounds: int, deadline: float, big_tokens: int = BIG, configs=tuple(CONFIGS)) -> list:
    """The sweep (module docstring): per-case lines, then the summary; returns the failed checks.

    The summary's first group is the cases of at least ``big_tokens`` tokens.
    Cases not started by ``deadline`` (perf_counter seconds) are skipped, so
    that a slow machine still prints the summary of those done.
    """
    failures = []
    ratios = {}  # case -> config -> ratio to the baseline
    big = set()  # cases of at least big_tokens tokens
    for case in cases:
        if time.perf_counter() > deadline:
            print(f"budget spent: {case} and the cases after it skipped", flush=True)
            break
        host, expected, inputs = case_inputs(case, device)
        tokens = host[0].shape[0]
        pool = inputs[3].clone()
        runs = checked_runs(case, {"baseline": lambda p: launch_per_request_tile(*inputs[:3], p)}, inputs, expected, pool,
                            failures)
        if not runs:  # no ratios without the baseline: the case is skipped
            continue
        runs["copy"] = same_bytes_copy(torch, tokens, device)
        runs |= checked_runs(case, {c: lambda p, c=c: run_config(c, inputs, p) for c in configs}, inputs, expected, pool,
                             failures)
        med = interleaved(runs, timer, rounds)
        base, copy = med["baseline"], med["copy"]
        timed = [c for c in configs if c in med]
        ratios[case] = {c: med[c] / base for c in timed}
        if tokens >= big_tokens:
            big.add(case)
        chosen = launch_shape(case[0], host[3].shape[1], tokens)
        print(f"{case} {tokens} tokens, width {host[3].shape[1]}: baseline {base:.2f} us, copy {copy:.2f} us "
              f"(baseline / copy {base / copy:.2f}); the launcher's shape: library {chosen[0]}/{chosen[1]}", flush=True)
        for c in timed:
            print(f"  {c.name:<18} {med[c]:8.2f} us  {med[c] / base:5.2f} x baseline  {med[c] / copy:5.2f} x copy")
        if timed:
            best = min(timed, key=med.get)
            print(f"  best: {best.name} {med[best] / base:.2f} x baseline", flush=True)
    print(f"\nsummary: ratio to the same-run baseline, worst / mean (cases) over the {len(big)} cases of >= {big_tokens} tokens "
          f"| over all {len(ratios)} cases")
    for c in configs:
        line = f"  {c.name:<18}"
        for group in (big, ratios):
            values = [ratios[case][c] for case in group if c in ratios[case]]
            line += f" | {max(values):5.3f} / {statistics.mean(values):5.3f} ({len(values)})" if values else " | -"
        print(line)
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check-only", action="store_true",
                        help="tiny cases, wall-clock timing: every check and the report, on a CPU with TRITON_INTERPRET=1")
    parser.add_argument("--budget", type=float, default=200.0,
                        help="seconds from the start after which no new sweep case begins (default 200)")
    parser.add_argument("--config", action="append", metavar="VARIANT/BLOCK/WARPS",
                        help="sweep these configs (e.g. tiled/512/2) instead of CONFIGS; repeatable")
    parser.add_argument("--no-floor", action="store_true", help="skip the latency floor")
    parser.add_argument("--case", action="append", metavar="BSxSEQ[r][a]",
                        help="time these cases instead of CASES (e.g. 4096x512, 256x8192r; suffix a: rows seq wide)")
    parser.add_argument("--timer", choices=("flushed", "chained"), default="flushed",
                        help="flushed: do_bench with the L2 flushed before each call (the bench's method, default); "
                             "chained: CUDA graphs of back-to-back calls, inputs warm (a captured serving step)")
    parser.add_argument("--copy-floor", action="store_true",
                        help="only the copy floor of the cases of >= 1M tokens (copy_floor), no sweep")
    args = parser.parse_args(argv)
    configs = CONFIGS
    if args.config:
        configs = [Config(v, int(b), int(w)) for v, b, w in (text.split("/") for text in args.config)]
        unknown = {c.variant for c in configs} - set(VARIANTS)
        if unknown:
            parser.error(f"unknown variants {sorted(unknown)}; known: {sorted(VARIANTS)}")
    start = time.perf_counter()
    if k.INTERPRETED:
        if not args.check_only:
            print("the kernels are interpreted (TRITON_INTERPRET=1): only --check-only makes sense")
            return 2
        device = "cpu"
    elif not torch.cuda.is_available():
        print("no CUDA GPU: run with TRITON_INTERPRET=1 and --check-only")
        return 2
    else:
        device = "cuda"
    if args.check_only:
        timer, cases, floor_cases, rounds, big = wall_us, CHECK_CASES, CHECK_CASES[:2], 2, 1000
    else:
        timer = chained_us if args.timer == "chained" else bench_us
        cases, floor_cases, rounds, big = CASES, FLOOR_CASES, REPEATS, BIG
    if args.case:
        cases = [parse_case(text) for text in args.case]
    if args.copy_floor:
        failures = copy_floor(cases, device, timer, rounds, big)
    else:
        failures = [] if args.no_floor else floor(floor_cases, device, timer, rounds)
        failures += sweep(cases, device, timer, rounds, deadline=start + args.budget, big_tokens=big, configs=configs)
    for case, name, problem in failures:
        print(f"CHECK FAILED {case} {name}: {problem}")
    print(f"done in {time.perf_counter() - start:.0f} s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
