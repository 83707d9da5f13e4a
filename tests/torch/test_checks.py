"""The torch frontend's argument checks: the generated predicates agree with the spec's ordered checks everywhere,
and the launchers raise exactly the spec's error, before anything is written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from kv_canary_arrays.describe import describe
from kv_canary_torch import BACKENDS, assign_req_to_token_pool_func, launch_scatter_req_token_ids_kernel
from kv_canary_torch.checks import assign_ok, scatter_ok, scatter_traced_ok
from kv_canary_torch.conformance import TorchRunner
from shared_spec import checks, errors
from shared_spec.cases import ASSIGN, ArrayData, load_cases
from shared_spec.checks import TORCH, first_failure
from shared_spec.reference import scatter_reference
from tests.contract import examples
from tests.torch_support import P, as_numpy, device_for, nested, raises, sentinel

SCATTER_NAMES = [a.name for a in checks.SCATTER.args]
ASSIGN_NAMES = [a.name for a in checks.ASSIGN.args]


def spec_failure(op, args: dict, batch_size=None):
    views = {name: describe(value, TORCH, written=name == op.output) for name, value in args.items()}
    return first_failure(op, views, TORCH, batch_size)


def agree(op, args: dict, batch_size=None) -> None:
    """The predicate is True exactly when the spec finds nothing and every argument is a tensor (anything else
    takes the slow path, which adopts numpy and JAX arrays)."""
    failure = spec_failure(op, args, batch_size)
    tensors = all(isinstance(v, torch.Tensor) for v in args.values())
    if op is checks.SCATTER:
        predicate = scatter_ok(*(args[n] for n in SCATTER_NAMES), args.get("start_cols"))
    else:
        predicate = assign_ok(*(args[n] for n in ASSIGN_NAMES), batch_size)
        tensors = tensors and (batch_size is None or type(batch_size) is int)
    assert predicate == (failure is None and tensors), failure


# -- every conformance case's arguments -------------------------------------------------------------------------


def case_arguments(case):
    runner = TorchRunner("torch")
    args = {name: arg.value if not isinstance(arg, ArrayData) else runner.array(arg, "cpu")
            for name, arg in case.args.items()}
    output = checks.ASSIGN.output if case.op == ASSIGN else checks.SCATTER.output
    if case.layout == "column_slice":
        pool = args[output]
        args[output] = torch.zeros((pool.shape[0], pool.shape[1] + 5), dtype=pool.dtype)[:, 2:2 + pool.shape[1]]
    elif case.layout == "broadcast_rows":
        args[output] = args[output][:1].expand(args[output].shape[0], -1)
    return args


@pytest.mark.parametrize("case", load_cases(), ids=lambda c: c.name)
def test_the_predicates_agree_with_the_spec_on_every_case(case):
    args = case_arguments(case)
    if case.op == ASSIGN:
        batch_size = args.pop("batch_size")
        agree(checks.ASSIGN, args, batch_size)
    else:
        if args.get("start_cols", 0) is None:
            del args["start_cols"]
        agree(checks.SCATTER, args)


# -- hostile arguments -------------------------------------------------------------------------------------------

KINDS = ["good"] * 10 + ["rank", "dtype", "list", "none", "meta", "sparse", "nested", "negative", "conjugate", "freed",
                         "shrunk", "numpy", "jax", "inference"]


def hostile_array(draw, rank: int, dtype: torch.dtype, length: int):
    kind = draw(st.sampled_from(KINDS))
    if kind in ("list", "none"):
        return [1, 2] if kind == "list" else None
    if kind == "rank":
        rank = draw(st.sampled_from([r for r in range(4) if r != rank]))
    if kind == "dtype":
        dtype = draw(st.sampled_from([torch.int32, torch.int16, torch.uint8, torch.float32, torch.bool]))
    shape = (length,) + tuple(draw(st.integers(0, 4)) for _ in range(rank - 1)) if rank else ()
    value = torch.full(shape, 3, dtype=dtype if kind != "conjugate" else torch.complex64,
                       device="meta" if kind == "meta" else "cpu")
    if kind == "sparse" and value.dim():
        value = value.to_sparse()
    elif kind == "nested" and value.dim() == 1:
        value = nested(value, value)
    elif kind == "negative":
        value = torch._neg_view(value)
    elif kind == "conjugate":
        value = value.conj()
    elif kind in ("freed", "shrunk") and value.numel():
        value = value.clone()
        value.untyped_storage().resize_(0 if kind == "freed" else value.untyped_storage().nbytes() // 2)
    elif kind == "numpy":
        value = value.numpy()
    elif kind == "jax":  # a host array beside the CPU pool (x64 on: int64 stays int64)
        import jax

        value = jax.device_put(value.numpy(), jax.devices("cpu")[0])
    elif kind == "inference":
        with torch.inference_mode():
            value = value.clone()
    return value


@st.composite
def hostile_pools(draw):
    rows, cols = draw(st.integers(0, 4)), draw(st.integers(0, 5))
    layout = draw(st.sampled_from(["hostile", "plain", "strided", "expand_rows", "expand_cols", "transpose", "slice",
                                   "inference"]))
    if layout == "inference":
        with torch.inference_mode():
            return torch.zeros((rows, cols), dtype=torch.int32)
    if layout == "hostile":
        return hostile_array(draw, 2, torch.int32, rows)
    if layout == "strided":
        s0, s1 = draw(st.integers(0, 7)), draw(st.integers(0, 7))
        size = (rows - 1) * s0 + (cols - 1) * s1 + 1 if rows and cols else 0
        return torch.zeros(size, dtype=torch.int32).as_strided((rows, cols), (s0, s1))
    pool = torch.zeros((rows, cols), dtype=torch.int32)
    if layout == "expand_rows":
        return pool[:1].expand(rows + 1, -1) if rows else pool
    if layout == "expand_cols":
        return pool[:, :1].expand(-1, cols + 1) if cols else pool
    if layout == "transpose":
        return torch.zeros((cols, rows), dtype=torch.int32).t()
    if layout == "slice":
        return torch.zeros((rows, cols + 3), dtype=torch.int32)[:, 1:1 + cols]
    return pool


@st.composite
def scatter_arguments(draw):
    bs = draw(st.integers(0, 3))
    lengths = {"flat_in": draw(st.integers(0, 5)), "req_pool_indices": bs,
               "offsets": bs + 1 if draw(st.integers(0, 3)) else draw(st.integers(0, 5)), "start_cols": bs}
    args = {name: hostile_array(draw, 1, torch.int64, lengths[name]) for name in ("flat_in", "offsets",
                                                                                  "req_pool_indices")}
    args["pool_out"] = draw(hostile_pools())
    start_cols = hostile_array(draw, 1, torch.int64, draw(st.sampled_from([bs, bs, bs + 1])))
    if start_cols is not None and draw(st.booleans()):  # None: start_cols not given
        args["start_cols"] = start_cols
    return args


@examples(150)
@given(args=scatter_arguments(), inference_mode=st.booleans())
def test_the_scatter_predicate_agrees_with_the_spec_on_hostile_arguments(args, inference_mode, x64):
    with torch.inference_mode(inference_mode):
        agree(checks.SCATTER, args)
        failure = spec_failure(checks.SCATTER, args)
        # The traced checks (what TorchDynamo decides) are the same but for memory and an inference pool, which a
        # running graph asks.
        traced = scatter_traced_ok(*(args[n] for n in SCATTER_NAMES), args.get("start_cols"))
        if failure is None:
            assert traced == all(isinstance(v, torch.Tensor) for v in args.values())
            return
        message, arg = str(failure[1]), failure[1].fields.get("arg")
        if errors.WRITE_INFERENCE not in message and message != errors.NO_MEMORY.format(arg=arg):
            assert not traced, message
        with pytest.raises(type(failure[1])) as raised:
            launch_scatter_req_token_ids_kernel(**args, backend="torch")
        assert str(raised.value) == message


@examples(100)
@given(data=st.data(), bs=st.integers(0, 3),
       batch_size=st.one_of(st.none(), st.integers(-1, 4), st.sampled_from([np.int64(1), True, 2.0, 2**62])))
def test_the_assign_predicate_agrees_with_the_spec_on_hostile_arguments(data, bs, batch_size, x64):
    dtypes = data.draw(st.lists(st.sampled_from([torch.int32, torch.int64]), min_size=4, max_size=4))
    args = {name: hostile_array(data.draw, 1, dtype, bs) for name, dtype in zip(
        ("req_pool_indices", "start_offset", "end_offset", "out_cache_loc"), dtypes)}
    args["req_to_token"] = data.draw(hostile_pools())
    args = {name: args[name] for name in ASSIGN_NAMES}
    agree(checks.ASSIGN, args, batch_size)
    failure = spec_failure(checks.ASSIGN, args, batch_size)
    if failure is not None:
        with pytest.raises(type(failure[1])) as raised:
            assign_req_to_token_pool_func(*args.values(), batch_size, backend="torch")
        assert str(raised.value) == str(failure[1])


# -- what the checks let through: foreign arrays, strided layouts ----------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("framework", ["numpy", "jax"])
def test_numpy_and_jax_arrays_are_adopted(backend, framework, x64):
    if device_for(backend) != "cpu":
        pytest.skip("host arrays go with a CPU pool")
    import jax

    flat_in, offsets, rows = np.arange(100, 108), np.array([0, 3, 8]), np.array([2, 0])
    convert = (lambda a: a) if framework == "numpy" else (lambda a: jax.device_put(a, jax.devices("cpu")[0]))
    pool = sentinel(3, 6, seed=1)
    expected = scatter_reference(flat_in, offsets, rows, pool.numpy())
    launch_scatter_req_token_ids_kernel(flat_in=convert(flat_in), offsets=convert(offsets),
                                        req_pool_indices=convert(rows), pool_out=pool, backend=backend)
    np.testing.assert_array_equal(pool.numpy(), expected)
    numpy_pool = sentinel(3, 6, seed=1).numpy()
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=numpy_pool,
                                        backend=backend)
    np.testing.assert_array_equal(numpy_pool, expected)


def _unaligned(values: np.ndarray) -> np.ndarray:
    """``values`` at an odd byte address: a view one byte into a buffer of its own."""
    buffer = np.zeros(values.nbytes + 1, np.uint8)
    view = buffer[1:].view(values.dtype).reshape(values.shape)
    view[...] = values
    return view


HOST_FORMS = {
    "big-endian": lambda a: a.astype(a.dtype.newbyteorder(">")),
    "unaligned": _unaligned,
    "negative strides": lambda a: a[::-1].copy()[::-1],
    "read-only": lambda a: np.lib.stride_tricks.as_strided(a, writeable=False),
}


@pytest.mark.parametrize("form", list(HOST_FORMS))
def test_numpy_inputs_torch_cannot_share_are_read_and_pools_refused_with_the_reason(form):
    flat_in, offsets, rows = np.arange(100, 108), np.array([0, 3, 8]), np.array([2, 0])
    convert = HOST_FORMS[form]
    pool = sentinel(3, 6, seed=1)
    expected = scatter_reference(flat_in, offsets, rows, pool.numpy())
    launch_scatter_req_token_ids_kernel(flat_in=convert(flat_in), offsets=convert(offsets),
                                        req_pool_indices=convert(rows), pool_out=pool)
    np.testing.assert_array_equal(pool.numpy(), expected)
    numpy_pool = convert(sentinel(3, 6, seed=1).numpy())
    before = numpy_pool.copy()
    failure = spec_failure(checks.SCATTER, dict(flat_in=flat_in, offsets=offsets, req_pool_indices=rows,
                                                pool_out=numpy_pool))
    assert failure is not None and failure[0] == "writable"
    with pytest.raises(errors.KvCanaryValueError) as raised:
        launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows,
                                            pool_out=numpy_pool)
    assert str(raised.value) == str(failure[1])
    np.testing.assert_array_equal(numpy_pool, before)


def test_jax_prng_keys_get_the_spec_s_dtype_error():
    import jax

    keys = jax.random.split(jax.random.key(0), 3)
    with pytest.raises(errors.KvCanaryTypeError) as raised:
        launch_scatter_req_token_ids_kernel(flat_in=keys, offsets=torch.tensor([0, 1]), req_pool_indices=torch.tensor(
            [0]), pool_out=sentinel(2, 3))
    assert str(raised.value) == errors.WRONG_DTYPE.format(arg="flat_in", dtype="int64", got=str(keys.dtype))


def test_more_requests_than_a_call_takes_are_refused_before_anything_is_read():
    bs = checks.MAX_REQUESTS + 1
    rows = torch.zeros(1, dtype=torch.int64).expand(bs)  # 2**31 requests in 8 bytes
    offsets = torch.zeros(1, dtype=torch.int64).expand(bs + 1)
    pool = sentinel(2, 3)
    with pytest.raises(errors.KvCanaryValueError) as raised:
        launch_scatter_req_token_ids_kernel(flat_in=torch.arange(3), offsets=offsets, req_pool_indices=rows,
                                            pool_out=pool)
    assert str(raised.value) == errors.TOO_MANY_REQUESTS.format(bs=bs, limit=checks.MAX_REQUESTS)
    assert (pool == sentinel(2, 3)).all()


WRITABLE_LAYOUTS = {
    "transposed": lambda d: sentinel(6, 4, seed=5, device=d).t(),
    "column_slice": lambda d: sentinel(4, 20, seed=3, device=d)[:, 5:11],
    "every_other_row": lambda d: sentinel(8, 6, seed=6, device=d)[::2],
    "every_other_column": lambda d: sentinel(4, 20, seed=3, device=d)[:, ::2][:, :6],
    "interleaved": lambda d: sentinel(1, 64, seed=4, device=d).reshape(-1).as_strided((4, 6), (7, 2)),
    "one_row_broadcast": lambda d: sentinel(1, 6, seed=7, device=d).reshape(-1).expand(1, 6),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", list(WRITABLE_LAYOUTS))
def test_strided_pools_and_inputs_are_written_through_their_strides(layout, backend):
    device = device_for(backend)
    pool = WRITABLE_LAYOUTS[layout](device)
    flat = torch.arange(100, 140, dtype=torch.int64, device=device)[::3]  # stride 3
    offsets = torch.tensor([0, 9, 2, 9, 5, 9, 13], device=device)[::2]  # [0, 2, 5, 13]
    rows = torch.tensor([pool.shape[0] - 1, 7, 0, 7, -1], device=device)[::2]
    starts = torch.tensor([1, 0, 0, 0, 3], device=device)[::2]
    for start_cols in (None, starts):
        expected = scatter_reference(*(as_numpy(t) for t in (flat, offsets, rows, pool)), None if start_cols is None
                                     else as_numpy(start_cols))
        launch_scatter_req_token_ids_kernel(flat_in=flat, offsets=offsets, req_pool_indices=rows, pool_out=pool,
                                            start_cols=start_cols, backend=backend)
        np.testing.assert_array_equal(as_numpy(pool), expected)


# -- backend choice and the order of errors ----------------------------------------------------------------------


def good_args(**changes):
    args = dict(flat_in=torch.tensor([11, 12, 13, 14, 15]), offsets=torch.tensor([0, 2, 5]),
                req_pool_indices=torch.tensor([1, 3]), pool_out=sentinel(4, 6))
    return {**args, **changes}


@pytest.mark.parametrize("name", ["cuda", "Triton", "", None, 3, ["torch"], np.array(["torch", "auto"])])
def test_unknown_backends_are_refused(name):
    message = f"{P} unknown backend {name!r}; expected one of 'auto', 'triton', 'torch'"
    args = good_args()
    raises(errors.KvCanaryValueError, message, lambda: launch_scatter_req_token_ids_kernel(**args, backend=name),
           args["pool_out"])
    table = sentinel(4, 6)
    raises(errors.KvCanaryValueError, message.replace(errors.OP_NAME, errors.ASSIGN_OP_NAME),
           lambda: assign_req_to_token_pool_func(args["req_pool_indices"], table, torch.tensor([0, 1]),
                                                 torch.tensor([2, 3]), args["flat_in"], 2, backend=name), table)


def test_errors_come_in_the_spec_s_order():
    """Arguments, then the backend, then check_values, then the values."""
    bad = good_args(offsets=torch.tensor([-1, 2, 5]))
    cases = [
        (dict(flat_in=torch.tensor([1, 2], dtype=torch.int32), backend="nope", check_values="yes"),
         errors.KvCanaryTypeError, f"{P} flat_in must be int64, got int32"),
        (dict(backend="nope", check_values="yes"), errors.KvCanaryValueError,
         f"{P} unknown backend 'nope'; expected one of 'auto', 'triton', 'torch'"),
        (dict(check_values="yes"), errors.KvCanaryTypeError, f"{P} check_values must be a bool, got str"),
        (dict(check_values=np.True_), errors.KvCanaryValueError, f"{P} offsets[0] must be >= 0, got -1"),
    ]
    for changes, error_class, message in cases:
        args = {**bad, **changes}
        raises(error_class, message, lambda: launch_scatter_req_token_ids_kernel(**args), bad["pool_out"])


TRITON_WITHOUT_INTERPRETER = """
import torch
from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch
pool = torch.full((2, 3), -5, dtype=torch.int32)
args = dict(flat_in=torch.tensor([1, 2]), offsets=torch.tensor([0, 2]), req_pool_indices=torch.tensor([1]),
            pool_out=pool)
