"""The launch rule of the Triton backend: which kernel, which launch shape, which grid and which ints, from shapes and strides.

Contract: ``plan(bs, n_tokens, n_rows, width, stride_row, stride_col,
flat_stride, offsets_stride, rows_stride, device, windowed=False, rule=RULE) -> Plan`` (``NOTHING`` when
no cell can be written: ``bs``, ``N``, ``R`` or ``C`` is 0) is a pure
function of its integers, a few integer operations; it reads no data and
keeps nothing, so a serving step whose ``N`` and ``bs`` change every call
costs the same as a repeated one. ``Plan.variant`` names the compiled kernel
the launch needs (one per device, kernel, launch shape and constexprs: a
handful in all); ``Plan.slot`` is its index among the ``SLOTS`` variants one
argument signature can need, which the C call path fills per signature.

The numbers live here once: ``Rule`` (``RULE``: this module's constants) and
the slots. The C call path (``native.cpp``'s ``plan_launch``, the same few
integer operations in C) takes them by name from ``native_config`` when it is
configured, and is tested equal to this rule at every boundary.

Two kernels (``kv_canary_torch.triton_kernel``):

- ``tiled`` (``scatter_req_token_ids_tiled_kernel``): where ``flat_in`` and
  the pool's columns are contiguous, the batch is large (the ``LARGE``
  shape's tiles, over ``TILED_WARPS`` warps) and has at least
  ``TILED_MIN_TOKENS`` tokens, a window may span at least
  ``TILED_MIN_TILES`` tiles (``cdiv(min(C, N), BLOCK)``), the batch is full
  (``N`` at least ``TILED_FILL`` percent of ``bs * min(C, N)``, the cells its
  grid ``(bs, cdiv(min(C, N), BLOCK) + 1)`` covers: a ragged, skewed or decode
  batch leaves most of such a grid idle) and the grid fits CUDA's axis 1
  (65535): one program per aligned tile, no loop, unmasked 16-byte stores
  inside windows;
- ``lanes`` (``scatter_req_token_ids_kernel``): everything else, any strides;
  compiled with ``UNIT`` (no stride multiply per element) where ``flat_in``
  and the pool's columns are contiguous, ``WIDE`` (int64 column offsets)
  where a column index times a stride, or the last lane's tile, could pass
  2**31, and ``ONE`` (no tile loop) where the lanes cover the longest window,
  ``lanes * BLOCK >= min(C, N)``: every ``SMALL`` launch (``Rule.checked`` checks
  that ``SMALL_CELLS`` guarantees it) and every ``LARGE`` one but batches of
  more than ``TARGET_PROGRAMS`` tiles.

Both kernels take ``WINDOWED`` where the call passes ``start_cols`` (one more
scalar load a program, the window shifted; ``windowed=True``): a variant of its
own, in the same slot: a windowed call has a signature of its own, whose
slots hold the windowed kernels.

Both kernels take ``DENSE`` where ``offsets`` and ``req_pool_indices`` are
contiguous (every serving step's): no stride multiply before their loads.
``UNIT`` and ``DENSE`` follow from strides, so they are fixed per argument
signature and add no slot.

Requests go on axis 0, which CUDA allows up to 2**31 - 1 (axes 1 and 2 stop
at 65535), so there is no cap on ``bs`` below that. In the ``lanes`` kernel
each request's columns are shared by ``lanes`` programs that stride through
them tile by tile, so any width is covered by any lane count and the lane
count is a pure speed choice:

- a request never writes more than ``min(C, N)`` cells, so more than
  ``cdiv(min(C, N), BLOCK)`` lanes would only add programs with nothing to do
  (decode steps, one token per request, get one lane);
- with many requests, ``cdiv(TARGET_PROGRAMS, bs)`` lanes per request keep the
  programs that exit at once (short requests) from outnumbering the work, while
  one long request alone still gets up to ``TARGET_PROGRAMS`` lanes.

``small_ints``: every integer argument, and ``bs`` (grid axis 0), fits
int32. Triton passes an int as i32 when it fits and i64 otherwise, a
different compiled kernel; the remembered kernels and the call path take
only the i32 one, and a plan with a larger int launches through Triton's
generic path.
"""

