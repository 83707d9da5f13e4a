"""What ``torch.compile(fullgraph=True)`` supports around the launcher, one test per statement.

1. torch.Tensor arguments, valid or not: a valid call traces into one graph
   (tests/torch/test_torch_op.py); every argument, backend and check_values error
   reaches the caller as the spec's exception itself, raised when the graph
   runs, before anything is written (tests/spec/test_hostile_inputs.py), also when
   no argument is a tensor a graph could take as a mutated operand (no
   contiguous tensor, an overlapping pool, meta tensors), and under Inductor.
2. The storage check holds under compile: nested and meta tensors, and
   lazily negated views (which Inductor would otherwise read as raw memory),
   get the spec's errors. Sparse tensors are torch's limit: Dynamo refuses to
   take one as a graph input (its Unsupported).
3. An inference pool is refused when the graph runs outside inference mode and
   written inside it: the graph asks when it runs, since Dynamo traces with
   inference mode off and its guards do not tell no_grad from inference mode.
4. dynamic=True traces every valid pool layout (transposed, as_strided views
   whose strides interleave); a message holding a size is formatted when the
   graph runs, under dynamic=True and under the default dynamic=None after a
   recompile with automatic dynamic shapes (tests/spec/test_hostile_inputs.py:
   every argument error, and one graph giving each call its own sizes).
5. numpy and JAX arguments are not supported with fullgraph=True (Dynamo
   cannot trace numpy's array attributes nor JAX arrays at all: its
   Unsupported, pinned here); without fullgraph Dynamo breaks the graph there
   and the call runs eagerly, with the spec's results and errors.

aot_eager runs the same Dynamo trace and functionalization as Inductor; one
Inductor compile covers the case that once failed only there.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from kv_canary_torch import launch_scatter_req_token_ids_kernel
from shared_spec import errors, scatter_reference
from tests.spec.test_hostile_inputs import FLAT_IN, OFFSETS, ROWS
from tests.strategies import sentinel_pool
from tests.torch_support import FIRST_CALLS_RUN, device_for, first_calls_in_a_fresh_process


def _pool() -> np.ndarray:
    return sentinel_pool(4, 5, seed=13)


def _expected() -> np.ndarray:
    return scatter_reference(FLAT_IN, OFFSETS, ROWS, _pool())


def _inputs():
    return [torch.from_numpy(a.copy()) for a in (FLAT_IN, OFFSETS, ROWS)]


def caller(flat_in, offsets, rows, pool, backend="torch"):
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend=backend)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _every_two(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a view of stride 2: not contiguous."""
    return torch.repeat_interleave(t, 2)[::2]


def _assert_compiled_raises(args, error_class, message, *, backend="aot_eager", dynamic=False):
    """Eager and compiled calls raise exactly ``error_class(message)`` (twice: traced, then cached); the pool is kept."""
    pool = args[3]
    readable = isinstance(pool, torch.Tensor) and pool.device.type != "meta" and pool.layout == torch.strided
    before = pool.resolve_neg().clone() if readable else None
    with pytest.raises(error_class) as eager:
        caller(*args)
    assert str(eager.value) == message
    compiled = torch.compile(caller, fullgraph=True, backend=backend, dynamic=dynamic)
    for _ in range(2):
        with pytest.raises(error_class) as raised:
            compiled(*args)
        assert type(raised.value) is error_class and str(raised.value) == message
        if before is not None:
            assert torch.equal(pool.resolve_neg(), before)


# -- 1. errors without a tensor to hang them on ---------------------------------------------------


def test_an_error_reaches_the_caller_when_no_argument_is_contiguous():
    pool = torch.from_numpy(_pool()[:1].copy()).expand(4, -1)  # overlapping: no graph may take it as mutated
    args = [*(_every_two(t) for t in _inputs()), pool]
    assert not any(a.is_contiguous() for a in args)
    _assert_compiled_raises(args, errors.KvCanaryValueError, errors.NOT_WRITABLE.format(reason=errors.WRITE_OVERLAP.format(strides=(0, 1))))


def test_an_error_reaches_the_caller_when_every_argument_is_on_meta():
    args = [t.to("meta") for t in (*_inputs(), torch.from_numpy(_pool()))]
    _assert_compiled_raises(args, errors.KvCanaryValueError, errors.NO_DATA.format(arg="flat_in"))


def test_under_inductor_a_meta_pool_with_cpu_inputs_gets_the_eager_error():
    """Inductor once failed here (auto_functionalized_v2 was not removed) where eager raised the spec's error."""
    args = [*_inputs(), torch.empty((4, 5), dtype=torch.int32, device="meta")]
    _assert_compiled_raises(args, errors.KvCanaryValueError, errors.NO_DATA.format(arg="pool_out"), backend="inductor")


# -- 2. the storage check --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["flat_in", "pool_out"])
def test_lazily_negated_views_are_refused_under_compile(name):
    args = [*_inputs(), torch.from_numpy(_pool())]
    position = 0 if name == "flat_in" else 3
    args[position] = torch._neg_view(args[position])
    _assert_compiled_raises(args, errors.KvCanaryValueError, errors.NEGATIVE_BIT.format(arg=name))


def test_nested_tensors_are_refused_under_compile():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype: torch says so
        jagged = torch.nested.nested_tensor([torch.arange(3), torch.arange(9)], layout=torch.jagged)
    args = [jagged, *_inputs()[1:], torch.from_numpy(_pool())]
    _assert_compiled_raises(args, errors.KvCanaryTypeError, errors.NOT_STRIDED.format(arg="flat_in", layout="jagged"))


