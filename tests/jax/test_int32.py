"""int32 index arrays: exact at the dtype's extremes under jit with donation, and computed without 64-bit integers,
also with x64 on (every implementation, the kernels' own bodies included)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kv_canary_jax import assign_req_to_token_pool, pallas_mosaic_gpu, pallas_mosaic_tpu, pallas_triton, xla
from shared_spec.reference import assign_reference, scatter_reference
from tests.contract import assert_same_pool
from tests.jax_support import INT32_MAX, INT32_MIN, WAY_IDS, WAYS, fresh, jitted, scatter_fn, wide_types

N, R, C = 40, 5, 12


def extreme_batches():
    """Windows at the int32 edges: offsets near 2**31, first columns near +-2**31, ``start - s`` wrapping."""
    rng = np.random.default_rng(0)
    flat_in = rng.integers(INT32_MIN, INT32_MAX, size=N, endpoint=True).astype(np.int32)
    pool = (-1_000_000 - np.arange(R * C)).astype(np.int32).reshape(R, C)

    def make(offsets, rows, start_cols=None):
        as32 = functools.partial(np.array, dtype=np.int32)
        return flat_in, as32(offsets), as32(rows), pool, None if start_cols is None else as32(start_cols)

    return [
        make([INT32_MAX - 3, INT32_MAX, INT32_MIN, 5, INT32_MAX], [0, 1, 2, 3]),
        make([INT32_MIN, INT32_MIN + 1, N - 3, N, 0], [4, 1, 3, 0]),
        make([0, 5, 10, 20, 38], [0, 1, 2, 3], [INT32_MIN, INT32_MAX, C - 2, -3]),
        make([INT32_MIN, INT32_MAX, 2, 30, INT32_MAX - 1], [4, 3, 2, 1], [INT32_MAX, INT32_MIN, -5, INT32_MIN + 7]),
        make([30, 5, INT32_MAX, 0, N], [2, 2, 2, 0], [INT32_MIN + 1, -2, INT32_MAX - 2, 3]),
        make([N - 1, N, N + 5, -C, 4], [0, INT32_MIN, INT32_MAX, 1], [C - 1, 0, 0, INT32_MIN]),
    ]


@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
def test_int32_extremes_under_jit_with_donation(implementation, interpret):
    f = jitted(implementation, interpret, donate=True)
    for flat_in, offsets, rows, pool, start_cols in extreme_batches():
        expected = scatter_reference(flat_in, offsets, rows, pool, start_cols)
        assert_same_pool(np.asarray(f(flat_in, offsets, rows, fresh(pool), start_cols)), expected)


def test_the_assignment_at_int32_extremes():
    rows = np.array([0, 1, 2, 3], np.int32)
    start = np.array([INT32_MIN, -3, INT32_MAX - 1, 2], np.int32)
    end = np.array([INT32_MAX, 4, INT32_MIN, INT32_MAX], np.int32)  # lengths wrap in int32: clipped to N
    loc = np.arange(100, 100 + N, dtype=np.int32)
    table = np.full((R, C), -1, np.int32)
    out = jax.jit(assign_req_to_token_pool, static_argnums=5, donate_argnums=1)(rows, fresh(table), start, end, loc, 4)
    assert_same_pool(np.asarray(out), assign_reference(rows, table, start, end, loc, 4))


def test_running_sums_saturate_instead_of_wrapping():
    """Past 2**31 cells in all (bs * N), the running sum is a saturated scan; its result is the capped sum."""
    n, bs = 2**16, 2**15 + 7
    lengths = jnp.full((bs,), n, jnp.int32).at[::3].set(1)
    got = np.asarray(jax.jit(xla.running_sum, static_argnums=(1, 2))(lengths, n, n))
    assert_same_pool(got, np.minimum(np.cumsum(np.asarray(lengths, np.int64)), n).astype(np.int32))


def test_an_assignment_whose_lengths_sum_past_int32():
    rng = np.random.default_rng(1)
    bs, n = 40_000, 60_000  # bs * N > 2**31: the saturated scan
    rows = rng.integers(-2, 6, size=bs).astype(np.int32)
    start = rng.integers(-5, 10, size=bs).astype(np.int32)
    end = (start + rng.integers(0, n + 10, size=bs)).astype(np.int32)
    loc, table = rng.integers(0, 10**6, size=n).astype(np.int32), np.full((6, 10), -1, np.int32)
    out = assign_req_to_token_pool(rows, table, start, end, loc, implementation="xla")
    assert_same_pool(np.asarray(out), assign_reference(rows, table, start, end, loc))


SHAPES = [jax.ShapeDtypeStruct(s, jnp.int32) for s in ((3000,), (6,), (5,), (7, 2000), (5,))]


@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
@pytest.mark.parametrize("windowed", [False, True], ids=["plain", "windowed"])
def test_int32_inputs_compute_in_int32_also_with_x64(x64, implementation, interpret, windowed):
    f = scatter_fn(implementation, interpret)
    shapes = SHAPES[: 4 + windowed]
    assert not wide_types(str(jax.make_jaxpr(f)(*shapes)))
    if implementation == "xla":
        assert not wide_types(jax.jit(f, donate_argnums=3).trace(*shapes).lower().as_text(dialect="hlo"))

    def assign(rows, table, start, end, loc):
        return assign_req_to_token_pool(rows, table, start, end, loc, 4, implementation=implementation,
                                        interpret=interpret)

    assert not wide_types(str(jax.make_jaxpr(assign)(SHAPES[2], SHAPES[3], SHAPES[2], SHAPES[2], SHAPES[0])))


@pytest.mark.parametrize("module", [pallas_triton, pallas_mosaic_gpu, pallas_mosaic_tpu])
def test_compiled_kernel_bodies_hold_no_64_bit_integer_with_x64(x64, module):
    narrow_pool = jax.ShapeDtypeStruct((7, 50), jnp.int32)  # windows below Mosaic GPU's vector: its staged path
    for shapes in (SHAPES[:4], SHAPES, [*SHAPES[:3], narrow_pool]):
        assert not wide_types(str(jax.make_jaxpr(module.scatter)(*shapes))), module.__name__


def test_int64_inputs_keep_int64_where_given(x64):
    shapes = [jax.ShapeDtypeStruct(s.shape, jnp.int64 if s.ndim == 1 else jnp.int32) for s in SHAPES]
    assert wide_types(str(jax.make_jaxpr(scatter_fn("xla"))(*shapes)))
