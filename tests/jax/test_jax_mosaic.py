"""The Mosaic GPU kernel (``implementation="mosaic"``) without a GPU: the shared contract, edges, choice, lowering.

The kernel body runs in the Pallas interpreter here (``interpret=True``), the
same body the GPU compiles (the shared contract runs the real kernel where a
Hopper-or-newer GPU is present; ``test_jax_mosaic_gpu.py`` has the GPU-only
tests). Small ``block`` values (the tile cap) put several tiles, the
short-window copies and the staged copies into shapes the interpreter runs
quickly, and the edge tests share one shape so they share one compile. The
kernel is also lowered for CUDA through both launch entries (no GPU needed):
Pallas's Mosaic GPU lowering rejects what Mosaic GPU cannot express, so a
kernel that only interprets fails here.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kv_canary_jax import implementations  # noqa: E402
from kv_canary_jax.api import scatter_req_token_ids  # noqa: E402
from kv_canary_jax.conformance import MosaicRunner  # noqa: E402
from shared_spec import errors, scatter_reference  # noqa: E402
from tests.contract import (  # noqa: E402
    INTERPRETED_CASE_EVERY, ScatterContract, assert_same_pool, assert_written_by_its_requests,
)
from tests.jax_support import (  # noqa: E402
    assert_one_bare_mosaic_call, check_donation_writes_in_place, check_unavailable_falls_through,
    check_vmap_over_pools_and_over_batches, DEFAULT_CALLS_RUN, default_calls_clear_of_the_triton_lowering, lower_for_cuda,
)
from tests.profiles import property_settings  # noqa: E402
from tests.strategies import large_batch, sentinel_pool  # noqa: E402

MOSAIC_IMPORT_ERROR = implementations.mosaic_import_error()
pytestmark = pytest.mark.skipif(MOSAIC_IMPORT_ERROR is not None, reason=f"no Mosaic GPU here: {MOSAIC_IMPORT_ERROR}")

if MOSAIC_IMPORT_ERROR is None:
    from kv_canary_jax import pallas_mosaic_gpu as mosaic
else:  # pragma: no cover
    mosaic = None

P = errors.PREFIX
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class TestJaxMosaic(ScatterContract):
    case_every = INTERPRETED_CASE_EVERY  # a compile per case: a sample by default (tests/contract.py)
    # Each new shape re-traces and re-compiles the interpreted kernel.
    examples = 4
    few_shapes = True

    @classmethod
    def make_runner(cls):
        return MosaicRunner()


@functools.partial(jax.jit, static_argnames="block")
def _interpreted(flat_in, offsets, rows, pool, block=None):
    return mosaic.scatter(flat_in, offsets, rows, pool, interpret=True, block=block)


def interpreted(*batch, block=None):
    """The interpreted kernel's pool (jitted once per shape and block: tests share shapes to share compiles)."""
    return np.asarray(_interpreted(*[jnp.asarray(a) for a in batch], block=block))


def check(*batch, block=None):
    assert_same_pool(interpreted(*batch, block=block), scatter_reference(*batch))


def tokens(n, seed):
    return np.random.default_rng(seed).integers(INT64_MIN, INT64_MAX, size=n, dtype=np.int64, endpoint=True)


# One shape for the edge tests (one compile): a width of 3 tiles + 5 (block 128), six requests, eight rows.
ROWS, WIDTH, TOKENS, BS = 8, 3 * 128 + 5, 1000, 6


def edge_batch(offsets, rows, seed):
    offsets, rows = np.asarray(offsets, dtype=np.int64), np.asarray(rows, dtype=np.int64)
    assert offsets.shape == (BS + 1,) and rows.shape == (BS,)
    return tokens(TOKENS, seed), offsets, rows, sentinel_pool(ROWS, WIDTH, seed)


# -- the copy plan: every program's copies stay inside the window and cover it ----------------------