from __future__ import annotations

from typing import NamedTuple

from shared_spec.checks import MAX_REQUESTS
from shared_spec.reference import longest_window

# Launch shapes, from benchmarks/tune_triton.py on the H200 (interleaved
# rounds against the same-run per-request-tile baseline): (BLOCK, num_warps,
# TARGET_PROGRAMS). A batch whose requests together span at most
# SMALL_CELLS columns is latency-bound: 256-column tiles (2 tokens a thread)
# finish soonest. Everything larger streams best from 1024-column tiles over
# 4 warps (8 tokens a thread), at most ~4096 programs. Across the grid these
# measured 0.87x to 1.02x the baseline's device time (ratios of medians).
SMALL_CELLS = 16384
SMALL = (256, 4, 4096)
LARGE = (1024, 4, 4096)
# The lanes kernel's ONE (each lane one tile, no loop), with the row loaded after the lane's test: chained in CUDA
# graphs 0.94-1.03x the baseline where the loop with the row first took 0.97-1.06x, flushed 0.95-0.99x where it took
# 0.95-1.02x (tune_triton.py-style sweeps on the H200, 2026-12-01, two runs of 5 interleaved rounds, at the 8
# batches of 128K-2M tokens on this kernel and two skewed workloads). Each change alone bought less (the late row
# 0.96-1.04x chained, ONE 0.95-1.05x), and a per-program branch between one tile and the loop, in place of ONE,
# 0.96-1.02x: docs/performance-notes.md, "The lanes kernel".
# The tiled kernel runs LARGE's 1024-cell tiles over 2 warps (16 tokens a
# thread, twice the loads in flight per thread). tune_triton.py, one H200, 5
# interleaved rounds (2026-11-30), ratio to the baseline at the 8 cases of
# 1M tokens or more, 2 warps / 4 warps: worst 0.98 / 1.06, mean 0.93 / 0.96;
# 2 warps faster at 6 of the 8 cases.
TILED_WARPS = 2
# The tiled kernel only where a window may span this many tiles or more. On
# shorter windows (sglang's 513- and 2049-column rows) the lanes kernel matched
# it with the L2 flushed before each call and beat it chained in a CUDA graph,
# inputs warm: tune_triton.py on one H200 (2026-11-30), ratio to the
# same-run baseline, tiled / lanes, medians of three flushed runs, then chained:
# 4096 x 512 0.96 / 0.98, 1.34 / 1.14; 1024 x 2048 1.00 / 1.00, 1.11 / 1.03;
# 256 x 2048 0.98 / 0.90, 1.21 / 1.06; 64 x 2048 1.01 / 0.96, 1.04 / 0.99.
# From 8193 columns on the tiled kernel was ahead flushed (256 x 8192 0.94 /
# 1.01, ragged 0.97 / 1.00 and 0.94 / 0.99). With the lanes kernel's UNIT
# specialization since, two flushed runs and one chained: 4096 x 512 0.90, 0.98 /
# 0.98, 1.03, chained 1.31 / 1.01; 1024 x 2048 0.95, 1.01 / 1.22 (an outlier),
# 1.04, chained 1.15 / 1.03; 256 x 32768 0.94, 0.96 / 1.02, 1.02, chained 0.96 / 1.04.
TILED_MIN_TILES = 4
# The tiled kernel only for full batches: N at least this percent of bs * min(C, N)
# (the host knows N, bs and C without a sync). Measured on the H200 (2026-12-01,
# tune_triton.py, ratio to the same-run baseline chained in CUDA graphs, tiled / lanes):
# ragged 256 x 8192 (fill 0.52) 1.12 / 1.03, ragged 64 x 32768 (0.51) 1.17 / 1.05; full
# 256 x 32768 0.96 / 1.04, 256 x 8192 1.01 / 1.01. Every batch this sends to the lanes
# kernel has fewer tokens than a quarter of its tiled grid's cells, so this also bounds
# the tiled grid's idle programs (it replaced a cap of 4 programs per tile of tokens).
TILED_FILL = 75
# The tiled kernel only from this many tokens (12 bytes each: 48 MB, about the H200's 50 MB L2). Below it, run back
# to back in a CUDA graph the batch stays in L2 from call to call and the tiled kernel's extra edge tile per request
# costs more than its 16-byte stores save; with the L2 flushed the two kernels were within 0.03 of each other there.
# benchmarks/tune_triton.py on the H200 (2026-12-01, 5 interleaved rounds, flushed figures replayed from CUDA
# graphs), ratio to the same-run baseline chained, tiled / lanes: 64 x 8192 1.08 / 0.99, 128 x 4096 1.10 / 0.99,
# 128 x 8192 1.06 / 0.97, 32 x 32768 1.12 / 0.97, 64 x 16384 1.01 / 0.97, 192 x 8192 0.99 / 0.96, 512 x 4096
# 1.08 / 1.01, 256 x 8192 0.99 / 1.01 (the one case below it where tiled led); from it, 1024 x 4096 0.97 / 1.05,
# 256 x 32768 0.97 / 1.05, and flushed 0.93 / 0.99, 0.94 / 1.01.
TILED_MIN_TOKENS = 2**22
# CUDA's grid axis 1 (the tiled kernel's tiles per request) stops here.
GRID_AXIS_1 = 65535
INT32_END = 2**31
TILED, LANES = "tiled", "lanes"
# Each kernel's constexpr parameters, in the order of a plan's ``constexprs``.
TILED_CONSTEXPRS = ("BLOCK", "DENSE", "WINDOWED")
LANES_CONSTEXPRS = ("BLOCK", "WIDE", "UNIT", "DENSE", "ONE", "WINDOWED")
# The variants one argument signature can need, by slot: the lanes kernel with ONE
# in the SMALL and LARGE shapes, each narrow and WIDE (0-3: 2 * large + wide); the LARGE lanes kernel
# with its loop, narrow and WIDE (LOOP_SLOT + wide); the tiled kernel (device, UNIT and DENSE
# follow from the signature). The C call path takes these numbers from ``native_config``.
SLOTS = 7
LOOP_SLOT = 4
TILED_SLOT = 6


