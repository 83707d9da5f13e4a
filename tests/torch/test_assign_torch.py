"""``kv_canary_torch.assign_req_to_token_pool_func``: the Triton kernel (interpreted without CUDA) and the composed
backends against the assignment's reference, on sentinel-filled tables; errors; GPU properties (marked gpu)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from kv_canary.platform import cuda_available
from kv_canary_torch import assign_req_to_token_pool_func
from kv_canary_torch.conformance import TorchRunner
from kv_canary_torch.launch import plan as launch_plan
from shared_spec import assignment, errors
from shared_spec.build_cases import sentinel_pool
from shared_spec.cases import ASSIGN, load_cases
from shared_spec.conformance import check_case
from tests.assign_support import EXTREME_WINDOWS, INT64_MAX, INT64_MIN, assignments, conformance_sweeps, well_formed
from tests.profiles import property_settings

DEVICE = "cuda" if cuda_available() else "cpu"
BACKENDS = ["triton", "torch"]


GUARD = 2  # rows (and, strided, columns) of a guard band around the table: drawn rows reach 2 past either edge
GUARD_FILL = -77


def run(batch, backend, device=DEVICE, strided=False):
    """The table after one call on tensors made from the numpy ``batch``, the table a view inside a parent with
    ``GUARD`` rows above and below (``strided``: and columns either side, every 1-D input a view of every other
    element), whose guard cells must stay untouched."""
    rows, table, start, end, loc, bs = batch

    def tensor(x):
        t = torch.from_numpy(np.ascontiguousarray(x)).to(device)
        if strided:
            wide = torch.zeros(2 * t.shape[0], dtype=t.dtype, device=device)
            wide[::2] = t
            return wide[::2]
        return t

    n_rows, width = table.shape
    side = GUARD if strided else 0
    parent = torch.full((n_rows + 2 * GUARD, width + 2 * side), GUARD_FILL, dtype=torch.int32, device=device)
    parent[GUARD : GUARD + n_rows, side : side + width] = torch.from_numpy(table).to(device)
    t = parent[GUARD : GUARD + n_rows, side : side + width]
    assign_req_to_token_pool_func(tensor(rows), t, tensor(start), tensor(end), tensor(loc), bs, backend=backend)
    outside = parent.clone()
    outside[GUARD : GUARD + n_rows, side : side + width] = GUARD_FILL
    assert (outside == GUARD_FILL).all(), "a cell outside the table was written"
    return t.cpu().numpy()


@pytest.mark.parametrize("backend", BACKENDS)
@property_settings(15)
@given(batch=assignments(), strided=st.booleans())
def test_matches_the_reference(backend, batch, strided):
    np.testing.assert_array_equal(run(batch, backend, strided=strided), assignment.assignment_reference(*batch))


@pytest.mark.parametrize("backend", BACKENDS)
@property_settings(8)
@given(batch=well_formed(max_rows=40, max_width=70, max_bs=40))
def test_well_formed_batches_past_a_group(backend, batch):
    """Several groups of requests (GROUP = 16) and several copy blocks per group."""
    np.testing.assert_array_equal(run(batch, backend), assignment.assignment_reference(*batch))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("start,end", EXTREME_WINDOWS)
@pytest.mark.parametrize("dtype", ["int64"])
def test_int64_extremes(backend, start, end, dtype):
    n = len(start)
    batch = (np.arange(n), sentinel_pool(n, 5), np.asarray(start, dtype), np.asarray(end, dtype),
             np.asarray([INT64_MIN, INT64_MAX, 7, -1, 2**40, 3, 4]), n)
    np.testing.assert_array_equal(run(batch, backend), assignment.assignment_reference(*batch))


def test_prefix_sum_across_many_groups():
    """bs past PREFIX (1024 lengths a prefix iteration): the running sum of earlier groups in one SMALL-wide block
    (the groups among the first SMALL requests), in one PREFIX-wide block, and in two."""
    from kv_canary_torch import assign_kernel

    bs = assign_kernel.PREFIX + 3 * assign_kernel.GROUP + 5
    assert assign_kernel.GROUP < assign_kernel.SMALL < assign_kernel.PREFIX
    rng = np.random.default_rng(0)
    lengths = rng.integers(-1, 3, bs)
    start = rng.integers(0, 4, bs)
    batch = (rng.permutation(bs + 7)[:bs], sentinel_pool(bs + 7, 8), start, start + lengths, np.arange(1, 2 * bs), bs)
    np.testing.assert_array_equal(run(batch, "triton"), assignment.assignment_reference(*batch))


def test_windows_longer_than_a_lap_of_the_split_programs():
    """Windows past SPLIT * BLOCK columns: each program of a group takes several chunks, every SPLIT-th."""
    from kv_canary_torch import assign_kernel

    lap = launch_plan.assign_split(1) * assign_kernel.BLOCK
    width = 2 * lap + 37
    start = np.array([0, 5, lap - 3], np.int64)
    end = np.array([width, 2 * lap + 1, width + 9], np.int64)  # the last runs past the table: clipped
    lengths = end - start
    batch = (np.array([2, 0, 1]), sentinel_pool(3, width), start, end, np.arange(10, 10 + int(lengths.sum())), 3)
    np.testing.assert_array_equal(run(batch, "triton"), assignment.assignment_reference(*batch))


@pytest.mark.parametrize("backend, cases", conformance_sweeps(["triton", "torch", "pallas"],
                                                              interpreted=("triton", "pallas")))
def test_conformance_cases(backend, cases):
    runner = TorchRunner(backend)
    if runner.unavailable:
        pytest.skip(runner.unavailable)
    results = [check_case(runner, case) for case in cases]
    assert [r for r in results if r.status == "fail"] == []
    assert sum(r.status == "pass" for r in results) >= len(cases) * 3 // 4


def test_unknown_backend_is_the_assignments_error():
    t = torch.zeros((2, 4), dtype=torch.int32)
    one = torch.zeros(1, dtype=torch.int64)
    with pytest.raises(errors.KvCanaryValueError) as info:
        assign_req_to_token_pool_func(one, t, one, one, one, 1, backend="cuda")
    assert str(info.value).startswith(errors.ASSIGN_PREFIX + " unknown backend 'cuda'")


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_size_times_the_slots_at_2_to_the_63_is_the_specs_error(backend):
    """2 requests over an ``out_cache_loc`` of ``2**62`` entries (expanded: one in memory), whose running sum could
    reach ``2**63``: the "slots" check's error, before anything is written; 1 request passes every check."""
    from kv_canary_arrays.describe import TORCH, describe
    from kv_canary_torch.assign import fast_check

    t = torch.full((2, 4), -5, dtype=torch.int32)
    rows, start, end = torch.tensor([0, 1]), torch.tensor([0, 0]), torch.tensor([2, 2])
    many = torch.zeros(1, dtype=torch.int64).expand(2**62)
    with pytest.raises(errors.KvCanaryValueError) as info:
        assign_req_to_token_pool_func(rows, t, start, end, many, 2, backend=backend)
    assert str(info.value) == errors.ASSIGN_TOO_MANY_SLOTS.format(bs=2, n=2**62)
    assert (t == -5).all()
    for batch_size, passes in ((2, False), (None, False), (1, True), (0, True)):
        values = (rows, t, start, end, many)
        views = {n: describe(v, frontend=TORCH, written=n == assignment.TABLE) for n, v in zip(assignment.ARGUMENT_NAMES, values)}
        assert fast_check(*values, batch_size) == passes == (assignment.first_error(views, batch_size) is None)


