"""Row-sharded pools (``kv_canary_jax.sharded``) on several devices: results, donation, HLO, errors.

On the CPU the tests need four host devices: tests/conftest.py sets
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` before JAX starts (they
skip, saying so, when JAX has fewer). Every sharded result is compared byte for
byte with the spec's reference (``scatter_reference``) on the whole pool: the
pool the single-device call (``api.scatter_req_token_ids``) leaves, which the
contract (tests/contract.py) holds every implementation to, here without a
single-device compile per shape. Pools are sentinel-filled; pools whose rows do
not divide among the devices are padded with more sentinel rows, and the
reference gets the padded pool.
The GPU test at the end needs two CUDA GPUs that JAX sees.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from hypothesis import given  # noqa: E402
from jax.experimental import checkify  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import kv_canary_jax  # noqa: E402
from kv_canary_jax import implementations, platforms, sharded  # noqa: E402
from kv_canary_jax.api import scatter_req_token_ids  # noqa: E402
from kv_canary_jax.sharded import scatter_req_token_ids_sharded  # noqa: E402
from shared_spec import errors, scatter_reference  # noqa: E402
from shared_spec.arguments import ARGUMENT_NAMES, OUTPUT, START_COLS  # noqa: E402
from shared_spec.cases import ArrayData, PythonValue, load_cases  # noqa: E402
from tests.contract import assert_same_pool  # noqa: E402
from tests.profiles import property_settings  # noqa: E402
from tests.strategies import batches, large_batch, sentinel_pool, windowed_batches  # noqa: E402

CPUS = jax.devices("cpu")
pytestmark = pytest.mark.skipif(
    len(CPUS) < 4,
    reason="needs 4 host devices: XLA_FLAGS=--xla_force_host_platform_device_count=4 before JAX starts (tests/conftest.py)",
)

P_ = errors.PREFIX
AXIS = "rows"
# (implementation, interpret): every way to run on the CPU.
WAYS = [("xla", False), ("pallas", True)]
WAY_IDS = ["xla", "pallas-interpret"]
COUNTS = [4, 2]
# Ops that move data between devices; a row-sharded call compiles to none of them.
COLLECTIVES = re.compile(r"\b(all-gather|all-to-all|collective-permute|all-reduce|reduce-scatter|collective-broadcast)(-start)?\b")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

CASES = load_cases()


@pytest.fixture(autouse=True)
def host_default_device(request):
    """CPU tests compute on the host devices, also on a GPU machine (jnp.asarray goes there uncommitted)."""
    if request.node.get_closest_marker("gpu"):
        yield
        return
    with jax.default_device(CPUS[0]):
        yield


def runs_here(case) -> bool:
    return "in_place" not in case.requires and "accelerator" not in case.requires


POOL_CASES = [c for c in CASES if not c.expects_error and runs_here(c)]
ERROR_CASES = [c for c in CASES if c.expects_error and runs_here(c)]


def mesh_of(n: int) -> Mesh:
    """A 1-D mesh over the first ``n`` host devices, in JAX's default (auto) sharding mode."""
    return Mesh(np.array(CPUS[:n]), (AXIS,))


def row_sharding(mesh, axis=AXIS) -> NamedSharding:
    return NamedSharding(mesh, P(axis, None))


def on_mesh(pool: np.ndarray, mesh, axis=AXIS) -> jax.Array:
    """``pool`` split by rows; its shards are XLA-owned buffers (made by a computation, not imported)."""
    sharding = row_sharding(mesh, axis)
    placed = jax.device_put(pool.copy(), sharding)
    if pool.size == 0:  # (JAX 0.10 assembles a computed empty array with a row sharding wrongly)
        return placed
    return jax.jit(lambda p: p + 0, out_shardings=sharding)(placed)


def single(*arrays):
    return [jax.device_put(a, CPUS[0]) for a in arrays]


def pad_rows(pool: np.ndarray, n: int) -> np.ndarray:
    """``pool`` with sentinel rows appended up to a multiple of ``n`` rows (unchanged when it divides)."""
    extra = -pool.shape[0] % n
    return np.concatenate([pool, sentinel_pool(extra, pool.shape[1], seed=99)]) if extra else pool


