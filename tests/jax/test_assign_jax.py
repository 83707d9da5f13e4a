"""``kv_canary_jax.assign_req_to_token_pool`` without a GPU: each implementation (the Pallas kernels in their
interpreters) against the assignment's reference on sentinel tables; jit with the table donated; int32 inputs;
errors; the conformance cases. The GPU test is marked gpu."""

from __future__ import annotations

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from hypothesis import given  # noqa: E402

from kv_canary_jax import assign_req_to_token_pool, implementations  # noqa: E402
from kv_canary_jax.conformance import runners  # noqa: E402
from shared_spec import assignment, errors  # noqa: E402
from shared_spec.conformance import check_case  # noqa: E402
from tests.assign_support import (  # noqa: E402
    EXTREME_WINDOWS, INT64_MAX, INT64_MIN, anything, assignments, conformance_sweeps,
)
from tests.contract import assert_same_pool  # noqa: E402
from tests.profiles import property_settings  # noqa: E402
from tests.strategies import sentinel_pool  # noqa: E402

ALL_WAYS = [("xla", False, 12), ("pallas", True, 3), ("mosaic", True, 2), ("mosaic_tpu", True, 2)]
WAYS = [w for w in ALL_WAYS if implementations.unavailable_reason(w[0], "cpu", w[1]) is None]
IDS = [w[0] for w in WAYS]


@functools.cache
def jitted(implementation, interpret, batch_size):
    def f(rows, table, start, end, loc):
        return assign_req_to_token_pool(rows, table, start, end, loc, batch_size=batch_size,
                                        implementation=implementation, interpret=interpret)

    return jax.jit(f, donate_argnums=1)


def run(batch, implementation, interpret):
    rows, table, start, end, loc, bs = batch
    args = [jnp.asarray(x) for x in (rows, table, start, end, loc)]
    return np.asarray(jitted(implementation, interpret, bs)(*args))


@pytest.mark.parametrize("implementation,interpret,examples", WAYS, ids=IDS)
def test_matches_the_reference(implementation, interpret, examples):
    @property_settings(examples)
    @given(batch=assignments())
    def check(batch):
        assert_same_pool(run(batch, implementation, interpret), assignment.assignment_reference(*batch))

    check()


@pytest.mark.parametrize("start,end", EXTREME_WINDOWS)
def test_int64_extremes(start, end):
    n = len(start)
    batch = (np.arange(n), sentinel_pool(n, 5), np.asarray(start), np.asarray(end), np.arange(1, 8), n)
    assert_same_pool(run(batch, "xla", False), assignment.assignment_reference(*batch))


@pytest.mark.parametrize("prefix", ["masked_prefix", "summed_prefix"])
def test_both_running_sums_are_the_specs_offsets(prefix):
    """The GPU's masked running sum and the cumsum (each platform's formulation, called directly here) give
    ``assignment.windows``' offsets on any int64 windows, extremes included."""
    from kv_canary_jax import assign

    formulation = jax.jit(getattr(assign, prefix))

    @property_settings(25)
    @given(batch=anything())
    def check(batch):
        _, _, start, end, loc, bs = batch
        expected, _ = assignment.windows(np.asarray(start), np.asarray(end), bs, len(loc))
        lengths = assignment.lengths(jnp.asarray(start[:bs], jnp.int64), jnp.asarray(end[:bs], jnp.int64), len(loc), jnp)
        np.testing.assert_array_equal(np.asarray(formulation(lengths)), expected)

    check()
    for start, end in EXTREME_WINDOWS:
        start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
        expected, _ = assignment.windows(start, end, len(start), 7)
        np.testing.assert_array_equal(np.asarray(formulation(assignment.lengths(jnp.asarray(start), jnp.asarray(end), 7, jnp))), expected)


def batch_of(bs, rng, width=9):
    """``bs`` requests, half malformed (int64 extremes, negative and past-the-width windows, rows outside)."""
    start = rng.integers(-3, width, bs)
    start[0], start[-1] = INT64_MIN, 2
    end = start + rng.integers(-2, 6, bs)
    end[0] = INT64_MAX
    return rng.integers(-1, bs + 1, bs), sentinel_pool(bs, width), start, end, np.arange(3, 4 * bs), bs


@pytest.mark.skipif(implementations.unavailable_reason("mosaic", "cpu", True) is not None, reason="no Mosaic GPU here")
def test_mosaic_gpu_kernels_own_running_sum():
    """Batches the Mosaic GPU kernel sums itself (pallas_mosaic_gpu.takes_assignment: scalars up to SCALAR_SUM_MAX
    requests, vectors of VEC from VEC) and those next to them (the running sum from XLA), in the interpreter: int32
    and int64 indices, malformed windows, int64 extremes."""
    pm = pytest.importorskip("kv_canary_jax.pallas_mosaic_gpu")

    @property_settings(4)
    @given(batch=assignments(max_rows=pm.SCALAR_SUM_MAX, max_bs=pm.SCALAR_SUM_MAX))
    def check(batch):
        assert_same_pool(run(batch, "mosaic", True), assignment.assignment_reference(*batch))

    check()
    rng = np.random.default_rng(0)
    for bs in (pm.SCALAR_SUM_MAX, pm.SCALAR_SUM_MAX + 1, pm.VEC, pm.VEC + 3):
        assert pm.takes_assignment(bs) == (bs != pm.SCALAR_SUM_MAX + 1)
        batch = batch_of(bs, rng)
        assert_same_pool(run(batch, "mosaic", True), assignment.assignment_reference(*batch))