class Rule(NamedTuple):
    """The launch rule's numbers: ``RULE`` (this module's constants) unless a caller plans under another one.

    ``dispatch.use_rule`` hands one to both the Python rule and the C call path (tests use small tiles)."""

    small_cells: int = SMALL_CELLS
    small_block: int = SMALL[0]
    large_block: int = LARGE[0]
    warps: int = LARGE[1]  # SMALL's and LARGE's
    target_programs: int = LARGE[2]  # SMALL's and LARGE's
    tiled_warps: int = TILED_WARPS
    tiled_min_tokens: int = TILED_MIN_TOKENS
    tiled_min_tiles: int = TILED_MIN_TILES
    tiled_fill: int = TILED_FILL

    @property
    def small(self) -> tuple[int, int, int]:
        return (self.small_block, self.warps, self.target_programs)

    @property
    def large(self) -> tuple[int, int, int]:
        return (self.large_block, self.warps, self.target_programs)

    def checked(self) -> "Rule":
        """This rule, or ValueError where its numbers break what the slots assume."""
        if min(self.small_block, self.large_block, self.warps, self.target_programs, self.tiled_warps) < 1:
            raise ValueError("the rule's blocks, warps and target must be positive")
        if self.small_block == self.large_block:
            raise ValueError("SMALL and LARGE must differ in BLOCK (the slots tell them apart by it)")
        # bs * window <= SMALL_CELLS <= BLOCK * target gives cdiv(window, BLOCK) <= cdiv(target, bs): lanes for every tile.
        if self.small_cells > self.small_block * self.target_programs:
            raise ValueError("SMALL_CELLS must give every SMALL launch ONE (the slots have no SMALL loop)")
        return self