try:
    launch(**args, backend="triton")
except ValueError as error:
    print(type(error).__name__, error, sep="|")
assert (pool == -5).all()
launch(**args)  # auto runs torch
assert pool.tolist() == [[-5, -5, -5], [1, 2, -5]], pool
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
def test_triton_on_the_cpu_without_the_interpreter_is_unavailable():
    from tests.torch_support import run_python

    expected = errors.unavailable_error("backend", "triton", errors.TRITON_NEEDS_CUDA)
    assert run_python(TRITON_WITHOUT_INTERPRETER, interpret=False).strip() == f"KvCanaryValueError|{expected}"


def test_the_package_without_torch_says_how_to_install_it():
    from tests.torch_support import run_python

    script = ("import sys\nsys.modules['torch'] = None\ntry:\n    import kv_canary_torch\n"
              "except ModuleNotFoundError as error:\n    print(error.name, error, sep='|')\n")
    hint = errors.install_hint(["torch"])
    expected = errors.FRONTEND_NEEDS.format(frontend="kv_canary_torch", module="torch", hint=hint)
    assert run_python(script).strip() == f"torch|{expected}"


# -- the checked mode ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_checked_mode_raises_the_spec_s_first_violation_or_writes(backend):
    from shared_spec.values import raise_first_value_error

    @examples(30)
    @given(offsets=st.lists(st.integers(-3, 12), min_size=1, max_size=6), rows=st.lists(st.integers(-2, 6), max_size=5),
           starts=st.lists(st.integers(-2, 5), max_size=5), n_tokens=st.integers(0, 12), windowed=st.booleans())
    def check(offsets, rows, starts, n_tokens, windowed):
        bs = min(len(offsets) - 1, len(rows), len(starts) if windowed else len(rows))
        offsets, rows = np.array(offsets[:bs + 1], np.int64), np.array(rows[:bs], np.int64)
        start_cols = np.array(starts[:bs], np.int64) if windowed else None
        flat_in = np.arange(n_tokens, dtype=np.int64) + 7
        pool = sentinel(5, 4, seed=9, device=device_for(backend))
        before = as_numpy(pool).copy()
        try:
            raise_first_value_error(offsets, rows, n_tokens, 5, start_cols)
        except errors.KvCanaryValueError as error:
            expected = error
        else:
            expected = scatter_reference(flat_in, offsets, rows, before, start_cols)
        arrays = [torch.from_numpy(a).to(pool.device) for a in (flat_in, offsets, rows)]
        window = None if start_cols is None else torch.from_numpy(start_cols).to(pool.device)
        call = lambda: launch_scatter_req_token_ids_kernel(  # noqa: E731
            flat_in=arrays[0], offsets=arrays[1], req_pool_indices=arrays[2], pool_out=pool, start_cols=window,
            check_values=True, backend=backend)
        if isinstance(expected, Exception):
            raises(type(expected), str(expected), call, pool)
        else:
            call()
            np.testing.assert_array_equal(as_numpy(pool), expected)

    check()


def test_interpreted_launches_from_several_threads():
    """Triton's interpreter keeps a launch's state in globals: the launcher runs one interpreted launch at a time."""
    import threading

    from shared_spec import arg_specs

    if device_for("triton") != "cpu":
        pytest.skip("compiled kernels here")
    failures = []

    def worker(seed):
        for k in range(4):
            flat_in, offsets, rows, pool = arg_specs.make_batch("6x40r", seed=10 * seed + k)
            pool_t = torch.from_numpy(pool.copy())
            launch_scatter_req_token_ids_kernel(flat_in=torch.from_numpy(flat_in), offsets=torch.from_numpy(offsets),
                                                req_pool_indices=torch.from_numpy(rows), pool_out=pool_t,
                                                backend="triton")
            if not np.array_equal(pool_t.numpy(), scatter_reference(flat_in, offsets, rows, pool)):
                failures.append((seed, k))

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
