"""The Triton backend's tiled kernel (contiguous arguments, large batches) against the reference, and when it is chosen.

The launcher takes ``scatter_req_token_ids_tiled_kernel`` only for the LARGE
shape (1024-column tiles), ``TILED_MIN_TOKENS`` tokens or more, full batches
and windows of ``TILED_MIN_TILES`` tiles or more;
here LARGE is shrunk to a 16-column tile and every batch made to take it (no
size, window or idleness limit), so that tiles inside windows (unmasked), at
their edges (masked) and past them (nothing) all occur on small random
batches, hostile values included. Runs interpreted without a GPU, on the GPU otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given

from kv_canary_torch.launch import dispatch, plan as launch_plan
from shared_spec import scatter_reference
from tests.contract import SEMANTIC_BATCHES, assert_same_pool
from tests.profiles import property_settings
from tests.strategies import large_batch, sentinel_pool, tile_batches
from tests.torch_support import device_for, tiled_everywhere

DEVICE = device_for("triton")
BLOCK = 16


@pytest.fixture
def small_tiles(monkeypatch):
    """Every contiguous batch launches the tiled kernel, with BLOCK-column tiles; no plan or fast-path entry survives the test."""
    yield from tiled_everywhere(monkeypatch, BLOCK)


def run(batch, strided_flat: bool = False):
    """``(pool after the launch, the plan it took)``, on copies of ``batch`` (which stays as it was, for the reference)."""
    flat_in, offsets, rows, pool = (torch.tensor(x, device=DEVICE) for x in batch)
    if strided_flat:
        flat_in = torch.repeat_interleave(flat_in, 2)[::2]
    dispatch.launch(flat_in, offsets, rows, pool)
    return pool.cpu().numpy(), dispatch.plan_of(flat_in, offsets, rows, pool)


def test_random_batches_take_the_tiled_kernel_and_match(small_tiles):
    @property_settings(40)
    @given(batch=tile_batches(BLOCK))
    def check(batch):
        got, plan = run(batch)
        assert_same_pool(got, scatter_reference(*batch))
        if plan is not launch_plan.NOTHING:
            assert plan.tiled

    check()


def test_rows_at_every_alignment_to_the_tiles(small_tiles):
    batch = large_batch(bs=64, width=3 * BLOCK + 5, seed=3)  # width coprime to BLOCK: rows start anywhere in a tile
    got, plan = run(batch)
    assert plan.tiled and plan.grid == (64, -(-(3 * BLOCK + 5) // BLOCK) + 1)
    assert (plan.constexprs[0], plan.warps) == (BLOCK, launch_plan.TILED_WARPS)
    assert_same_pool(got, scatter_reference(*batch))


def test_a_strided_flat_in_takes_the_lanes_kernel(small_tiles):
    batch = large_batch(bs=8, width=2 * BLOCK + 1, seed=4)
    got, plan = run(batch, strided_flat=True)
    assert not plan.tiled
    assert_same_pool(got, scatter_reference(*batch))


def test_the_conformance_cases(small_tiles):
    # Plain calls of the spec's cases (no error, the pool as given): int64 extremes, overflowing differences.
    for batch in SEMANTIC_BATCHES:
        assert_same_pool(run(batch)[0], scatter_reference(*batch))


@pytest.mark.parametrize(
    "flat_stride, stride_col, bs, n_tokens, width, expected",
    [
        (1, 1, 256, 256 * 32768, 32769, True),  # sglang's 256 x 32768: full windows of 33 tiles
        (1, 1, 256, 256 * 8192, 8193, False),  # 256 x 8192: 2M tokens, under TILED_MIN_TOKENS
        (1, 1, 512, 2**22, 8192, True),  # 512 x 8192: TILED_MIN_TOKENS, the fewest that take it
        (1, 1, 512, 2**22 - 1, 8192, False),
        (1, 1, 1024, 1024 * 4096, 4097, True),  # 1024 x 4096: windows of 5 tiles, past the 4 that take it
        (1, 1, 2048, 2048 * 3073, 3073, True),  # windows of 3 tiles and one cell: 4 tiles, the least that takes it
        (1, 1, 2048, 2048 * 3072, 3072, False),  # windows of exactly 3 tiles
        (1, 1, 4096, 4096 * 2048, 2049, False),  # 4096 x 2048 (rows 2049 wide): windows of at most 3 tiles
        (1, 1, 16384, 16384 * 512, 513, False),  # 16384 x 512: windows within one tile
        (2, 1, 256, 256 * 32768, 32769, False),  # flat_in strided
        (1, 3, 256, 256 * 32768, 32769, False),  # pool columns strided
        (1, 1, 1024, 4372928, 8193, False),  # a ragged 1024 x 8192: the batch fills 52% of its windows
        (1, 1, 1024, 1024 * 8193 * 3 // 4, 8193, True),  # 75%: the least that takes it
        (1, 1, 1024, 1024 * 8193 * 3 // 4 - 1, 8193, False),
        (1, 1, 4096, 4096, 8193, False),  # decode: one token per request on a wide pool
        (1, 1, 1, 2**26, 2**26, False),  # a window of 65536 tiles: past CUDA's grid axis 1
    ],
)
def test_when_the_tiled_kernel_runs(flat_stride, stride_col, bs, n_tokens, width, expected):
    window = min(width, n_tokens)
    tiles = -(-window // launch_plan.LARGE[0]) + 1
    assert launch_plan.tiled(True, flat_stride, stride_col, bs, n_tokens, window, tiles) is expected
    assert not launch_plan.tiled(False, flat_stride, stride_col, bs, n_tokens, window, tiles)
    plan = launch_plan.plan(bs, n_tokens, bs + 1, width, width * stride_col, stride_col, flat_stride, 1, 1, 0)
    assert plan.tiled is expected


@pytest.mark.parametrize("tiles", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_every_window_length_at_every_row_alignment(small_tiles, tiles):
    # Request i writes row i, i % (width + 2) tokens long (up to one past the width: truncated). The width is
    # coprime to BLOCK and to width + 2, so the BLOCK * (width + 2) requests (368 by default; 880 in the slow
    # sweep, rows 3 tiles wide and more) meet every (row start within a tile, length) pair: windows ending one cell
    # before, on and one after a tile boundary, in every tile position of a row.
    width = tiles * BLOCK + 5
    bs = BLOCK * (width + 2)
    lengths = np.arange(bs) % (width + 2)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat_in = np.random.default_rng(5).integers(-(2**63), 2**63 - 1, size=int(offsets[-1]), dtype=np.int64)
    batch = (flat_in, offsets, np.arange(bs, dtype=np.int64), sentinel_pool(bs, width, seed=6))
    got, plan = run(batch)
    assert plan.tiled
    assert_same_pool(got, scatter_reference(*batch))


@pytest.mark.parametrize(
    "stride_col, flat_stride, unit",
    [(1, 1, True), (2, 1, False), (1, 2, False)],
    ids=["contiguous", "pool-columns-strided", "flat-strided"],
)
def test_the_lanes_kernel_is_specialized_for_unit_strides(stride_col, flat_stride, unit):
    # 64 x 2049 (sglang's rows, windows of at most 3 tiles) takes the lanes kernel: UNIT exactly when both strides are 1.
    plan = launch_plan.plan(64, 64 * 2048, 65, 2049, 2049 * stride_col, stride_col, flat_stride, 1, 1, None)
    assert not plan.tiled
    assert dict(zip(launch_plan.LANES_CONSTEXPRS, plan.constexprs))["UNIT"] is unit
