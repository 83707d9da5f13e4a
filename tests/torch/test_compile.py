"""The launcher under ``torch.compile(fullgraph=True)``: one graph, eager's results, and eager's errors raised as the
spec's exceptions themselves when the graph runs. ``aot_eager`` runs Dynamo's trace and functionalization as
Inductor does; one Inductor compile covers code generation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kv_canary_torch import launch_scatter_req_token_ids_kernel
from shared_spec import errors
from shared_spec.reference import scatter_reference
from tests.torch_support import BACKENDS, P, as_numpy, device_for, freed, sentinel

FLAT_IN, OFFSETS, ROWS = np.arange(100, 105), np.array([0, 2, 5]), np.array([1, 3])


def inputs(device="cpu"):
    return [torch.from_numpy(a.copy()).to(device) for a in (FLAT_IN, OFFSETS, ROWS)]


def caller(flat_in, offsets, rows, pool, backend="torch", check_values=False, start_cols=None):
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool,
                                        start_cols=start_cols, check_values=check_values, backend=backend)


def scatter_then_read(flat_in, lengths, rows, pool, start_cols, backend):
    """Work on both sides of the call: offsets built in the graph, the pool read after the write."""
    offsets = torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)])
    caller(flat_in, offsets, rows, pool, backend, start_cols=start_cols)
    return pool.to(torch.int64).sum(dim=1)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_a_valid_call_is_one_graph_with_eager_s_result(backend, compiler):
    if compiler == "inductor" and backend == "triton":
        pytest.skip("one Inductor compile is enough on a CPU")
    device = device_for(backend)
    compiled = torch.compile(scatter_then_read, fullgraph=True, backend=compiler)
    windows = (torch.tensor([2, 0], device=device),) + ((None,) if compiler == "aot_eager" else ())
    for seed, start_cols in enumerate(windows):
        pool = sentinel(4, 6, seed=seed, device=device)
        flat_in, offsets, rows = inputs(device)
        expected = scatter_reference(FLAT_IN, OFFSETS, ROWS, as_numpy(pool), None if start_cols is None
                                     else as_numpy(start_cols))
        sums = compiled(flat_in, offsets.diff(), rows, pool, start_cols, backend)
        np.testing.assert_array_equal(as_numpy(pool), expected)
        np.testing.assert_array_equal(as_numpy(sums), expected.astype(np.int64).sum(axis=1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_pool_layouts_and_dynamic_shapes_trace_without_breaks(backend, dynamic):
    compiled = torch.compile(caller, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    device = device_for(backend)
    for seed, width in enumerate((5, 8, 6)):
        wide = torch.full((4, width + 5), -77, dtype=torch.int32, device=device)
        pools = (wide[:, 2:2 + width], sentinel(width, 4, seed=seed, device=device).t())
        for pool in pools:
            expected = scatter_reference(FLAT_IN, OFFSETS, ROWS, as_numpy(pool))
            compiled(*inputs(device), pool, backend)
            np.testing.assert_array_equal(as_numpy(pool), expected)
        assert (wide[:, :2] == -77).all() and (wide[:, 2 + width:] == -77).all()


def bad_calls():
    flat, offsets, rows = inputs()
    pool = sentinel(4, 6)
    return {
        "dtype": ((flat.int(), offsets, rows, pool), errors.KvCanaryTypeError, f"{P} flat_in must be int64, got int32"),
        "rank": ((flat[:4].reshape(2, 2), offsets, rows, pool), errors.KvCanaryValueError,
                 f"{P} flat_in must be 1-D, got shape (2, 2)"),
        "length": ((flat, offsets[:2], rows, pool), errors.KvCanaryValueError, f"{P} offsets length 2 != bs+1 (3)"),
        "list": (([1, 2], offsets, rows, pool), errors.KvCanaryTypeError, f"{P} flat_in must be an array, got list"),
        "overlap": ((flat, offsets, rows, sentinel(1, 6).expand(4, -1)), errors.KvCanaryValueError,
                    errors.NOT_WRITABLE.format(reason=errors.WRITE_OVERLAP.format(strides=(0, 1)))),
        "meta pool": ((flat, offsets, rows, pool.to("meta")), errors.KvCanaryValueError,
                      errors.NO_DATA.format(arg="pool_out")),
        "all on meta": ((flat.to("meta"), offsets.to("meta"), rows.to("meta"), pool.to("meta")),
                        errors.KvCanaryValueError, errors.NO_DATA.format(arg="flat_in")),
        "negative bit": ((torch._neg_view(flat), offsets, rows, pool), errors.KvCanaryValueError,
                         errors.NEGATIVE_BIT.format(arg="flat_in")),
        "backend": ((flat, offsets, rows, pool, "nope"), errors.KvCanaryValueError,
                    f"{P} unknown backend 'nope'; expected one of 'auto', 'triton', 'torch'"),
        "backend none": ((flat, offsets, rows, pool, None), errors.KvCanaryValueError,
                         f"{P} unknown backend None; expected one of 'auto', 'triton', 'torch'"),
        "check_values": ((flat, offsets, rows, pool, "torch", "yes"), errors.KvCanaryTypeError,
                         f"{P} check_values must be a bool, got str"),
        "checked values": ((flat, offsets, torch.tensor([1, 1]), pool, "torch", True), errors.KvCanaryValueError,
                           errors.ROW_REPEATED.format(j=1, row=1, i=0)),
    }


@pytest.mark.parametrize("name", list(bad_calls()))
def test_an_invalid_call_raises_eager_s_error_when_the_graph_runs(name):
    args, error_class, message = bad_calls()[name]
    pool = args[3]
    readable = pool.device.type != "meta"
    before = as_numpy(pool).copy() if readable else None
    compiled = torch.compile(caller, fullgraph=True, backend="aot_eager")
    for call in (caller, compiled, compiled):  # eager, then traced, then the cached graph
        with pytest.raises(error_class) as raised:
            call(*args)
        assert type(raised.value) is error_class and str(raised.value) == message
        if readable:
            np.testing.assert_array_equal(as_numpy(pool), before)


def test_one_dynamic_graph_gives_each_call_its_own_sizes():
    compiled = torch.compile(caller, fullgraph=True, backend="aot_eager", dynamic=True)
    flat, offsets, rows = inputs()
    for n in (2, 4, 6):
        with pytest.raises(errors.KvCanaryValueError) as raised:
            compiled(flat, torch.zeros(n, dtype=torch.int64), rows, sentinel(4, 6))
        assert str(raised.value) == f"{P} offsets length {n} != bs+1 (3)"


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_inference_pool_is_refused_outside_inference_mode_and_written_inside(backend):
    device = device_for(backend)
    with torch.inference_mode():
        pool = sentinel(4, 6, device=device)
    before = as_numpy(pool).copy()
    compiled = torch.compile(caller, fullgraph=True, backend="aot_eager")
    message = errors.NOT_WRITABLE.format(reason=errors.WRITE_INFERENCE)
    for outside in (torch.no_grad, torch.enable_grad):
        with outside(), pytest.raises(errors.KvCanaryValueError) as raised:
            compiled(*inputs(device), pool, backend)
        assert str(raised.value) == message
        np.testing.assert_array_equal(as_numpy(pool), before)
    with torch.inference_mode():
        compiled(*inputs(device), pool, backend)
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(FLAT_IN, OFFSETS, ROWS, before))


def test_storage_freed_after_tracing_is_found_when_the_graph_runs():
    compiled = torch.compile(caller, fullgraph=True, backend="aot_eager")
    pool = sentinel(4, 6)
    compiled(*inputs(), pool)
    _, offsets, rows = inputs()
    with pytest.raises(errors.KvCanaryValueError) as raised:
        compiled(freed(FLAT_IN.tolist()), offsets, rows, pool)
    assert str(raised.value) == errors.NO_MEMORY.format(arg="flat_in")


def test_the_op_is_registered_with_its_schema():
    schema = str(torch.ops.kv_canary.scatter_req_token_ids.default._schema)
    assert "Tensor(a3!) pool_out" in schema and schema.endswith("-> ()"), schema
    flat, offsets, rows = inputs()
    torch.library.opcheck(torch.ops.kv_canary.scatter_req_token_ids.default,
                          (flat, offsets, rows, sentinel(4, 6), None, False, "torch", False),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))


def test_numpy_arrays_in_compiled_code_run_eagerly_with_the_spec_s_answers():
    """Another framework's arrays break the graph (TorchDynamo would trace them as tensors) and take the eager
    launcher: a numpy pool written in place, numpy inputs adopted, a bad one refused with the spec's message."""
    def f(flat_in, offsets, rows, pool, start_cols=None):
        launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool,
                                            start_cols=start_cols)
        return pool

    g = torch.compile(f)
    flat, offsets, rows = torch.arange(5), torch.tensor([0, 2, 5]), torch.tensor([0, 1])
    pool = np.zeros((2, 6), np.int32)
    g(flat, offsets, rows, pool)
    assert pool.tolist() == [[0, 1, 0, 0, 0, 0], [2, 3, 4, 0, 0, 0]]
    tensor_pool = torch.zeros((2, 6), dtype=torch.int32)
    g(flat.numpy(), offsets.numpy(), rows.numpy(), tensor_pool, np.array([1, 0]))
    assert tensor_pool.tolist() == [[0, 0, 1, 0, 0, 0], [2, 3, 4, 0, 0, 0]]
    with pytest.raises(errors.KvCanaryTypeError, match="pool_out must be int32, got float32"):
        g(flat, offsets, rows, np.zeros((2, 6), np.float32))


def test_a_parameter_pool_is_taken_in_the_graph():
    compiled = torch.compile(caller, fullgraph=True, backend="aot_eager")
    pool = torch.nn.Parameter(sentinel(4, 6), requires_grad=False)
    compiled(*inputs(), pool, check_values=True)
    expected = scatter_reference(FLAT_IN, OFFSETS, ROWS, sentinel(4, 6).numpy())
    np.testing.assert_array_equal(pool.detach().numpy(), expected)


def test_a_tensor_subclass_runs_eagerly_outside_fullgraph():
    class Pool(torch.Tensor):
        pass

    pool = sentinel(4, 6).as_subclass(Pool)
    torch.compile(caller, backend="aot_eager")(*inputs(), pool)
    np.testing.assert_array_equal(pool.numpy(), scatter_reference(FLAT_IN, OFFSETS, ROWS, sentinel(4, 6).numpy()))