def sharded_fn(mesh=None, axis=None, implementation=None, interpret=False, **kw):
    def f(flat_in, offsets, rows, pool):
        return scatter_req_token_ids_sharded(
            flat_in, offsets, rows, pool, mesh=mesh, axis=axis, implementation=implementation, interpret=interpret, **kw
        )

    return f


def assert_sharded_like_single(batch, n, implementation, interpret, check_values=False) -> np.ndarray:
    """The eager sharded call over ``n`` devices leaves the single-device pool, and keeps the pool's sharding.

    The single-device pool is the reference's on the whole (padded) pool; ``batch[4]``, where there is one, is
    ``start_cols``, replicated.
    """
    mesh = mesh_of(n)
    pool = jax.device_put(batch[3], row_sharding(mesh))
    window = {"start_cols": batch[4]} if len(batch) > 4 else {}  # a windowed batch: start_cols replicated
    out = scatter_req_token_ids_sharded(
        *batch[:3], pool, **window, implementation=implementation, interpret=interpret, check_values=check_values
    )
    if out.size:  # (JAX gives an empty array whatever sharding it likes)
        assert out.sharding.is_equivalent_to(pool.sharding, 2), out.sharding
    got = np.asarray(out)
    expected = scatter_reference(*batch)
    assert (got.dtype, got.shape, got.tobytes()) == (expected.dtype, expected.shape, expected.tobytes())
    assert_same_pool(np.asarray(pool), batch[3])  # the input pool is unchanged
    return got


def compiled_text(fn, *args) -> str:
    return jax.jit(fn).lower(*args).compile().as_text()


def collectives(hlo: str) -> list[str]:
    return sorted({m.group(0) for m in COLLECTIVES.finditer(hlo)})


def shard_pointers(array) -> dict:
    return {s.device: s.data.unsafe_buffer_pointer() for s in array.addressable_shards}


# -- every conformance case, sharded ------------------------------------------------------


# The block arithmetic (rows shifted by the block's first row, rows another
# device owns skipped) is the sharded wrapper's, the same for every
# implementation, and each case costs a compile per way (shape and mesh): by
# default each case runs one way, case i the way i % 3 (XLA on four devices,
# XLA on two, the interpreted Pallas kernel on four), so every case and every
# way run; the slow sweep (-m slow) runs every case every way.
CONFORMANCE_WAYS = [(4, "xla", False), (2, "xla", False), (4, "pallas", True)]
CONFORMANCE_IDS = ["4-xla", "2-xla", "4-pallas-interpret"]


def conformance_params():
    """``(case, n, implementation, interpret)`` for every case and way; marked slow where the default run leaves it out."""
    for w, (way, way_id) in enumerate(zip(CONFORMANCE_WAYS, CONFORMANCE_IDS)):
        for i, case in enumerate(POOL_CASES):
            slow = i % len(CONFORMANCE_WAYS) != w
            yield pytest.param(case, *way, id=f"{case.name}-{way_id}", marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("case,n,implementation,interpret", list(conformance_params()))
def test_conformance_case_matches_single_device(case, n, implementation, interpret):
    batch = [case.args[name].numpy() for name in ARGUMENT_NAMES]
    if isinstance(case.args.get(START_COLS.name), ArrayData):
        batch.append(case.args[START_COLS.name].numpy())
    n_rows = batch[3].shape[0]
    batch[3] = pad_rows(batch[3], n)
    got = assert_sharded_like_single(batch, n, implementation, interpret, case.check_values)
    # Padding rows are written only by requests naming them: the case's own rows are its expectation.
    assert_same_pool(got[:n_rows], case.expected_pool.numpy())


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c.name for c in ERROR_CASES])
def test_errors_match_single_device(case):
    """Bad arguments: the same class and message as the single-device call, before the pool is touched."""
    native = {}
    for name in (*ARGUMENT_NAMES, *(n for n in (START_COLS.name,) if n in case.args)):
        arg = case.args[name]
        native[name] = arg.value if isinstance(arg, PythonValue) else jax.device_put(arg.numpy(), CPUS[0])
    with pytest.raises(Exception) as expected:
        scatter_req_token_ids(**native, check_values=case.check_values)
    assert type(expected.value).__name__ == case.error_class and str(expected.value) == case.message()
    pool = case.args[OUTPUT]
    n = 4
    if isinstance(pool, ArrayData) and len(pool.shape) == 2 and pool.shape[0] % n == 0:
        native[OUTPUT] = on_mesh(pool.numpy(), mesh_of(n))  # the pool really sharded
    with pytest.raises(Exception) as got:
        scatter_req_token_ids_sharded(**native, mesh=mesh_of(n), axis=AXIS, check_values=case.check_values)
    assert type(got.value) is type(expected.value)
    assert str(got.value) == str(expected.value)
    if isinstance(pool, ArrayData):
        assert np.asarray(native[OUTPUT]).tobytes() == pool.numpy().tobytes()


