"""``pack_token_ids``: per-request lists in, the launcher's ``(flat_in, offsets)`` out."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kv_canary_torch import launch_scatter_req_token_ids_kernel, pack_token_ids
from shared_spec import errors, scatter_reference
from tests.profiles import property_settings
from tests.strategies import INT64_MAX, INT64_MIN
from tests.torch_support import as_numpy, device_for, sentinel


def check_packed(token_lists, flat_in, offsets):
    assert flat_in.dtype == torch.int64 and offsets.dtype == torch.int64
    assert flat_in.device.type == "cpu" and offsets.device.type == "cpu"
    assert flat_in.dim() == 1 and offsets.shape == (len(token_lists) + 1,)
    expected = [int(x) for ids in token_lists for x in (ids.tolist() if hasattr(ids, "tolist") else ids)]
    assert flat_in.tolist() == expected
    assert offsets.tolist() == list(np.cumsum([0] + [len(ids) for ids in token_lists]))


@property_settings(40, health_checks=True)
@given(
    lists=st.lists(st.lists(st.integers(INT64_MIN, INT64_MAX), max_size=6), max_size=6),
    kinds=st.lists(st.sampled_from(["list", "tuple", "numpy", "numpy32", "tensor", "tensor32"]), min_size=6, max_size=6),
)
def test_any_mix_of_lists_arrays_and_tensors(lists, kinds):
    token_lists = []
    for ids, kind in zip(lists, kinds):
        if kind.endswith("32"):
            ids = [x & 0x7FFFFFFF for x in ids]
        token_lists.append(
            {
                "list": lambda: list(ids),
                "tuple": lambda: tuple(ids),
                "numpy": lambda: np.asarray(ids, dtype=np.int64),
                "numpy32": lambda: np.asarray(ids, dtype=np.int32),
                "tensor": lambda: torch.tensor(ids, dtype=torch.int64),
                "tensor32": lambda: torch.tensor(ids, dtype=torch.int32),
            }[kind]()
        )
    check_packed(token_lists, *pack_token_ids(token_lists))


def test_no_requests():
    flat_in, offsets = pack_token_ids([])
    assert flat_in.shape == (0,) and offsets.tolist() == [0]


def test_empty_requests_among_others():
    flat_in, offsets = pack_token_ids([[], [5, 6], [], np.zeros(0, dtype=np.int64), torch.zeros(0, dtype=torch.int64)])
    assert flat_in.tolist() == [5, 6] and offsets.tolist() == [0, 0, 2, 2, 2, 2]


def test_a_generator_of_requests():
    flat_in, offsets = pack_token_ids(range(k) for k in (1, 3))
    assert flat_in.tolist() == [0, 0, 1, 2] and offsets.tolist() == [0, 1, 4]


@pytest.mark.parametrize(
    "bad, what",
    [
        ([[1, 2], [3, 4]], "list of shape (2, 2) and dtype int64"),
        (np.zeros((2, 2), dtype=np.int64), "ndarray of shape (2, 2) and dtype int64"),
        ([1.5, 2.0], "list of shape (2,) and dtype float64"),
        (torch.tensor([1.0]), "Tensor of shape (1,) and dtype float32"),
        (7, "int of shape () and dtype int64"),
        ("abc", f"str of shape () and dtype {np.asarray('abc').dtype.name}"),
        ([[1], [2, 3]], "list"),
    ],
)
def test_entries_that_are_not_token_ids_are_refused(bad, what):
    with pytest.raises(errors.KvCanaryTypeError) as raised:
        pack_token_ids([[1], bad])
    assert str(raised.value) == errors.PACK_NOT_TOKEN_IDS.format(where=errors.PACK_WHERE, index=1, what=what)
    assert str(raised.value).startswith("kv-canary: pack_token_ids token_lists[1] must be a 1-D sequence of integers, got ")


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_packed_requests_feed_the_launcher(backend):
    token_lists = [[101, 102, 103], [], np.arange(7, dtype=np.int64) + 200, torch.tensor([9, 8])]
    device = device_for(backend)
    flat_in, offsets = (t.to(device) for t in pack_token_ids(token_lists))
    rows = torch.tensor([3, 0, 1, 2], dtype=torch.int64, device=device)
    pool = sentinel(4, 5, seed=11, device=device)
    expected = scatter_reference(as_numpy(flat_in), as_numpy(offsets), as_numpy(rows), as_numpy(pool))
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend=backend)
    np.testing.assert_array_equal(as_numpy(pool), expected)
    assert pool[3, :3].tolist() == [101, 102, 103] and pool[1].tolist() == [200, 201, 202, 203, 204]


def out_of_range(index, position, value) -> str:
    return errors.PACK_OUT_OF_RANGE.format(where=errors.PACK_WHERE, index=index, position=position, value=value, low=INT64_MIN, high=INT64_MAX)


@pytest.mark.parametrize(
    "token_lists, index, position, value",
    [
        ([[2**63, 1]], 0, 0, 2**63),
        ([[1, 2], [-1, 2**63]], 1, 1, 2**63),
        ([[5], [INT64_MIN - 1]], 1, 0, INT64_MIN - 1),
        ([(2**64, 1)], 0, 0, 2**64),
        ([[10**30]], 0, 0, 10**30),
        ([np.array([1, 2**63 + 5], dtype=np.uint64)], 0, 1, 2**63 + 5),
        ([[3], torch.from_numpy(np.array([7, 2**63], dtype=np.uint64))], 1, 1, 2**63),
    ],
)
def test_a_token_id_outside_int64_is_named(token_lists, index, position, value):
    with pytest.raises(errors.KvCanaryValueError) as info:
        pack_token_ids(token_lists)
    assert str(info.value) == out_of_range(index, position, value)


@property_settings(60, health_checks=True)
@given(
    ids=st.lists(st.integers(INT64_MIN, INT64_MAX), max_size=5),
    bad=st.one_of(st.integers(INT64_MAX + 1, 2**70), st.integers(-(2**70), INT64_MIN - 1)),
    at=st.integers(0, 5),
)
def test_the_first_out_of_range_id_is_named_wherever_it_is(ids, bad, at):
    at = min(at, len(ids))
    with pytest.raises(errors.KvCanaryValueError) as info:
        pack_token_ids([[1], ids[:at] + [bad] + ids[at:]])
    assert str(info.value) == out_of_range(1, at, bad)


def test_the_int64_bounds_themselves_pack():
    flat_in, _ = pack_token_ids([[INT64_MIN, INT64_MAX], np.array([INT64_MAX], dtype=np.uint64)])
    assert flat_in.tolist() == [INT64_MIN, INT64_MAX, INT64_MAX]


def test_floats_beside_a_huge_int_are_still_not_token_ids():
    with pytest.raises(errors.KvCanaryTypeError):
        pack_token_ids([[2**63, 1.5]])