def test_sparse_tensors_are_torch_compiles_limit():
    """Pins a limit of torch (2.13): Dynamo does not take a sparse tensor into a graph. When this fails, it does."""
    args = [_inputs()[0].to_sparse(), *_inputs()[1:], torch.from_numpy(_pool())]
    with pytest.raises(torch._dynamo.exc.Unsupported, match="sparse"):
        torch.compile(caller, fullgraph=True, backend="aot_eager")(*args)


def test_an_argument_made_by_an_in_place_op_is_computed_once():
    """The storage check reads the traced tensor's fake, never a real value Dynamo would compute again."""
    def in_place(flat_in, offsets, rows, pool):
        caller(flat_in.add_(1), offsets, rows, pool)

    flat_in, offsets, rows = _inputs()
    pool = torch.from_numpy(_pool())
    torch.compile(in_place, fullgraph=True, backend="aot_eager")(flat_in, offsets, rows, pool)
    np.testing.assert_array_equal(flat_in.numpy(), FLAT_IN + 1)
    np.testing.assert_array_equal(pool.numpy(), scatter_reference(FLAT_IN + 1, OFFSETS, ROWS, _pool()))


# -- 3. inference pools ----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_an_inference_pool_is_refused_outside_inference_mode_and_written_inside(backend):
    device = device_for(backend)
    inputs = [t.to(device) for t in _inputs()]
    with torch.inference_mode():
        pool = torch.from_numpy(_pool()).to(device)
    compiled = torch.compile(caller, fullgraph=True, backend="aot_eager")
    message = errors.NOT_WRITABLE.format(reason=errors.WRITE_INFERENCE)
    # no_grad first: its graph is the one inference mode reuses (Dynamo guards grad mode, not inference mode).
    for outside in (torch.no_grad, torch.enable_grad):
        with outside():
            with pytest.raises(errors.KvCanaryValueError) as raised:
                compiled(*inputs, pool, backend)
        assert str(raised.value) == message
        np.testing.assert_array_equal(pool.cpu().numpy(), _pool())
    with torch.inference_mode():
        compiled(*inputs, pool, backend)
    np.testing.assert_array_equal(pool.cpu().numpy(), _expected())


def test_an_inference_pool_error_comes_before_a_backend_error_under_compile():
    with torch.inference_mode():
        pool = torch.from_numpy(_pool()).clone()
    message = errors.NOT_WRITABLE.format(reason=errors.WRITE_INFERENCE)
    for call in (caller, torch.compile(caller, fullgraph=True, backend="aot_eager")):
        with pytest.raises(errors.KvCanaryValueError) as raised:
            call(*_inputs(), pool, "nope")
        assert str(raised.value) == message
        np.testing.assert_array_equal(pool.numpy(), _pool())


# -- 4. dynamic shapes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "strides", [(1, 4), (7, 2), (2, 9)], ids=["transposed", "interleaved", "interleaved-columns"]
)
def test_dynamic_shapes_trace_every_valid_pool_layout(strides):
    memory = torch.full((64,), -7, dtype=torch.int32)
    pool = memory.as_strided((4, 5), strides)
    pool.copy_(torch.from_numpy(_pool()))
    torch.compile(caller, fullgraph=True, backend="aot_eager", dynamic=True)(*_inputs(), pool)
    np.testing.assert_array_equal(pool.numpy(), _expected())


# -- 5. numpy and JAX arguments --------------------------------------------------------------------


@pytest.mark.parametrize("framework", ["numpy", "jax"])
def test_foreign_arguments_are_not_supported_with_fullgraph(framework):
    """Pins a limit of torch (2.13): Dynamo cannot trace a numpy array's attributes or a JAX array."""
    convert = np.asarray if framework == "numpy" else jnp.asarray
    pool = torch.from_numpy(_pool())
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(caller, fullgraph=True, backend="aot_eager")(convert(FLAT_IN), *_inputs()[1:], pool)
    np.testing.assert_array_equal(pool.numpy(), _pool())


@pytest.mark.parametrize("framework", ["numpy", "jax"])
def test_without_fullgraph_foreign_arguments_run_eagerly_with_the_specs_answers(framework):
    # JAX arrays on the host, beside the CPU pool (on a GPU machine jnp.asarray would put them on the GPU)
    convert = np.asarray if framework == "numpy" else (lambda a: jax.device_put(a, jax.devices("cpu")[0]))
    compiled = torch.compile(caller, backend="aot_eager")
    pool = torch.from_numpy(_pool())
    compiled(convert(FLAT_IN), *_inputs()[1:], pool)
    np.testing.assert_array_equal(pool.numpy(), _expected())
    wrong = torch.from_numpy(_pool())
    with pytest.raises(errors.KvCanaryTypeError) as raised:
        compiled(convert(FLAT_IN.astype(np.int32)), *_inputs()[1:], wrong)
    assert str(raised.value) == errors.WRONG_DTYPE.format(arg="flat_in", dtype="int64", got="int32")
    np.testing.assert_array_equal(wrong.numpy(), _pool())


def test_the_constant_marker_is_the_one_torchs_decorator_sets():
    """kv_canary_torch.traced marks functions as torch.compiler.assume_constant_result does, without importing Dynamo."""
    from kv_canary_torch import traced

    def ours():
        return 0

    def theirs():
        return 0

    traced.assume_constant_result(ours)
    torch.compiler.assume_constant_result(theirs)
    assert vars(ours) == vars(theirs) == {traced.MARKER: True}


@FIRST_CALLS_RUN.ahead
def test_importing_the_frontend_imports_no_dynamo():
    """A serving worker that never compiles pays no TorchDynamo import (about a second on the CPU machine)."""
    assert first_calls_in_a_fresh_process()["dynamo_after_import"] is False
