"""``assign_req_to_token_pool_func`` against sglang's own kernel on the inputs sglang's callers pass, and its
argument handling beyond the conformance cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given, strategies as st

from kv_canary_torch import assign_req_to_token_pool_func
from shared_spec import errors
from shared_spec.reference import assign_reference
from tests.contract import examples
from tests.torch_support import BACKENDS, as_numpy, device_for, raises, sentinel


@triton.jit
def sglang_assign_kernel(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                         pool_len: tl.constexpr, bs_upper: tl.constexpr):
    """sglang's design: a program per request sums the lengths before it in one ``bs_upper``-wide block, then copies
    its slots in chunks of 32."""
    BLOCK_SIZE: tl.constexpr = 32
    pid = tl.program_id(axis=0)
    kv_start = tl.load(start_offset + pid)
    kv_end = tl.load(end_offset + pid)
    token_pool = req_to_token + tl.load(req_pool_indices + pid) * pool_len
    length_offset = tl.arange(0, bs_upper)
    start = tl.load(start_offset + length_offset, mask=length_offset < pid, other=0)
    end = tl.load(end_offset + length_offset, mask=length_offset < pid, other=0)
    out_offset = tl.sum(end - start, axis=0)
    out_cache_ptr = out_cache_loc + out_offset
    save_offset = tl.arange(0, BLOCK_SIZE) + kv_start
    load_offset = tl.arange(0, BLOCK_SIZE)
    num_loop = tl.cdiv(kv_end - kv_start, BLOCK_SIZE)
    for _ in range(num_loop):
        mask = save_offset < kv_end
        data = tl.load(out_cache_ptr + load_offset, mask=mask)
        tl.store(token_pool + save_offset, data, mask=mask)
        save_offset += BLOCK_SIZE
        load_offset += BLOCK_SIZE


def sglang_inputs(rng, bs: int, width: int, dtype):
    """What sglang's callers pass: distinct rows, each request's new slots after its prefix, as many slots as the
    lengths sum to."""
    start = rng.integers(0, width, size=bs)
    end = start + rng.integers(0, width - start + 1)
    rows = rng.permutation(bs + 1)[:bs]
    loc = rng.integers(0, 2**31 - 1, size=int((end - start).sum()))
    return [np.asarray(a, dtype) for a in (rows, start, end, loc)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sglang_inputs_give_sglang_s_table(backend):
    @examples(8)
    @given(seed=st.integers(0, 2**32 - 1), bs=st.integers(1, 12), width=st.integers(1, 70),
           dtype=st.sampled_from([np.int32, np.int64]))
    def check(seed, bs, width, dtype):
        arrays = sglang_inputs(np.random.default_rng(seed), bs, width, dtype)
        ours = sentinel(bs + 1, width, seed=seed % 7, device=device_for(backend))
        theirs = ours.to(device_for("triton"))
        rows, start, end, loc = (torch.from_numpy(a).to(ours.device) for a in arrays)
        assign_req_to_token_pool_func(rows, ours, start, end, loc, bs, backend=backend)
        rows, start, end, loc = (torch.from_numpy(a).to(theirs.device) for a in arrays)
        sglang_assign_kernel[(bs,)](rows, theirs, start, end, loc, theirs.shape[1], triton.next_power_of_2(bs))
        np.testing.assert_array_equal(as_numpy(ours), as_numpy(theirs))

    check()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_longer_than_a_prefix_block(backend):
    """More requests than one block of the kernel's running sum (its loop over blocks of lengths)."""
    rng = np.random.default_rng(3)
    bs, width = 1500, 6
    rows, start, end, loc = sglang_inputs(rng, bs, width, np.int64)
    table = np.full((bs + 1, width), -2, dtype=np.int32)
    expected = assign_reference(rows, table, start, end, loc, bs)
    device = device_for(backend)
    table_t = torch.from_numpy(table).to(device)
    assign_req_to_token_pool_func(*(torch.from_numpy(a).to(device) for a in (rows,)), table_t,
                                  *(torch.from_numpy(a).to(device) for a in (start, end, loc)), bs, backend=backend)
    np.testing.assert_array_equal(as_numpy(table_t), expected)


@pytest.mark.parametrize("batch_size", [np.int64(2), np.int32(2), None])
def test_integer_batch_sizes_of_any_kind(batch_size):
    rows, start, end, loc = torch.tensor([1, 0]), torch.tensor([0, 2]), torch.tensor([3, 4]), torch.arange(10, 15)
    table = sentinel(2, 5)
    expected = assign_reference(rows, table.numpy(), start, end, loc, 2)
    assign_req_to_token_pool_func(rows, table, start, end, loc, batch_size)
    np.testing.assert_array_equal(table.numpy(), expected)


def test_a_batch_whose_slots_overflow_int64_is_refused():
    rows = torch.zeros(2, dtype=torch.int64)
    loc = torch.zeros(1, dtype=torch.int64).expand(2**62)  # 2 * 2**62 slots: the running sum could pass 2**63
    table = sentinel(2, 3)
    message = errors.ASSIGN_TOO_MANY_SLOTS.format(bs=2, n=2**62)
    raises(errors.KvCanaryValueError, message,
           lambda: assign_req_to_token_pool_func(rows, table, rows, rows, loc, 2), table)


def test_jax_arrays_are_adopted(x64):
    import jax

    cpu = jax.devices("cpu")[0]
    rows, start, end = (jax.device_put(np.array(a, dtype), cpu) for a, dtype in
                        (([1, 0], np.int32), ([0, 2], np.int64), ([3, 4], np.int32)))
    loc = jax.device_put(np.arange(10, 15), cpu)
    table = sentinel(2, 5)
    expected = assign_reference(np.asarray(rows), table.numpy(), np.asarray(start), np.asarray(end), np.asarray(loc), 2)
    assign_req_to_token_pool_func(rows, table, start, end, loc, 2)
    np.testing.assert_array_equal(table.numpy(), expected)
