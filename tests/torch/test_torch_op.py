"""The launcher under ``torch.compile``: one graph, the same results, the same errors.

Inductor compiles are slow on a small CPU, so each backend gets one Inductor
compile of a realistic caller; the variations (layouts, dynamic shapes,
errors) compile with ``aot_eager``, which runs the same Dynamo trace and
functionalization and differs only in code generation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kv_canary_torch import launch_scatter_req_token_ids_kernel
from kv_canary_torch.op import OP_QUALNAME, decode_fields, encode_fields
from shared_spec import errors, scatter_reference
from tests.profiles import property_settings
from tests.strategies import large_batch
from tests.torch_support import as_numpy, device_for, sentinel

BACKENDS = ["torch", "triton"]


def as_tensors(batch, device="cpu"):
    return [torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in batch]


def scatter_then_read(flat_in, lengths, rows, pool, backend: str):
    """A caller with work on both sides: offsets built in-graph, the pool read after the write."""
    offsets = torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)])
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend=backend)
    return pool.to(torch.int64).sum(dim=1)


def plain_caller(flat_in, offsets, rows, pool, backend: str, check_values: bool = False):
    launch_scatter_req_token_ids_kernel(
        flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, check_values=check_values, backend=backend
    )


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_the_op_is_registered_with_a_fake():
    packet = torch.ops.kv_canary.scatter_req_token_ids
    assert packet.default.name() == OP_QUALNAME
    schema = str(packet.default._schema)
    assert "Tensor(a3!) pool_out" in schema and "-> ()" in schema, schema


@pytest.mark.parametrize("implementation", BACKENDS)
def test_opcheck(implementation):
    flat_in, offsets, rows, pool = as_tensors(large_batch(bs=6, width=5, seed=1), device_for(implementation))
    torch.library.opcheck(
        torch.ops.kv_canary.scatter_req_token_ids.default,
        (flat_in, offsets, rows, pool, False, implementation),
        test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"),
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_inductor_fullgraph_matches_the_reference(backend):
    flat_in, offsets, rows, pool = large_batch(bs=50, width=9, seed=2)
    lengths = np.diff(offsets)
    expected = scatter_reference(flat_in, offsets, rows, pool)
    compiled = torch.compile(scatter_then_read, fullgraph=True)
    device = device_for(backend)
    pool_t = torch.from_numpy(pool.copy()).to(device)
    sums = compiled(*as_tensors((flat_in, lengths, rows), device), pool_t, backend)
    np.testing.assert_array_equal(as_numpy(pool_t), expected)
    np.testing.assert_array_equal(as_numpy(sums), expected.astype(np.int64).sum(axis=1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_column_slices_and_dynamic_shapes_trace_without_breaks(backend, dynamic):
    compiled = torch.compile(plain_caller, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    device = device_for(backend)
    for seed, (bs, width) in enumerate([(7, 5), (11, 8), (3, 6)]):
        flat_in, offsets, rows, pool = large_batch(bs=bs, width=width, seed=seed)
        expected = scatter_reference(flat_in, offsets, rows, pool)
        wide = torch.full((pool.shape[0], width + 5), -77, dtype=torch.int32, device=device)
        view = wide[:, 2 : 2 + width]
        view.copy_(torch.from_numpy(pool))
        compiled(*as_tensors((flat_in, offsets, rows), device), view, backend)
        np.testing.assert_array_equal(as_numpy(view), expected)
        assert (wide[:, :2] == -77).all() and (wide[:, 2 + width :] == -77).all()
        contiguous = torch.from_numpy(pool.copy()).to(device)
        compiled(*as_tensors((flat_in, offsets, rows), device), contiguous, backend)
        np.testing.assert_array_equal(as_numpy(contiguous), expected)


def bad_calls():
    flat = torch.arange(5, dtype=torch.int64)
    offsets, rows = torch.tensor([0, 2, 5]), torch.tensor([1, 3])
    pool = sentinel(4, 6)
    P = errors.PREFIX
    return [
        ("dtype", (flat.to(torch.int32), offsets, rows, pool, "torch"), errors.KvCanaryTypeError, f"{P} flat_in must be int64, got int32"),
        ("backend", (flat, offsets, rows, pool, "nope"), errors.KvCanaryValueError, f"{P} unknown backend 'nope'; expected one of 'auto', 'triton', 'torch', 'pallas'"),
        (
            "overlap", (flat, offsets, rows, sentinel(1, 6).expand(4, -1), "torch"), errors.KvCanaryValueError,
            f"{P} pool_out cannot be written in place: strides (0, 1) make several cells share memory",
        ),
    ]


@pytest.mark.parametrize("name, args, error_class, message", bad_calls(), ids=[c[0] for c in bad_calls()])
def test_argument_errors_under_compile(name, args, error_class, message):
    pool = args[3]
    before = as_numpy(pool).copy()
    # Without fullgraph, Dynamo hands the raising frame back to Python: the exact error.
    with pytest.raises(error_class) as raised:
        torch.compile(plain_caller, backend="aot_eager")(*args)
    assert type(raised.value) is error_class and str(raised.value) == message
    # With fullgraph, the error is recorded into the graph and raised when it runs: the same exception.
    torch._dynamo.reset()
    with pytest.raises(error_class) as raised:
        torch.compile(plain_caller, fullgraph=True, backend="aot_eager")(*args)
    assert type(raised.value) is error_class and str(raised.value) == message
    np.testing.assert_array_equal(as_numpy(pool), before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_checked_mode_runs_inside_the_compiled_graph(backend):
    compiled = torch.compile(plain_caller, fullgraph=True, backend="aot_eager")
    flat_in, offsets, rows, pool = as_tensors(large_batch(bs=5, width=4, seed=4), device_for(backend))
    expected = scatter_reference(*(as_numpy(x) for x in (flat_in, offsets, rows, pool)))
    compiled(flat_in, offsets, rows, pool, backend, True)
    np.testing.assert_array_equal(as_numpy(pool), expected)
    repeated = rows.clone()
    repeated[3] = repeated[1]
    before = as_numpy(pool).copy()
    with pytest.raises(errors.KvCanaryValueError) as raised:
        compiled(flat_in, offsets, repeated, pool, backend, True)
    assert str(raised.value) == errors.ROW_REPEATED.format(j=3, row=int(rows[1]), i=1)
    np.testing.assert_array_equal(as_numpy(pool), before)


@pytest.mark.parametrize("backend", ["auto", *BACKENDS])
def test_backend_choice_traces_with_a_cold_cache(monkeypatch, backend):
    from kv_canary_torch import backends

    monkeypatch.setattr(backends, "_resolved", {})  # the first resolution happens inside the trace
    device = device_for("triton" if backend == "auto" else backend)
    flat_in, offsets, rows, pool = as_tensors(large_batch(bs=4, width=6, seed=6), device)
    expected = scatter_reference(*(as_numpy(x) for x in (flat_in, offsets, rows, pool)))
    torch.compile(plain_caller, fullgraph=True, backend="aot_eager")(flat_in, offsets, rows, pool, backend)
    np.testing.assert_array_equal(as_numpy(pool), expected)


_FIELD = st.recursive(
    st.one_of(st.text(), st.integers(-(2**63), 2**63 - 1), st.lists(st.integers(0, 2**40), max_size=3).map(tuple)),
    lambda inner: st.dictionaries(st.text(min_size=1), inner, max_size=3).map(lambda f: errors.Message("{0!r}", f)),
    max_leaves=6,
)


@property_settings(100)
@given(fields=st.dictionaries(st.text(min_size=1), _FIELD, max_size=4))
def test_recorded_fields_come_back_as_they_were_encoded(fields):
    """What record_error passes to kv_canary::raise_error (str tokens and sizes) decodes to the same fields."""
    names, sizes = [], []
    assert encode_fields(fields, names, sizes)
    assert all(type(name) is str for name in names) and all(type(size) is int for size in sizes)
    assert decode_fields(names, sizes) == fields
    assert names == [] and sizes == []


def test_a_field_of_another_kind_is_not_encoded():
    assert not encode_fields({"name": None}, [], []) and not encode_fields({"flag": True}, [], [])
