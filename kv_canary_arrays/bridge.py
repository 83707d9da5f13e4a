"""Zero-copy moves between torch and JAX through DLPack, and checked arguments as a frontend's arrays.

``to_jax(x)`` and ``to_torch(x)`` return an array of the other framework over the same memory, or raise the spec's
errors: they never copy or cast silently (JAX copies a CPU buffer not aligned to its liking; without x64 it makes
int64 int32). ``to_jax(x, copy_ok=True)`` clones a torch tensor that cannot cross as it is into one contiguous copy.

For arguments that passed the checks: ``torch_input(x, device)`` a read-only argument as a tensor on ``device``
(zero-copy, or one copy where DLPack cannot share it), ``torch_output(x)`` the pool as a tensor over its memory,
``jax_input(x, device)`` any argument as a ``jax.Array`` (host data put on ``device``), ``host_values(x)`` a
concrete array's values as numpy (a sync for device arrays).
"""

from __future__ import annotations

import os

from kv_canary_arrays.describe import dtype_name, negative_strides
from kv_canary_arrays.frameworks import is_jax, is_numpy, is_torch
from shared_spec import errors


def to_jax(x, *, copy_ok: bool = False):
    """``x`` as a ``jax.Array`` over the same memory (``x`` itself if it is one)."""
    try:
        return _to_jax(x)
    except errors.KvCanaryValueError:
        if not (copy_ok and is_torch(x)):
            raise
        import torch

        nbytes, total = x.numel() * x.element_size(), _memory_bytes(x)
        if nbytes > total:  # asked first: a system that overcommits memory grants it, then kills the process
            raise _refused(x, "JAX", errors.BRIDGE_COPY_FAILED.format(error=f"{nbytes} bytes, of {total} in all"))
        try:
            copy = x.clone(memory_format=torch.contiguous_format)
        except (RuntimeError, MemoryError) as error:
            raise _refused(x, "JAX", errors.BRIDGE_COPY_FAILED.format(error=str(error).splitlines()[0])) from error
        return _to_jax(copy)


def _to_jax(x):
    import jax

    if isinstance(x, jax.Array):
        return x
    if not hasattr(x, "__dlpack__"):
        raise errors.type_error(errors.BRIDGE_UNKNOWN, type_name=type(x).__name__, target="JAX")
    if dtype_name(x) in ("int64", "uint64", "float64", "complex128") and not jax.config.jax_enable_x64:
        raise errors.type_error(errors.BRIDGE_X64)
    try:
        out = jax.dlpack.from_dlpack(x)
    except Exception as error:  # DLPack's own refusal (strides, device), reworded once here
        raise _refused(x, "JAX", str(error).splitlines()[0]) from error
    if _size(x) and out.unsafe_buffer_pointer() != _pointer(x):
        raise _refused(x, "JAX", errors.BRIDGE_COPIED)
    return out


def to_torch(x):
    """``x`` as a ``torch.Tensor`` over the same memory (``x`` itself if it is one)."""
    import torch

    if isinstance(x, torch.Tensor):
        return x
    if not hasattr(x, "__dlpack__"):
        raise errors.type_error(errors.BRIDGE_UNKNOWN, type_name=type(x).__name__, target="torch")
    if is_numpy(x) and negative_strides(x):  # torch's DLPack import aborts the process on them
        raise _refused(x, "torch", errors.BRIDGE_NEGATIVE_STRIDES.format(strides=x.strides))
    try:
        out = torch.from_dlpack(x)
    except Exception as error:
        raise _refused(x, "torch", str(error).splitlines()[0]) from error
    if out.numel() and out.data_ptr() != _pointer(x):
        raise _refused(x, "torch", errors.BRIDGE_COPIED)
    return out


def _refused(x, target: str, reason: str) -> errors.KvCanaryValueError:
    source = "torch" if is_torch(x) else "JAX" if is_jax(x) else type(x).__name__
    return errors.value_error(errors.BRIDGE_REFUSED, source=source, shape=errors.format_shape(x.shape),
                              dtype=dtype_name(x), target=target, reason=reason)


def _memory_bytes(tensor) -> int:
    """All the memory where ``tensor`` lives: its CUDA device's, else the host's physical memory."""
    import torch

    if tensor.is_cuda:
        return torch.cuda.mem_get_info(tensor.device)[1]
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _size(x) -> int:
    return int(x.numel()) if is_torch(x) else int(getattr(x, "size", 0))


def _pointer(x) -> int:
    if is_torch(x):
        return x.data_ptr()
    if is_jax(x):
        return x.unsafe_buffer_pointer()
    return x.__array_interface__["data"][0]


def _native(x):
    """A numpy array DLPack and JAX take as it is: ``x``, or one native, aligned, C-ordered copy."""
    import numpy as np

    if x.dtype.isnative and x.flags.aligned and not negative_strides(x):
        return x
    return np.array(x, dtype=x.dtype.newbyteorder("="), order="C")


def torch_input(x, device=None):
    """A read-only argument as a torch tensor on ``device``: zero-copy where DLPack shares it, else one copy."""
    if is_torch(x):
        return x
    if is_numpy(x):
        tensor = to_torch(_native(x))
    else:
        try:
            tensor = to_torch(x)
        except errors.KvCanaryValueError:
            if not is_jax(x):
                raise
            import numpy as np
            import torch

            tensor = torch.from_numpy(np.array(x))  # a sharded JAX array, gathered on the host: the one copy
    return tensor if device is None else tensor.to(device)


def torch_output(x):
    """The pool as a torch tensor over the same memory (the checks refused what cannot be)."""
    return to_torch(x)


def jax_input(x, device=None):
    """Any argument as a ``jax.Array``: a torch tensor on its own device (zero-copy, or one contiguous copy), host
    data put on ``device`` (JAX's default where None)."""
    import jax

    if isinstance(x, jax.Array):
        return x
    if is_torch(x):
        return to_jax(x, copy_ok=True)
    if is_numpy(x):
        x = _native(x)
    return jax.numpy.asarray(x) if device is None else jax.device_put(x, device)


def host_values(x):
    """A concrete array's values as a numpy array on the host."""
    import numpy as np

    if is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)