@pytest.mark.parametrize("implementation,interpret,examples", WAYS, ids=IDS)
def test_vmap_maps_each_example(implementation, interpret, examples):
    rows, start, end = jnp.array([[1, 0], [0, 1]]), jnp.array([[0, 2], [1, INT64_MIN]]), jnp.array([[2, 3], [3, 1]])
    loc, tables = jnp.arange(6).reshape(2, 3), jnp.asarray(np.stack([sentinel_pool(2, 4)] * 2))
    got = jax.vmap(functools.partial(assign_req_to_token_pool, implementation=implementation, interpret=interpret))(
        rows, tables, start, end, loc)
    for k in range(2):
        expected = assignment.assignment_reference(*(np.asarray(x[k]) for x in (rows, tables, start, end, loc)))
        assert_same_pool(np.asarray(got[k]), expected)


def test_eager_and_default_batch_size():
    rows, start, end = jnp.array([1, 0], jnp.int32), jnp.array([0, 2], jnp.int32), jnp.array([2, 3])
    table = jnp.full((2, 4), -5, jnp.int32)
    got = assign_req_to_token_pool(rows, table, start, end, jnp.arange(5, 8))
    assert got.tolist() == [[-5, -5, 7, -5], [5, 6, -5, -5]] and table.tolist() == [[-5] * 4] * 2


def test_jit_donates_the_table():
    table = jnp.asarray(sentinel_pool(3, 6))
    f = jitted("xla", False, 2)
    out = f(jnp.array([2, 0]), table, jnp.array([1, 0]), jnp.array([3, 1]), jnp.array([9, 8, 7]))
    assert table.is_deleted()
    expected = assignment.assignment_reference([2, 0], sentinel_pool(3, 6), [1, 0], [3, 1], [9, 8, 7], 2)
    assert_same_pool(np.asarray(out), expected)


def test_argument_errors_are_the_assignments():
    table = jnp.zeros((2, 4), jnp.int32)
    one = jnp.zeros(1, jnp.int64)
    with pytest.raises(errors.KvCanaryTypeError) as info:
        assign_req_to_token_pool(one, table.astype(jnp.int64), one, one, one)
    assert str(info.value) == f"{errors.ASSIGN_PREFIX} req_to_token must be int32, got int64"
    with pytest.raises(errors.KvCanaryValueError) as info:
        assign_req_to_token_pool(one, table, one, one, one, implementation="nope")
    assert str(info.value).startswith(f"{errors.ASSIGN_PREFIX} unknown implementation 'nope'")


def test_x64_off_is_refused_after_the_argument_checks():
    table = jnp.zeros((2, 4), jnp.int32)
    jax.config.update("jax_enable_x64", False)
    try:
        one = jnp.zeros(1, jnp.int32)
        with pytest.raises(errors.KvCanaryValueError) as info:
            assign_req_to_token_pool(one, table, one, one, one)
        assert str(info.value) == errors.ASSIGN_NEEDS_X64
    finally:
        jax.config.update("jax_enable_x64", True)


RUNNERS = {runner.name: runner for runner in runners()}


@pytest.mark.parametrize("name, cases", conformance_sweeps(RUNNERS, interpreted=("jax/pallas", "jax/mosaic",
                                                                                 "jax/mosaic_tpu")))
def test_conformance_cases(name, cases):
    runner = RUNNERS[name]
    if runner.unavailable:
        pytest.skip(runner.unavailable)
    results = [check_case(runner, case) for case in cases]
    assert [r for r in results if r.status == "fail"] == []
    assert sum(r.status == "pass" for r in results) >= len(cases) * 3 // 4


@pytest.mark.gpu
@pytest.mark.skipif(not any(d.platform == "gpu" for d in jax.devices()), reason="needs a JAX GPU")
@pytest.mark.parametrize("bs", [1, 16, 17, 127, 128, 131, 300, 1024, 1025])
def test_gpu_default_implementation_on_batches_either_side_of_each_running_sum(bs):
    """The default compiled for the GPU on batches that take each form of the running sum, or the one next to it."""
    batch = batch_of(bs, np.random.default_rng(bs), width=40)
    assert_same_pool(run(batch, None, False), assignment.assignment_reference(*batch))
    int32 = tuple(np.clip(x, -2**31, 2**31 - 1).astype(np.int32) if k in (0, 2, 3, 4) else x for k, x in enumerate(batch))
    assert_same_pool(run(int32, None, False), assignment.assignment_reference(*int32))


@pytest.mark.gpu
@pytest.mark.skipif(not any(d.platform == "gpu" for d in jax.devices()), reason="needs a JAX GPU")
@pytest.mark.parametrize("implementation", [None, "xla"])
def test_gpu_default_implementation_and_xla_path_match_the_reference(implementation):
    """The default (the masked running sum and the kernel) and the XLA path, compiled for the GPU, on any values."""
    @property_settings(10)
    @given(batch=anything(max_rows=20, max_width=40, max_bs=30))
    def check(batch):
        rows, table, start, end, loc, bs = batch
        args = [jax.device_put(x, jax.devices("gpu")[0]) for x in (rows, table, start, end, loc)]
        f = functools.partial(assign_req_to_token_pool, batch_size=bs, implementation=implementation)
        got = jax.jit(f, donate_argnums=1)(*args)
        assert_same_pool(np.asarray(got), assignment.assignment_reference(*batch))

    check()
