"""The launcher's call path without a GPU: which calls it is offered, and which signatures it remembers.

``dispatch.call_bound`` (the native piece's ``call`` once loaded) takes an
eager call whose argument signature a checked launch has remembered
(``dispatch.remember_call``). Here the real launcher runs the interpreted
Triton kernel, with the native piece configured as the call path and
stand-ins for the kernels a GPU would bind; the piece's signature, planning
and launches are in test_launch_native.py, real launches in test_torch_gpu.py.
The assignment (``assign_req_to_token_pool_func``: ``dispatch.assign_bound``,
``remember_assign``) likewise, and end to end through the stand-in driver for
its hostile arguments.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from kv_canary_torch import assign_req_to_token_pool_func, launch_scatter_req_token_ids_kernel, op
from kv_canary_torch.launch import dispatch, plan as launch_plan
from shared_spec import assignment, errors, scatter_reference
from tests.strategies import large_batch
from tests.launch.test_launch_native import c_module, driver  # noqa: F401 (the stand-in driver fixture and its piece)
from tests.torch_support import as_numpy, native_module

BATCH = large_batch(bs=3, width=40, seed=5)


def arguments():
    return [torch.from_numpy(np.ascontiguousarray(x)) for x in BATCH]


def call(flat_in, offsets, rows, pool, **options):
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, **options)


@pytest.fixture
def offered(monkeypatch):
    """Every call the launcher offers to call_bound, which takes each one (launches nothing, returns True)."""
    seen = []
    monkeypatch.setattr(dispatch, "call_bound", lambda *a: seen.append(a) or True)
    return seen


def test_a_call_taken_by_the_call_path_does_nothing_else(offered):
    flat_in, offsets, rows, pool = arguments()
    before = as_numpy(pool).copy()
    call(flat_in, offsets, rows, pool, backend="triton")
    start_cols = torch.zeros(rows.shape[0], dtype=torch.int64)
    call(flat_in, offsets, rows, pool, backend="triton", start_cols=start_cols)
    assert offered == [("triton", flat_in, offsets, rows, pool, None), ("triton", flat_in, offsets, rows, pool, start_cols)]
    np.testing.assert_array_equal(as_numpy(pool), before)


@pytest.mark.parametrize("check_values", [True, np.bool_(False)])
def test_only_check_values_false_itself_is_offered(offered, check_values):
    flat_in, offsets, rows, pool = arguments()
    call(flat_in, offsets, rows, pool, backend="torch", check_values=check_values)
    assert offered == []
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*BATCH))


@pytest.fixture
def remembering(monkeypatch, tmp_path_factory):
    """The call path on the real native piece over a fresh memo; a launch "binds" its variant when asked, as on a GPU.

    Returns the native piece, the memo and the list of plan variants to bind
    (the interpreted launch compiles nothing to bind: ``dispatch._compiled``
    stays empty on a CPU).
    """
    if not dispatch.interpreted():
        pytest.skip("drives the interpreted kernel on CPU tensors; on a GPU test_torch_gpu.py runs the real path")
    c = native_module(tmp_path_factory)
    for name, value in (("_memo", {}), ("_kernels", {}), ("_compiled", {}), ("_c", None), ("call_bound", dispatch._no_call),
                        ("assign_bound", dispatch._no_assign),
                        ("_hook_holder", lambda: SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None))):
        monkeypatch.setattr(dispatch, name, value)
    dispatch._configure(c)
    to_bind = []

    def launch_then_bind(*arguments):
        dispatch.launch(*arguments)
        variant = dispatch.plan_of(*arguments).variant
        if variant in to_bind:
            dispatch._kernels[variant] = "the bound kernel"

    monkeypatch.setitem(op.IMPLEMENTATIONS, "triton", launch_then_bind)
    return c, dispatch._memo, to_bind


def slot(arguments) -> int:
    return dispatch.plan_of(*arguments).slot


def test_a_checked_triton_launch_remembers_its_signature_and_kernel(remembering):
    c, memo, to_bind = remembering
    flat_in, offsets, rows, pool = arguments()
    to_bind.append(dispatch.plan_of(flat_in, offsets, rows, pool).variant)
    call(flat_in, offsets, rows, pool, backend="triton")  # the interpreted kernel
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*BATCH))
    family = [None] * launch_plan.SLOTS
    family[slot((flat_in, offsets, rows, pool))] = "the bound kernel"
    assert memo == {c.signature("triton", flat_in, offsets, rows, pool): family}


def test_a_windowed_call_is_a_signature_of_its_own_and_takes_windowed_kernels(remembering):
    c, memo, to_bind = remembering
    flat_in, offsets, rows, pool = arguments()
    start_cols = torch.tensor([0, 5, 2], dtype=torch.int64)
    windowed = dispatch.plan_of(flat_in, offsets, rows, pool, start_cols)
    assert windowed.variant != dispatch.plan_of(flat_in, offsets, rows, pool).variant
    to_bind.append(windowed.variant)
    call(flat_in, offsets, rows, pool, backend="triton", start_cols=start_cols)
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*BATCH, start_cols.numpy()))
    family = [None] * launch_plan.SLOTS
    family[windowed.slot] = "the bound kernel"
    signature = c.signature("triton", flat_in, offsets, rows, pool, start_cols)
    assert memo == {signature: family} and signature != c.signature("triton", flat_in, offsets, rows, pool)
    assert c.signature("triton", flat_in, offsets, rows, pool, None) == c.signature("triton", flat_in, offsets, rows, pool)
    memo.clear()
    call(flat_in, offsets, rows, pool, backend="triton", start_cols=torch.zeros(6, dtype=torch.int64)[::2])
    assert memo == {}  # a strided start_cols: its stride is not the one the bound kernels compiled in


def test_a_new_n_and_bs_is_the_same_signature(remembering):
    _, memo, _ = remembering
    flat_in, offsets, rows, pool = arguments()
    call(flat_in, offsets, rows, pool, backend="triton")
    call(flat_in[:-3], offsets[:-1], rows[:-1], pool, backend="triton")  # the next serving step
    assert len(memo) == 1


@pytest.mark.parametrize(
    "options", [dict(backend="torch"), dict(backend="triton", check_values=True)], ids=["torch", "check_values"]
)
def test_nothing_else_is_remembered(remembering, options):
    _, memo, to_bind = remembering
    flat_in, offsets, rows, pool = arguments()
    to_bind.append(dispatch.plan_of(flat_in, offsets, rows, pool).variant)
    call(flat_in, offsets, rows, pool, **options)
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*BATCH))
    assert memo == {}


def test_a_new_signature_takes_every_kernel_bound_already(remembering, monkeypatch):
    """A kernel bound for one signature serves every signature whose launches plan its variant: no second miss."""
    c, memo, to_bind = remembering
    flat_in, offsets, rows, pool = arguments()
    to_bind.append(dispatch.plan_of(flat_in, offsets, rows, pool).variant)
    call(flat_in, offsets, rows, pool, backend="triton")
    taller = torch.full((pool.shape[0] + 1, pool.shape[1]), -1, dtype=torch.int32)  # another signature: the pool's rows
    to_bind.clear()
    call(flat_in, offsets, rows, taller, backend="triton")
    family = [None] * launch_plan.SLOTS
    family[slot((flat_in, offsets, rows, taller))] = "the bound kernel"
    assert memo[c.signature("triton", flat_in, offsets, rows, taller)] == family
    variants = launch_plan.slot_variants(1, 1, 1, 1, -1)
    dispatch._kernels[variants[launch_plan.LOOP_SLOT]] = "a kernel another signature bound"
    call(flat_in, offsets, rows, taller, backend="triton")  # the next checked call of the signature fills that slot too
    family[launch_plan.LOOP_SLOT] = "a kernel another signature bound"
    assert memo[c.signature("triton", flat_in, offsets, rows, taller)] == family


def test_an_unbound_kernel_is_not_put_in_its_slot_and_a_failed_check_is_not_remembered(remembering):
    c, memo, to_bind = remembering
    flat_in, offsets, rows, pool = arguments()
    call(flat_in, offsets, rows, pool, backend="triton")  # its variant is not bound
    assert memo == {c.signature("triton", flat_in, offsets, rows, pool): [None] * launch_plan.SLOTS}
    memo.clear()
    with pytest.raises(errors.KvCanaryTypeError):
        call(flat_in.to(torch.int32), offsets, rows, pool, backend="triton")
    assert memo == {}


def test_the_signature_call_bound_gives_is_the_one_remembered(remembering, monkeypatch):
    c, memo, _ = remembering
    flat_in, offsets, rows, pool = arguments()
    monkeypatch.setattr(dispatch, "call_bound", lambda *a: b"the signature call gave")
    call(flat_in, offsets, rows, pool, backend="triton")
    assert list(memo) == [b"the signature call gave"]  # not read again


def test_another_rule_reconfigures_the_call_path_and_forgets_its_signatures(remembering):
    c, memo, _ = remembering
    flat_in, offsets, rows, pool = arguments()
    call(flat_in, offsets, rows, pool, backend="triton")
    assert len(memo) == 1
    rule = launch_plan.RULE._replace(large_block=16, small_cells=-1)
    try:
        dispatch.use_rule(rule)
        assert memo == {} and c.plan(1, 5000, 2, 5000, 5000, 1, 1, 1, 1)[1] == (1, -(-5000 // 16))  # C++ plans with it
        assert dispatch.plan_of(flat_in, offsets, rows, pool).constexprs[0] == 16
    finally:
        dispatch.use_rule(launch_plan.RULE)
    default = launch_plan.plan(1, 5000, 2, 5000, 5000, 1, 1, 1, 1, -1)
    assert c.plan(1, 5000, 2, 5000, 5000, 1, 1, 1, 1)[:2] == (default.slot, default.grid)  # the default rule again
    with pytest.raises(ValueError):
        dispatch.use_rule(rule._replace(small_block=16))  # SMALL and LARGE alike: refused before anything changes
    assert dispatch._rule == launch_plan.RULE


# ---- the assignment: the same call path, its own op (dispatch.assign_bound, remember_assign) ----


def assignment_arguments():
    """An assignment's CPU arguments, the per-request arrays one longer than batch_size 3 (the entry past it unread)."""
    return (torch.tensor([2, 0, 3, 9]), torch.full((4, 6), -1, dtype=torch.int32), torch.tensor([0, 1, 4, 0]),
            torch.tensor([2, 4, 6, 0]), torch.arange(10, 17), 3)