def plan_copies(lo, hi, bs, width, n_tokens, block=None):
    """The copies one request's programs make for the window [lo, hi), from the kernel's own plan functions.

    ``(starts, widths, sizes, tile)``: every run of columns written (first
    column and width) and the size of each copy (a window shorter than ``VEC``
    is one staged copy of size 1: one-column runs). Every lane at once:
    ``lane_tiles`` and ``tile_copy`` work elementwise on lane and tile numbers.
    """
    tile, lanes = mosaic.launch_shape(bs, width, n_tokens, block)
    starts, widths, sizes = [], [], []
    if tile:
        lane = np.arange(lanes)
        count = np.asarray(mosaic.lane_tiles(lo, hi, lane, lanes, tile, np))
        # Lane l copies tiles l, l + lanes, ..., count[l] of them.
        nth = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
        k = np.repeat(lane, count) + lanes * nth
        (tile_starts,), size = mosaic.tile_copy(lo, hi, k, tile, np)
        starts.append(tile_starts)
        widths.append(np.full(k.shape, size))
        sizes += [size] * len(k)
    for when, copy_starts, size in mosaic.short_copies(lo, hi, mosaic.vector_sizes(tile), np):  # lane 0's
        if when:
            starts.append(np.asarray(copy_starts))
            widths.append(np.full(len(copy_starts), size))
            sizes.append(size)
    if hi - lo < mosaic.VEC:  # lane 0's staged copy
        columns = [np.asarray(mosaic.staged_columns(lo, hi, k, np)) for k in range(mosaic.staged_batches(lo, hi))]
        starts.append(lo + np.concatenate(columns))
        widths.append(np.ones(len(starts[-1]), np.int64))
        sizes.append(1)
    return np.concatenate(starts), np.concatenate(widths), sizes, tile


