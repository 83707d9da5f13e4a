"""The real Mosaic GPU kernel (``implementation="mosaic"``) on a Hopper-or-newer CUDA GPU.

Run on the GPU machine: ``pytest -m gpu tests/jax/test_jax_mosaic_gpu.py``.
Skipped without a GPU of compute capability 9.0 or newer that JAX sees (or
without Mosaic GPU). Pools are sentinel-filled, never zeros. The compiled
kernel is the ``pl.kernel`` launch (``pallas_mosaic_gpu``'s "Launch").
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kv_canary_jax import implementations, platforms  # noqa: E402
from kv_canary_jax.api import scatter_req_token_ids  # noqa: E402
from shared_spec import scatter_reference  # noqa: E402
from tests.contract import assert_same_pool  # noqa: E402
from tests.jax_support import clear_of_the_triton_lowering, printed_clear_of_the_triton_lowering  # noqa: E402
from tests.profiles import property_settings  # noqa: E402
from tests.strategies import batches, large_batch, sentinel_pool  # noqa: E402

GPU = platforms.gpu_device()
REASON = implementations.unavailable_reason(implementations.MOSAIC, platforms.CUDA, False)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU is None or REASON is not None, reason=f"cannot run: {REASON}")]

if REASON is None:
    from kv_canary_jax import pallas_mosaic_gpu as mosaic

    TILE = mosaic.TILE
else:  # pragma: no cover
    mosaic, TILE = None, 512

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def on_gpu(*arrays):
    return [jax.device_put(a, GPU) for a in arrays]


def scatter_fn(**kw):
    def f(flat_in, offsets, rows, pool):
        return scatter_req_token_ids(flat_in, offsets, rows, pool, implementation="mosaic", **kw)

    return f


@functools.cache
def jitted():
    """One jitted function for the whole test run: a shape seen before is not compiled again."""
    return jax.jit(scatter_fn())


def check(*batch, jit=True):
    out = (jitted() if jit else scatter_fn())(*on_gpu(*batch))
    assert_same_pool(np.asarray(out), scatter_reference(*batch))


def tokens(n, seed):
    return np.random.default_rng(seed).integers(INT64_MIN, INT64_MAX, size=n, dtype=np.int64, endpoint=True)


def test_it_is_the_mosaic_kernel():
    args = on_gpu(*large_batch(bs=8, width=300, seed=1))
    hlo = jax.jit(scatter_fn()).lower(*args).as_text()
    assert "mosaic_gpu" in hlo and "triton" not in hlo
    default = jax.jit(lambda *a: scatter_req_token_ids(*a)).lower(*args).as_text()  # the default on Hopper and newer
    assert "mosaic_gpu" in default and "triton" not in default


def test_agrees_with_the_reference():
    check(*large_batch(bs=300, width=TILE + 5, seed=2))
    check(*large_batch(bs=40, width=100, seed=3), jit=False)


def test_random_batches():
    @property_settings(10)
    @given(batch=batches(max_rows=12, max_width=300, max_bs=16, max_tokens=700))
    def run(batch):
        check(*batch)

    run()


def test_random_batches_wider_than_a_tile():
    # Widths past the tile and not multiples of it: several tiles per row, the last one moved back to the row's end.
    @property_settings(4)
    @given(batch=batches(max_rows=6, max_width=3 * TILE + 17, max_bs=8, max_tokens=4 * TILE))
    def run(batch):
        check(*batch)

    run()


# tests/jax/test_jax_gpu.py::test_large_batches runs (20_000, 9), (3000, 1025) and
# (70_000, 3) on every implementation, this one included.
@pytest.mark.parametrize("bs,width", [(64, 5 * 2048 - 3), (4096, 1), (256, 8193), (2, 200_000)])
def test_large_batches(bs, width):
    check(*large_batch(bs=bs, width=width, seed=bs))


def test_every_window_length_around_the_copy_sizes():
    """One request per length 0 .. 2 * TILE + 3 on a pool exactly that wide: tiles, short copies, staged copies."""
    width = 2 * TILE + 3
    lengths = np.arange(width + 1)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = np.random.default_rng(4).permutation(width + 1).astype(np.int64)
    check(tokens(int(offsets[-1]), 4), offsets, rows, sentinel_pool(width + 1, width, 4))


def test_segments_at_the_edges():
    """Segments ending exactly at flat_in's end, starting below 0 (and below -C), the pool's last rows and columns."""
    n_rows, width, n_tokens = 7, 2 * TILE + 5, 3 * TILE
    offsets = np.array([-TILE - 3, 5, n_tokens - width, n_tokens, n_tokens - 1, n_tokens + 9, 2**62], dtype=np.int64)
    rows = np.array([n_rows - 1, 0, n_rows - 2, 3, 4, n_rows], dtype=np.int64)
    check(tokens(n_tokens, 5), offsets, rows, sentinel_pool(n_rows, width, 5))
    offsets = np.array([-width - 1, -width + 3, -50, n_tokens], dtype=np.int64)  # the last: [50, 50 + N) clipped to C
    check(tokens(n_tokens, 6), offsets, np.array([6, 5, 4], dtype=np.int64), sentinel_pool(n_rows, width, 6))


def test_repeated_rows_never_undo_each_other():
    """Rows repeated (unchecked): cells one request writes hold its value, cells both write one of the two."""
    width = TILE + 300
    lengths = [TILE + 200, 5, 130, 7, TILE + 290, 1, 64]
    rows = np.array([1, 1, 1, 0, 0, 2, 2], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat_in, pool = tokens(int(offsets[-1]), 7), sentinel_pool(3, width, 7)
    got = np.asarray(jax.jit(scatter_fn())(*on_gpu(flat_in, offsets, rows, pool)))
    for row in range(3):
        writers = [r for r in range(len(rows)) if rows[r] == row]
        for j in range(width):
            values = {int(flat_in[offsets[r] + j].astype(np.int32)) for r in writers if j < lengths[r]}
            assert int(got[row, j]) in values if values else got[row, j] == pool[row, j], (row, j)


def test_bench_cases_match_the_triton_pallas_kernel():
    """sglang's benchmark inputs (pool width seq + 1: rows misaligned): same pool as the reference and as pallas."""
    from kv_canary.bench import make_inputs

    for case in [(256, 2048, False), (64, 8192, False), (256, 8192, True), (4096, 512, False), (1, 128, False)]:
        host = make_inputs(*case)
        expected = scatter_reference(*host)
        out = jax.jit(scatter_fn(), donate_argnums=3)(*on_gpu(*host))
        assert_same_pool(np.asarray(out), expected)
        if "pallas" in implementations.available_implementations():
            f = lambda *a: scatter_req_token_ids(*a, implementation="pallas")  # noqa: E731
            assert_same_pool(np.asarray(jax.jit(f)(*on_gpu(*host))), expected)