RULE = Rule().checked()
if SMALL[1:] != LARGE[1:]:
    raise ValueError("SMALL and LARGE share their warps and target (Rule has one of each)")


class Plan(NamedTuple):
    """Everything about one launch that follows from shapes and strides alone."""

    grid: tuple[int, int]
    ints: tuple[int, ...]  # the kernel's integer arguments, in order
    warps: int  # num_warps
    constexprs: tuple  # the kernel's constexprs (LANES_CONSTEXPRS or TILED_CONSTEXPRS), after its other arguments
    variant: tuple  # (device, kernel, warps, constexprs): one compiled kernel each
    small_ints: bool  # every int and bs fit int32 (the remembered kernels' specialization, grid axis 0)
    slot: int  # the variant's index among a signature's SLOTS

    @property
    def tiled(self) -> bool:
        """Whether the tiled kernel runs (else the lanes kernel)."""
        return self.slot == TILED_SLOT


NOTHING = Plan((0, 0), (), 0, (), (), False, -1)  # bs, N, R or C is 0


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def launch_shape(bs: int, width: int, n_tokens: int, rule: Rule = RULE) -> tuple[int, int, int]:
    """(BLOCK, num_warps, TARGET_PROGRAMS) for one launch: SMALL when the batch spans at most SMALL_CELLS cells."""
    return rule.small if bs * longest_window(width, n_tokens) <= rule.small_cells else rule.large


def tiled(large: bool, flat_stride: int, stride_col: int, bs: int, n_tokens: int, window: int, tiles: int,
          rule: Rule = RULE) -> bool:
    """Whether the tiled kernel runs (module docstring): contiguous, large, many tokens, long windows, a full batch, within grid axis 1.

    ``window`` is ``min(C, N)``; ``tiles`` is its grid's axis 1, ``cdiv(window, BLOCK) + 1``.
    """
    return (
        flat_stride == 1 and stride_col == 1 and large and n_tokens >= rule.tiled_min_tokens
        and tiles - 1 >= rule.tiled_min_tiles and 100 * n_tokens >= rule.tiled_fill * bs * window and tiles <= GRID_AXIS_1
    )


def plan(bs, n_tokens, n_rows, width, stride_row, stride_col, flat_stride, offsets_stride, rows_stride, device,
         windowed: bool = False, rule: Rule = RULE) -> Plan:
    """The launch of one call (``windowed``: it passes ``start_cols``) under ``rule``; see the module docstring.

    A windowed request writes at most as many columns as an unwindowed one (``hi - lo <= min(C - shift, N)``), so
    the same grid covers it."""
    if bs == 0 or n_tokens == 0 or n_rows == 0 or width == 0:
        return NOTHING
    window = longest_window(width, n_tokens)
    large = bs * window > rule.small_cells
    block = rule.large_block if large else rule.small_block
    tiles = cdiv(window, block) + 1  # aligned tiles a window can meet
    dense = offsets_stride == 1 and rows_stride == 1
    if tiled(large, flat_stride, stride_col, bs, n_tokens, window, tiles, rule):
        ints = (n_tokens, n_rows, width, offsets_stride, rows_stride, stride_row)
        constexprs = (block, dense, windowed)
        return Plan((bs, tiles), ints, rule.tiled_warps, constexprs, (device, TILED, rule.tiled_warps, constexprs),
                    max(*ints, bs) < INT32_END, TILED_SLOT)
    lanes = min(cdiv(window, block), cdiv(rule.target_programs, bs))
    wide = width * max(stride_col, flat_stride, 1) >= INT32_END or width + lanes * block >= INT32_END
    one = lanes * block >= window
    ints = (n_tokens, n_rows, width, flat_stride, offsets_stride, rows_stride, stride_row, stride_col)
    constexprs = (block, wide, flat_stride == 1 and stride_col == 1, dense, one, windowed)
    return Plan((bs, lanes), ints, rule.warps, constexprs, (device, LANES, rule.warps, constexprs),
                max(*ints, bs) < INT32_END, 2 * large + wide if one else LOOP_SLOT + wide)


