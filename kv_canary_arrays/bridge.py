"""Zero-copy moves of arrays between torch and JAX through DLPack.

``to_jax(x)`` and ``to_torch(x)`` return an array of the other framework that
shares ``x``'s memory on the same device, with the same dtype and shape, or
raise ``KvCanaryTypeError``/``KvCanaryValueError`` (messages in
``shared_spec.errors``). They never copy or cast silently: where DLPack or the
importing framework would copy (JAX imports a CPU buffer that is not aligned
to its liking by copying it) or cast (JAX without x64 turns int64 into int32),
they refuse instead. Arrays already of the target framework pass through.
Any other DLPack exporter (numpy) works as a source; a numpy array with
negative strides is refused before DLPack sees it (torch cannot hold negative
strides, and its DLPack import aborts the process on them).
"""

from __future__ import annotations

from kv_canary_arrays.describe import dtype_name, negative_strides
from kv_canary_arrays.frameworks import is_jax, is_numpy, is_torch
from shared_spec import errors
from shared_spec.arguments import format_shape

__all__ = ["to_jax", "to_torch"]


def to_jax(x, *, copy_ok: bool = False):
    """``x`` as a ``jax.Array`` over the same memory (``x`` itself if it is one).

    ``copy_ok=True``: a torch tensor that cannot cross without a copy (strided,
    or not aligned as JAX wants) is cloned into a fresh contiguous tensor first
    and that crosses; casts are refused either way, and so is a copy torch
    cannot allocate (an expanded view of more elements than memory holds: JAX
    arrays are dense), with ``errors.BRIDGE_COPY_FAILED``.
    """
    try:
        return _to_jax(x)
    except errors.KvCanaryValueError:
        if not (copy_ok and is_torch(x)):
            raise
        import torch

        try:
            copy = x.clone(memory_format=torch.contiguous_format)
        except (RuntimeError, MemoryError) as error:  # torch's allocation failures (OutOfMemoryError is a RuntimeError)
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
    if is_numpy(x) and negative_strides(x):
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
    return errors.value_error(
        errors.BRIDGE_REFUSED, source=source, shape=format_shape(x.shape), dtype=dtype_name(x), target=target, reason=reason
    )


def _size(x) -> int:
    return int(x.numel()) if is_torch(x) else int(getattr(x, "size", 0))


def _pointer(x) -> int:
    if is_torch(x):
        return x.data_ptr()
    if is_jax(x):
        return x.unsafe_buffer_pointer()
    return x.__array_interface__["data"][0]  # numpy and array-interface exporters
