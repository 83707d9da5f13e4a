"""Any argument as the spec's checks see it, for the frontend that computes with it; canonical device names.

``describe(x, frontend, written=False)`` returns the ``ArrayView`` of an array of any framework (shape, canonical
dtype name, device, why it cannot be written in place, layout, storage problem), or ``NotAnArray``. ``frontend``
(``checks.TORCH`` or ``checks.JAX``) decides where host data belongs: a numpy array is on ``cpu`` for torch (it
crosses zero-copy, so it must be where the pool is) and on no device for JAX (host data goes where the computation
runs); and whether ``written`` matters: only torch writes in place. Devices are ``cpu``, ``cuda:0``, ``tpu:0``, ...
for torch tensors and JAX arrays alike; a tracer has none, nor has an array over several devices for torch (which
reads it gathered); for JAX such an array is on ``checks.SEVERAL_DEVICES``. Nothing here copies data.
"""

from __future__ import annotations

from kv_canary_arrays.frameworks import is_jax, is_numpy, is_torch, is_tracer
from shared_spec import checks, errors
from shared_spec.checks import TORCH, ArrayView, NotAnArray, cells_overlap


def dtype_name(x) -> str:
    """The canonical dtype name of an array of any framework (numpy's name; a JAX PRNG key's as JAX prints it)."""
    if is_torch(x):
        return str(x.dtype).removeprefix("torch.")
    import numpy as np

    try:
        return np.dtype(x.dtype).name
    except TypeError:
        return str(x.dtype)


def jax_platform(device) -> str:
    """The lowering platform of a JAX device, as ``jax.lax.platform_dependent`` names it: cpu, cuda, rocm, tpu."""
    if device.platform != "gpu":
        return device.platform
    return "rocm" if "rocm" in str(getattr(device.client, "platform_version", "")).lower() else "cuda"


def jax_device_name(device) -> str:
    """``cpu`` for the host's first device (``cpu:1``, ... for more), ``<platform>:<local index>`` otherwise."""
    kind = jax_platform(device)
    if kind == "cpu":
        return "cpu" if device.id == 0 else f"cpu:{device.id}"
    index = getattr(device, "local_hardware_id", None)
    return f"{kind}:{device.id if index is None else index}"


def jax_single_device(x):
    """The one device a concrete ``jax.Array`` lives on; None for a tracer or an array over several devices."""
    if is_tracer(x):
        return None
    devices = x.devices()
    return next(iter(devices)) if len(devices) == 1 else None


def describe(x, frontend: str, written: bool = False) -> ArrayView | NotAnArray:
    """What the spec's checks need to know of one argument (module docstring)."""
    in_place = written and frontend == TORCH
    if is_torch(x):
        return _describe_torch(x, in_place)
    if is_jax(x):
        problem = errors.WRITE_IMMUTABLE.format(type_name="jax.Array") if in_place else None
        if not is_tracer(x) and x.is_deleted():
            return ArrayView(tuple(x.shape), dtype_name(x), None, problem, storage_problem=checks.DELETED)
        device = jax_single_device(x)
        several = checks.SEVERAL_DEVICES if frontend == checks.JAX and not is_tracer(x) else None  # torch: gathered
        name = several if device is None else jax_device_name(device)
        return ArrayView(tuple(x.shape), dtype_name(x), name, problem)
    if is_numpy(x):
        import numpy as np

        masked = checks.MASKED if isinstance(x, np.ma.MaskedArray) else None
        return ArrayView(tuple(x.shape), dtype_name(x), "cpu" if frontend == TORCH else None,
                         numpy_write_problem(x) if in_place else None, storage_problem=masked)
    return NotAnArray(type(x).__name__)


def _describe_torch(x, in_place: bool) -> ArrayView:
    import torch

    dtype, device, layout = dtype_name(x), str(x.device), torch_layout(x)
    if layout != checks.STRIDED:
        return ArrayView((), dtype, device, layout=layout)
    problem = None
    if in_place:
        # TorchDynamo hides inference mode while it traces: the compiled graph asks when it runs (torch frontend).
        if not torch.compiler.is_compiling() and x.is_inference() and not torch.is_inference_mode_enabled():
            problem = errors.WRITE_INFERENCE
        elif x.dim() == 2 and not torch_writable(x):
            problem = errors.Message(errors.WRITE_OVERLAP, {"strides": tuple(x.stride())})
    return ArrayView(tuple(x.shape), dtype, device, problem, storage_problem=torch_storage_problem(x))


