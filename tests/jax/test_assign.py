"""``assign_req_to_token_pool``: sglang's positional signature, jit and donation, placement, errors."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from kv_canary_jax import assign_req_to_token_pool
from shared_spec import errors
from shared_spec.reference import assign_reference
from tests.contract import assert_same_pool
from tests.jax_support import WAY_IDS, WAYS, fresh

A = errors.ASSIGN_PREFIX


def step(bs=3, width=8, seed=0, extra=2):
    """A decode-and-extend step: ``bs`` requests, ``extra`` more entries past ``batch_size`` in every per-request
    array (sglang's padded buffers)."""
    rng = np.random.default_rng(seed)
    rows = rng.permutation(bs + extra + 1)[: bs + extra].astype(np.int32)
    start = rng.integers(0, width // 2, size=bs + extra).astype(np.int32)
    end = (start + rng.integers(0, width // 2, size=bs + extra)).astype(np.int32)
    loc = rng.integers(0, 10_000, size=int((end - start).sum())).astype(np.int32)
    table = np.full((bs + extra + 1, width), -1, np.int32)
    return rows, table, start, end, loc


@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
def test_positional_batch_size_jitted_and_donated(implementation, interpret):
    rows, table, start, end, loc = step(seed=1)

    def f(rows, table, start, end, loc):
        return assign_req_to_token_pool(rows, table, start, end, loc, 3, implementation=implementation,
                                        interpret=interpret)

    donated = fresh(table)
    pointer = donated.unsafe_buffer_pointer()
    out = jax.jit(f, donate_argnums=1)(rows, donated, start, end, loc)
    assert out.unsafe_buffer_pointer() == pointer and donated.is_deleted()
    assert_same_pool(np.asarray(out), assign_reference(rows, table, start, end, loc, 3))


def test_batch_size_defaults_to_every_request_and_is_static_under_jit():
    rows, table, start, end, loc = step(seed=2)
    assert_same_pool(np.asarray(assign_req_to_token_pool(rows, table, start, end, loc)),
                     assign_reference(rows, table, start, end, loc))
    out = jax.jit(assign_req_to_token_pool, static_argnums=5)(rows, table, start, end, loc, np.int64(4))
    assert_same_pool(np.asarray(out), assign_reference(rows, table, start, end, loc, 4))


def test_an_empty_batch_stays_on_the_tables_device():
    """The table on a device that is not JAX's default: every array the call makes is made there."""
    device = jax.devices("cpu")[1]
    rows, table, start, end, loc = (jax.device_put(a, device) for a in step(seed=3))
    for f in (assign_req_to_token_pool, jax.jit(assign_req_to_token_pool, static_argnums=5)):
        out = f(rows, table, start, end, loc, 0)
        assert out.devices() == {device}
        assert_same_pool(np.asarray(out), np.asarray(table))
    host = [np.asarray(a) for a in (rows, start, end, loc)]  # host data goes to the table's device
    out = assign_req_to_token_pool(host[0], table, *host[1:], 2)
    assert out.devices() == {device}


def test_vmap_over_tables_and_windows():
    rows, table, start, end, loc = step(seed=4)
    starts = np.stack([start, start + 1])
    f = jax.vmap(lambda table, start: assign_req_to_token_pool(rows, table, start, end, loc, 3), in_axes=(0, 0))
    out = jax.jit(f)(np.stack([table, table - 1]), starts)
    for i, t in enumerate((table, table - 1)):
        assert_same_pool(np.asarray(out[i]), assign_reference(rows, t, starts[i], end, loc, 3))


def test_errors_carry_the_assignments_name():
    rows, table, start, end, loc = step(seed=5)
    with pytest.raises(errors.KvCanaryValueError) as info:
        assign_req_to_token_pool(rows, table, start, end, loc, 3, implementation="pallas")
    assert str(info.value) == f"{A} implementation 'pallas' cannot run here: {errors.PALLAS_NEEDS_GPU}"
    with pytest.raises(errors.KvCanaryValueError) as info:
        assign_req_to_token_pool(rows, table, start, end, loc, 3, implementation="triton")
    assert str(info.value).startswith(f"{A} unknown implementation 'triton'")
    with pytest.raises(errors.KvCanaryTypeError) as info:
        assign_req_to_token_pool(rows, table, start, end, loc, 2.0)
    assert str(info.value) == f"{A} batch_size must be an int, got float"


def test_int64_past_int32_is_refused_also_past_batch_size():
    rows, table, start, end, loc = step(seed=6)
    end = end.astype(np.int64)
    end[4] = 2**40  # past batch_size 3: the whole array is read
    with pytest.raises(errors.KvCanaryValueError) as info:
        assign_req_to_token_pool(rows, table, start, end, loc, 3)
    assert str(info.value) == errors.for_assignment(errors.NOT_INT32).format(arg="end_offset", index=4, value=2**40)
    end[4] = 5
    assert_same_pool(np.asarray(assign_req_to_token_pool(rows, table, start, end, loc, 3)),
                     assign_reference(rows, table, start, end, loc, 3))