# -- random batches --------------------------------------------------------------------------


@pytest.mark.parametrize("implementation,interpret,examples", [("xla", False, 6), ("pallas", True, 3)], ids=WAY_IDS)
def test_random_batches_match_single_device(implementation, interpret, examples):
    @property_settings(examples)
    @given(batch=batches(max_rows=12, few_shapes=True))
    def check(batch):
        flat_in, offsets, rows, pool = batch
        padded = pad_rows(pool, 4)
        assert_sharded_like_single((flat_in, offsets, rows, padded), 4, implementation, interpret)

    check()


@pytest.mark.parametrize("implementation,interpret,examples", [("xla", False, 6), ("pallas", True, 3)], ids=WAY_IDS)
def test_random_windowed_batches_match_single_device(implementation, interpret, examples):
    """start_cols, per request, replicated: each device writes its rows' windows from their first columns."""

    @property_settings(examples)
    @given(batch=windowed_batches(max_rows=12, few_shapes=True))
    def check(batch):
        flat_in, offsets, rows, pool, start_cols = batch
        padded = pad_rows(pool, 4)
        assert_sharded_like_single((flat_in, offsets, rows, padded, start_cols), 4, implementation, interpret)

    check()


@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
def test_windowed_jit_with_donation_and_checkify(implementation, interpret):
    mesh = mesh_of(4)
    batch = large_batch(bs=15, width=9, seed=45)
    cols = np.random.default_rng(46).integers(0, 10, size=15).astype(np.int64)

    def f(flat_in, offsets, rows, pool, start_cols, check_values=False):
        return scatter_req_token_ids_sharded(
            flat_in, offsets, rows, pool, start_cols=start_cols, mesh=mesh, axis=AXIS,
            implementation=implementation, interpret=interpret, check_values=check_values,
        )

    pool = on_mesh(batch[3], mesh)
    pointers = shard_pointers(pool)
    out = jax.jit(f, donate_argnums=3)(*[jnp.asarray(a) for a in batch[:3]], pool, jnp.asarray(cols))
    assert pool.is_deleted() and shard_pointers(out) == pointers
    assert_same_pool(np.asarray(out), scatter_reference(*batch, cols))
    checked = jax.jit(checkify.checkify(functools.partial(f, check_values=True), errors=checkify.user_checks))
    bad = cols.copy()
    bad[11] = -1
    err, out = checked(*[jnp.asarray(a) for a in batch[:3]], on_mesh(batch[3], mesh), jnp.asarray(bad))
    assert err.get() == per_device(f"{P_} start_cols[11] must be >= 0, got -1", 4)
    assert_same_pool(np.asarray(out), batch[3])


@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
def test_rows_at_shard_edges_and_int64_extremes(implementation, interpret):
    """Each shard's first and last row, rows just outside the pool, and rows whose shifted value wraps."""
    n_rows, width, n = 8, 6, 4  # 2 rows a shard
    rows = np.array([0, 1, 2, 3, 4, 5, 6, 7, -1, n_rows, INT64_MIN, INT64_MIN + 1, INT64_MIN + 5, INT64_MAX, -2 - n_rows], dtype=np.int64)
    rng = np.random.default_rng(21)
    lengths = rng.integers(1, width + 2, size=rows.shape[0])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat_in = rng.integers(INT64_MIN, INT64_MAX, size=int(offsets[-1]), dtype=np.int64, endpoint=True)
    batch = (flat_in, offsets, rows, sentinel_pool(n_rows, width, 22))
    got = assert_sharded_like_single(batch, n, implementation, interpret)
    assert (got != batch[3]).any(axis=1).all()  # every row was written, each by its own device


# -- jit, donation, the compiled program ------------------------------------------------------


