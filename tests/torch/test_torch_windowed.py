"""Windowed writes (``start_cols``) on every torch backend against ``scatter_reference(..., start_cols)``.

Random batches with hostile values (rows outside the pool, segments of any sign, int64 extremes of
``start_cols`` and ``offsets``) on sentinel pools, strided layouts, the Triton tiled kernel shrunk to small
tiles, the argument checks and the checked mode's rule 6, ``torch.func.vmap`` and ``torch.compile``.
Triton runs interpreted without a GPU, compiled on one.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given

from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch
from kv_canary_torch.launch import dispatch, plan as launch_plan
from shared_spec import errors, scatter_reference
from tests.contract import assert_same_pool
from tests.profiles import property_settings
from tests.strategies import INT64_MAX, INT64_MIN, sentinel_pool, windowed_batches
from tests.torch_support import device_for, tiled_everywhere, using_rule

BACKENDS = ["torch", "triton"]
EXAMPLES = {"torch": 60, "triton": 25}


def tensors(batch, device):
    return [torch.tensor(x, device=device) for x in batch]


def call(batch, backend, **options):
    """The pool after a windowed launch on copies of ``batch`` (which stays as it was, for the reference)."""
    flat_in, offsets, rows, pool, start_cols = tensors(batch, device_for(backend))
    launch(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, start_cols=start_cols,
           backend=backend, **options)
    return pool.cpu().numpy()


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_windowed_batches_match_the_reference(backend):
    @property_settings(EXAMPLES[backend])
    @given(batch=windowed_batches())
    def check(batch):
        assert_same_pool(call(batch, backend), scatter_reference(*batch))

    check()


@pytest.mark.parametrize("backend", BACKENDS)
def test_int64_extremes_of_start_cols_and_offsets(backend):
    flat_in = np.arange(40, dtype=np.int64) * 7 - 3
    edges = [INT64_MIN, INT64_MIN + 1, -41, -1, 0, 1, 5, 9, 10, 11, 2**31, INT64_MAX - 1, INT64_MAX]
    bs = len(edges)
    for start in (0, 3, 39, 40, -5, INT64_MIN, INT64_MAX, INT64_MAX - 2):
        for end in (0, 4, 40, 41, INT64_MAX, INT64_MIN):
            # requests alternate (start, end) and (end, start), each with every first column in turn
            offsets = np.array(([start, end] * bs)[: bs + 1], dtype=np.int64)
            batch = (flat_in, offsets, np.arange(bs, dtype=np.int64), sentinel_pool(bs, 10, seed=2), np.array(edges, dtype=np.int64))
            assert_same_pool(call(batch, backend), scatter_reference(*batch))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_serving_pattern_prompt_then_appends(backend):
    # A prompt from column 0, then each step's new tokens at the request's current length.
    device = device_for(backend)
    pool = torch.from_numpy(sentinel_pool(5, 12, seed=3)).to(device)
    expected = pool.cpu().numpy().copy()
    lengths = {0: 0, 3: 0}
    rng = np.random.default_rng(4)
    for step in range(5):
        new = {row: rng.integers(0, 2**40, size=(5 if step == 0 else 1) + row % 2) for row in lengths}
        flat = np.concatenate(list(new.values()))
        offsets = np.concatenate([[0], np.cumsum([len(v) for v in new.values()])])
        rows = np.array(list(new), dtype=np.int64)
        start_cols = np.array([lengths[row] for row in new], dtype=np.int64)
        batch = (flat, offsets.astype(np.int64), rows, expected, start_cols)
        expected = scatter_reference(*batch)
        launch(flat_in=torch.tensor(flat, device=device), offsets=torch.tensor(offsets, device=device),
               req_pool_indices=torch.tensor(rows, device=device), pool_out=pool,
               start_cols=torch.tensor(start_cols, device=device), backend=backend)
        for row, ids in new.items():
            lengths[row] += len(ids)
        assert_same_pool(pool.cpu().numpy(), expected)
    assert pool[0, :9].cpu().tolist() == [int(np.int32(v)) for v in expected[0, :9]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_layouts(backend):
    device = device_for(backend)
    flat_in, offsets, rows, _, start_cols = (
        np.arange(30, dtype=np.int64) + 100, np.array([0, 4, 9, 9, 20], dtype=np.int64), np.array([3, 0, 1, 2], dtype=np.int64),
        None, np.array([2, 0, 5, 7], dtype=np.int64),
    )
    wide = torch.from_numpy(sentinel_pool(4, 30, seed=5)).to(device)
    pool = wide[:, 3:27:2]  # strided columns, rows 30 apart
    flat_t = torch.repeat_interleave(torch.tensor(flat_in, device=device), 2)[::2]
    offsets_t = torch.repeat_interleave(torch.tensor(offsets, device=device), 3)[::3]
    rows_t = torch.tensor(rows, device=device).flip(0).flip(0)
    starts_t = torch.repeat_interleave(torch.tensor(start_cols, device=device), 2)[::2]
    expected = scatter_reference(flat_in, offsets, rows, pool.cpu().numpy(), start_cols)
    launch(flat_in=flat_t, offsets=offsets_t, req_pool_indices=rows_t, pool_out=pool, start_cols=starts_t, backend=backend)
    assert_same_pool(pool.cpu().numpy(), expected)
    # a broadcast first column (stride 0)
    pool2 = torch.from_numpy(sentinel_pool(4, 12, seed=6)).to(device)
    shared = torch.tensor([3], device=device).expand(4)
    expected = scatter_reference(flat_in, offsets, rows, pool2.cpu().numpy(), np.full(4, 3))
    launch(flat_in=flat_t, offsets=offsets_t, req_pool_indices=rows_t, pool_out=pool2, start_cols=shared, backend=backend)
    assert_same_pool(pool2.cpu().numpy(), expected)


@pytest.fixture
def small_tiles(monkeypatch):
    """Every contiguous batch launches the tiled kernel with 16-column tiles (as tests/torch/test_torch_triton_tiled.py)."""
    yield from tiled_everywhere(monkeypatch, 16)


def check_kernel_windowed(kernel: str, examples: int, **sizes) -> None:
    """Random windowed batches launched directly, each through ``kernel`` (``launch_plan.TILED`` or ``LANES``), against the reference."""
    device = device_for("triton")

    @property_settings(examples)
    @given(batch=windowed_batches(**sizes))
    def check(batch):
        flat_in, offsets, rows, pool, start_cols = tensors(batch, device)
        plan = dispatch.plan_of(flat_in, offsets, rows, pool, start_cols)
        dispatch.launch(flat_in, offsets, rows, pool, start_cols)
        assert_same_pool(pool.cpu().numpy(), scatter_reference(*batch))
        if plan is not launch_plan.NOTHING:
            constexprs = launch_plan.TILED_CONSTEXPRS if plan.tiled else launch_plan.LANES_CONSTEXPRS
            assert plan.tiled is (kernel == launch_plan.TILED) and dict(zip(constexprs, plan.constexprs))["WINDOWED"]

    check()


def test_the_tiled_kernel_windowed(small_tiles):
    check_kernel_windowed(launch_plan.TILED, 25, max_rows=6, max_width=67, max_bs=6, max_tokens=160)


def test_the_lanes_kernel_loop_windowed():
    # LARGE with 16-column tiles and few lanes: windows of several tiles per lane (the loop, not ONE).
    rule = launch_plan.RULE._replace(large_block=16, small_block=8, target_programs=2, small_cells=-1,
                                     tiled_min_tokens=2**62)
    for _ in using_rule(rule):
        check_kernel_windowed(launch_plan.LANES, 20, max_rows=4, max_width=70, max_bs=4, max_tokens=200)


def test_the_windowed_variant_is_its_own_and_takes_no_slot():
    plain = launch_plan.plan(8, 64, 9, 33, 33, 1, 1, 1, 1, 0)
    windowed = launch_plan.plan(8, 64, 9, 33, 33, 1, 1, 1, 1, 0, True)
    assert plain.variant != windowed.variant and plain.grid == windowed.grid and plain.ints == windowed.ints
    assert dict(zip(launch_plan.LANES_CONSTEXPRS, windowed.constexprs))["WINDOWED"] is True
    variants = launch_plan.slot_variants(1, 1, 1, 1, 0)
    assert plain.variant == variants[plain.slot] and windowed.variant not in variants


# -- the argument checks and the checked mode --------------------------------------------------------------------

def _valid(device="cpu"):
    return dict(flat_in=torch.arange(6), offsets=torch.tensor([0, 2, 6]), req_pool_indices=torch.tensor([1, 0]),
                pool_out=torch.from_numpy(sentinel_pool(2, 8, seed=7)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "start_cols, error, message",
    [
        (torch.tensor([1]), errors.KvCanaryValueError, errors.START_COLS_LENGTH.format(length=1, bs=2)),
        (torch.tensor([1, 2], dtype=torch.int32), errors.KvCanaryTypeError,
         errors.WRONG_DTYPE.format(arg="start_cols", dtype="int64", got="int32")),
        (torch.tensor([[1, 2]]), errors.KvCanaryValueError, errors.WRONG_RANK.format(arg="start_cols", rank=1, shape=(1, 2))),
        ([1, 2], errors.KvCanaryTypeError, errors.NOT_AN_ARRAY.format(arg="start_cols", type_name="list")),
    ],
    ids=["length", "dtype", "rank", "not-an-array"],
)
def test_bad_start_cols_get_the_spec_error_and_nothing_is_written(backend, start_cols, error, message):
    args = _valid()
    before = args["pool_out"].clone()
    with pytest.raises(error) as raised:
        launch(**args, start_cols=start_cols, backend=backend)
    assert str(raised.value) == message
    assert torch.equal(args["pool_out"], before)


def test_start_cols_is_checked_after_the_four_arguments():
    args = _valid()
    args["offsets"] = torch.tensor([0, 2, 6], dtype=torch.int32)
    with pytest.raises(errors.KvCanaryTypeError) as raised:
        launch(**args, start_cols=torch.tensor([1, 2], dtype=torch.int32))
    assert "offsets must be int64" in str(raised.value)


def test_start_cols_is_keyword_only_and_none_is_the_unwindowed_call():
    args = _valid()
    expected = scatter_reference(*(args[k].numpy() for k in ("flat_in", "offsets", "req_pool_indices", "pool_out")))
    launch(**args, start_cols=None)
    assert_same_pool(args["pool_out"].numpy(), expected)
    with pytest.raises(TypeError):
        launch(args["flat_in"], args["offsets"], args["req_pool_indices"], args["pool_out"], None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_checked_mode_refuses_a_negative_first_column(backend):
    args = _valid()
    before = args["pool_out"].clone()
    with pytest.raises(errors.KvCanaryValueError) as raised:
        launch(**args, start_cols=torch.tensor([0, -3]), check_values=True, backend=backend)
    assert str(raised.value) == errors.START_COLS_NEGATIVE.format(i=1, value=-3)
    assert torch.equal(args["pool_out"], before)
    # at or past the width is truncation, not malformed
    launch(**args, start_cols=torch.tensor([8, 100]), check_values=True, backend=backend)
    assert torch.equal(args["pool_out"], before)


def test_numpy_start_cols_are_adopted():
    args = _valid()
    expected = scatter_reference(*(args[k].numpy() for k in ("flat_in", "offsets", "req_pool_indices", "pool_out")), np.array([3, 1]))
    launch(**args, start_cols=np.array([3, 1]))
    assert_same_pool(args["pool_out"].numpy(), expected)


def test_a_batched_start_cols_under_vmap_gets_the_batched_segments_error():
    args = _valid()
    pools = args["pool_out"].expand(3, -1, -1).clone()
    start_cols = torch.tensor([[0, 1], [2, 3], [4, 5]])

    def one(pool, first):
        launch(flat_in=args["flat_in"], offsets=args["offsets"], req_pool_indices=args["req_pool_indices"], pool_out=pool,
               start_cols=first)
        return pool

    with pytest.raises(errors.KvCanaryValueError) as raised:
        torch.func.vmap(one)(pools, start_cols)
    assert str(raised.value) == errors.unavailable_error("backend", "torch", errors.TORCH_VMAP_BATCHED_SEGMENTS).args[0]


def test_an_unbatched_start_cols_under_vmap_writes_each_pool():
    args = _valid()
    pools = args["pool_out"].expand(3, -1, -1).clone()
    first = torch.tensor([2, 1])
    expected = scatter_reference(*(args[k].numpy() for k in ("flat_in", "offsets", "req_pool_indices", "pool_out")), first.numpy())

    def one(pool):
        launch(flat_in=args["flat_in"], offsets=args["offsets"], req_pool_indices=args["req_pool_indices"], pool_out=pool,
               start_cols=first)
        return pool

    got = torch.func.vmap(one)(pools)
    for pool in got:
        assert_same_pool(pool.numpy(), expected)


# -- torch.compile ---------------------------------------------------------------------------------------------

def test_the_op_schema_takes_an_optional_start_cols():
    schema = str(torch.ops.kv_canary.scatter_req_token_ids.default._schema)
    assert "Tensor? start_cols=None" in schema


@pytest.mark.parametrize("windowed", [False, True], ids=["unwindowed", "windowed"])
def test_fullgraph_compile_with_and_without_start_cols(windowed):
    torch._dynamo.reset()
    args = _valid()
    first = torch.tensor([3, 1]) if windowed else None
    expected = scatter_reference(*(args[k].numpy() for k in ("flat_in", "offsets", "req_pool_indices", "pool_out")),
                                 None if first is None else first.numpy())

    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(flat_in, offsets, rows, pool, start_cols):
        launch(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, start_cols=start_cols, backend="torch")

    step(args["flat_in"], args["offsets"], args["req_pool_indices"], args["pool_out"], first)
    assert_same_pool(args["pool_out"].numpy(), expected)


def test_a_compiled_graph_raises_a_start_cols_error_when_it_runs():
    torch._dynamo.reset()
    args = _valid()
    before = args["pool_out"].clone()

    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(flat_in, offsets, rows, pool, start_cols):
        launch(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, start_cols=start_cols, backend="torch")

    with pytest.raises(errors.KvCanaryValueError) as raised:
        step(args["flat_in"], args["offsets"], args["req_pool_indices"], args["pool_out"], torch.tensor([1, 2, 3]))
    assert str(raised.value) == errors.START_COLS_LENGTH.format(length=3, bs=2)
    assert torch.equal(args["pool_out"], before)


def test_the_compiled_node_asks_whether_memory_holds_start_cols():
    from kv_canary_torch.checks import require_memory

    args = _valid()
    freed = torch.tensor([1, 2])
    freed.untyped_storage().resize_(0)
    with pytest.raises(errors.KvCanaryValueError) as raised:
        require_memory(args["flat_in"], args["offsets"], args["req_pool_indices"], args["pool_out"], freed)
    assert "start_cols" in str(raised.value)
    require_memory(args["flat_in"], args["offsets"], args["req_pool_indices"], args["pool_out"], None)
