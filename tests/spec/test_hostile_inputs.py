"""Inputs a hostile (or unlucky) caller passes, through both frontends.

Every call either returns the reference's pool or raises the spec's exception;
nothing crashes the process and no foreign exception escapes. After every error
the pool still holds its sentinels, and an error one frontend raises the other
raises too, same class, byte-identical message. Where the frontends differ it
is by design: the torch launcher writes ``pool_out`` in place, so a pool it
cannot write is refused, while the JAX frontend returns a new pool and reads
``pool_out`` like any other input.
"""

from __future__ import annotations

import pathlib
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch._dynamo.testing

from kv_canary_arrays import adopt
from kv_canary_jax import scatter_req_token_ids, scatter_req_token_ids_sharded
from kv_canary_torch import launch_scatter_req_token_ids_kernel
from shared_spec import errors, scatter_reference
from shared_spec.arguments import ARGUMENT_NAMES
from tests.children import Child
from tests.strategies import sentinel_pool

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Three requests over a 4 x 5 pool; request 1 is truncated at the pool width.
FLAT_IN = np.arange(100, 112, dtype=np.int64)
OFFSETS = np.array([0, 3, 10, 12], dtype=np.int64)
ROWS = np.array([2, 0, 3], dtype=np.int64)


def _pool() -> np.ndarray:
    return sentinel_pool(4, 5, seed=7)


def _expected(flat_in=FLAT_IN, offsets=OFFSETS, rows=ROWS, pool=None) -> np.ndarray:
    return scatter_reference(flat_in, offsets, rows, _pool() if pool is None else pool)


def _torch_call(flat_in, offsets, rows, pool, **kw):
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend="torch", **kw)
    return pool


def _jax_call(flat_in, offsets, rows, pool, **kw):
    return scatter_req_token_ids(flat_in, offsets, rows, pool, **kw)


def _numpy(x) -> np.ndarray:
    return adopt.host_values(x).copy()


def _snapshot(x):
    """A copy of ``x`` to compare with later (torch and numpy arrays can change in place; JAX arrays cannot)."""
    return x.clone() if isinstance(x, torch.Tensor) else np.copy(x) if isinstance(x, np.ndarray) else x


def _assert_unchanged(x, snapshot) -> None:
    if isinstance(x, torch.Tensor):
        assert torch.equal(x, snapshot)
    elif isinstance(x, np.ndarray):
        np.testing.assert_array_equal(x, snapshot)


def _raised(call, *args) -> Exception:
    with pytest.raises((errors.KvCanaryTypeError, errors.KvCanaryValueError)) as info:
        call(*args)
    return info.value


def _same_error_in_both(args_torch, args_jax) -> Exception:
    """Both frontends raise one class and one message; every pool keeps its sentinels."""
    before_torch, before_jax = _snapshot(args_torch[3]), _snapshot(args_jax[3])
    from_torch = _raised(_torch_call, *args_torch)
    from_jax = _raised(_jax_call, *args_jax)
    assert type(from_torch) is type(from_jax) and str(from_torch) == str(from_jax), (from_torch, from_jax)
    _assert_unchanged(args_torch[3], before_torch)
    _assert_unchanged(args_jax[3], before_jax)
    return from_torch


# -- 1. negative strides into the torch launcher: a crash inside torch.from_dlpack, once ------