def test_a_failed_call_writes_nothing():
    t = torch.full((2, 4), -5, dtype=torch.int32)
    ok = torch.tensor([0, 1])
    with pytest.raises(errors.KvCanaryValueError, match="batch_size 3 is outside"):
        assign_req_to_token_pool_func(ok, t, torch.tensor([0, 0]), torch.tensor([2, 2]), torch.arange(4), 3)
    assert (t == -5).all()


def test_numpy_inputs_are_adopted():
    t = torch.full((2, 4), -5, dtype=torch.int32)
    assign_req_to_token_pool_func(np.array([1, 0]), t, np.array([0, 2], np.int32), np.array([2, 3]), np.arange(5, 8), 2)
    assert t.tolist() == [[-5, -5, 7, -5], [5, 6, -5, -5]]


gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not cuda_available(), reason="needs CUDA")


def sglang_inputs(bs, width, new_tokens, seed=0):
    """What sglang's callers pass: distinct rows, each request's new slots after its prefix."""
    rng = np.random.default_rng(seed)
    n_rows = max(2 * bs, 8)
    lengths = np.broadcast_to(np.asarray(new_tokens), (bs,)).astype(np.int64)
    start = rng.integers(0, width - lengths + 1)
    rows = rng.permutation(n_rows)[:bs]
    loc = rng.integers(0, 2**31 - 1, int(lengths.sum()))
    return rows, sentinel_pool(n_rows, width), start, start + lengths, loc, bs


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize("bs,new_tokens", [(1, 1), (64, 1), (1024, 1), (8, 2048), (64, 512), (300, 37)])
def test_gpu_is_sglangs_table_on_its_inputs(bs, new_tokens, dtype):
    from kv_canary.baseline_assign import sglang_style_assign

    batch = sglang_inputs(bs, 4097, new_tokens)
    typed = [torch.from_numpy(np.asarray(x).astype(dtype)).cuda() for x in (batch[0], batch[2], batch[3], batch[4])]
    ours = torch.from_numpy(batch[1].copy()).cuda()
    theirs = ours.clone()
    assign_req_to_token_pool_func(typed[0], ours, typed[1], typed[2], typed[3], bs)
    sglang_style_assign(typed[0], theirs, typed[1], typed[2], typed[3], bs)
    assert torch.equal(ours, theirs)
    np.testing.assert_array_equal(ours.cpu().numpy(), assignment.assignment_reference(*batch))


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_gpu_later_calls_are_served_by_the_native_call_path_with_sglangs_tables(dtype):
    """The serving pattern: one table, bs and lengths new every call, per-request arrays longer than bs (entries
    past it never read). The first call remembers the signature; every later one is served in one C++ call."""
    from kv_canary.baseline_assign import sglang_style_assign
    from kv_canary_torch.launch import dispatch, native

    n_rows, width = 2100, 4097
    ours = torch.from_numpy(sentinel_pool(n_rows, width)).cuda()
    theirs = ours.clone()
    steps = [(1, 1), (64, 1), (300, 37), (8, 2048), (1000, 1), (17, 5), (1024, 1), (2, 3)]
    for k, (bs, new_tokens) in enumerate(steps):
        rng = np.random.default_rng(k)
        lengths = np.full(bs, new_tokens, np.int64)
        start = rng.integers(0, width - lengths + 1)
        rows = rng.permutation(n_rows)[:bs]
        loc = rng.integers(0, 2**31 - 1, int(lengths.sum()))
        pad = lambda x: torch.from_numpy(np.concatenate([x, np.full(3, 10**6)]).astype(dtype)).cuda()  # noqa: E731
        arguments = (pad(rows), pad(start), pad(start + lengths), torch.from_numpy(loc.astype(dtype)).cuda())
        if k == 1:  # the first call remembered the signature and built (or loaded) the native piece
            assert native.module() is not None, native.unavailable_reason()
            assert dispatch.served() is not None, "the call path is not configured"
            served = dispatch.served()
        assign_req_to_token_pool_func(arguments[0], ours, arguments[1], arguments[2], arguments[3], bs)
        sglang_style_assign(arguments[0], theirs, arguments[1], arguments[2], arguments[3], bs)
        assert torch.equal(ours, theirs), (bs, new_tokens)
    assert dispatch.served() == served + len(steps) - 1
    before = ours.clone()
    rows, start, end, loc = arguments
    for call, error in (  # the remembered signature with lengths that do not relate: the spec's errors, nothing written
        (lambda: assign_req_to_token_pool_func(rows, ours, start, end, loc, rows.shape[0] + 1), errors.KvCanaryValueError),
        (lambda: assign_req_to_token_pool_func(rows, ours, start[:1], end, loc, 2), errors.KvCanaryValueError),
        (lambda: assign_req_to_token_pool_func(rows, ours, start, end, loc, -1), errors.KvCanaryValueError),
        (lambda: assign_req_to_token_pool_func(rows, ours, start, end, loc, True), errors.KvCanaryTypeError),
        (lambda: assign_req_to_token_pool_func(rows, ours, start, end, loc.float(), 2), errors.KvCanaryTypeError),
    ):
        served = dispatch.served()
        with pytest.raises(error):
            call()
        assert dispatch.served() == served
    torch.cuda.synchronize()
    assert torch.equal(ours, before)