def test_an_assignment_taken_by_the_call_path_does_nothing_else(monkeypatch):
    seen = []
    monkeypatch.setattr(dispatch, "assign_bound", lambda *a: seen.append(a) or True)
    arguments = assignment_arguments()
    assign_req_to_token_pool_func(*arguments, backend="triton")
    assert seen == [("triton", *arguments)] and (arguments[1] == -1).all()


def test_a_checked_triton_assignment_remembers_its_signature_with_one_slot(remembering):
    c, memo, _ = remembering
    arguments = assignment_arguments()
    expected = assignment.assignment_reference(*(a.numpy() if isinstance(a, torch.Tensor) else a for a in arguments))
    assign_req_to_token_pool_func(*arguments, backend="triton")  # the interpreted kernel: nothing compiled to bind
    np.testing.assert_array_equal(arguments[1].numpy(), expected)
    signature = c.assign_signature("triton", *arguments)
    assert memo == {signature: [None]}
    rows, table, start, end, loc, _ = arguments
    dispatch._kernels[dispatch.assign_variant(-1, rows, start, end, loc)] = "the bound kernel"
    assign_req_to_token_pool_func(rows[:3], table, start[:3], end[:3], loc[:6], None, backend="triton")  # the next step
    assert memo == {signature: ["the bound kernel"]}  # the same signature (no capsule: the checked path ran)
    np.testing.assert_array_equal(table.numpy(), expected)


