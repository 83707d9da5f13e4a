"""The JAX entry point's own behaviour: implementation choice, foreign arrays, int32 narrowing, jit and donation,
argument errors, devices, and the package's imports."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import kv_canary_jax
from kv_canary_jax import implementations, scatter_req_token_ids
from shared_spec import errors
from shared_spec.reference import scatter_reference
from tests.contract import assert_same_pool
from tests.jax_support import WAY_IDS, WAYS, batch, fresh, fresh_python, jitted, scatter_fn

P = errors.PREFIX
NO_GPU = implementations.first_device("cuda") is None
CHOICES = "'pallas', 'mosaic', 'mosaic_tpu', 'xla'"


# -- implementation choice -------------------------------------------------------------------------------------


@pytest.mark.parametrize("implementation,shown", [
    ("triton", "'triton'"), (["xla", "cuda"], "'cuda'"), (3, "3"), ([], "[]"), (("xla", None), "None"),
    (np.array(["xla"]), "array(['xla'], dtype='<U3')"),
])
def test_unknown_implementations_are_refused(implementation, shown):
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(*batch(), implementation=implementation)
    assert str(info.value) == f"{P} unknown implementation {shown}; expected one of {CHOICES}"


@pytest.mark.parametrize("name,reason", [
    ("pallas", errors.PALLAS_NEEDS_GPU), ("mosaic", errors.MOSAIC_NEEDS_GPU), ("mosaic_tpu", errors.MOSAIC_TPU_NEEDS_TPU),
])
def test_a_kernel_that_cannot_run_here_says_why_and_a_sequence_falls_through(name, reason):
    b = batch(seed=1)
    for call in (scatter_fn(name), jax.jit(scatter_fn(name))):  # eager, and at trace time under jit
        with pytest.raises(errors.KvCanaryValueError) as info:
            call(*b)
        assert str(info.value) == f"{P} implementation {name!r} cannot run here: {reason}"
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(*b, implementation=[name])
    assert str(info.value) == f"{P} none of the implementations {name!r} can run here: {name!r}: {reason}"
    assert_same_pool(np.asarray(scatter_fn((name, "xla"))(*b)), scatter_reference(*b))


def test_a_kernel_whose_module_does_not_import_is_unavailable_with_the_import_error(monkeypatch):
    broken = {"mosaic": "ImportError: no absl"}
    monkeypatch.setattr(implementations, "import_error", lambda name: broken.get(name))
    reason = errors.MOSAIC_NOT_IMPORTABLE.format(error="ImportError: no absl")
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(*batch(), implementation="mosaic", interpret=True)
    assert str(info.value) == f"{P} implementation 'mosaic' cannot run here: {reason}"
    assert implementations.choice(None, "cpu", True) == ((None, "pallas"),)
    assert "mosaic" not in kv_canary_jax.available_implementations(interpret=True)


@pytest.mark.skipif(not NO_GPU, reason="a machine without a GPU")
def test_available_implementations_and_the_choices_here():
    assert kv_canary_jax.IMPLEMENTATIONS == ("pallas", "mosaic", "mosaic_tpu", "xla")
    assert kv_canary_jax.available_implementations() == ("xla",)
    assert kv_canary_jax.available_implementations(interpret=True) == kv_canary_jax.IMPLEMENTATIONS
    assert implementations.choice(None, "cpu", False) == ((None, "xla"),)
    assert implementations.choice(None, None, False) == ((None, "xla"),)  # traced: only platforms present here
    assert implementations.choice(None, "cpu", True) == ((None, "mosaic"),)


@pytest.mark.parametrize("capability,expected", [((9, 0), "mosaic"), ((10, 0), "mosaic"), ((8, 9), "pallas")])
def test_a_traced_call_picks_the_gpu_kernel_for_the_gpu_by_compute_capability(monkeypatch, capability, expected):
    cpu = jax.devices("cpu")[0]
    monkeypatch.setattr(implementations, "first_device", lambda platform: cpu if platform in ("cpu", "cuda") else None)
    monkeypatch.setattr(implementations, "gpu_capability", lambda: capability)
    assert implementations.choice(None, None, False) == ((None, "xla"), ("cuda", expected))
    assert implementations.choice(None, "cuda", False) == ((None, expected),)


@pytest.mark.skipif(not NO_GPU, reason="a machine without a GPU (test_gpu.py has the GPU's default)")
def test_the_default_on_the_cpu_imports_no_gpu_lowering():
    script = """