@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
@pytest.mark.parametrize("n", COUNTS)
def test_jit_with_donation_writes_every_shard_in_place(n, implementation, interpret):
    mesh = mesh_of(n)
    f = jax.jit(sharded_fn(mesh, AXIS, implementation, interpret), donate_argnums=3)
    pool_np = sentinel_pool(4 * 5, 9, seed=30)
    pool = on_mesh(pool_np, mesh)
    pointers = shard_pointers(pool)
    rng = np.random.default_rng(31)
    for step in range(3):  # a serving loop: the same buffers every step
        flat_in, offsets, rows, _ = large_batch(bs=int(rng.integers(5, 19)), width=9, seed=32 + step)
        rows = rng.permutation(pool_np.shape[0])[: rows.shape[0]].astype(np.int64)
        before = pool
        pool = f(*[jnp.asarray(a) for a in (flat_in, offsets, rows)], pool)
        pool_np = scatter_reference(flat_in, offsets, rows, pool_np)
        assert before.is_deleted()
        assert shard_pointers(pool) == pointers, step
        assert pool.sharding.is_equivalent_to(row_sharding(mesh), 2)
    assert_same_pool(np.asarray(pool), pool_np)


@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
@pytest.mark.parametrize("check_values", [False, True], ids=["plain", "checkify"])
def test_compiled_program_never_moves_the_pool(implementation, interpret, check_values):
    """No collective in the partitioned HLO; each device holds its block, none the whole pool."""
    mesh = mesh_of(4)
    batch = large_batch(bs=15, width=9, seed=40)  # 16 rows: 4 a device
    args = [jnp.asarray(a) for a in batch[:3]] + [on_mesh(batch[3], mesh)]
    fn = sharded_fn(mesh, AXIS, implementation, interpret, check_values=check_values)
    if check_values:
        fn = checkify.checkify(fn, errors=checkify.user_checks)
    hlo = compiled_text(fn, *args)
    assert collectives(hlo) == []
    assert re.search(r"s32\[4,9\]", hlo) and not re.search(r"s32\[16,9\]", hlo)


def test_the_collective_detector_sees_a_gather():
    """The pattern above finds the collective that gathering a row-sharded pool compiles to."""
    mesh = mesh_of(4)
    pool = on_mesh(sentinel_pool(16, 9, 41), mesh)
    gather = lambda p: jax.lax.with_sharding_constraint(p, NamedSharding(mesh, P())) + 1  # noqa: E731
    assert collectives(compiled_text(gather, pool)) != []


@functools.cache
def checkified(n, implementation, interpret):
    """The checked sharded call under jit, checkified (and jitted again: compiled once per test)."""
    fn = jax.jit(sharded_fn(mesh_of(n), AXIS, implementation, interpret, check_values=True))
    return jax.jit(checkify.checkify(fn, errors=checkify.user_checks))


def checkify_failure(args, mesh, implementation, interpret):
    return checkified(len(mesh.devices.flat), implementation, interpret)(*args)


def per_device(message: str, n: int) -> str:
    """``err.get()`` for a failed rule: checkify maps every error through shard_map, one line per device."""
    return "\n".join(f"at mapped index {i}: {message} (`check` failed)" for i in range(n))


@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
def test_checkify_under_jit(implementation, interpret):
    mesh = mesh_of(4)
    batch = large_batch(bs=15, width=7, seed=42)
    args = [jnp.asarray(a) for a in batch[:3]] + [on_mesh(batch[3], mesh)]
    err, out = checkify_failure(args, mesh, implementation, interpret)
    assert err.get() is None and kv_canary_jax.error_from_checkify(err) is None
    assert_same_pool(np.asarray(out), scatter_reference(*batch))
    rows = batch[2].copy()
    rows[9] = rows[2]  # rows that different devices may own; the rule is global
    err, out = checkify_failure([args[0], args[1], jnp.asarray(rows), args[3]], mesh, implementation, interpret)
    assert err.get() == per_device(f"{P_} req_pool_indices[9]={rows[2]} repeats req_pool_indices[2]", 4)
    assert_same_pool(np.asarray(out), batch[3])  # a failed rule writes nothing, on any device
    # A row past the global pool is out of range, although it is inside a device's local range after the shift.
    rows = batch[2].copy()
    rows[0] = 16
    err, _ = checkify_failure([args[0], args[1], jnp.asarray(rows), args[3]], mesh, implementation, interpret)
    assert err.get() == per_device(f"{P_} req_pool_indices[0]=16 is outside [0, 16)", 4)