def test_staged_load_stays_in_flat_in_and_holds_the_window():
    """A short window's one vector load lies in [0, N) and its tokens sit at d .. d + m - 1 of it."""
    for n_tokens in (mosaic.VEC, mosaic.VEC + 1, 1000):
        for m in range(1, mosaic.VEC):
            for first in {0, 1, n_tokens - m, n_tokens - m - 1, (n_tokens - m) // 2} - {-1}:
                start, d = mosaic.staged_load(np.int64(first), n_tokens, np)
                assert 0 <= start and start + mosaic.VEC <= n_tokens, (n_tokens, m, first)
                assert start + d == first and 0 <= d and d + m <= mosaic.VEC, (n_tokens, m, first)


@pytest.mark.parametrize(
    "bs,width,n_tokens,block",
    [(3, 5, 1000, None), (3, 127, 1000, None), (3, 128, 1000, None), (3, 389, 1000, 128), (3, 389, 5, None),
     (3, 1000, 300, 256), (3, 2049, 5000, 512), (1, 5000, 5000, None), (3000, 5000, 5000, None), (2, 9000, 9000, None),
     (1, 70_000, 70_000, 128)],
)
def test_copies_stay_inside_the_window_and_cover_it(bs, width, n_tokens, block):
    span = min(width, n_tokens)
    rng = np.random.default_rng(width + n_tokens)
    lengths = sorted({*range(1, min(span, 300) + 1), *rng.integers(1, span + 1, size=60).tolist(), span})
    for m in lengths:
        for lo in {0, width - m, int(rng.integers(0, width - m + 1))}:
            hi = lo + m
            starts, widths, sizes, tile = plan_copies(lo, hi, bs, width, n_tokens, block)
            assert len(starts) and starts.min() >= lo and (starts + widths).max() <= hi, (m, lo)
            # How many runs cover each column: +1 where a run starts, -1 where it ends.
            depth = np.zeros(width + 1, np.int64)
            np.add.at(depth, starts, 1)
            np.add.at(depth, starts + widths, -1)
            assert (np.cumsum(depth)[lo:hi] > 0).all(), (m, lo)
            # Windows shorter than the tile take exactly one short copy; longer ones only tiles, each once.
            if tile and m >= tile:
                assert sizes == [tile] * -(-m // tile), (m, lo, sizes)
            else:
                assert len(sizes) == 1, (m, lo, sizes)
            if m < mosaic.VEC:  # a staged copy stores each column once, the last one up to STAGE_BATCH times
                assert len(starts) - m < mosaic.STAGE_BATCH, (m, lo, len(starts))


def test_launch_shapes():
    assert mosaic.launch_shape(8, 5, 1000) == (0, 1)  # every window is shorter than VEC: staged copies only
    assert mosaic.launch_shape(8, 1000, 100) == (0, 1)
    assert mosaic.TILE == 1024
    assert mosaic.launch_shape(8, 1000, 2**20) == (512, 2)  # the largest power of two within the longest window
    assert mosaic.launch_shape(8, 2049, 2**20) == (1024, 3)  # the tile cap; a lane per tile of the longest window
    assert mosaic.launch_shape(8, 8193, 2**20) == (1024, 9)
    assert mosaic.launch_shape(8, 3000, 1500, block=2048) == (1024, 2)  # the tokens, not the width, bound the window
    assert mosaic.launch_shape(8, 2**17, 300) == (256, 2)
    assert mosaic.launch_shape(256, 8193, 1_093_232) == (1024, 9)  # ragged: lanes for the longest window
    assert mosaic.launch_shape(64, 32769, 1_069_210) == (1024, 33)
    # Many requests: fewer lanes, each striding over several tiles (sglang's bench: 4096 x 512, 256 x 32768).
    assert mosaic.launch_shape(256, 32769, 32768 + 255) == (1024, 16)  # one long window among one-token ones
    assert mosaic.launch_shape(4096, 513, 2**21) == (512, 1)
    assert mosaic.launch_shape(256, 32769, 2**23) == (1024, 16)
    assert mosaic.launch_shape(1024, 2049, 2**21) == (1024, 3)
    assert mosaic.launch_shape(2048, 2049, 2**22) == (1024, 2)
    assert mosaic.launch_shape(1, 2**30, 2**30)[1] == mosaic.TARGET_PROGRAMS
    with pytest.raises(ValueError):
        mosaic.scatter(*[jnp.asarray(a) for a in large_batch(bs=2, width=3)], block=100)


# -- edges, interpreted ------------------------------------------------------------------------------


def test_segments_at_the_edges():
    """Segments ending exactly at flat_in's end, starting below 0 and below -C, past the end, on the pool's last rows."""
    offsets = [-WIDTH - 3, -100, TOKENS - WIDTH, TOKENS, TOKENS - 1, TOKENS + 9, 2**62]
    check(*edge_batch(offsets, [ROWS - 1, 0, ROWS - 2, 3, 4, ROWS], 2), block=128)


def test_windows_reaching_the_row_end():
    """Full-width windows on the pool's last rows: the last, overlapping tile ends exactly at column C (not a tile multiple)."""
    lengths = [WIDTH, WIDTH + 40, WIDTH - 1, 129, 127, 5]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    check(*edge_batch(offsets, [ROWS - 1, ROWS - 2, 0, 2, 1, ROWS - 3], 4), block=128)


def test_segment_ending_at_flat_in_end_from_a_negative_start():
    """Windows that start below 0 (lo > 0) and end at N, and one that reads the last token only."""
    offsets = [-50, TOKENS, -(TOKENS - 200), TOKENS - 1, TOKENS, TOKENS, TOKENS]  # (offsets may decrease unchecked)
    check(*edge_batch(offsets, [2, 5, 7, 0, 1, 3], 6), block=128)


def test_starts_far_below_zero_and_far_past_the_end():
    offsets = [INT64_MIN + 5, -WIDTH - 1, -WIDTH, -WIDTH + 1, TOKENS - 1, TOKENS + 1, INT64_MAX]
    check(*edge_batch(offsets, [0, 1, 2, 3, 4, 5], 8), block=128)


def test_repeated_rows_never_undo_each_other():
    """Unchecked mode allows a row twice: cells one request writes hold its value, cells both write one of the two.

    The kernel never writes a cell outside its request's window, so a short
    window next to a long one on the same row cannot restore the old value of
    a cell the other request wrote (what a read-modify-write tail would do).
    """
    # Row 1 gets windows of 300, 5 and 130 columns; row 0 of 7 and 380; row 6 of 1.
    lengths = [300, 5, 130, 7, 380, 1]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    rows = [1, 1, 1, 0, 0, 6]
    flat_in, offsets, rows, pool = edge_batch(offsets, rows, 10)
    assert_written_by_its_requests(flat_in, offsets, rows, pool, interpreted(flat_in, offsets, rows, pool, block=128))


@property_settings(25, derandomize=True)
@given(
    lengths=st.lists(st.sampled_from([0, 1, 2, 3, 63, 64, 127, 128, 129, 255, 256, 257, WIDTH - 1, WIDTH, WIDTH + 1])
                     | st.integers(-3, WIDTH + 20), min_size=BS, max_size=BS),
    start=st.sampled_from([0, -1, -WIDTH, -WIDTH - 1]) | st.integers(-WIDTH - 5, TOKENS),
    rows=st.permutations(range(ROWS)),
    seed=st.integers(0, 2**16),
)
def test_random_windows_across_every_copy_size(lengths, start, rows, seed):
    """Lengths around VEC, the tile (block 128) and the width: tiles, short vector copies and staged copies."""
    offsets = np.concatenate([[start], start + np.cumsum(lengths)])
    check(*edge_batch(offsets, rows[:BS], seed), block=128)


def test_lanes_stride_over_several_tiles(monkeypatch):
    """Fewer lanes than tiles (a big batch): each lane copies tiles lane, lane + lanes, ..."""
    monkeypatch.setattr(mosaic, "TARGET_PROGRAMS", 2 * BS)
    assert mosaic.launch_shape(BS, WIDTH, TOKENS, 128) == (128, 2)
    lengths = [WIDTH, 5, 300, WIDTH - 2, 0, 200]
    batch = edge_batch(np.concatenate([[0], np.cumsum(lengths)]), [3, 0, 1, 2, 4, 5], 12)
    out = mosaic.scatter(*[jnp.asarray(a) for a in batch], interpret=True, block=128)  # not the cached jit: new grid
    assert_same_pool(np.asarray(out), scatter_reference(*batch))


def test_64_bit_columns(monkeypatch):
    """Pools too wide for int32 columns compute them in int64 (forced here on a small pool)."""
    monkeypatch.setattr(mosaic, "INT32_COLUMNS_BELOW", WIDTH)
    lengths = [WIDTH, 5, 300, WIDTH - 2, 0, 200]
    batch = edge_batch(np.concatenate([[-7], -7 + np.cumsum(lengths)]), [3, 0, 1, 2, 4, 5], 13)
    out = mosaic.scatter(*[jnp.asarray(a) for a in batch], interpret=True, block=128)  # not the cached jit
    assert_same_pool(np.asarray(out), scatter_reference(*batch))


def test_pool_far_wider_than_the_batch():
    """The usual req_to_token pool: rows far wider than the batch's tokens; tiles are launched for the tokens."""
    rng = np.random.default_rng(14)
    lengths = rng.integers(0, 200, size=6)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = rng.permutation(9)[:6].astype(np.int64)
    assert mosaic.launch_shape(6, 20_000, int(offsets[-1]))[1] <= 2
    check(tokens(int(offsets[-1]), 14), offsets, rows, sentinel_pool(9, 20_000, 15))


def test_jit_with_donation_writes_the_donated_buffer():
    check_donation_writes_in_place("mosaic", interpret=True)


def test_vmap_over_pools_and_over_batches():
    """Mosaic GPU lowers no batched grid: the kernel's own batching rule runs one kernel per example."""
    check_vmap_over_pools_and_over_batches("mosaic", interpret=True)


# -- lowering for CUDA (no GPU needed) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "n_tokens,bs,n_rows,width,block",
    [(5000, 10, 11, 300, None), (5000, 10, 11, 3000, None), (50, 4, 5, 9, None), (2**20, 8, 9, 8193, None),
     (3000, 70_000, 70_001, 3, None), (1200, 4, 4, 7 * 128 + 3, 128), (5000, 3, 2, 2**31 + 5, None)],
)
@pytest.mark.parametrize("windowed", [False, True], ids=["plain", "windowed"])
def test_lowers_for_cuda(monkeypatch, n_tokens, bs, n_rows, width, block, windowed):
    """Pallas's Mosaic GPU lowering accepts every code path (tiles, short copies, staged copies, strides, big grids), windowed too."""
    if block == 128:
        monkeypatch.setattr(mosaic, "TARGET_PROGRAMS", 4)  # lanes striding over several tiles
    shapes = [((n_tokens,), jnp.int64), ((bs + 1,), jnp.int64), ((bs,), jnp.int64), ((n_rows, width), jnp.int32)]
    shapes += [((bs,), jnp.int64)] * windowed
    text = lower_for_cuda(functools.partial(mosaic.scatter, block=block), *shapes)
    assert_one_bare_mosaic_call(text, windowed=windowed)


def test_lowers_for_cuda_through_the_api_under_vmap_and_checkify(monkeypatch):
    from jax.experimental import checkify

    monkeypatch.setattr(implementations, "gpu_capability", lambda: (9, 0))  # a Hopper GPU, as far as the choice goes
    shapes = [((500,), jnp.int64), ((5,), jnp.int64), ((4,), jnp.int64), ((5, 200), jnp.int32)]
    f = functools.partial(scatter_req_token_ids, implementation=("mosaic", "xla"))
    assert "@mosaic_gpu" in lower_for_cuda(f, *shapes)
    checked = checkify.checkify(functools.partial(f, check_values=True), errors=checkify.user_checks)
    assert "@mosaic_gpu" in lower_for_cuda(checked, *shapes, donate=False)
    pools = [*shapes[:3], ((3, 5, 200), jnp.int32)]
    assert "@mosaic_gpu" in lower_for_cuda(jax.vmap(f, in_axes=(None, None, None, 0)), *pools)


# -- choosing "mosaic" -------------------------------------------------------------------------------


def test_mosaic_is_selectable_and_interprets_anywhere():
    assert "mosaic" in implementations.IMPLEMENTATIONS
    assert "mosaic" in implementations.available_implementations(interpret=True)
    b = large_batch(bs=5, width=7, seed=20)
    out = scatter_req_token_ids(*b, implementation="mosaic", interpret=True)
    assert_same_pool(np.asarray(out), scatter_reference(*b))


def test_default_order():
    assert implementations.DEFAULT == ("mosaic", "pallas", "xla")


@pytest.mark.parametrize("capability", [(9, 0), (10, 0), (8, 0), (8, 9)])
def test_the_default_per_compute_capability(monkeypatch, capability):
    """Hopper and newer: Mosaic GPU first; older GPUs: the Triton-lowered kernel (XLA where JAX no longer has it)."""
    monkeypatch.setattr(implementations, "gpu_capability", lambda: capability)
    if capability >= implementations.MOSAIC_MIN_CAPABILITY:
        expected = "mosaic"
    else:
        expected = "pallas" if implementations.pallas_triton_import_error() is None else "xla"
    assert implementations.choice(None, "cuda", False) == ((None, expected),)
    # Traced (no device yet): the GPU's choice as above, XLA on every other platform.
    tpu = (("tpu", "mosaic_tpu"),) if "tpu" in implementations.PLATFORM_DEFAULTS else ()
    assert implementations.choice(None, None, False) == (("cuda", expected), *tpu, (None, "xla"))


@DEFAULT_CALLS_RUN.ahead
def test_on_hopper_the_default_never_touches_the_triton_lowering():
    """Capability 9.0 simulated, in a fresh process, DeprecationWarnings as errors: planning, lowering and running
    the default never probe nor import Pallas' Triton lowering (JAX 0.11 warns on its import)."""
    assert default_calls_clear_of_the_triton_lowering()[1] == "[[0, 0, 0, 0], [0, 1, 2, 3]]"  # DEFAULT_CALLS


@pytest.mark.skipif(implementations.gpu_capability() is not None, reason="a GPU is here")
def test_without_a_gpu_mosaic_needs_the_interpreter():
    check_unavailable_falls_through("mosaic", errors.MOSAIC_NEEDS_GPU)


@pytest.mark.parametrize("capability,ok", [((8, 0), False), ((8, 9), False), ((9, 0), True), ((10, 0), True), ((12, 1), True)])
def test_compute_capability_decides(monkeypatch, capability, ok):
    monkeypatch.setattr(implementations, "gpu_capability", lambda: capability)
    reason = implementations.unavailable_reason("mosaic", "cuda", False)
    if ok:
        assert reason is None
        assert implementations.choice(("mosaic", "pallas", "xla"), "cuda", False) == ((None, "mosaic"),)
    else:
        assert reason == errors.MOSAIC_NEEDS_HOPPER.format(capability="{}.{}".format(*capability))
        # An older GPU falls through to the next name.
        assert implementations.choice(("mosaic", "pallas", "xla"), "cuda", False) == ((None, "pallas"),)
    assert implementations.unavailable_reason("mosaic", "cuda", True) is None  # the interpreter runs anywhere


def test_without_mosaic_gpu_the_choice_falls_through(monkeypatch):
    monkeypatch.setattr(implementations, "mosaic_import_error", lambda: "ImportError: No module named 'absl'")
    monkeypatch.setattr(implementations, "gpu_capability", lambda: (9, 0))
    reason = errors.MOSAIC_NOT_IMPORTABLE.format(error="ImportError: No module named 'absl'")
    for platform, interpret in (("cuda", False), ("cpu", True), ("cpu", False)):
        assert implementations.unavailable_reason("mosaic", platform, interpret) == reason
    assert implementations.choice(("mosaic", "pallas", "xla"), "cuda", False) == ((None, "pallas"),)
    assert implementations.choice(("mosaic", "xla"), "cpu", True) == ((None, "xla"),)
    with pytest.raises(errors.KvCanaryValueError) as info:
        implementations.choice("mosaic", "cuda", False)
    assert str(info.value) == f"{P} implementation 'mosaic' cannot run here: {reason}"


def test_the_conformance_runner_interprets_without_a_hopper_gpu():
    runner = MosaicRunner()
    assert runner.backend == "mosaic" and runner.unavailable is None
    assert runner.interpret == (implementations.unavailable_reason("mosaic", "cuda", False) is not None
                                or runner.accelerator is None)