@gpu
@needs_cuda
def test_gpu_compiles_one_kernel_for_every_batch_size_and_table():
    from kv_canary_torch import assign_kernel

    caches = assign_kernel.assign_kernel.device_caches
    compiled = lambda: sum(len(cache[0]) for cache in caches.values())  # noqa: E731 (earlier tests' variants count too)
    before = compiled()
    for bs, width in ((1, 17), (3, 4097), (64, 33), (1000, 2049), (5000, 5)):
        batch = sglang_inputs(bs, width, 1)
        run(batch, "triton", "cuda")
    assert compiled() - before <= 1  # int64 indices, contiguous: one variant, compiled here unless an earlier test did


@gpu
@needs_cuda
def test_gpu_no_host_sync_captures_in_a_cuda_graph():
    batch = sglang_inputs(64, 2049, 1)
    rows, table, start, end, loc = (torch.from_numpy(np.asarray(x)).cuda() for x in batch[:5])
    assign_req_to_token_pool_func(rows, table, start, end, loc, 64)  # compiled outside the capture
    fresh = torch.from_numpy(batch[1].copy()).cuda()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        assign_req_to_token_pool_func(rows, fresh, start, end, loc, 64)
    graph.replay()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(fresh.cpu().numpy(), assignment.assignment_reference(*batch))


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_and_columns_outside_the_table_write_nothing_there(backend):
    """Rows just outside the table and windows across its edges: the guard band around it stays untouched."""
    batch = (np.array([-1, 3, -2, 4, 0, 2]), sentinel_pool(3, 4), np.array([0, 0, 1, 0, -2, 3]),
             np.array([2, 4, 3, 4, 3, 9]), np.arange(1, 40), 6)
    np.testing.assert_array_equal(run(batch, backend), assignment.assignment_reference(*batch))
    np.testing.assert_array_equal(run(batch, backend, strided=True), assignment.assignment_reference(*batch))