# The launcher on reversed numpy arrays, each backend, one argument reversed and then all three.
NEGATIVE_STRIDES = textwrap.dedent(
    """
    import numpy as np, torch, jax
    jax.config.update("jax_enable_x64", True)
    from kv_canary_torch import launch_scatter_req_token_ids_kernel
    from shared_spec import scatter_reference
    from tests.strategies import sentinel_pool

    args = {"flat_in": np.arange(111, 99, -1, dtype=np.int64)[::-1],
            "offsets": np.array([12, 10, 3, 0], dtype=np.int64)[::-1],
            "req_pool_indices": np.array([3, 0, 2], dtype=np.int64)[::-1]}
    assert all(a.strides[0] < 0 for a in args.values())
    calls = 0
    for backend in ("torch", "triton", "pallas"):
        for name in args:   # one reversed argument at a time, then all three
            for chosen in ((name,), tuple(args)):
                given = {k: (v if k in chosen else np.ascontiguousarray(v)) for k, v in args.items()}
                pool = torch.from_numpy(sentinel_pool(4, 5, seed=7))
                expected = scatter_reference(*(np.ascontiguousarray(v) for v in args.values()), pool.numpy().copy())
                launch_scatter_req_token_ids_kernel(**given, pool_out=pool, backend=backend)
                assert (pool.numpy() == expected).all(), (backend, chosen)
                calls += 1
    print("calls", calls)
    """
)
NEGATIVE_STRIDES_RUN = Child(["-c", NEGATIVE_STRIDES], set_env={"TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})


@NEGATIVE_STRIDES_RUN.ahead
def test_negative_stride_numpy_inputs_do_not_kill_the_process():
    """Run in a child process: a regression aborts it (SIGABRT in torch's DLPack import), which no pytest.raises catches."""
    result = NEGATIVE_STRIDES_RUN.run()
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    assert "calls 18" in result.stdout


def test_negative_stride_numpy_inputs_in_the_jax_frontend():
    reversed_args = (FLAT_IN[::-1].copy()[::-1], OFFSETS[::-1].copy()[::-1], ROWS[::-1].copy()[::-1])
    assert all(a.strides[0] < 0 for a in reversed_args)
    np.testing.assert_array_equal(np.asarray(_jax_call(*reversed_args, _pool())), _expected())


# -- 2. a numpy pool the torch launcher cannot write in place: the true reason ---------------


def _reversed_pool() -> np.ndarray:
    return _pool()[::-1].copy()[::-1]


def _unaligned_pool() -> np.ndarray:
    pool = np.ndarray((4, 5), np.int32, buffer=bytearray(81), offset=1)
    pool[...] = _pool()
    return pool


@pytest.mark.parametrize(
    "make, message",
    [
        (_reversed_pool, errors.WRITE_NEGATIVE_STRIDES.format(strides=(-5, 1))),
        (lambda: _pool().astype(">i4"), errors.WRITE_BYTE_ORDER.format(dtype=">i4")),
        (_unaligned_pool, errors.WRITE_UNALIGNED.format(itemsize=4, strides=(20, 4))),
    ],
    ids=["negative-strides", "big-endian", "unaligned"],
)
def test_numpy_pools_torch_cannot_write_are_refused_with_the_true_reason(make, message):
    pool = make()
    before = pool.copy()
    with pytest.raises(errors.KvCanaryValueError) as info:
        _torch_call(FLAT_IN, OFFSETS, ROWS, pool)
    assert str(info.value) == errors.NOT_WRITABLE.format(reason=message)
    np.testing.assert_array_equal(pool, before)
    # The JAX frontend writes no pool in place: it reads this one and returns a new one.
    np.testing.assert_array_equal(np.asarray(_jax_call(FLAT_IN, OFFSETS, ROWS, pool)), _expected())
    np.testing.assert_array_equal(pool, before)


def test_a_numpy_column_slice_pool_is_written_in_place_by_the_torch_launcher():
    wide = np.full((4, 9), -7, dtype=np.int32)
    view = wide[:, 2:7]
    view[...] = _pool()
    _torch_call(FLAT_IN, OFFSETS, ROWS, view)
    np.testing.assert_array_equal(view, _expected())
    assert (wide[:, :2] == -7).all() and (wide[:, 7:] == -7).all()


# -- 3. torch tensors JAX cannot import as they are: one copy, never an error ----------------


def _unaligned(values: np.ndarray) -> torch.Tensor:
    """A contiguous tensor whose data starts 8 bytes into its storage (JAX copies such buffers)."""
    return torch.from_numpy(np.concatenate([[0], values]).astype(values.dtype))[1:]


def _strided(values: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.repeat(values, 2))[::2]


@pytest.mark.parametrize("make", [_unaligned, _strided], ids=["unaligned", "step-2"])
def test_the_jax_frontend_takes_torch_inputs_jax_cannot_import_as_they_are(make):
    args = [make(a) for a in (FLAT_IN, OFFSETS, ROWS)]
    keep = [a.clone() for a in args]
    pool = torch.from_numpy(_pool())
    np.testing.assert_array_equal(np.asarray(_jax_call(*args, pool)), _expected())
    np.testing.assert_array_equal(_torch_call(*args, pool.clone()).numpy(), _expected())
    for a, k in zip(args, keep):
        assert torch.equal(a, k)


@pytest.mark.parametrize("layout", ["column-slice", "transposed"])
def test_the_jax_frontend_takes_strided_torch_pools(layout):
    if layout == "column-slice":
        wide = torch.full((4, 9), -7, dtype=torch.int32)
        pool = wide[:, 2:7]
        pool.copy_(torch.from_numpy(_pool()))
    else:
        pool = torch.from_numpy(_pool().T.copy()).T
    before = pool.clone()
    np.testing.assert_array_equal(np.asarray(_jax_call(FLAT_IN, OFFSETS, ROWS, pool)), _expected())
    assert torch.equal(pool, before)


def test_jax_input_shares_memory_where_jax_can_and_copies_once_where_it_cannot():
    aligned = torch.arange(64, dtype=torch.int64)
    assert adopt.jax_input(aligned).unsafe_buffer_pointer() == aligned.data_ptr()
    for tensor in (_unaligned(FLAT_IN), _strided(FLAT_IN)):
        array = adopt.jax_input(tensor)
        assert array.unsafe_buffer_pointer() != tensor.data_ptr()
        np.testing.assert_array_equal(np.asarray(array), FLAT_IN)


# -- 4. a row-sharded pool with torch tensors (or other host data) for the other arguments ---


@pytest.mark.multidevice
def test_a_row_sharded_pool_takes_torch_and_numpy_arguments():
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = jax.devices()
    if len(devices) < 2:
        pytest.skip("needs several JAX devices")
    mesh = Mesh(np.array(devices[:2]), ("pool",))
    pool = jax.device_put(jnp.asarray(_pool()), NamedSharding(mesh, P("pool", None)))
    for convert in (torch.from_numpy, _unaligned, lambda a: a.astype(a.dtype.newbyteorder(">"))):
        args = [convert(a) for a in (FLAT_IN, OFFSETS, ROWS)]
        np.testing.assert_array_equal(np.asarray(scatter_req_token_ids(*args, pool)), _expected())
        np.testing.assert_array_equal(np.asarray(scatter_req_token_ids_sharded(*args, pool)), _expected())


# -- 5. PRNG key arrays: the spec's dtype error, in both frontends --------------------------


@pytest.mark.parametrize("name", ARGUMENT_NAMES)
def test_prng_key_arrays_get_the_specs_dtype_error(name):
    shape = (4, 5) if name == "pool_out" else {"flat_in": (12,), "offsets": (4,), "req_pool_indices": (3,)}[name]
    keys = jax.random.split(jax.random.key(0), shape)
    position = ARGUMENT_NAMES.index(name)
    torch_args = [torch.from_numpy(a) for a in (FLAT_IN, OFFSETS, ROWS, _pool())]
    jax_args = [jnp.asarray(a) for a in (FLAT_IN, OFFSETS, ROWS, _pool())]
    torch_args[position] = jax_args[position] = keys
    error = _same_error_in_both(torch_args, jax_args)
    dtype = "int32" if name == "pool_out" else "int64"
    assert str(error) == errors.WRONG_DTYPE.format(arg=name, dtype=dtype, got=str(keys.dtype))
    assert isinstance(error, errors.KvCanaryTypeError) and "key<" in str(error)


# -- 6. big-endian host data: one behaviour, a byte-swapping copy -----------------------------


@pytest.mark.parametrize("name", ["flat_in", "offsets", "req_pool_indices"])
def test_big_endian_inputs_are_read_through_a_byte_swapping_copy(name):
    args = [FLAT_IN, OFFSETS, ROWS]
    position = ARGUMENT_NAMES.index(name)
    args[position] = args[position].astype(">i8")
    keep = args[position].copy()
    np.testing.assert_array_equal(_torch_call(*args, torch.from_numpy(_pool())).numpy(), _expected())
    np.testing.assert_array_equal(np.asarray(_jax_call(*args, _pool())), _expected())
    np.testing.assert_array_equal(args[position], keep)
    assert args[position].dtype.str == ">i8"


def test_big_endian_arrays_of_the_wrong_dtype_get_the_same_error_in_both():
    wrong = OFFSETS.astype(">i4")
    error = _same_error_in_both(
        (FLAT_IN, wrong, ROWS, torch.from_numpy(_pool())), (FLAT_IN, wrong, ROWS, jnp.asarray(_pool()))
    )
    assert str(error) == errors.WRONG_DTYPE.format(arg="offsets", dtype="int64", got="int32")


# -- 7. x64 off: torch tensors into the JAX frontend fail as numpy and JAX arrays do --------------


def test_x64_off_torch_tensors_get_the_specs_dtype_error_and_note():
    with jax.enable_x64(False):
        messages = set()
        for make in (torch.from_numpy, np.asarray, jnp.asarray):
            pool = make(_pool())
            before = _numpy(pool)
            error = _raised(_jax_call, *(make(a) for a in (FLAT_IN, OFFSETS, ROWS)), pool)
            assert type(error) is errors.KvCanaryTypeError
            assert errors.X64_NOTE in getattr(error, "__notes__", [])
            messages.add(str(error))
            np.testing.assert_array_equal(_numpy(pool), before)
    assert messages == {errors.WRONG_DTYPE.format(arg="flat_in", dtype="int64", got="int32")}


# -- 8. check_values under jit: numpy constants on the host, JAX arrays made inside jit staged ---


def test_check_values_under_jit_checks_numpy_constants_on_the_host_and_stages_jax_ones():
    bad = np.array([0, 10, 3, 12], dtype=np.int64)
    expected = errors.OFFSETS_DECREASING.format(i=1, a=10, j=2, b=3)
    with pytest.raises(errors.KvCanaryValueError) as info:
        jax.jit(lambda pool: _jax_call(FLAT_IN, bad, ROWS, pool, check_values=True))(jnp.asarray(_pool()))
    assert str(info.value) == expected
    with pytest.raises(errors.KvCanaryValueError) as info:
        jax.jit(lambda pool: _jax_call(FLAT_IN, jnp.asarray(bad), ROWS, pool, check_values=True))(jnp.asarray(_pool()))
    assert str(info.value) == errors.CHECK_VALUES_UNTRACEABLE


# -- other hostile arguments: foreign arrays of every kind meet the same checks --------------


@pytest.mark.parametrize(
    "bad, name",
    [
        (np.arange(12, dtype=np.int64).reshape(3, 4)[::-1], "flat_in"),  # rank, negative strides
        (np.array([[0, 1]], dtype=">i8"), "offsets"),  # rank, big-endian
        (np.array(["a", "b", "c"]), "req_pool_indices"),  # a dtype JAX has no arrays of
        (np.array([0, 1, 2], dtype=object), "req_pool_indices"),
        (np.zeros((4, 5), dtype=np.float64)[::-1], "pool_out"),
        (torch.zeros((4, 5), dtype=torch.bfloat16), "pool_out"),
        ([0, 1, 2], "req_pool_indices"),
        (np.int64(3), "flat_in"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_malformed_foreign_arguments_get_one_error_in_both_frontends(bad, name):
    position = ARGUMENT_NAMES.index(name)
    torch_args = [torch.from_numpy(a) for a in (FLAT_IN, OFFSETS, ROWS, _pool())]
    jax_args = [jnp.asarray(a) for a in (FLAT_IN, OFFSETS, ROWS, _pool())]
    torch_args[position] = jax_args[position] = bad
    _same_error_in_both(torch_args, jax_args)


# -- 9. torch.compile(fullgraph=True): the spec's exception reaches the caller as it is ---------


def _compiled_bad_calls():
    flat, offsets, rows = (torch.from_numpy(a) for a in (FLAT_IN, OFFSETS, ROWS))
    interleaved = torch.zeros(64, dtype=torch.int32).as_strided((4, 5), (2, 1))  # strides that dynamic shapes keep symbolic
    return [
        ("dtype", (flat.to(torch.int32), offsets, rows, torch.from_numpy(_pool()), "torch")),
        ("rank", (flat, offsets, rows, torch.from_numpy(_pool()).reshape(-1), "torch")),
        ("offsets_length", (flat, offsets[:-1], rows, torch.from_numpy(_pool()), "torch")),
        ("overlap", (flat, offsets, rows, torch.from_numpy(_pool()[:1]).expand(4, -1), "torch")),
        ("overlap-interleaved", (flat, offsets, rows, interleaved, "torch")),
        ("not-an-array", (flat, [0, 3, 10, 12], rows, torch.from_numpy(_pool()), "torch")),
        ("backend", (flat, offsets, rows, torch.from_numpy(_pool()), "nope")),
        ("backend-not-a-str", (flat, offsets, rows, torch.from_numpy(_pool()), None)),  # a field of no size: constant
    ]


def _warm_up_automatic_dynamic(compiled):
    """Two valid calls of other sizes: Dynamo's default (dynamic=None) recompiles the second with dynamic shapes."""
    for bs in (1, 2):
        flat = torch.arange(100, 100 + 3 * bs + 1)
        offsets = torch.arange(0, 3 * bs + 1, 3)
        compiled(flat, offsets, torch.arange(bs), torch.zeros((bs + 5, 6 + bs), dtype=torch.int32), "torch")


# Each compiler at each dynamic mode in the slow sweep; by default aot_eager at Dynamo's default (None) and Inductor at
# the two fixed modes, so that every mode and every compiler runs.
@pytest.mark.parametrize(
    "compiler, dynamic",
    [pytest.param("aot_eager", False, marks=pytest.mark.slow), pytest.param("aot_eager", True, marks=pytest.mark.slow),
     ("aot_eager", None), ("inductor", False), ("inductor", True)],
)
def test_argument_errors_reach_a_fullgraph_caller_as_the_specs_exception(compiler, dynamic):
    """dynamic=None: after a recompile with automatic dynamic shapes, a size in a message is symbolic, as with dynamic=True."""
    def caller(flat_in, offsets, rows, pool, backend):
        launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend=backend)
        return pool.sum() if isinstance(pool, torch.Tensor) else None

    calls = _compiled_bad_calls()
    if compiler == "inductor":  # Inductor compiles are slow here: a message without sizes and one with
        calls = [call for call in calls if call[0] in ("dtype", "offsets_length")]
    for name, args in calls:
        torch._dynamo.reset()
        with pytest.raises((errors.KvCanaryTypeError, errors.KvCanaryValueError)) as eager:
            caller(*args)
        compiled = torch.compile(caller, fullgraph=True, backend=compiler, dynamic=dynamic)
        if dynamic is None:
            _warm_up_automatic_dynamic(compiled)
        for _ in range(2):  # the first call traces, the second runs the cached graph
            before = args[3].clone()
            with pytest.raises(type(eager.value)) as raised:
                compiled(*args)
            assert type(raised.value) is type(eager.value) and str(raised.value) == str(eager.value), name
            assert torch.equal(args[3], before)
    torch._dynamo.reset()


@pytest.mark.parametrize("dynamic", [True, None])
def test_with_dynamic_shapes_one_graph_formats_each_calls_sizes_into_its_message(dynamic):
    """The sizes in a message are the graph's symbolic sizes, formatted when it runs: one graph, each call's own message."""
    def caller(flat_in, offsets, rows, pool):
        launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend="torch")

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(caller, fullgraph=True, backend=counter, dynamic=dynamic)
    for bs in (3, 5, 8):
        flat, offsets, rows = torch.arange(20), torch.arange(bs), torch.arange(bs)  # offsets one too short
        pool = torch.from_numpy(sentinel_pool(bs + 2, 4 + bs, seed=bs))
        before = pool.clone()
        with pytest.raises(errors.KvCanaryValueError) as raised:
            compiled(flat, offsets, rows, pool)
        assert str(raised.value) == errors.OFFSETS_LENGTH.format(length=bs, expected=bs + 1)
        assert torch.equal(pool, before)
        for wrong in (pool.reshape(-1), pool[None]):
            with pytest.raises(errors.KvCanaryValueError) as raised:
                compiled(flat, offsets, rows, wrong)
            assert str(raised.value) == errors.WRONG_RANK.format(arg="pool_out", rank=2, shape=tuple(wrong.shape))
    # one graph per kind of call (a length error, then each rank) once the sizes are dynamic
    assert counter.frame_count == (3 if dynamic else 6)
    torch._dynamo.reset()


# -- every layout of every framework, on random batches with malformed values -----------------

# What a read-only argument may arrive as; each keeps the values of the numpy array it is given.
LAYOUTS = {
    "numpy": lambda a: a,
    "numpy-reversed": lambda a: a[::-1].copy()[::-1],
    "numpy-big-endian": lambda a: a.astype(a.dtype.newbyteorder(">")),
    "numpy-unaligned": lambda a: _numpy_unaligned(a),
    "numpy-step-2": lambda a: np.repeat(a, 2, axis=0)[::2],
    "numpy-read-only": lambda a: _read_only(a),
    "torch": lambda a: torch.from_numpy(a.copy()),
    "torch-unaligned": lambda a: _unaligned(a) if a.ndim == 1 else torch.from_numpy(a.copy()),
    "torch-step-2": lambda a: torch.from_numpy(np.repeat(a, 2, axis=0))[::2],
    "jax": lambda a: jax.device_put(a, jax.devices("cpu")[0]),  # beside the torch CPU tensors, also on a GPU machine
}
# What pool_out may be for the torch launcher (written in place, so never copied).
TORCH_POOLS = ("numpy", "numpy-step-2", "torch", "torch-step-2")


def _numpy_unaligned(a: np.ndarray) -> np.ndarray:
    out = np.ndarray(a.shape, a.dtype, buffer=bytearray(a.nbytes + 1), offset=1)
    out[...] = a
    return out


def _read_only(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    out.flags.writeable = False
    return out


def test_random_batches_in_every_layout_match_the_reference():
    from hypothesis import given, strategies as st

    from tests.profiles import property_settings
    from tests.strategies import batches

    names = sorted(LAYOUTS)

    @property_settings(30)
    @given(
        batch=batches(max_rows=5, max_width=9, max_bs=5, max_tokens=20, few_shapes=True),
        inputs=st.lists(st.sampled_from(names), min_size=3, max_size=3),
        jax_pool=st.sampled_from(names),
        torch_pool=st.sampled_from(TORCH_POOLS),
    )
    def check(batch, inputs, jax_pool, torch_pool):
        expected = scatter_reference(*batch)
        args = [LAYOUTS[name](a) for name, a in zip(inputs, batch[:3])]
        got = _jax_call(*args, LAYOUTS[jax_pool](batch[3]))
        np.testing.assert_array_equal(np.asarray(got), expected)
        pool = LAYOUTS[torch_pool](batch[3].copy())
        _torch_call(*args, pool)
        np.testing.assert_array_equal(_numpy(pool), expected)
        for name, a, given_arg in zip(inputs, batch[:3], args):  # read-only arguments stay as they were
            np.testing.assert_array_equal(_numpy(given_arg), a)

    check()


@pytest.mark.multidevice
def test_the_torch_launcher_reads_jax_arrays_sharded_over_several_devices():
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = jax.devices()
    if len(devices) < 2:
        pytest.skip("needs several JAX devices")
    sharding = NamedSharding(Mesh(np.array(devices[:2]), ("x",)), P("x"))
    flat_in = jax.device_put(jnp.asarray(FLAT_IN), sharding)  # 12 tokens: 6 per device
    assert len(flat_in.devices()) == 2
    pool = torch.from_numpy(_pool())
    _torch_call(flat_in, OFFSETS, ROWS, pool)
    np.testing.assert_array_equal(pool.numpy(), _expected())


@pytest.mark.gpu
def test_on_the_gpu_foreign_arrays_cross_on_their_device():
    from kv_canary_arrays.frameworks import cuda_available

    if not cuda_available():
        pytest.skip("needs a CUDA GPU")
    expected = _expected()
    # torch tensors JAX cannot import as they are (unaligned, step-2, a column-slice pool): one copy on the GPU.
    inputs = [_unaligned(FLAT_IN).cuda(), torch.from_numpy(np.repeat(OFFSETS, 2)).cuda()[::2], torch.from_numpy(ROWS).cuda()]
    wide = torch.full((4, 9), -7, dtype=torch.int32, device="cuda")
    pool = wide[:, 2:7]
    pool.copy_(torch.from_numpy(_pool()))
    for implementation in ("pallas", "xla"):
        got = _jax_call(*inputs, pool, implementation=implementation)
        assert next(iter(got.devices())).platform == "gpu"
        np.testing.assert_array_equal(np.asarray(got), expected)
    # JAX GPU arrays into the torch launcher: zero-copy through DLPack, the Triton kernel on the tensors.
    gpu = jax.devices("gpu")[0]
    jax_inputs = [jax.device_put(a, gpu) for a in (FLAT_IN, OFFSETS, ROWS)]
    launch_scatter_req_token_ids_kernel(flat_in=jax_inputs[0], offsets=jax_inputs[1], req_pool_indices=jax_inputs[2], pool_out=pool)
    np.testing.assert_array_equal(pool.cpu().numpy(), expected)
    assert (wide[:, :2] == -7).all() and (wide[:, 7:] == -7).all()