def slot_variants(stride_col, flat_stride, offsets_stride, rows_stride, device, windowed: bool = False,
                  rule: Rule = RULE) -> tuple[tuple, ...]:
    """The ``variant`` of each of the ``SLOTS`` slots for arguments of these strides on ``device``: what ``plan`` gives
    every launch of one argument signature, whatever its ``N`` and ``bs`` (``plan(...).variant ==
    slot_variants(...)[plan(...).slot]``), so a signature's slots can be filled from kernels compiled for others."""
    unit, dense = flat_stride == 1 and stride_col == 1, offsets_stride == 1 and rows_stride == 1
    lanes = [
        (block, wide, unit, dense, one, windowed)
        for block, one in ((rule.small_block, True), (rule.large_block, True), (rule.large_block, False))
        for wide in (False, True)
    ]
    return (*((device, LANES, rule.warps, constexprs) for constexprs in lanes),
            (device, TILED, rule.tiled_warps, (rule.large_block, dense, windowed)))


# The assignment kernel's grid (``kv_canary_torch.assign_kernel``): ``(cdiv(bs, ASSIGN_GROUP), split)``, ``split``
# programs per group, enough to fill the GPU when the groups are few, at most ASSIGN_MAX_SPLIT (grid axis 1 <= 65535).
# A target of 256 programs rather than 1024: the programs past a decode step's one chunk only exit, and fewer of them
# cost less (H200, 2026-12-02, chained us in CUDA graphs, the same kernel launched at both targets in turns: decode
# 1024 1.47 / 1.82, 256 x 1-511 2.55 / 3.17; decode 1-256 and the other extends within 0.05, whose splits are equal
# or capped at ASSIGN_MAX_SPLIT either way: docs/performance-notes.md, "The assignment kernel").
ASSIGN_GROUP = 16  # requests a program
ASSIGN_TARGET_PROGRAMS = 256
ASSIGN_MAX_SPLIT = 64
ASSIGN_INTS = 10  # bs, N, R, C and six strides


def assign_split(n_groups: int) -> int:
    """Grid axis 1 of the assignment kernel for ``n_groups`` groups: from ``bs`` alone (the cells are on the device)."""
    return max(1, min(ASSIGN_MAX_SPLIT, cdiv(ASSIGN_TARGET_PROGRAMS, max(n_groups, 1))))


def assign_grid(bs: int) -> tuple[int, int] | None:
    """The assignment kernel's grid for ``bs`` requests; None for 0 (nothing launched)."""
    if bs == 0:
        return None
    n_groups = cdiv(bs, ASSIGN_GROUP)
    return (n_groups, assign_split(n_groups))


def native_config(rule: Rule = RULE) -> dict:
    """What the C call path plans with, by name (``native.cpp``'s ``configure``): ``rule``'s numbers, the slots', the
    assignment's grid numbers and the spec's ``MAX_REQUESTS``."""
    return dict(rule._asdict(), grid_axis_1=GRID_AXIS_1, slots=SLOTS, loop_slot=LOOP_SLOT, tiled_slot=TILED_SLOT,
                assign_group=ASSIGN_GROUP, assign_target_programs=ASSIGN_TARGET_PROGRAMS, assign_max_split=ASSIGN_MAX_SPLIT,
                max_requests=MAX_REQUESTS)
