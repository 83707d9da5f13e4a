"""A batch of one request on the XLA path (``kv_canary_jax.xla_one_request``): the reference on random and int64
extreme windows, windowed or not, through the scatter's and the assignment's XLA paths; the lowerings (one
``dynamic_update_slice`` and no scatter on CPUs and TPUs, and for the assignment on GPUs; the grid for the scatter on
GPUs); jit with the pool donated; vmap."""

from __future__ import annotations

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kv_canary_jax import assign_req_to_token_pool, scatter_req_token_ids, xla_windowed  # noqa: E402
from shared_spec import assignment, scatter_reference  # noqa: E402
from tests.assign_support import assignments  # noqa: E402
from tests.contract import assert_same_pool  # noqa: E402
from tests.profiles import property_settings  # noqa: E402
from tests.strategies import extreme_windowed_batches, sentinel_pool, windowed_batches  # noqa: E402

one_request = st.one_of(
    windowed_batches(max_bs=1, few_shapes=True),  # FEW_SHAPES sizes are at least 1: one request
    extreme_windowed_batches(max_bs=1),
)


def xla_scatter(flat_in, offsets, rows, pool, start_cols=None):
    """``scatter_req_token_ids``' XLA path, the pool the fourth argument (donated under ``jit``)."""
    return scatter_req_token_ids(flat_in, offsets, rows, pool, start_cols=start_cols, implementation="xla")


@property_settings(40)
@given(batch=one_request, windowed=st.booleans())
def test_one_request_batches_match_the_reference(batch, windowed):
    flat_in, offsets, rows, pool, start_cols = batch
    start_cols = start_cols if windowed else None
    arrays = [None if a is None else jnp.asarray(a) for a in (flat_in, offsets, rows, pool, start_cols)]
    got = np.asarray(jax.jit(xla_scatter, donate_argnums=3)(*arrays))
    assert_same_pool(got, scatter_reference(flat_in, offsets, rows, pool, start_cols=start_cols))


@property_settings(30)
@given(batch=assignments())
def test_one_request_assignments_match_the_reference(batch):
    rows, table, start, end, loc, _ = batch
    if rows.shape[0] == 0:
        return
    got = jax.jit(lambda *a: assign_req_to_token_pool(*a, batch_size=1, implementation="xla"), donate_argnums=1)(
        *map(jnp.asarray, (rows, table, start, end, loc)))
    assert_same_pool(np.asarray(got), assignment.assignment_reference(rows, table, start, end, loc, 1))


ONE_REQUEST = [((5,), jnp.int64), ((2,), jnp.int64), ((1,), jnp.int64), ((4, 9), jnp.int32)]
WINDOW = [((1,), jnp.int64)]


def one_dynamic_update_slice(text: str) -> bool:
    return "stablehlo.dynamic_update_slice" in text and "stablehlo.scatter" not in text


@pytest.mark.parametrize("windowed", [False, True])
def test_on_the_cpu_and_tpu_one_request_is_one_dynamic_update_slice(windowed):
    for platform in ("cpu", "tpu"):
        text = lowered(xla_scatter, ONE_REQUEST + WINDOW * windowed, platform)
        assert one_dynamic_update_slice(text), platform


def test_on_a_gpu_one_request_takes_the_grid_and_the_assignment_one_dynamic_update_slice():
    assert not one_dynamic_update_slice(lowered(xla_scatter, ONE_REQUEST, "cuda"))
    assert not one_dynamic_update_slice(lowered(xla_scatter, ONE_REQUEST + WINDOW, "cuda"))
    contiguous = functools.partial(xla_windowed.scatter, contiguous=True)
    assert one_dynamic_update_slice(lowered(contiguous, ONE_REQUEST + WINDOW, "cuda"))


def lowered(f, shapes, platform: str) -> str:
    args = [jax.ShapeDtypeStruct(s, t) for s, t in shapes]
    return jax.jit(f, donate_argnums=3).trace(*args).lower(lowering_platforms=(platform,)).as_text()


def test_jit_donation_writes_the_donated_buffer():
    pool = jnp.asarray(sentinel_pool(3, 8))
    pointer = pool.unsafe_buffer_pointer()
    out = jax.jit(xla_scatter, donate_argnums=3)(jnp.arange(4, dtype=jnp.int64), jnp.array([0, 4]),
                                                           jnp.array([1]), pool, jnp.array([6]))
    assert out.unsafe_buffer_pointer() == pointer
    expected = scatter_reference(np.arange(4), np.array([0, 4]), np.array([1]), sentinel_pool(3, 8), start_cols=np.array([6]))
    assert_same_pool(np.asarray(out), expected)


def test_vmap_over_pools_and_first_columns():
    pools = np.stack([sentinel_pool(3, 8, seed) for seed in range(4)])
    cols = np.array([[-2], [0], [5], [9]])
    flat_in, offsets, rows = np.arange(1, 6), np.array([0, 5]), np.array([2])
    got = jax.vmap(lambda p, c: xla_scatter(jnp.asarray(flat_in), jnp.asarray(offsets), jnp.asarray(rows), p, c))(
        jnp.asarray(pools), jnp.asarray(cols))
    for k in range(4):
        assert_same_pool(np.asarray(got[k]), scatter_reference(flat_in, offsets, rows, pools[k], start_cols=cols[k]))
