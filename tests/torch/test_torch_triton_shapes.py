"""Every launch shape and the int64 column path of the Triton kernel, against the reference.

The launcher picks its block shape from the batch and turns on int64 column
offsets (WIDE) only for pools whose column offsets pass 2**31; neither choice
may change a result, so each is forced here on small random batches.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given

from kv_canary_torch.launch import dispatch, plan as launch_plan
from shared_spec import scatter_reference
from tests.profiles import property_settings
from tests.strategies import batches
from tests.torch_support import device_for

DEVICE = device_for("triton")


def on_device(x):
    """A copy of ``x`` on DEVICE: on the CPU ``from_numpy(x).to("cpu")`` would share ``x``'s memory, so the
    reference, computed afterwards from ``x``, would start from the pool the kernel wrote and hide a stray write."""
    return torch.from_numpy(x.copy()).to(DEVICE)


def run_kernel(batch, shape, wide):
    flat_in, offsets, rows, pool = (on_device(x) for x in batch)
    block, warps, target = shape
    n_rows, width = pool.shape
    bs, n_tokens = rows.shape[0], flat_in.shape[0]
    if min(bs, n_tokens, n_rows, width) == 0:
        return pool.cpu().numpy()
    lanes = min(-(-min(width, n_tokens) // block), -(-target // bs))
    dispatch.kernel_module().scatter_req_token_ids_kernel[(bs, lanes)](
        flat_in, offsets, rows, pool, n_tokens, n_rows, width, 1, 1, 1, pool.stride(0), pool.stride(1), None, None,
        BLOCK=block, WIDE=wide, UNIT=pool.stride(1) == 1, DENSE=True,
        ONE=lanes * block >= min(width, n_tokens), WINDOWED=False, num_warps=warps,
    )
    return pool.cpu().numpy()


@pytest.mark.parametrize("wide", [False, True])
# (8, 4, 8): 8 programs' worth of lanes, so from bs = 2 on a 40-column window's lanes loop over its 5 tiles.
@pytest.mark.parametrize("shape", [launch_plan.SMALL, launch_plan.LARGE, (16, 4, 64), (8, 4, 8)], ids=str)
def test_launch_shapes_match_reference(shape, wide):
    @property_settings(8)
    @given(batch=batches(max_width=40))
    def check(batch):
        np.testing.assert_array_equal(run_kernel(batch, shape, wide), scatter_reference(*batch))

    check()


def test_long_rows_take_the_large_shape():
    width = launch_plan.SMALL_CELLS // 2 + 700
    assert launch_plan.launch_shape(2, width, 2 * width) == launch_plan.LARGE
    rng = np.random.default_rng(7)
    flat_in = rng.integers(-(2**40), 2**40, size=2 * width - 5, dtype=np.int64)
    offsets = np.array([3, width + 1, 2 * width - 5], dtype=np.int64)
    rows = np.array([2, 0], dtype=np.int64)
    pool = (rng.integers(-(2**31), 2**31, size=(3, width))).astype(np.int32)
    got = on_device(pool)
    from kv_canary_torch import launch_scatter_req_token_ids_kernel

    launch_scatter_req_token_ids_kernel(
        flat_in=on_device(flat_in), offsets=on_device(offsets), req_pool_indices=on_device(rows), pool_out=got,
        backend="triton",
    )
    np.testing.assert_array_equal(got.cpu().numpy(), scatter_reference(flat_in, offsets, rows, pool))