def torch_layout(x) -> str:
    """A tensor's layout by name: ``checks.STRIDED``, ``sparse_coo``, ``jagged``, ..., ``nested`` for a nested tensor
    of strided layout."""
    layout = str(x.layout).removeprefix("torch.")
    return "nested" if layout == checks.STRIDED and x.is_nested else layout


def torch_lazy_bit(x) -> str | None:
    """``checks.NEGATIVE_BIT`` or ``checks.CONJUGATE_BIT`` where the memory holds -x or conj(x), from the dispatch
    keys (TorchDynamo traces those, not ``is_neg()``)."""
    import torch

    keys = torch._C._dispatch_keys(x)
    if keys.has(torch._C.DispatchKey.Negative):
        return checks.NEGATIVE_BIT
    if keys.has(torch._C.DispatchKey.Conjugate):
        return checks.CONJUGATE_BIT
    return None


def torch_storage_problem(x) -> str | None:
    """A strided tensor's storage problem: its lazy bit, else ``NO_MEMORY`` where ``torch_backed`` is False (not
    asked while TorchDynamo traces: its fake tensors have no data)."""
    import torch

    bit = torch_lazy_bit(x)
    if bit is not None or torch.compiler.is_compiling():
        return bit
    return None if torch_backed(x) else checks.NO_MEMORY


def torch_backed(x) -> bool:
    """True when memory holds every element of the strided tensor: none, or a non-null pointer whose storage reaches
    the last byte the sizes and strides address. False for a storage freed or shrunk under it (``resize_(0)``) and
    a zero tensor. True for a ``torch.func`` wrapper: only the torch backend, which the transform follows, runs it."""
    import torch

    if x.numel() == 0:
        return True
    if torch._C._are_functorch_transforms_active() and torch._C._functorch.is_functorch_wrapped_tensor(x):
        return True
    if x.data_ptr() == 0:
        return False
    last = x.storage_offset() + sum((size - 1) * stride for size, stride in zip(x.shape, x.stride()))
    return (last + 1) * x.element_size() <= x.untyped_storage().nbytes()


def torch_writable(pool) -> bool:
    """True when no two cells of the 2-D tensor share memory: the usual layouts by a comparison or two, which
    TorchDynamo turns into guards, any other by ``cells_overlap``."""
    if pool.is_contiguous():
        return True
    stride_row, stride_col = pool.stride()
    n_rows, width = pool.shape
    if stride_col == 1 and stride_row >= width:
        return True
    if stride_row >= 1 and stride_col >= 1 and (stride_col * width <= stride_row or stride_row * n_rows <= stride_col):
        return True
    return not cells_overlap(pool.shape, (stride_row, stride_col))


def negative_strides(x) -> bool:
    """True when a numpy array steps backwards along an axis of more than one item (torch tensors cannot)."""
    return any(s < 0 and n > 1 for s, n in zip(x.strides, x.shape))


def numpy_write_problem(x) -> str | None:
    """Why a numpy array cannot be written in place through a torch tensor (None: it can)."""
    if not x.flags.writeable:
        return errors.WRITE_IMMUTABLE.format(type_name="read-only numpy.ndarray")
    if not x.dtype.isnative:
        return errors.WRITE_BYTE_ORDER.format(dtype=x.dtype.str)
    if not x.flags.aligned:
        return errors.WRITE_UNALIGNED.format(itemsize=x.dtype.itemsize, strides=x.strides)
    if x.itemsize == 0:  # no element strides; the dtype check refuses it first
        return None
    strides = tuple(s // x.itemsize for s in x.strides)
    if negative_strides(x):
        return errors.WRITE_NEGATIVE_STRIDES.format(strides=strides)
    if x.ndim == 2 and cells_overlap(x.shape, strides):
        return errors.WRITE_OVERLAP.format(strides=strides)
    return None