@pytest.mark.parametrize("change", [
    lambda a: dict(backend="torch"),  # not Triton's launch
    lambda a: dict(arguments=(*a[:4], a[4].float(), a[5])),  # a check fails
    lambda a: dict(arguments=(*a[:5], 5)),  # batch_size past the per-request lengths
])
def test_no_other_assignment_is_remembered(remembering, change):
    _, memo, _ = remembering
    options = dict(arguments=assignment_arguments(), backend="triton") | change(assignment_arguments())
    try:
        assign_req_to_token_pool_func(*options["arguments"], backend=options["backend"])
    except (errors.KvCanaryTypeError, errors.KvCanaryValueError):
        pass
    assert memo == {}


def test_the_signature_assign_bound_gives_is_the_one_remembered(remembering, monkeypatch):
    _, memo, _ = remembering
    monkeypatch.setattr(dispatch, "assign_bound", lambda *a: b"the signature assign gave")
    assign_req_to_token_pool_func(*assignment_arguments(), backend="triton")
    assert list(memo) == [b"the signature assign gave"]


HOSTILE = ["meta", "sparse", "negative_bit", "freed", "inference", "read_only_numpy"]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_assignment_with_a_remembered_signature_gets_the_specs_error(remembering, driver, monkeypatch, name):
    """The valid call's signature remembered with a kernel, launched through the stand-in driver: a hostile argument
    of that call (the reader's declines, or a signature of its own that was never remembered) is never launched."""
    from tests.torch.test_assign_torch import hostile

    c, memo, _ = remembering
    monkeypatch.setattr(dispatch, "_raw_stream", lambda device: 0x5000)
    dispatch._configure(c)  # with the stand-in stream: a launch reaches the stand-in driver
    valid = hostile(None)
    memo[c.assign_signature("triton", *valid.values(), 2)] = [c.bind(0x4444, 128, 0, launch_plan.ASSIGN_INTS, 0, None, 0, 5)]
    served = c.served()
    assign_req_to_token_pool_func(*valid.values(), 2, backend="triton")  # served by the stand-in driver: nothing written
    assert c.served() == served + 1 and (valid["req_to_token"] == -5).all()
    arguments = hostile(name)
    with pytest.raises((errors.KvCanaryTypeError, errors.KvCanaryValueError)):
        assign_req_to_token_pool_func(*arguments.values(), 2, backend="triton")
    assert c.served() == served + 1