def test_donation_writes_in_place():
    batch = large_batch(bs=500, width=300, seed=9)
    args = on_gpu(*batch)
    pointer = args[3].unsafe_buffer_pointer()
    out = jax.jit(scatter_fn(), donate_argnums=3)(*args)
    assert out.unsafe_buffer_pointer() == pointer
    assert args[3].is_deleted()
    assert_same_pool(np.asarray(out), scatter_reference(*batch))


# A pool far wider than the batch, a donated serving loop, vmap over pools, a pool
# past 4 GiB and checkify with the real kernel: tests/jax/test_jax_gpu.py runs those on
# every implementation, this one included.


@property_settings(4)
@given(block=st.sampled_from([128, 256, 512, 1024, 2048, 4096]), seed=st.integers(0, 2**16))
def test_every_tile_cap_is_exact(block, seed):
    """The tuning knob (``block``) changes speed only."""
    batch = large_batch(bs=50, width=int(np.random.default_rng(seed).integers(1, 3 * block)), seed=seed)
    out = jax.jit(functools.partial(mosaic.scatter, block=block))(*on_gpu(*batch))
    assert_same_pool(np.asarray(out), scatter_reference(*batch))


def test_the_default_on_hopper_is_mosaic_and_warns_of_nothing():
    """A fresh process with DeprecationWarnings as errors: the default, eager, jitted and donated, runs Mosaic GPU.

    A fresh process because other tests in this one import the Triton
    lowering. It is never probed (its import is what warns on JAX 0.11), and
    the results are the reference's.
    """
    script = """
import numpy as np
import jax
from kv_canary_jax import implementations, platforms, scatter_req_token_ids
from shared_spec import scatter_reference
gpu = platforms.gpu_device()
host = (np.arange(10, 16), np.array([0, 4, 6]), np.array([1, 0]), np.full((3, 5), -1, np.int32))
on_gpu = lambda: [jax.device_put(a, gpu) for a in host]
assert implementations.choice(None, "cuda", False) == ((None, "mosaic"),), implementations.mosaic_import_error()
eager = scatter_req_token_ids(*on_gpu())
jitted = jax.jit(scatter_req_token_ids)(*on_gpu())
donated = jax.jit(scatter_req_token_ids, donate_argnums=3)(*on_gpu())
hlo = jax.jit(scatter_req_token_ids).lower(*on_gpu()).as_text()
assert "@mosaic_gpu" in hlo and "triton" not in hlo, "the default did not lower to the Mosaic GPU kernel"
for out in (eager, jitted, donated):
    np.testing.assert_array_equal(np.asarray(out), scatter_reference(*host))
print(np.asarray(eager).tolist())
"""
    assert printed_clear_of_the_triton_lowering(clear_of_the_triton_lowering(script)) == "[[14, 15, -1, -1, -1], [10, 11, 12, 13, -1], [-1, -1, -1, -1, -1]]"
