"""The DLPack bridge: arrays cross between torch and JAX over the same memory, and what cannot is refused by name."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from kv_canary_arrays.bridge import to_jax, to_torch
from shared_spec import errors


def test_arrays_cross_both_ways_over_the_same_memory(x64):
    for dtype in (torch.int32, torch.int64):
        tensor = torch.arange(6, dtype=dtype)
        array = to_jax(tensor)
        assert array.unsafe_buffer_pointer() == tensor.data_ptr() and array.tolist() == tensor.tolist()
        back = to_torch(array)
        assert back.data_ptr() == tensor.data_ptr() and back.dtype == dtype
    assert to_jax(array) is array and to_torch(tensor) is tensor


def test_int64_into_jax_with_x64_off_is_refused():
    with pytest.raises(errors.KvCanaryTypeError) as raised:
        to_jax(torch.arange(3))
    assert str(raised.value) == errors.BRIDGE_X64


def test_what_would_cross_only_as_a_copy_is_refused_unless_a_copy_is_asked_for():
    tensor = torch.arange(12, dtype=torch.int32)
    for view in (tensor[::2], tensor[1:]):  # strides JAX's import refuses; an offset JAX's CPU import copies
        with pytest.raises(errors.KvCanaryValueError, match="into JAX without a copy"):
            to_jax(view)
        assert to_jax(view, copy_ok=True).tolist() == view.tolist()
    with pytest.raises(errors.KvCanaryValueError, match="it crosses only as a dense copy, which cannot be made"):
        to_jax(torch.zeros(1, dtype=torch.int32).expand(2**40), copy_ok=True)


def test_negative_strides_and_non_arrays_are_refused_by_name():
    reversed_ = np.arange(4)[::-1]
    with pytest.raises(errors.KvCanaryValueError) as raised:
        to_torch(reversed_)
    assert str(raised.value) == errors.BRIDGE_REFUSED.format(
        source="ndarray", shape=(4,), dtype="int64", target="torch",
        reason=errors.BRIDGE_NEGATIVE_STRIDES.format(strides=reversed_.strides))
    for convert, target in ((to_torch, "torch"), (to_jax, "JAX")):
        with pytest.raises(errors.KvCanaryTypeError) as raised:
            convert([1, 2])
        assert str(raised.value) == errors.BRIDGE_UNKNOWN.format(type_name="list", target=target)
    assert to_torch(jnp.arange(3, dtype=jnp.int32)).tolist() == [0, 1, 2]
