"""The launcher's call path without a GPU: which calls it is offered, and which signatures it remembers.

``triton_launch.call_bound`` (the C launcher's ``call`` once loaded) takes an
eager call whose argument signature a checked launch has remembered
(``triton_launch.remember_call``). Here both ends are replaced by recorders
around the real launcher and the interpreted Triton kernel; the C side's
signature and planning are in test_cuda_launch.py, its launches in
test_torch_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kv_canary_torch import cuda_launch, launch_scatter_req_token_ids_kernel, op, triton_launch
from shared_spec import errors, scatter_reference
from tests.strategies import large_batch
from tests.torch_support import as_numpy

BATCH = large_batch(bs=3, width=40, seed=5)


def arguments():
    return [torch.from_numpy(np.ascontiguousarray(x)) for x in BATCH]


def call(flat_in, offsets, rows, pool, **options):
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, **options)


@pytest.fixture
def offered(monkeypatch):
    """Every call the launcher offers to call_bound, which takes each one (launches nothing, returns True)."""
    seen = []
    monkeypatch.setattr(triton_launch, "call_bound", lambda *a: seen.append(a) or True)
    return seen


def test_a_call_taken_by_the_call_path_does_nothing_else(offered):
    flat_in, offsets, rows, pool = arguments()
    before = as_numpy(pool).copy()
    call(flat_in, offsets, rows, pool, backend="triton")
    assert offered == [("triton", flat_in, offsets, rows, pool)]
    np.testing.assert_array_equal(as_numpy(pool), before)


@pytest.mark.parametrize("check_values", [True, np.bool_(False)])
def test_only_check_values_false_itself_is_offered(offered, check_values):
    flat_in, offsets, rows, pool = arguments()
    call(flat_in, offsets, rows, pool, backend="torch", check_values=check_values)
    assert offered == []
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*BATCH))


@pytest.fixture
def remembering(monkeypatch, tmp_path_factory):
    """remember_call over the real C signature and a fresh memo; the Triton launch binds its key, as on a GPU.

    Returns the C module, the memo and the list of launch keys to bind (the
    interpreted launch binds nothing itself: there is no C launcher on a CPU).
    """
    c = cuda_launch.load_module(cuda_launch.build(tmp_path_factory.mktemp("cache")))
    memo, bound, to_bind = {}, {}, []
    c.configure(memo, torch.Tensor, lambda: True, lambda device: 0, None)
    monkeypatch.setattr(triton_launch, "_signature", c.signature)
    monkeypatch.setattr(triton_launch, "_memo", memo)
    monkeypatch.setattr(triton_launch, "_bound", bound)

    def launch_then_bind(*arguments):
        triton_launch.launch(*arguments)
        key = triton_launch.launch_key(*arguments)
        if key in to_bind:
            bound[key] = "the bound launch"

    monkeypatch.setitem(op.IMPLEMENTATIONS, "triton", launch_then_bind)
    return c, memo, to_bind


def test_a_checked_triton_launch_remembers_its_bound_signature(remembering):
    c, memo, to_bind = remembering
    flat_in, offsets, rows, pool = arguments()
    to_bind.append(triton_launch.launch_key(flat_in, offsets, rows, pool))
    call(flat_in, offsets, rows, pool, backend="triton")  # the interpreted kernel
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*BATCH))
    assert memo == {c.signature("triton", flat_in, offsets, rows, pool): "the bound launch"}


@pytest.mark.parametrize(
    "options", [dict(backend="torch"), dict(backend="triton", check_values=True)], ids=["torch", "check_values"]
)
def test_nothing_else_is_remembered(remembering, options):
    _, memo, to_bind = remembering
    flat_in, offsets, rows, pool = arguments()
    to_bind.append(triton_launch.launch_key(flat_in, offsets, rows, pool))
    call(flat_in, offsets, rows, pool, **options)
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*BATCH))
    assert memo == {}


def test_an_unbound_launch_or_a_failed_check_is_not_remembered(remembering):
    _, memo, to_bind = remembering
    flat_in, offsets, rows, pool = arguments()
    call(flat_in, offsets, rows, pool, backend="triton")  # its key is not bound
    assert memo == {}
    to_bind.append(triton_launch.launch_key(flat_in, offsets, rows, pool))
    with pytest.raises(errors.KvCanaryTypeError):
        call(flat_in.to(torch.int32), offsets, rows, pool, backend="triton")
    assert memo == {}


def test_forget_drops_the_remembered_signatures(monkeypatch):
    memo = {("a signature",): "a bound launch"}
    monkeypatch.setattr(triton_launch, "_memo", memo)
    triton_launch.forget()
    assert memo == {}
