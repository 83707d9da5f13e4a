"""Row-sharded pools on the four host devices (``tests/conftest.py``): results, jit and donation, the compiled
program, the checked mode, the layout errors, and the assignment."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from jax.experimental import checkify
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from kv_canary_jax import (assign_req_to_token_pool, error_from_checkify, scatter_req_token_ids,
                           scatter_req_token_ids_sharded)
from shared_spec import arg_specs, errors
from shared_spec.reference import assign_reference, scatter_reference
from tests.contract import assert_same_pool
from tests.jax_support import INT32_MAX, INT32_MIN, WAY_IDS, WAYS, batch, fresh

CPUS = jax.devices("cpu")
MESH = Mesh(np.array(CPUS[:4]), ("rows",))
ROWS = NamedSharding(MESH, P("rows", None))
COLLECTIVE = re.compile(r"\b(all-gather|all-to-all|collective-permute|all-reduce|reduce-scatter)\b")
TWO_WAYS, TWO_IDS = WAYS[:2], WAY_IDS[:2]


def sharded_fn(implementation="xla", interpret=False, mesh=MESH, axis="rows", **options):
    def f(flat_in, offsets, rows, pool, start_cols=None):
        return scatter_req_token_ids_sharded(flat_in, offsets, rows, pool, start_cols=start_cols, mesh=mesh, axis=axis,
                                             implementation=implementation, interpret=interpret, **options)

    return f


def shard_pointers(x) -> list[int]:
    return [shard.data.unsafe_buffer_pointer() for shard in x.addressable_shards]


@pytest.mark.parametrize("implementation,interpret", TWO_WAYS, ids=TWO_IDS)
def test_hostile_batches_match_the_reference(implementation, interpret):
    rng = np.random.default_rng(0)
    for n_rows, windowed in ((8, False), (12, True), (4, True)):
        flat_in, offsets, rows, pool, start_cols = arg_specs.hostile_batch(rng, n_rows, 9, 10, 40, np.int32, windowed)
        rows[:3] = [n_rows // 4 - 1, n_rows // 4, n_rows - 1]  # the edges of the blocks
        out = scatter_req_token_ids(flat_in, offsets, rows, jax.device_put(pool, ROWS), start_cols=start_cols,
                                    implementation=implementation, interpret=interpret)  # dispatched on the layout
        assert out.sharding.is_equivalent_to(ROWS, 2)
        assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool, start_cols))


def test_row_shift_is_exact_at_int32_extremes():
    flat_in, offsets, _, pool = batch(bs=6, width=5, seed=1)
    pool = np.concatenate([pool, pool[:1] - 9])  # 8 rows, 2 a device
    rows = np.array([INT32_MIN, INT32_MIN + 1, INT32_MIN + 5, INT32_MAX, 7, 6], np.int32)
    out = sharded_fn()(flat_in, offsets, rows, jax.device_put(pool, ROWS))
    assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool))


@pytest.mark.parametrize("implementation,interpret", TWO_WAYS, ids=TWO_IDS)
def test_jit_with_donation_writes_every_shard_in_place_with_no_collective(implementation, interpret):
    f = jax.jit(sharded_fn(implementation, interpret), donate_argnums=3)
    expected = batch(bs=7, width=9, seed=2)[3]
    pool = fresh(expected, ROWS)
    pointers = shard_pointers(pool)
    rng = np.random.default_rng(3)
    for k in range(3):  # a serving loop: the same buffers every step
        flat_in, offsets, rows, _ = batch(bs=5, width=9, seed=4 + k)
        rows = rng.permutation(8)[:5].astype(np.int32)
        assert not COLLECTIVE.search(f.lower(flat_in, offsets, rows, pool).compile().as_text())
        pool = f(flat_in, offsets, rows, pool)
        expected = scatter_reference(flat_in, offsets, rows, expected)
        assert shard_pointers(pool) == pointers and pool.sharding.is_equivalent_to(ROWS, 2)
    assert_same_pool(np.asarray(pool), expected)


def test_the_checked_mode_sees_the_global_rows():
    flat_in, offsets, rows, pool = batch(bs=5, width=9, seed=5)
    pool = np.concatenate([pool, pool[:2]])  # 8 rows: 2 a device
    rows[1] = 7  # inside the pool, outside the first device's block
    assert_same_pool(np.asarray(sharded_fn(check_values=True)(flat_in, offsets, rows, jax.device_put(pool, ROWS))),
                     scatter_reference(flat_in, offsets, rows, pool))
    rows[1] = 8
    message = f"{errors.PREFIX} req_pool_indices[1]=8 is outside [0, 8)"
    with pytest.raises(errors.KvCanaryValueError) as info:
        sharded_fn(check_values=True)(flat_in, offsets, rows, jax.device_put(pool, ROWS))
    assert str(info.value) == message
    checked = checkify.checkify(jax.jit(sharded_fn(check_values=True)), errors=checkify.user_checks)
    err, out = checked(flat_in, offsets, rows, jax.device_put(pool, ROWS))
    assert str(error_from_checkify(err)) == message
    assert_same_pool(np.asarray(out), pool)
    with pytest.raises(errors.KvCanaryValueError) as info:
        jax.jit(sharded_fn(check_values=True))(flat_in, offsets, rows, jax.device_put(pool, ROWS))
    assert str(info.value) == errors.CHECK_VALUES_UNTRACEABLE


def test_layout_errors():
    flat_in, offsets, rows, pool = batch(bs=3, width=9, seed=6)
    unknown = f"{errors.PREFIX} cannot tell which mesh axis splits pool_out's rows: "
    hint = "; pass mesh= and axis=, or shard pool_out as NamedSharding(mesh, P(axis, None))"
    calls = [
        (lambda: scatter_req_token_ids_sharded(flat_in, offsets, rows, pool), unknown + "it is a ndarray, on no device" + hint),
        (lambda: scatter_req_token_ids_sharded(flat_in, offsets, rows, jax.device_put(pool, NamedSharding(MESH, P()))),
         unknown + "its sharding PartitionSpec() does not split the rows alone over a mesh axis" + hint),
        (lambda: jax.jit(scatter_req_token_ids_sharded)(flat_in, offsets, rows, pool),
         unknown + errors.SHARDED_LAYOUT_TRACED + hint),
        (lambda: sharded_fn(mesh="rows")(flat_in, offsets, rows, pool),
         f"{errors.PREFIX} mesh must be a jax.sharding.Mesh, got str"),
        (lambda: sharded_fn(axis="cols")(flat_in, offsets, rows, pool),
         f"{errors.PREFIX} axis 'cols' is not an axis of the mesh; its axes are ('rows',)"),
        (lambda: sharded_fn()(flat_in, offsets, rows, pool[:3]),
         errors.SHARDED_UNEVEN.format(rows=3, devices=4, axis="rows")),
        (lambda: sharded_fn()(flat_in, offsets[:-1], rows, pool[:3]),  # the argument checks come first
         f"{errors.PREFIX} offsets length 3 != bs+1 (4)"),
    ]
    for call, message in calls:
        with pytest.raises((errors.KvCanaryValueError, errors.KvCanaryTypeError)) as info:
            call()
        assert str(info.value) == message


def test_a_two_dimensional_mesh_and_an_axis_tuple():
    mesh = Mesh(np.array(CPUS[:4]).reshape(2, 2), ("a", "b"))
    flat_in, offsets, rows, pool = batch(bs=7, width=9, seed=7)
    for axis in ("a", ("a", "b")):
        out = jax.jit(sharded_fn(mesh=mesh, axis=axis))(flat_in, offsets, rows, jax.device_put(pool, NamedSharding(mesh, P(axis, None))))
        assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool))


def test_the_assignment_on_a_sharded_table():
    rng = np.random.default_rng(8)
    rows = rng.permutation(8)[:6].astype(np.int32)
    start = rng.integers(0, 5, size=6).astype(np.int32)
    end = (start + rng.integers(0, 5, size=6)).astype(np.int32)
    loc, table = np.arange(40, dtype=np.int32), np.full((8, 9), -1, np.int32)
    out = assign_req_to_token_pool(rows, jax.device_put(table, ROWS), start, end, loc, 5)
    assert out.sharding.is_equivalent_to(ROWS, 2)
    assert_same_pool(np.asarray(out), assign_reference(rows, table, start, end, loc, 5))
    with pytest.raises(errors.KvCanaryValueError) as info:
        assign_req_to_token_pool(rows, jax.device_put(table, ROWS), start, end, loc, implementation="pallas")
    assert str(info.value) == f"{errors.ASSIGN_PREFIX} implementation 'pallas' cannot run here: {errors.PALLAS_NEEDS_GPU}"
    with pytest.raises(errors.KvCanaryTypeError) as info:
        assign_req_to_token_pool(rows, jax.device_put(table, ROWS), start, end, loc, 5, interpret="no")
    assert str(info.value) == errors.for_assignment(errors.NOT_A_BOOL).format(option="interpret", type_name="str")


def test_a_pool_whole_on_several_devices_takes_arguments_placed_anywhere():
    flat_in, offsets, rows, pool = batch(bs=3, width=8, seed=7)
    expected = scatter_reference(flat_in, offsets, rows, pool)
    elsewhere = [jax.device_put(a, CPUS[1]) for a in (flat_in, offsets, rows)]
    for spec in (P(), P(None, "rows")):
        out = scatter_req_token_ids(*elsewhere, jax.device_put(pool, NamedSharding(MESH, spec)))
        assert_same_pool(np.asarray(out), expected)
        assert out.sharding.is_equivalent_to(NamedSharding(MESH, spec), 2)
    with pytest.raises(errors.KvCanaryValueError) as raised:  # several devices against one
        scatter_req_token_ids(jax.device_put(flat_in, NamedSharding(MESH, P())), offsets, rows,
                              jax.device_put(pool, CPUS[2]))
    assert str(raised.value) == errors.DEVICE_MISMATCH.format(arg="flat_in", device="several devices",
                                                               pool_device="cpu:2")


def test_explicit_sharding_mode():
    explicit = jax.make_mesh((4,), ("rows",), axis_types=(jax.sharding.AxisType.Explicit,), devices=CPUS[:4])
    flat_in, offsets, rows, pool = batch(bs=3, width=8, seed=8)
    expected = scatter_reference(flat_in, offsets, rows, pool)
    with jax.sharding.use_mesh(explicit) if hasattr(jax.sharding, "use_mesh") else jax.set_mesh(explicit):
        by_rows = jax.device_put(pool, NamedSharding(explicit, P("rows", None)))
        split_tokens = jax.device_put(np.resize(flat_in, 8 * ((len(flat_in) + 7) // 8)),
                                      NamedSharding(explicit, P("rows")))
        padded = scatter_reference(np.asarray(split_tokens), offsets, rows, pool)
        assert_same_pool(np.asarray(jax.jit(scatter_req_token_ids)(split_tokens, offsets, rows, by_rows)), padded)
        assert_same_pool(np.asarray(scatter_req_token_ids(flat_in, offsets, rows, by_rows)), expected)
        with pytest.raises(errors.KvCanaryValueError) as raised:
            checkify.checkify(jax.jit(lambda *a: scatter_req_token_ids(*a, check_values=True)))(
                flat_in, offsets, rows, by_rows)
        assert str(raised.value) == errors.CHECK_VALUES_EXPLICIT_SHARDED
        by_columns = jax.device_put(pool, NamedSharding(explicit, P(None, "rows")))
        refusal = errors.SHARDED_EXPLICIT_SPLIT.format(arg="pool_out", spec="PartitionSpec(None, 'rows')")
        for interpret in (False, "no"):  # the pool's sharding is refused before the options, on both operations
            with pytest.raises(errors.KvCanaryValueError) as raised:
                scatter_req_token_ids(flat_in, offsets, rows, by_columns, interpret=interpret)
            assert str(raised.value) == refusal
            with pytest.raises(errors.KvCanaryValueError) as raised:
                assign_req_to_token_pool(rows, by_columns, offsets[:-1], offsets[1:], flat_in, interpret=interpret)
            assert str(raised.value) == errors.for_assignment(refusal.replace("pool_out", "req_to_token"))
