"""The DLPack bridge: zero-copy both ways, dtype and shape kept, refusals instead of copies or casts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from kv_canary import bridge
from kv_canary.platform import cuda_available
from shared_spec import errors

DTYPES = [torch.int64, torch.int32, torch.float32, torch.bfloat16, torch.bool, torch.uint8]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_torch_to_jax_shares_memory(dtype):
    tensor = (torch.arange(24) % 7).to(dtype).reshape(4, 6)
    array = bridge.to_jax(tensor)
    assert isinstance(array, jax.Array)
    assert array.unsafe_buffer_pointer() == tensor.data_ptr()
    assert array.shape == (4, 6) and str(array.dtype) == str(dtype).removeprefix("torch.")
    np.testing.assert_array_equal(np.asarray(array.astype(jnp.float32)), tensor.float().numpy())


@pytest.mark.parametrize("dtype", [jnp.int64, jnp.int32, jnp.float32, jnp.bfloat16, jnp.bool_], ids=str)
def test_jax_to_torch_shares_memory(dtype):
    array = (jnp.arange(12) % 5).astype(dtype).reshape(3, 4) + jnp.zeros((), dtype)  # an XLA-owned buffer
    tensor = bridge.to_torch(array)
    assert tensor.data_ptr() == array.unsafe_buffer_pointer()
    assert tuple(tensor.shape) == (3, 4) and str(tensor.dtype).removeprefix("torch.") == jnp.dtype(dtype).name


def test_arrays_of_the_target_framework_pass_through():
    tensor, array = torch.arange(3), jnp.arange(3)
    assert bridge.to_torch(tensor) is tensor and bridge.to_jax(array) is array


def test_int64_into_jax_without_x64_is_refused_not_cast():
    with jax.enable_x64(False):
        with pytest.raises(errors.KvCanaryTypeError) as info:
            bridge.to_jax(torch.arange(4, dtype=torch.int64))
    assert str(info.value) == errors.BRIDGE_X64


def test_strided_tensor_is_refused_unless_a_copy_is_allowed():
    parent = torch.arange(20, dtype=torch.int32).reshape(4, 5)
    view = parent[:, 1:3]
    with pytest.raises(errors.KvCanaryValueError) as info:
        bridge.to_jax(view)
    assert str(info.value).startswith(
        "kv-canary: cannot move a torch array of shape (4, 2), dtype int32 into JAX without a copy: "
    )
    copied = bridge.to_jax(view, copy_ok=True)
    np.testing.assert_array_equal(np.asarray(copied), view.numpy())
    assert copied.unsafe_buffer_pointer() != view.data_ptr()


def test_a_silent_copy_is_refused():
    # JAX copies a CPU buffer that is not aligned as it wants; the bridge notices and refuses.
    tensor = torch.arange(21, dtype=torch.int64)[1:]
    with pytest.raises(errors.KvCanaryValueError) as info:
        bridge.to_jax(tensor)
    assert str(info.value).endswith(errors.BRIDGE_COPIED)


def test_objects_without_dlpack_are_refused():
    with pytest.raises(errors.KvCanaryTypeError) as info:
        bridge.to_jax([1, 2, 3])
    assert str(info.value) == errors.BRIDGE_UNKNOWN.format(type_name="list", target="JAX")


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
def test_zero_copy_on_the_gpu_both_ways():
    tensor = torch.arange(1 << 20, dtype=torch.int64, device="cuda")
    array = bridge.to_jax(tensor)
    assert array.unsafe_buffer_pointer() == tensor.data_ptr()
    assert next(iter(array.devices())).platform == "gpu"
    back = bridge.to_torch(array * 2)
    assert back.is_cuda and back.data_ptr() != tensor.data_ptr()
    np.testing.assert_array_equal(back.cpu().numpy(), 2 * tensor.cpu().numpy())
    result = array + 0
    assert bridge.to_torch(result).data_ptr() == result.unsafe_buffer_pointer()