def test_error_from_checkify_reads_per_device_errors():
    mesh = mesh_of(4)
    batch = large_batch(bs=15, width=7, seed=42)
    rows = batch[2].copy()
    rows[9] = rows[2]
    args = [jnp.asarray(a) for a in (batch[0], batch[1], rows)] + [on_mesh(batch[3], mesh)]
    err, _ = checkify_failure(args, mesh, "xla", False)
    error = kv_canary_jax.error_from_checkify(err)
    assert type(error) is errors.KvCanaryValueError
    assert str(error) == f"{P_} req_pool_indices[9]={rows[2]} repeats req_pool_indices[2]"


def test_argument_errors_under_jit_leave_the_donated_pool():
    mesh = mesh_of(4)
    b = large_batch(bs=7, width=5, seed=43)
    pool = on_mesh(b[3], mesh)
    f = jax.jit(sharded_fn(mesh, AXIS, "xla"), donate_argnums=3)
    with pytest.raises(errors.KvCanaryValueError) as info:
        f(jnp.asarray(b[0]), jnp.asarray(b[1][:-1]), jnp.asarray(b[2]), pool)
    assert str(info.value) == f"{P_} offsets length {len(b[1]) - 1} != bs+1 ({len(b[2]) + 1})"
    assert not pool.is_deleted()
    assert_same_pool(np.asarray(pool), b[3])


def explicit_mesh():
    """A 4-device host mesh in JAX's explicit sharding mode (skips where JAX has no such mode)."""
    axis_type = getattr(jax.sharding, "AxisType", None)
    if axis_type is None:
        pytest.skip("this JAX has no explicit sharding mode")
    return jax.make_mesh((4,), (AXIS,), axis_types=(axis_type.Explicit,), devices=CPUS[:4])


def test_explicit_sharding_mode_reads_the_layout_under_jit():
    mesh = explicit_mesh()
    batch = large_batch(bs=11, width=6, seed=44)
    pool = jax.device_put(batch[3], row_sharding(mesh))
    args = [jnp.asarray(a) for a in batch[:3]] + [pool]
    f = sharded_fn(implementation="xla")  # no mesh, no axis: the traced pool's type says
    out = jax.jit(f)(*args)
    assert_same_pool(np.asarray(out), scatter_reference(*batch))
    assert out.sharding.is_equivalent_to(pool.sharding, 2)
    assert collectives(compiled_text(f, *args)) == []


# -- meshes and placement --------------------------------------------------------------------


@pytest.mark.parametrize("axis", ["a", "b", ("a", "b")], ids=["a", "b", "a+b"])
def test_two_dimensional_mesh(axis):
    """Rows over one axis (replicated over the other) or over both."""
    mesh = Mesh(np.array(CPUS[:4]).reshape(2, 2), ("a", "b"))
    batch = large_batch(bs=11, width=6, seed=45)
    pool = on_mesh(batch[3], mesh, axis)
    assert sharded.row_layout(pool) == (mesh, axis)
    f = jax.jit(sharded_fn(mesh, axis, "xla"), donate_argnums=3)
    args = [jnp.asarray(a) for a in batch[:3]]
    assert collectives(jax.jit(sharded_fn(mesh, axis, "xla")).lower(*args, pool).compile().as_text()) == []
    pointers = shard_pointers(pool)
    out = f(*args, pool)
    assert shard_pointers(out) == pointers
    assert_same_pool(np.asarray(out), scatter_reference(*batch))


def test_eager_inputs_are_placed_on_the_mesh():
    """Host data and arrays on one device are put where the computation needs them (outside jit)."""
    mesh = mesh_of(4)
    batch = large_batch(bs=11, width=6, seed=46)
    expected = scatter_reference(*batch)
    out = scatter_req_token_ids_sharded(*batch, mesh=mesh, axis=AXIS)  # numpy, pool included
    assert out.sharding.is_equivalent_to(row_sharding(mesh), 2)
    assert_same_pool(np.asarray(out), expected)
    on_one = [jax.device_put(a, CPUS[1]) for a in batch]
    out = scatter_req_token_ids_sharded(*on_one, mesh=mesh, axis=AXIS)
    assert out.sharding.is_equivalent_to(row_sharding(mesh), 2)
    assert_same_pool(np.asarray(out), expected)
    assert_same_pool(np.asarray(on_one[3]), batch[3])


