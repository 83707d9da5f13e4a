"""The JAX frontend's own behaviour: jit, implementation choice, x64, checkify, vmap, numpy inputs.

The shared contract (test_jax_xla.py, test_jax_pallas.py) covers semantics and
messages; these tests cover what only JAX has. The Pallas kernel runs in the
Pallas interpreter here (``interpret=True``); test_jax_gpu.py runs it for real.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.experimental import checkify  # noqa: E402

import kv_canary_jax  # noqa: E402
from kv_canary_arrays import devices  # noqa: E402
from kv_canary_jax import implementations, platforms, xla  # noqa: E402
from kv_canary_jax.api import scatter_req_token_ids  # noqa: E402
from shared_spec import errors, scatter_reference  # noqa: E402
from shared_spec.cases import load_cases  # noqa: E402
from tests.contract import assert_same_pool  # noqa: E402
from tests.jax_support import default_gpu_kernel  # noqa: E402
from tests.strategies import large_batch, sentinel_pool  # noqa: E402

P = errors.PREFIX
NO_GPU = platforms.gpu_device() is None
# (implementation, interpret): every way to run here.
WAYS = [("xla", False), ("pallas", True)]
CHECKED_ERRORS = [c for c in load_cases() if c.rule == "check_values" and c.expects_error]


def batch(bs=6, width=5, seed=1):
    return large_batch(bs=bs, width=width, seed=seed)


def as_jax(*arrays):
    return [jnp.asarray(a) for a in arrays]


def scatter_fn(implementation, interpret, **kw):
    def f(flat_in, offsets, rows, pool, start_cols=None):
        return scatter_req_token_ids(
            flat_in, offsets, rows, pool, start_cols=start_cols, implementation=implementation, interpret=interpret, **kw
        )

    return f


def pallas_calls(fn, *args) -> int:
    """How many pallas_call equations the jaxpr of ``fn(*args)`` holds (nested jaxprs included)."""
    return str(jax.make_jaxpr(fn)(*args)).count("pallas_call[")


# -- jit and donation -------------------------------------------------------------


@pytest.mark.parametrize("implementation,interpret", WAYS)
def test_jit_matches_reference(implementation, interpret):
    b = batch(bs=30, width=9, seed=4)
    out = jax.jit(scatter_fn(implementation, interpret))(*as_jax(*b))
    assert_same_pool(np.asarray(out), scatter_reference(*b))


@pytest.mark.parametrize("implementation,interpret", WAYS)
def test_jit_with_donation_writes_the_donated_buffer(implementation, interpret):
    b = batch(bs=30, width=9, seed=6)
    args = as_jax(*b)
    pointer = args[3].unsafe_buffer_pointer()
    out = jax.jit(scatter_fn(implementation, interpret), donate_argnums=3)(*args)
    assert out.unsafe_buffer_pointer() == pointer
    assert args[3].is_deleted()
    assert_same_pool(np.asarray(out), scatter_reference(*b))


@pytest.mark.parametrize("implementation,interpret", WAYS)
def test_eager_call_leaves_the_input_pool_alone(implementation, interpret):
    b = batch(seed=7)
    args = as_jax(*b)
    out = scatter_fn(implementation, interpret)(*args)
    assert not args[3].is_deleted()
    assert_same_pool(np.asarray(args[3]), b[3])
    assert_same_pool(np.asarray(out), scatter_reference(*b))


def test_default_under_jit_on_this_machine():
    # Under jit the choice is made per platform at lowering: XLA on the CPU.
    b = batch(seed=8)
    out = jax.jit(scatter_fn(None, False))(*as_jax(*b))
    assert_same_pool(np.asarray(out), scatter_reference(*b))


# -- implementation choice ----------------------------------------------------------


@pytest.mark.parametrize(
    "implementation,name",
    [("triton", "'triton'"), (["xla", "cuda"], "'cuda'"), (3, "3"), ([], "[]"), (("xla", None), "None")],
)
def test_unknown_implementation(implementation, name):
    b = as_jax(*batch())
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(*b, implementation=implementation)
    assert str(info.value) == f"{P} unknown implementation {name}; expected one of 'pallas', 'mosaic', 'mosaic_tpu', 'xla'"


@pytest.mark.skipif(not NO_GPU, reason="the kernel can run here")
def test_pallas_without_gpu_or_interpreter_is_unavailable():
    b = as_jax(*batch())
    expected = f"{P} implementation 'pallas' cannot run here: {errors.PALLAS_NEEDS_GPU}"
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(*b, implementation="pallas")
    assert str(info.value) == expected
    with pytest.raises(errors.KvCanaryValueError) as info:  # same at trace time under jit
        jax.jit(scatter_fn("pallas", False))(*b)
    assert str(info.value) == expected
    assert_same_pool(np.asarray(b[3]), batch()[3])


@pytest.mark.skipif(not NO_GPU, reason="the kernel can run here")
def test_sequence_none_of_which_runs():
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(*as_jax(*batch()), implementation=["pallas"])
    assert str(info.value) == f"{P} none of the implementations 'pallas' can run here: 'pallas': {errors.PALLAS_NEEDS_GPU}"


@pytest.mark.skipif(not NO_GPU, reason="the kernel can run here")
def test_sequence_takes_the_first_that_runs():
    b = batch()
    args = as_jax(*b)
    # Concrete arrays: the platform is known, so only the chosen implementation is traced.
    assert pallas_calls(lambda: scatter_req_token_ids(*args, implementation=("pallas", "xla"))) == 0
    assert pallas_calls(lambda: scatter_req_token_ids(*args, implementation=("pallas", "xla"), interpret=True)) == 1
    assert pallas_calls(lambda: scatter_req_token_ids(*args)) == 0
    out = scatter_req_token_ids(*args, implementation=("pallas", "xla"))
    assert_same_pool(np.asarray(out), scatter_reference(*b))


def test_available_implementations():
    hopper = implementations.unavailable_reason("mosaic", "cuda", False) is None
    on_gpu = ("pallas", "mosaic", "xla") if hopper else ("pallas", "xla")
    assert kv_canary_jax.available_implementations() == (("xla",) if NO_GPU else on_gpu)
    interpreted = ("pallas", "mosaic_tpu", "xla") if implementations.mosaic_import_error() else ("pallas", "mosaic", "mosaic_tpu", "xla")
    assert kv_canary_jax.available_implementations(interpret=True) == interpreted


def test_plans():
    choice = implementations.choice
    on_cuda, interpreted = default_gpu_kernel("cuda", False), default_gpu_kernel("cpu", True)
    assert choice(None, "cpu", False) == ((None, "xla"),)
    assert choice(None, "cuda", False) == ((None, on_cuda),)
    assert choice(None, "cpu", True) == ((None, interpreted),)
    assert choice("xla", "cuda", False) == ((None, "xla"),)
    assert choice(("pallas", "xla"), "cpu", False) == ((None, "xla"),)
    # Tracers carry no device: one choice per platform, picked when lowering.
    tpu = (("tpu", "mosaic_tpu"),) if "tpu" in implementations.PLATFORM_DEFAULTS else ()
    assert choice(None, None, False) == (("cuda", on_cuda), *tpu, (None, "xla"))
    assert choice("xla", None, False) == ((None, "xla"),)
    assert choice("pallas", None, True) == ((None, "pallas"),)


# -- x64 ------------------------------------------------------------------------------


def _x64_off():
    return jax.enable_x64(False)


def test_x64_disabled_numpy_inputs_fail_their_dtype_check_with_the_note():
    b = batch()
    with _x64_off():
        with pytest.raises(errors.KvCanaryTypeError) as info:
            scatter_req_token_ids(*b)
    assert str(info.value) == f"{P} flat_in must be int64, got int32"
    assert info.value.__notes__.count(errors.X64_NOTE) == 1  # (JAX may add its traceback note)
    assert jax.config.jax_enable_x64  # the library never changes the flag


def test_x64_disabled_jax_inputs_fail_their_dtype_check_with_the_note():
    b = batch()
    with _x64_off():
        args = as_jax(*b)  # JAX makes the int64 data int32
        assert args[0].dtype == np.int32
        with pytest.raises(errors.KvCanaryTypeError) as info:
            jax.jit(scatter_fn("xla", False))(*args)
    assert str(info.value) == f"{P} flat_in must be int64, got int32"
    assert info.value.__notes__.count(errors.X64_NOTE) == 1  # (JAX may add its traceback note)


def test_x64_enabled_dtype_errors_have_no_note():
    b = batch()
    with pytest.raises(errors.KvCanaryTypeError) as info:
        scatter_req_token_ids(b[0].astype(np.int32), *b[1:])
    assert str(info.value) == f"{P} flat_in must be int64, got int32"
    assert errors.X64_NOTE not in getattr(info.value, "__notes__", [])


# -- numpy inputs and argument checks ----------------------------------------------------


@pytest.mark.parametrize("implementation,interpret", WAYS)
def test_numpy_inputs_outside_jit(implementation, interpret):
    b = batch(seed=9)
    pool_before = b[3].copy()
    out = scatter_fn(implementation, interpret)(*b)
    assert isinstance(out, jax.Array)
    assert_same_pool(np.asarray(out), scatter_reference(*b))
    assert_same_pool(b[3], pool_before)


def test_mixed_numpy_and_jax_inputs():
    b = batch(seed=10)
    out = scatter_req_token_ids(b[0], jnp.asarray(b[1]), b[2], jnp.asarray(b[3]))
    assert_same_pool(np.asarray(out), scatter_reference(*b))


def test_argument_errors_under_jit_are_raised_while_tracing():
    b = batch()
    args = as_jax(b[0], b[1][:-1], b[2], b[3])
    f = jax.jit(scatter_fn("xla", False), donate_argnums=3)
    with pytest.raises(errors.KvCanaryValueError) as info:
        f(*args)
    assert str(info.value) == f"{P} offsets length {len(b[1]) - 1} != bs+1 ({len(b[2]) + 1})"
    assert not args[3].is_deleted()
    assert_same_pool(np.asarray(args[3]), b[3])


def test_a_numpy_scalar_is_not_an_array():
    b = batch()
    with pytest.raises(errors.KvCanaryTypeError) as info:
        scatter_req_token_ids(b[0], np.int64(0), b[2], b[3])
    assert str(info.value) == f"{P} offsets must be an array, got int64"


def test_arguments_on_another_device_are_rejected():
    cpus = jax.devices("cpu")
    gpu = platforms.gpu_device()
    other = gpu if gpu is not None else (cpus[1] if len(cpus) > 1 else None)
    if other is None:
        pytest.skip("one device only")
    b = batch()
    args = [jax.device_put(a, cpus[0]) for a in b[:3]] + [jax.device_put(b[3], other)]
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(*args)
    assert str(info.value).startswith(f"{P} flat_in is on cpu but pool_out is on ")


def test_with_a_host_pool_the_first_argument_on_a_device_decides():
    """A numpy pool goes where the arrays are: arrays on two devices get the spec's device error, not JAX's."""
    cpus = jax.devices("cpu")
    if len(cpus) < 2:
        pytest.skip("one device only")
    b = batch()
    args = [jax.device_put(b[0], cpus[0]), jax.device_put(b[1], cpus[1]), jax.device_put(b[2], cpus[0]), np.array(b[3])]
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(*args)
    assert str(info.value) == errors.DEVICE_MISMATCH_HOST_POOL.format(
        arg="offsets", device=devices.jax_device_name(cpus[1]), first="flat_in", first_device=devices.jax_device_name(cpus[0])
    )
    args = [np.array(b[0]), jax.device_put(b[1], cpus[1]), jax.device_put(b[2], cpus[0]), np.array(b[3])]
    with pytest.raises(errors.KvCanaryValueError) as info:  # host flat_in: offsets is the first with a device
        scatter_req_token_ids(*args)
    assert str(info.value) == errors.DEVICE_MISMATCH_HOST_POOL.format(
        arg="req_pool_indices", device=devices.jax_device_name(cpus[0]), first="offsets",
        first_device=devices.jax_device_name(cpus[1]),
    )


# -- checked mode ------------------------------------------------------------------------


@functools.cache
def checkified(implementation, interpret):
    """The checked call under jit, checkified (and jitted again): one per way for the test run, so cases of one shape compile once."""
    jitted = jax.jit(scatter_fn(implementation, interpret, check_values=True))
    return jax.jit(checkify.checkify(jitted, errors=checkify.user_checks))


@pytest.mark.parametrize("case", CHECKED_ERRORS, ids=[c.name for c in CHECKED_ERRORS])
@pytest.mark.parametrize("implementation,interpret", WAYS)
def test_checkify_under_jit_reports_the_eager_message(case, implementation, interpret):
    names = ("flat_in", "offsets", "req_pool_indices", "pool_out") + (("start_cols",) if "start_cols" in case.args else ())
    args = [jnp.asarray(case.args[name].numpy()) for name in names]
    err, out = checkified(implementation, interpret)(*args)
    assert err.get() == case.error_message + " (`check` failed)"
    error = kv_canary_jax.error_from_checkify(err)
    assert type(error) is errors.KvCanaryValueError and str(error) == case.error_message
    # A failed check writes nothing.
    assert_same_pool(np.asarray(out), case.args["pool_out"].numpy())
    # The eager path raises the same.
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_fn(implementation, interpret, check_values=True)(*args)
    assert str(info.value) == case.error_message


@pytest.mark.parametrize("implementation,interpret", WAYS)
def test_checkify_passes_a_valid_batch(implementation, interpret):
    b = batch(bs=20, width=6, seed=11)
    err, out = checkified(implementation, interpret)(*as_jax(*b))
    assert err.get() is None and kv_canary_jax.error_from_checkify(err) is None
    assert_same_pool(np.asarray(out), scatter_reference(*b))


def test_checked_mode_under_jit_without_checkify_fails_to_compile():
    b = batch()
    args = as_jax(*b)
    f = jax.jit(scatter_fn("xla", False, check_values=True), donate_argnums=3)
    with pytest.raises(errors.KvCanaryValueError) as info:
        f(*args)
    assert str(info.value) == errors.CHECK_VALUES_UNTRACEABLE
    with pytest.raises(errors.KvCanaryValueError) as info:
        jax.jit(scatter_fn("xla", False, check_values=True)).lower(*args)
    assert str(info.value) == errors.CHECK_VALUES_UNTRACEABLE
    # Compilation failed before anything ran: the donated pool is intact.
    assert not args[3].is_deleted()
    assert_same_pool(np.asarray(args[3]), b[3])
    # Tracing alone cannot tell a later checkify from none, so it does not fail.
    jax.make_jaxpr(scatter_fn("xla", False, check_values=True))(*args)


def test_eager_checked_error_leaves_the_pool():
    b = batch()
    rows = b[2].copy()
    rows[1] = rows[0]
    args = as_jax(b[0], b[1], rows, b[3])
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(*args, check_values=True)
    assert str(info.value) == f"{P} req_pool_indices[1]={rows[0]} repeats req_pool_indices[0]"
    assert not args[3].is_deleted()
    assert_same_pool(np.asarray(args[3]), b[3])


# -- vmap ----------------------------------------------------------------------------------


@pytest.mark.parametrize("implementation,interpret", WAYS + [(None, False)])
def test_vmap_over_pools(implementation, interpret):
    flat_in, offsets, rows, _ = batch(bs=12, width=7, seed=12)
    pools = np.stack([sentinel_pool(13, 7, seed) for seed in range(3)])
    f = scatter_fn(implementation, interpret)
    out = jax.jit(jax.vmap(f, in_axes=(None, None, None, 0)))(*as_jax(flat_in, offsets, rows, pools))
    for i in range(3):
        assert_same_pool(np.asarray(out[i]), scatter_reference(flat_in, offsets, rows, pools[i]))


@pytest.mark.parametrize("implementation,interpret", WAYS + [(None, False)])
def test_vmap_over_everything(implementation, interpret):
    n_tokens, bs, shape = 20, 4, (6, 5)
    rng = np.random.default_rng(13)
    flat = rng.integers(-(2**40), 2**40, size=(3, n_tokens), dtype=np.int64)
    offsets = np.array([[0, 3, 8, 12, 20], [2, 9, 4, 30, 11], [-4, -1, 5, 5, 19]], dtype=np.int64)  # sorted, not, sorted
    rows = np.array([[0, 5, 2, 3], [-1, 4, 6, 1], [5, 4, 3, 2]], dtype=np.int64)
    pools = np.stack([sentinel_pool(*shape, seed) for seed in range(3)])
    out = jax.vmap(scatter_fn(implementation, interpret))(*as_jax(flat, offsets, rows, pools))
    for i in range(3):
        assert_same_pool(np.asarray(out[i]), scatter_reference(flat[i], offsets[i], rows[i], pools[i]))
    assert bs == rows.shape[1] and n_tokens == flat.shape[1]


def test_vmap_with_checkify_reports_the_failing_example():
    flat_in, offsets, rows, _ = batch(bs=4, width=5, seed=14)
    pools = np.stack([sentinel_pool(5, 5, seed) for seed in range(2)])
    bad_rows = np.stack([rows, np.array([0, 0, 1, 2])])
    f = jax.vmap(scatter_fn("xla", False, check_values=True), in_axes=(None, None, 0, 0))
    err, out = checkify.checkify(jax.jit(f), errors=checkify.user_checks)(*as_jax(flat_in, offsets, bad_rows, pools))
    # A check staged inside vmap is reduced over the batch: one message, the failing example's.
    message = f"{P} req_pool_indices[1]=0 repeats req_pool_indices[0]"
    assert err.get() == message + " (`check` failed)"
    assert str(kv_canary_jax.error_from_checkify(err)) == message
    # Under vmap each example's pool is gated by its own checks.
    assert_same_pool(np.asarray(out[0]), scatter_reference(flat_in, offsets, rows, pools[0]))
    assert_same_pool(np.asarray(out[1]), pools[1])


@pytest.mark.parametrize("implementation,interpret", WAYS)
def test_wide_pool_few_tokens_negative_start(implementation, interpret):
    """A pool much wider than the batch's tokens; segments starting below zero and ending at flat_in's end."""
    width = 2500  # > 2 kernel tiles, not a multiple of the tile
    flat_in = np.arange(1, 31, dtype=np.int64) * 7
    offsets = np.array([-2000, 10, 30, 30, -5], dtype=np.int64)
    rows = np.array([3, 0, 2, 1], dtype=np.int64)
    pool = sentinel_pool(4, width, 17)
    out = scatter_fn(implementation, interpret)(flat_in, offsets, rows, pool)
    assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool))


def test_a_list_of_implementations_works_under_jit_when_it_is_not_a_jit_argument():
    """A list is unhashable, so it cannot be a static argument of ``jax.jit`` (JAX refuses it;
    the README passes a tuple there), but closed over it becomes a hashable plan inside."""
    b = batch(bs=5, width=4, seed=7)
    out = jax.jit(scatter_fn(["mosaic", "pallas", "xla"], True))(*as_jax(*b))
    assert_same_pool(np.asarray(out), scatter_reference(*b))
    step = jax.jit(scatter_req_token_ids, static_argnames=("implementation", "interpret"))
    out = step(*as_jax(*b), implementation=("pallas", "xla"), interpret=True)
    assert_same_pool(np.asarray(out), scatter_reference(*b))
