"""``pack_token_ids``: per-request token ids as the launcher's ``(flat_in, offsets)``, or the spec's error."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from kv_canary_torch import launch_scatter_req_token_ids_kernel, pack_token_ids
from shared_spec import errors
from shared_spec.reference import scatter_reference
from tests.contract import examples
from tests.torch_support import freed, nested

INT64 = st.integers(-(2**63), 2**63 - 1)
WHERE = errors.PACK_WHERE


@examples(60)
@given(lists=st.lists(st.lists(INT64, max_size=6), max_size=6), forms=st.lists(st.integers(0, 4), min_size=6,
                                                                              max_size=6))
def test_every_form_of_a_request_packs_to_its_ids(lists, forms):
    def form(ids, kind):
        return [ids, tuple(ids), np.array(ids, np.int64), torch.tensor(ids, dtype=torch.int64), range(0)][kind] \
            if kind < 4 or not ids else ids

    flat_in, offsets = pack_token_ids([form(ids, kind) for ids, kind in zip(lists, forms)])
    assert flat_in.dtype == offsets.dtype == torch.int64
    assert flat_in.tolist() == [t for ids in lists for t in ids]
    assert offsets.tolist() == [0, *np.cumsum([len(ids) for ids in lists]).tolist()]


def test_packed_ids_feed_the_launcher():
    token_lists = [[11, 12, 13], np.array([21, 22], np.uint16), torch.tensor([], dtype=torch.int32)]
    flat_in, offsets = pack_token_ids(token_lists)
    pool = torch.full((3, 4), -1, dtype=torch.int32)
    expected = scatter_reference(flat_in.numpy(), offsets.numpy(), np.array([2, 0, 1]), pool.numpy())
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=torch.tensor([2, 0, 1]),
                                        pool_out=pool)
    np.testing.assert_array_equal(pool.numpy(), expected)


def not_ids(index, what):
    return errors.KvCanaryTypeError, errors.PACK_NOT_TOKEN_IDS.format(where=WHERE, index=index, what=what)


REFUSED = {
    "int entry": ([[1], 2], *not_ids(1, "int")),
    "none entry": ([None], *not_ids(0, "NoneType")),
    "dict entry": ([[1], {2: 3}], *not_ids(1, "dict")),
    "set entry": ([{2, 3}], *not_ids(0, "set")),
    "bool entry": ([True], *not_ids(0, "bool")),
    "str entry": (["abc"], *not_ids(0, "str")),
    "floats": ([[1], [1.5, 2]], *not_ids(1, "list of shape (2,) and dtype float64")),
    "nested": ([[[1, 2]]], *not_ids(0, "list of shape (1, 2) and dtype int64")),
    "ragged": ([[[1], [2, 3]]], *not_ids(0, "list")),
    "bool array": ([np.array([True])], *not_ids(0, "ndarray of shape (1,) and dtype bool")),
    "float tensor": ([torch.ones(2)], *not_ids(0, "Tensor of shape (2,) and dtype float32")),
    "2-D tensor": ([torch.ones(2, 2, dtype=torch.int64)], *not_ids(0, "Tensor of shape (2, 2) and dtype int64")),
    "sparse tensor": ([torch.arange(3).to_sparse()], *not_ids(0, "Tensor of layout sparse_coo")),
    "nested tensor": ([nested(torch.arange(3))], *not_ids(0, "Tensor of layout nested")),
    "past int64": ([[1, 2**63]], errors.KvCanaryValueError, errors.PACK_OUT_OF_RANGE.format(
        where=WHERE, index=0, position=1, value=2**63, low=-(2**63), high=2**63 - 1)),
    "below int64": ([[], (-(2**63) - 1,)], errors.KvCanaryValueError, errors.PACK_OUT_OF_RANGE.format(
        where=WHERE, index=1, position=0, value=-(2**63) - 1, low=-(2**63), high=2**63 - 1)),
    "uint64 past int64": ([np.array([1, 2**63], np.uint64)], errors.KvCanaryValueError, errors.PACK_OUT_OF_RANGE.format(
        where=WHERE, index=0, position=1, value=2**63, low=-(2**63), high=2**63 - 1)),
    "none": (None, errors.KvCanaryTypeError, errors.PACK_NOT_REQUESTS.format(where=WHERE, what="NoneType")),
    "generator": ((ids for ids in [[1]]), errors.KvCanaryTypeError,
                  errors.PACK_NOT_REQUESTS.format(where=WHERE, what="generator")),
    "str": ("12", errors.KvCanaryTypeError, errors.PACK_NOT_REQUESTS.format(where=WHERE, what="str")),
    "0-d array": (np.array(3), errors.KvCanaryTypeError,
                  errors.PACK_NOT_REQUESTS.format(where=WHERE, what="ndarray of shape ()")),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_is_not_token_ids_is_refused_by_name(name):
    token_lists, error_class, message = REFUSED[name]
    with pytest.raises(error_class) as raised:
        pack_token_ids(token_lists)
    assert type(raised.value) is error_class and str(raised.value) == message


def test_a_tensor_whose_memory_does_not_hold_it_is_refused_by_name():
    for entry in (freed([0, 1, 2]), torch.arange(3, device="meta")):
        with pytest.raises(errors.KvCanaryValueError) as raised:
            pack_token_ids([[1], entry])
        assert str(raised.value) == errors.HOST_NO_MEMORY.format(where=f"{WHERE}[1]")


def test_a_tensor_negated_lazily_packs_its_values():
    assert pack_token_ids([torch._neg_view(torch.tensor([-5, 6]))])[0].tolist() == [5, -6]


def test_pin_memory_is_a_bool_and_needs_cuda():
    with pytest.raises(errors.KvCanaryTypeError) as raised:
        pack_token_ids([[1]], pin_memory=1)
    assert str(raised.value) == errors.PACK_NOT_A_BOOL.format(option="pin_memory", type_name="int")
    if not torch.cuda.is_available():
        with pytest.raises(errors.KvCanaryValueError) as raised:
            pack_token_ids([[1]], pin_memory=True)
        assert str(raised.value) == errors.PACK_PIN_NEEDS_CUDA


def test_a_2d_array_is_one_request_a_row():
    flat_in, offsets = pack_token_ids(np.arange(6).reshape(2, 3))
    assert flat_in.tolist() == list(range(6)) and offsets.tolist() == [0, 3, 6]