def test_row_layout():
    mesh = mesh_of(4)
    pool = sentinel_pool(8, 4)
    assert sharded.row_layout(jax.device_put(pool, row_sharding(mesh))) == (mesh, AXIS)
    assert sharded.row_layout(jax.device_put(pool, NamedSharding(mesh, P(AXIS)))) == (mesh, AXIS)
    assert sharded.row_layout(jax.device_put(pool, NamedSharding(mesh, P(None, AXIS)))) is None
    assert sharded.row_layout(jax.device_put(pool, NamedSharding(mesh, P()))) is None
    assert sharded.row_layout(jax.device_put(pool, CPUS[0])) is None
    assert sharded.row_layout(jax.device_put(pool, row_sharding(mesh_of(1)))) is None  # one device: nothing to split
    assert sharded.row_layout(pool) is None
    assert sharded.row_layout(jax.device_put(pool.reshape(-1)[:8], NamedSharding(mesh, P(AXIS)))) is None  # 1-D


# Once api.scatter_req_token_ids routes row-sharded pools here (it imports this module), plain calls need no wrapper.
@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
def test_public_call_dispatches_on_a_row_sharded_pool(implementation, interpret):
    batch = large_batch(bs=15, width=9, seed=47)
    pool = on_mesh(batch[3], mesh_of(4))

    def call():
        return scatter_req_token_ids(*batch[:3], pool, implementation=implementation, interpret=interpret)

    assert "shard_map" in str(jax.make_jaxpr(call)())
    out = call()
    assert out.sharding.is_equivalent_to(pool.sharding, 2)
    assert_same_pool(np.asarray(out), scatter_reference(*batch))


def test_public_call_under_jit_in_explicit_sharding_mode():
    mesh = explicit_mesh()
    batch = large_batch(bs=15, width=9, seed=48)
    f = jax.jit(lambda *a: scatter_req_token_ids(*a, implementation="pallas", interpret=True), donate_argnums=3)
    args = [jnp.asarray(a) for a in batch[:3]] + [jax.device_put(batch[3], row_sharding(mesh))]
    assert collectives(f.lower(*args).compile().as_text()) == []
    assert_same_pool(np.asarray(f(*args)), scatter_reference(*batch))


# -- errors of the sharded call ----------------------------------------------------------------


def sharded_error(*args, **kw) -> Exception:
    with pytest.raises((errors.KvCanaryTypeError, errors.KvCanaryValueError)) as info:
        scatter_req_token_ids_sharded(*args, **kw)
    return info.value


def test_uneven_rows_are_refused():
    mesh = mesh_of(4)
    b = large_batch(bs=5, width=4, seed=50)  # 6 rows
    error = sharded_error(*b, mesh=mesh, axis=AXIS)
    assert type(error) is errors.KvCanaryValueError
    assert str(error) == f"{P_} pool_out has 6 rows, which the 4 devices of mesh axis 'rows' cannot split evenly; give the pool a multiple of 4 rows"
    two_d = Mesh(np.array(CPUS[:4]).reshape(2, 2), ("a", "b"))
    error = sharded_error(*b, mesh=two_d, axis=("a", "b"))
    assert str(error) == errors.SHARDED_UNEVEN.format(rows=6, devices=4, axis=("a", "b"))
    assert_same_pool(np.asarray(sharded_fn(two_d, "a")(*b)), scatter_reference(*b))  # 6 rows over 2 devices: fine


