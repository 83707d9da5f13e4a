"""The real Pallas kernel (and the XLA path) on a CUDA GPU: results, donation, large shapes.

Run on the GPU machine: ``pytest -m gpu tests/jax/test_jax_gpu.py``. Skipped
without a GPU that JAX sees. Pools are sentinel-filled, never zeros.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from hypothesis import given  # noqa: E402
from jax.experimental import checkify  # noqa: E402

from kv_canary_jax import available_implementations
from kv_canary_jax import error_from_checkify, pallas_triton, platforms  # noqa: E402
from kv_canary_jax.api import scatter_req_token_ids  # noqa: E402
from shared_spec import scatter_reference  # noqa: E402
from tests.contract import assert_same_pool  # noqa: E402
from tests.jax_support import default_gpu_kernel  # noqa: E402
from tests.profiles import property_settings  # noqa: E402
from tests.strategies import batches, large_batch, sentinel_pool  # noqa: E402

GPU = platforms.gpu_device()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU is None, reason="JAX sees no CUDA GPU")]
BLOCK = pallas_triton.BLOCK
# The Mosaic GPU kernel joins every test here where it can run (Hopper and newer).
IMPLEMENTATIONS = ["pallas", "xla"] + (["mosaic"] if "mosaic" in available_implementations() else [])


def on_gpu(*arrays):
    return [jax.device_put(a, GPU) for a in arrays]


def scatter_fn(implementation, **kw):
    def f(flat_in, offsets, rows, pool):
        return scatter_req_token_ids(flat_in, offsets, rows, pool, implementation=implementation, **kw)

    return f


@functools.cache
def jitted(implementation):
    """One jitted function per implementation for the whole test run: a shape seen before is not compiled again."""
    return jax.jit(scatter_fn(implementation))


def check(implementation, *batch, jit=False):
    f = jitted(implementation) if jit else scatter_fn(implementation)
    out = f(*on_gpu(*batch))
    assert_same_pool(np.asarray(out), scatter_reference(*batch))


def test_default_is_the_kernel_on_gpu():
    """Mosaic GPU on Hopper and newer, the Triton-lowered kernel on older GPUs (``tests.jax_support.default_gpu_kernel``)."""
    from kv_canary_jax import pallas_mosaic_gpu

    args = on_gpu(*large_batch(bs=8, width=5, seed=1))
    jaxpr = str(jax.make_jaxpr(lambda: scatter_req_token_ids(*args))())
    # The kernel, not XLA's scatter: Mosaic GPU's pl.kernel carries its name, the Triton lowering is a pallas_call.
    mosaic = default_gpu_kernel("cuda", False) == "mosaic"
    assert (pallas_mosaic_gpu.NAME in jaxpr) if mosaic else ("pallas_call[" in jaxpr), jaxpr[-2000:]
    # Under jit every platform's choice is staged; lowering for CUDA keeps the GPU's kernel.
    hlo = jax.jit(scatter_fn(None)).lower(*args).as_text()
    if default_gpu_kernel("cuda", False) == "mosaic":
        assert "@mosaic_gpu" in hlo and "triton" not in hlo
    else:
        assert "triton" in hlo and "@mosaic_gpu" not in hlo


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_random_batches(implementation):
    @property_settings(15)
    @given(batch=batches(max_rows=12, max_width=40, max_bs=16, max_tokens=200))
    def run(batch):
        check(implementation, *batch)

    run()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_random_batches_wider_than_a_tile(implementation):
    # Widths past BLOCK and not multiples of it: several tiles per row, the last one past the row's end.
    @property_settings(6)
    @given(batch=batches(max_rows=6, max_width=3 * BLOCK + 17, max_bs=8, max_tokens=4 * BLOCK))
    def run(batch):
        check(implementation, *batch, jit=True)

    run()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("bs,width", [(20_000, 9), (3000, BLOCK + 1), (64, 5 * BLOCK - 3), (70_000, 3)])
def test_large_batches(implementation, bs, width):
    check(implementation, *large_batch(bs=bs, width=width, seed=bs), jit=True)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_segments_at_the_edges(implementation):
    """Segments ending exactly at flat_in's end, starting below 0, the pool's last rows and columns."""
    n_rows, width = 7, 2 * BLOCK + 5
    n_tokens = 3 * BLOCK
    flat_in = np.random.default_rng(2).integers(-(2**63), 2**63 - 1, size=n_tokens, dtype=np.int64)
    offsets = np.array([-BLOCK - 3, 5, n_tokens - width, n_tokens, n_tokens - 1, n_tokens + 9, 2**62], dtype=np.int64)
    rows = np.array([n_rows - 1, 0, n_rows - 2, 3, 4, n_rows], dtype=np.int64)
    check(implementation, flat_in, offsets, rows, sentinel_pool(n_rows, width, 3), jit=True)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_pool_far_wider_than_the_batch(implementation):
    """The usual req_to_token pool: context-length rows, few tokens (the kernel launches tiles for the tokens)."""
    rng = np.random.default_rng(4)
    bs, n_rows, width = 64, 80, 131_072
    lengths = rng.integers(0, 300, size=bs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat_in = rng.integers(0, 200_000, size=int(offsets[-1]), dtype=np.int64)
    rows = rng.permutation(n_rows)[:bs].astype(np.int64)
    check(implementation, flat_in, offsets, rows, sentinel_pool(n_rows, width, 5), jit=True)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_donation_writes_in_place(implementation):
    batch = large_batch(bs=500, width=300, seed=6)
    args = on_gpu(*batch)
    pointer = args[3].unsafe_buffer_pointer()
    out = jax.jit(scatter_fn(implementation), donate_argnums=3)(*args)
    assert out.unsafe_buffer_pointer() == pointer
    assert args[3].is_deleted()
    assert_same_pool(np.asarray(out), scatter_reference(*batch))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_donation_in_a_loop(implementation):
    """A serving loop: one pool, donated every step, each step's batch written over the last.

    Every step has the same shapes, as a server's padded batches do (one
    compile): requests past the step's ``bs`` name no row (-1) with empty
    segments, and tokens past its last offset are random values no request reads.
    """
    f = jax.jit(scatter_fn(implementation), donate_argnums=3)
    n_rows, width = 257, 4096 + 700  # several tiles of every kernel (Pallas 1024, Mosaic up to 2048 columns)
    max_bs, longest = 200, width + 50
    pool_np = sentinel_pool(n_rows, width, 7)
    pool = jax.device_put(pool_np, GPU)
    pointer = pool.unsafe_buffer_pointer()
    rng = np.random.default_rng(8)
    for step in range(12):
        bs = int(rng.integers(1, max_bs))
        lengths = np.concatenate([rng.integers(0, longest, size=bs), np.zeros(max_bs - bs, np.int64)])
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat_in = rng.integers(-(2**63), 2**63 - 1, size=max_bs * longest, dtype=np.int64, endpoint=True)
        rows = np.concatenate([rng.permutation(n_rows)[:bs], np.full(max_bs - bs, -1)]).astype(np.int64)
        pool_np = scatter_reference(flat_in, offsets, rows, pool_np)
        pool = f(*on_gpu(flat_in, offsets, rows), pool)
        assert pool.unsafe_buffer_pointer() == pointer, step
    assert_same_pool(np.asarray(pool), pool_np)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_vmap_over_pools(implementation):
    flat_in, offsets, rows, _ = large_batch(bs=100, width=BLOCK + 9, seed=9)
    pools = np.stack([sentinel_pool(101, BLOCK + 9, seed) for seed in range(3)])
    f = jax.jit(jax.vmap(scatter_fn(implementation), in_axes=(None, None, None, 0)))
    out = f(*on_gpu(flat_in, offsets, rows, pools))
    for i in range(3):
        assert_same_pool(np.asarray(out[i]), scatter_reference(flat_in, offsets, rows, pools[i]))


def test_pool_over_4_gib_uses_64_bit_offsets():
    """Past 2**32 bytes Pallas computes pointer offsets in int64: the last rows must land right."""
    n_rows, width = 1030, 1 << 20  # 1030 * 2**20 * 4 bytes > 2**32
    pool = jax.device_put(jnp.full((n_rows, width), -7, dtype=jnp.int32), GPU)
    flat_in = np.arange(1, 3001, dtype=np.int64) * 3
    offsets = np.array([0, 1000, 2000, 3000], dtype=np.int64)
    rows = np.array([n_rows - 1, 0, n_rows - 2], dtype=np.int64)
    # A segment reaching the last columns of a row near the end.
    flat_far = np.array([11, 12, 13], dtype=np.int64)
    offsets_far = np.array([3 - width, 3], dtype=np.int64)  # n = width, tokens land in columns width-3 ..
    f = jax.jit(scatter_fn("pallas"), donate_argnums=3)
    pool = f(*on_gpu(flat_in, offsets, rows), pool)
    pool = f(*on_gpu(flat_far, offsets_far, np.array([n_rows - 3], dtype=np.int64)), pool)
    touched = [n_rows - 1, 0, n_rows - 2, n_rows - 3, 1, n_rows // 2]
    got = np.asarray(pool[np.array(touched)])
    small = np.full((len(touched), width), -7, dtype=np.int32)
    small = scatter_reference(flat_in, offsets, np.array([0, 1, 2], dtype=np.int64), small)
    small = scatter_reference(flat_far, offsets_far, np.array([3], dtype=np.int64), small)
    assert_same_pool(got, small)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_checkify_with_the_real_implementations(implementation):
    flat_in, offsets, rows, pool = large_batch(bs=300, width=BLOCK + 3, seed=10)
    jitted = jax.jit(scatter_fn(implementation, check_values=True), donate_argnums=3)
    checked = checkify.checkify(jitted, errors=checkify.user_checks)
    err, out = checked(*on_gpu(flat_in, offsets, rows, pool))
    assert err.get() is None
    assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool))
    bad = rows.copy()
    bad[7] = bad[3]
    err, out = checked(*on_gpu(flat_in, offsets, bad, pool))
    assert str(error_from_checkify(err)) == f"kv-canary: scatter_req_token_ids req_pool_indices[7]={bad[3]} repeats req_pool_indices[3]"
    assert_same_pool(np.asarray(out), pool)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_windowed_serving_step_jitted_and_donated(implementation):
    """The incremental serving step on the GPU: prompts from column 0, then each step's new tokens at each request's length.

    One jitted step with the pool donated (its buffer reused every step), against the reference; padded batches
    (requests past the step's bs on row -1) keep one shape for the decode steps.
    """

    def step(flat_in, offsets, rows, pool, start_cols):
        return scatter_req_token_ids(flat_in, offsets, rows, pool, start_cols=start_cols, implementation=implementation)

    f = jax.jit(step, donate_argnums=3)
    n_rows, width, bs = 257, 4096 + 700, 64
    pool_np = sentinel_pool(n_rows, width, 11)
    pool = jax.device_put(pool_np, GPU)
    pointer = pool.unsafe_buffer_pointer()
    rng = np.random.default_rng(12)
    rows = rng.permutation(n_rows)[:bs].astype(np.int64)
    lengths = np.zeros(bs, dtype=np.int64)
    for n_new in [rng.integers(1, 3000, size=bs)] + [np.ones(bs, np.int64)] * 6 + [rng.integers(0, 900, size=bs)]:
        offsets = np.concatenate([[0], np.cumsum(n_new)]).astype(np.int64)
        flat_in = rng.integers(-(2**63), 2**63 - 1, size=int(offsets[-1]), dtype=np.int64, endpoint=True)
        pool = f(*on_gpu(flat_in, offsets, rows), pool, jax.device_put(lengths, GPU))
        pool_np = scatter_reference(flat_in, offsets, rows, pool_np, lengths)
        lengths = lengths + n_new  # past the width on some rows: truncated there
        assert pool.unsafe_buffer_pointer() == pointer
    assert_same_pool(np.asarray(pool), pool_np)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_random_windowed_batches(implementation):
    from tests.strategies import windowed_batches

    f = jax.jit(lambda a, b, c, d, s: scatter_req_token_ids(a, b, c, d, start_cols=s, implementation=implementation))

    @property_settings(25)
    @given(batch=windowed_batches(max_width=3 * BLOCK + 7, max_tokens=4 * BLOCK))
    def check(batch):
        assert_same_pool(np.asarray(f(*on_gpu(*batch))), scatter_reference(*batch))

    check()