def case_tensors(case):
    """A case's arguments as the torch runner builds them (CPU), in sglang's order with batch_size last."""
    runner = TorchRunner("torch")
    values = []
    for name in (*assignment.ARGUMENT_NAMES, assignment.BATCH_SIZE):
        arg = case.args[name]
        value = arg.value if not hasattr(arg, "numpy") else runner.array(arg, "cpu")
        if name == assignment.TABLE and case.layout == "broadcast_rows":
            value = value[:1].expand(value.shape[0], -1)
        values.append(value)
    return values


@pytest.mark.parametrize("case", load_cases(op=ASSIGN), ids=lambda c: c.name)
def test_fast_check_is_first_error_on_every_case(case):
    from kv_canary_arrays.describe import TORCH, describe
    from kv_canary_torch.assign import fast_check

    *arrays, batch_size = case_tensors(case)
    views = {n: describe(v, frontend=TORCH, written=n == assignment.TABLE) for n, v in zip(assignment.ARGUMENT_NAMES, arrays)}
    assert fast_check(*arrays, batch_size) == (assignment.first_error(views, batch_size) is None)


@pytest.mark.parametrize("batch_size", [np.int64(1), np.int32(2)])
def test_numpy_integer_batch_sizes_take_the_slow_path_and_work(batch_size):
    t = torch.full((2, 4), -5, dtype=torch.int32)
    assign_req_to_token_pool_func(torch.tensor([1, 0]), t, torch.tensor([0, 2]), torch.tensor([2, 3]), torch.arange(5, 8), batch_size)
    assert t[1, :2].tolist() == [5, 6] and (t[0, 2] == 7) == (batch_size == 2)


def hostile(name):
    """A valid call's arguments with one replaced by a tensor no kernel may touch."""
    args = {"req_pool_indices": torch.tensor([1, 0]), "req_to_token": torch.full((2, 4), -5, dtype=torch.int32),
            "start_offset": torch.tensor([0, 2]), "end_offset": torch.tensor([2, 3]), "out_cache_loc": torch.arange(5, 8)}
    if name == "meta":
        args["start_offset"] = torch.empty(2, dtype=torch.int64, device="meta")
    elif name == "sparse":
        args["req_pool_indices"] = torch.tensor([1, 0]).to_sparse()
    elif name == "negative_bit":
        args["out_cache_loc"] = torch.arange(5, 8)._neg_view()
    elif name == "freed":
        loc = torch.arange(5, 8)
        loc.untyped_storage().resize_(0)
        args["out_cache_loc"] = loc
    elif name == "inference":
        with torch.inference_mode():
            args["req_to_token"] = torch.full((2, 4), -5, dtype=torch.int32)
    elif name == "read_only_numpy":
        table = np.full((2, 4), -5, np.int32)
        table.flags.writeable = False
        args["req_to_token"] = table
    return args


@pytest.mark.parametrize("name,expected", [
    ("meta", errors.for_assignment(errors.NO_DATA).format(arg="start_offset")),
    ("sparse", errors.for_assignment(errors.NOT_STRIDED).format(arg="req_pool_indices", layout="sparse_coo")),
    ("negative_bit", errors.for_assignment(errors.NEGATIVE_BIT).format(arg="out_cache_loc")),
    ("freed", errors.for_assignment(errors.NO_MEMORY).format(arg="out_cache_loc")),
    ("inference", errors.ASSIGN_NOT_WRITABLE.format(reason=errors.WRITE_INFERENCE)),
    ("read_only_numpy", errors.ASSIGN_NOT_WRITABLE.format(reason=errors.WRITE_IMMUTABLE.format(type_name="read-only numpy.ndarray"))),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_hostile_arguments_get_the_specs_error_and_nothing_is_written(name, expected, backend):
    args = hostile(name)
    before = np.array(args["req_to_token"], copy=True) if not isinstance(args["req_to_token"], torch.Tensor) else None
    with pytest.raises((errors.KvCanaryTypeError, errors.KvCanaryValueError)) as info:
        assign_req_to_token_pool_func(*args.values(), 2, backend=backend)
    assert str(info.value) == expected
    table = args["req_to_token"]
    if isinstance(table, torch.Tensor):
        with torch.inference_mode():
            assert (table == -5).all()
    else:
        np.testing.assert_array_equal(table, before)