def test_layout_errors():
    mesh = mesh_of(4)
    b = large_batch(bs=7, width=4, seed=51)  # 8 rows
    unknown = errors.SHARDED_LAYOUT_UNKNOWN
    assert str(sharded_error(*b)) == unknown.format(reason=errors.SHARDED_LAYOUT_HOST.format(type_name="ndarray"))
    on_cpu = single(*b)
    assert str(sharded_error(*on_cpu)) == unknown.format(
        reason=errors.SHARDED_LAYOUT_SHARDING.format(sharding="SingleDeviceSharding")
    )
    columns = jax.device_put(b[3], NamedSharding(mesh, P(None, AXIS)))
    assert str(sharded_error(*b[:3], columns)) == unknown.format(
        reason=errors.SHARDED_LAYOUT_SHARDING.format(sharding="PartitionSpec(None, 'rows')")
    )
    with pytest.raises(errors.KvCanaryValueError) as info:  # auto mode: a traced pool has no layout
        jax.jit(sharded_fn())(*[jnp.asarray(a) for a in b[:3]], on_mesh(b[3], mesh))
    assert str(info.value) == unknown.format(reason=errors.SHARDED_LAYOUT_TRACED)
    error = sharded_error(*b, mesh=mesh, axis="cols")
    assert type(error) is errors.KvCanaryValueError
    assert str(error) == f"{P_} axis 'cols' is not an axis of the mesh; its axes are ('rows',)"
    assert str(sharded_error(*b, mesh=mesh, axis=3)) == errors.SHARDED_UNKNOWN_AXIS.format(axis=3, axes=(AXIS,))
    error = sharded_error(*b, mesh="mesh", axis=AXIS)
    assert type(error) is errors.KvCanaryTypeError
    assert str(error) == f"{P_} mesh must be a jax.sharding.Mesh, got str"


def test_argument_checks_come_before_the_layout():
    b = large_batch(bs=5, width=4, seed=52)  # 6 rows: uneven over 4, and no layout
    error = sharded_error(b[0].astype(np.int32), *b[1:], mesh=mesh_of(4), axis=AXIS)
    assert str(error) == f"{P_} flat_in must be int64, got int32"
    error = sharded_error(b[0], b[1], b[2], [1, 2])
    assert str(error) == f"{P_} pool_out must be an array, got list"


def test_value_checks_use_the_global_pool():
    """check_values outside jit: the host rules see the global row count, not a device's."""
    mesh = mesh_of(4)
    b = large_batch(bs=7, width=4, seed=53)
    rows = b[2].copy()
    rows[3] = 8
    pool = on_mesh(b[3], mesh)
    error = sharded_error(b[0], b[1], rows, pool, check_values=True)
    assert str(error) == f"{P_} req_pool_indices[3]=8 is outside [0, 8)"
    assert_same_pool(np.asarray(pool), b[3])


def test_exported_from_the_package():
    assert kv_canary_jax.scatter_req_token_ids_sharded is scatter_req_token_ids_sharded


# -- two GPUs --------------------------------------------------------------------------------------


def _cuda_gpus():
    try:
        return [d for d in jax.devices("gpu") if platforms.platform(d) == platforms.CUDA]
    except RuntimeError:
        return []


@pytest.mark.gpu
@pytest.mark.multidevice
@pytest.mark.parametrize("implementation", [None, *implementations.IMPLEMENTATIONS])
def test_two_gpus(implementation):
    """A pool split over two GPUs: each device's own kernel, donated in place, no collective."""
    gpus = _cuda_gpus()
    if len(gpus) < 2:
        pytest.skip("needs two CUDA GPUs that JAX sees")
    try:
        implementations.choice(implementation, platforms.platform(gpus[0]), False)
    except errors.KvCanaryValueError as error:
        pytest.skip(str(error))
    mesh = Mesh(np.array(gpus[:2]), (AXIS,))
    sharding = row_sharding(mesh)
    f = sharded_fn(mesh, AXIS, implementation)
    batch = large_batch(bs=999, width=1500, seed=60)  # 1000 rows; rows wider than a kernel tile
    args = [jax.device_put(a, NamedSharding(mesh, P())) for a in batch[:3]]
    pool = jax.jit(lambda p: p + 0, out_shardings=sharding)(jax.device_put(batch[3], sharding))
    assert collectives(compiled_text(f, *args, pool)) == []
    if implementation == implementations.PALLAS:
        assert "triton" in jax.jit(f).lower(*args, pool).as_text()
    pointers = shard_pointers(pool)
    out = jax.jit(f, donate_argnums=3)(*args, pool)
    assert shard_pointers(out) == pointers
    assert_same_pool(np.asarray(out), scatter_reference(*batch))

    @property_settings(4)
    @given(batch=batches(max_rows=12, max_width=40, max_bs=16, max_tokens=200))
    def check(batch):
        padded = pad_rows(batch[3], 2)
        out = scatter_req_token_ids_sharded(*batch[:3], jax.device_put(padded, sharding), implementation=implementation)
        assert_same_pool(np.asarray(out), scatter_reference(*batch[:3], padded))

    check()