import sys
import jax, numpy as np
from kv_canary_jax import scatter_req_token_ids
args = (np.arange(10, 16, dtype=np.int32), np.array([0, 4, 6], np.int32), np.array([1, 0], np.int32),
        np.full((3, 5), -1, np.int32))
eager = scatter_req_token_ids(*args)
jitted = jax.jit(scatter_req_token_ids, donate_argnums=3)(*args)
assert (np.asarray(eager) == np.asarray(jitted)).all()
loaded = [m for m in ("jax.experimental.pallas.triton", "jax.experimental.pallas.mosaic_gpu",
                      "kv_canary_jax.pallas_triton", "kv_canary_jax.pallas_mosaic_gpu") if m in sys.modules]
print(loaded, np.asarray(eager).tolist())
"""
    done = fresh_python(script)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[] [[14, 15, -1, -1, -1], [10, 11, 12, 13, -1], [-1, -1, -1, -1, -1]]"


def test_importing_without_jax_names_the_install():
    script = """
import importlib.abc, sys
class NoJax(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "jax" or name.startswith("jax."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoJax())
try:
    import kv_canary_jax
except ModuleNotFoundError as error:
    print(error)
"""
    done = fresh_python(script)
    hint = errors.install_hint(["jax"])
    assert done.stdout.strip() == errors.FRONTEND_NEEDS.format(frontend="kv_canary_jax", module="jax", hint=hint)


# -- foreign arrays and int32 narrowing ------------------------------------------------------------------------


@pytest.mark.parametrize("implementation,interpret", WAYS[:2], ids=WAY_IDS[:2])
def test_numpy_and_torch_arguments_outside_jit(implementation, interpret):
    b = batch(bs=5, seed=2)
    expected = scatter_reference(*b)
    f = scatter_fn(implementation, interpret)
    pool = b[3].copy()
    out = f(*b[:3], pool)
    assert isinstance(out, jax.Array) and out.dtype == jnp.int32
    assert_same_pool(np.asarray(out), expected)
    assert_same_pool(pool, b[3])  # the host pool is unchanged
    tensors = [torch.from_numpy(a.astype(np.int64)) for a in b[:3]] + [torch.from_numpy(b[3].copy())]
    assert_same_pool(np.asarray(f(*tensors)), expected)  # int64 tensors narrowed: their values fit int32
    mixed = (b[0].astype(np.int64), jnp.asarray(b[1]), torch.from_numpy(b[2]), jnp.asarray(b[3]))
    assert_same_pool(np.asarray(f(*mixed)), expected)


def test_numpy_closed_over_inside_jit():
    b = batch(bs=5, seed=3)
    f = jax.jit(lambda pool: scatter_req_token_ids(b[0].astype(np.int64), b[1], b[2].astype(np.int64), pool))
    assert_same_pool(np.asarray(f(jnp.asarray(b[3]))), scatter_reference(*b))


@pytest.mark.parametrize("kind", ["numpy", "big-endian", "torch"])
def test_int64_host_data_past_int32_is_refused_at_its_first_argument_and_index(kind):
    flat_in, offsets, rows, pool = batch(bs=4, seed=4, dtype=np.int64)
    offsets[3], offsets[4] = 2**31, -(2**31) - 1
    rows[2] = 2**40  # later in argument order than offsets: not the one named
    wrap = {"numpy": np.asarray, "big-endian": lambda a: a.astype(">i8"), "torch": torch.from_numpy}[kind]
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(wrap(flat_in), wrap(offsets), wrap(rows), pool, implementation="not one")
    assert str(info.value) == errors.NOT_INT32.format(arg="offsets", index=3, value=2**31)  # before the choice
    with pytest.raises(errors.KvCanaryTypeError) as info:  # after the argument checks
        scatter_req_token_ids(wrap(flat_in), wrap(offsets), wrap(rows), pool.astype(np.int64))
    assert str(info.value) == f"{P} pool_out must be int32, got int64"
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(flat_in, offsets[:-1], rows[:-1], pool, start_cols=np.array([0, 0, 2**35]))
    assert str(info.value) == errors.NOT_INT32.format(arg="offsets", index=3, value=2**31)
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(flat_in, offsets[:3], rows[:2], pool, start_cols=np.array([0, -(2**35)]))
    assert str(info.value) == errors.NOT_INT32.format(arg="start_cols", index=1, value=-(2**35))


def test_host_arrays_jax_cannot_take_as_they_are_are_read_through_a_copy():
    flat_in, offsets, rows, pool = batch(bs=4, seed=5)
    unaligned = np.zeros(flat_in.nbytes + 1, np.uint8)[1:].view(flat_in.dtype)
    unaligned[...] = flat_in
    forms = (unaligned, offsets[::-1].copy()[::-1], rows.astype(rows.dtype.newbyteorder(">")), pool[::-1].copy()[::-1])
    assert_same_pool(np.asarray(scatter_req_token_ids(*forms, implementation="xla")), scatter_reference(*batch(
        bs=4, seed=5)))


def test_prng_keys_and_too_many_requests_get_the_spec_s_errors():
    flat_in, offsets, rows, pool = batch(bs=2, seed=6)
    keys = jax.random.split(jax.random.key(0), 3)
    with pytest.raises(errors.KvCanaryTypeError) as info:
        scatter_req_token_ids(flat_in, keys, rows, pool)
    assert str(info.value) == errors.WRONG_DTYPE.format(arg="offsets", dtype="int32 or int64", got=str(keys.dtype))
    bs = 2**31 - 1 + 1  # shapes only: nothing of this size is made
    shapes = (jax.ShapeDtypeStruct(s, jnp.int32) for s in ((8,), (bs + 1,), (bs,), (4, 4)))
    with pytest.raises(errors.KvCanaryValueError) as info:
        jax.eval_shape(scatter_req_token_ids, *shapes)
    assert str(info.value) == errors.TOO_MANY_REQUESTS.format(bs=bs, limit=2**31 - 1)


def test_int64_host_data_stays_int64_with_x64(x64):
    flat_in = np.arange(1, 9, dtype=np.int64) + 2**40  # low 32 bits: 1 .. 8
    rows, pool = np.array([1], dtype=np.int64), np.full((2, 4), -1, np.int32)
    out = scatter_req_token_ids(flat_in, np.array([1, 4]), rows, pool, start_cols=np.array([1]))
    assert_same_pool(np.asarray(out), np.array([[-1] * 4, [-1, 2, 3, 4]], np.int32))
    out = scatter_req_token_ids(flat_in, np.array([2**40, 2**40 + 3]), rows, pool, start_cols=np.array([-(2**40)]))
    assert_same_pool(np.asarray(out), pool)  # past flat_in, and before column 0: nothing
    jaxpr = jax.make_jaxpr(lambda p: scatter_req_token_ids(flat_in, np.array([1, 4]), rows, p))(pool)
    assert "i64[8]" in str(jaxpr)


def test_the_library_never_changes_x64():
    scatter_req_token_ids(*batch(dtype=np.int64))
    assert not jax.config.jax_enable_x64
    assert jnp.asarray(np.int64(1)).dtype == jnp.int32


# -- jit, donation, argument errors, devices -------------------------------------------------------------------


@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
def test_jit_with_donation_writes_the_donated_buffer(implementation, interpret):
    b = batch(bs=7, seed=5)
    pool = fresh(b[3])
    pointer = pool.unsafe_buffer_pointer()
    out = jitted(implementation, interpret, donate=True)(*b[:3], pool)
    assert out.unsafe_buffer_pointer() == pointer and pool.is_deleted()
    assert_same_pool(np.asarray(out), scatter_reference(*b))


def test_an_eager_call_leaves_its_pool_alone():
    b = batch(seed=6)
    pool = jnp.asarray(b[3])
    out = scatter_req_token_ids(*b[:3], pool)
    assert not pool.is_deleted()
    assert_same_pool(np.asarray(pool), b[3])
    assert_same_pool(np.asarray(out), scatter_reference(*b))


def test_argument_errors_under_jit_are_raised_while_tracing_and_leave_the_donated_pool():
    b = batch(seed=7)
    pool = fresh(b[3])
    with pytest.raises(errors.KvCanaryValueError) as info:
        jitted("xla", False, donate=True)(b[0], b[1][:-1], b[2], pool)
    assert str(info.value) == f"{P} offsets length {len(b[1]) - 1} != bs+1 ({len(b[2]) + 1})"
    assert not pool.is_deleted()
    assert_same_pool(np.asarray(pool), b[3])


def test_arrays_on_two_devices_are_refused_and_host_data_follows_the_pool():
    cpus = jax.devices("cpu")
    b = batch(seed=8)
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(jax.device_put(b[0], cpus[0]), *b[1:3], jax.device_put(b[3], cpus[1]))
    assert str(info.value) == f"{P} flat_in is on cpu but pool_out is on cpu:1; all arrays must be on one device"
    out = scatter_req_token_ids(*b[:3], jax.device_put(b[3], cpus[1]))
    assert out.devices() == {cpus[1]}
    out = scatter_req_token_ids(b[0], jax.device_put(b[1], cpus[2]), *b[2:])  # a host pool: offsets decide
    assert out.devices() == {cpus[2]}
    assert_same_pool(np.asarray(out), scatter_reference(*b))
    with jax.default_device(cpus[3]):  # host data alone: JAX's default device
        assert scatter_req_token_ids(*b).devices() == {cpus[3]}


@pytest.mark.parametrize("interpret", ["no", 1, np.array([True, False]), None])
def test_interpret_must_be_a_bool(interpret):
    flat_in, offsets, rows, pool = batch(bs=2, seed=9)
    with pytest.raises(errors.KvCanaryTypeError) as info:
        scatter_req_token_ids(flat_in, offsets, rows, pool, interpret=interpret)
    assert str(info.value) == errors.NOT_A_BOOL.format(option="interpret", type_name=type(interpret).__name__)
    with pytest.raises(errors.KvCanaryTypeError) as info:
        kv_canary_jax.assign_req_to_token_pool(rows, pool, offsets[:2], offsets[1:], flat_in, interpret=interpret)
    assert str(info.value) == errors.for_assignment(errors.NOT_A_BOOL).format(
        option="interpret", type_name=type(interpret).__name__)


def test_arrays_in_another_memory_of_their_device_are_moved_into_its_default():
    flat_in, offsets, rows, pool = batch(bs=2, seed=10)
    device = jax.devices()[0]
    kinds = [m.kind for m in device.addressable_memories() if m.kind != device.default_memory().kind]
    if not kinds:
        pytest.skip("this device has one memory")
    away = [jax.device_put(a, jax.sharding.SingleDeviceSharding(device, memory_kind=kinds[0])) for a in (flat_in, pool)]
    for implementation in ("xla", "pallas", "mosaic"):
        out = scatter_req_token_ids(away[0], offsets, rows, away[1], implementation=implementation, interpret=True)
        assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool))
