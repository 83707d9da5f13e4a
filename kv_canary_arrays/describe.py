"""Any argument as the spec's checks see it, for the frontend that computes with it.

Contract: ``describe(x, *, frontend, written=False)`` returns the
``shared_spec.checks.ArrayView`` of an array of any framework, or
``NotAnArray(type name)`` for anything else (lists, tuples, scalars, None,
numpy scalars). ``frontend`` is ``TORCH`` or ``JAX``: the framework the
arrays will be computed in, which decides three things:

- dtype: the canonical name (``dtype_name``: numpy's ``dtype.name`` whatever
  the byte order, ``bfloat16``, ``bool``; a dtype numpy cannot name, such as a
  JAX PRNG key's, as the framework prints it: ``key<fry>``). For the JAX
  frontend, host data (numpy arrays, torch tensors) is described with the dtype
  JAX would give it (``jax_dtype_name``): with x64 disabled an int64 array is
  reported as int32, whichever framework it comes from, so the dtype check
  fails with the spec's message and never "must be int64, got int64".
- device: a torch tensor's own device (``cpu``, ``cuda:0``); a JAX array's
  single device, None for a tracer or an array sharded over several devices;
  a numpy array is ``cpu`` for the torch frontend (it crosses zero-copy, so it
  must be where the pool is) and None for the JAX frontend (host data is copied
  to where the computation runs).
- ``write_problem`` (``written``: the argument is ``pool_out``; only the torch
  frontend writes in place): one of the ``errors.WRITE_*`` reasons, filled in,
  when the array cannot be written in place through a torch tensor: a JAX array
  or a read-only numpy array (immutable), a torch inference tensor outside
  ``torch.inference_mode()`` (``torch_inference_outside_mode``; not decided
  here while TorchDynamo traces, which hides inference mode: the launcher's
  compiled path decides it when the graph runs), a numpy array in non-native
  byte order, with unaligned items, or with negative strides (torch tensors
  have neither), or a layout where two cells share memory.
- ``layout`` and ``storage_problem`` (the storage check, every argument): a
  torch tensor's layout (``sparse_coo``, ``sparse_csr``, ..., ``jagged``, and
  ``nested`` for a nested tensor of strided layout); ``storage_problem`` for a
  numpy masked array, a deleted (donated) JAX array, a torch tensor with
  its negative or conjugate bit set (``torch_lazy_bit``), and a torch tensor
  whose elements no memory holds (``torch_backed``: a freed or shrunk storage,
  a null data pointer; not decided while TorchDynamo traces, whose fake
  tensors have no data: the compiled graph's scatter node decides it when it
  runs). A tensor that is not
  strided is described by its layout, dtype and device alone (shape ``()``:
  nested tensors have no shape to read).

Nothing here copies or converts data, so a call that fails its checks moves nothing.
"""

from __future__ import annotations

from kv_canary_arrays import devices
from kv_canary_arrays.frameworks import JAX, TORCH, is_jax, is_numpy, is_torch
from shared_spec import checks, errors
from shared_spec.checks import ArrayView, NotAnArray, cells_overlap

__all__ = [
    "JAX", "TORCH", "describe", "dtype_name", "jax_dtype_name", "jax_x64_enabled", "negative_strides",
    "numpy_write_problem", "torch_backed", "torch_inference_outside_mode", "torch_layout", "torch_lazy_bit",
    "torch_storage_problem", "torch_writable",
]


def dtype_name(x) -> str:
    """The canonical dtype name of an array of any framework."""
    if is_torch(x):
        return str(x.dtype).removeprefix("torch.")
    import numpy as np

    try:
        return np.dtype(x.dtype).name
    except TypeError:  # no numpy dtype (a JAX PRNG key array): the framework's own spelling
        return str(x.dtype)


def jax_x64_enabled() -> bool:
    """Whether JAX keeps int64 arrays int64 here (reads the flag, including context overrides)."""
    import jax
    import numpy as np

    return jax.dtypes.canonicalize_dtype(np.int64) == np.dtype(np.int64)


def jax_dtype_name(name: str) -> str:
    """The name of the dtype JAX gives host data whose dtype is called ``name``."""
    import jax
    import numpy as np

    try:
        return np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(name))).name
    except TypeError:  # a dtype JAX or numpy has no arrays of (object, str, torch-only): as it is
        return name


def describe(x, *, frontend: str, written: bool = False) -> ArrayView | NotAnArray:
    """What the spec's checker needs to know of one argument; see the module docstring."""
    if frontend not in (TORCH, JAX):
        raise ValueError(f"frontend must be {TORCH!r} or {JAX!r}, got {frontend!r}")
    in_place = written and frontend == TORCH
    if is_torch(x):
        return _describe_torch(x, frontend, in_place)
    if is_jax(x):
        problem = errors.WRITE_IMMUTABLE.format(type_name="jax.Array") if in_place else None
        if not devices.is_tracer(x) and x.is_deleted():  # a deleted array has no devices() to ask
            return ArrayView(tuple(x.shape), dtype_name(x), None, problem, storage_problem=checks.DELETED)
        device = devices.jax_single_device(x)
        name = None if device is None else devices.jax_device_name(device)
        return ArrayView(tuple(x.shape), dtype_name(x), name, problem)
    if is_numpy(x):
        problem = numpy_write_problem(x) if in_place else None
        device = devices.CPU if frontend == TORCH else None
        masked = checks.MASKED if _is_masked(x) else None
        return ArrayView(tuple(x.shape), _host_dtype(x, frontend), device, problem, storage_problem=masked)
    return NotAnArray(type(x).__name__)


def _describe_torch(x, frontend: str, in_place: bool) -> ArrayView:
    dtype, device = _host_dtype(x, frontend), devices.torch_device_name(x)
    layout = torch_layout(x)
    if layout != checks.STRIDED:
        return ArrayView((), dtype, device, layout=layout)
    problem = None
    if in_place:
        import torch

        # TorchDynamo hides inference mode while it traces (and refuses to trace the question):
        # under torch.compile the launcher asks when the graph runs instead.
        if not torch.compiler.is_compiling() and torch_inference_outside_mode(x):
            problem = errors.WRITE_INFERENCE
        elif x.dim() == 2 and not torch_writable(x):
            problem = errors.Message(errors.WRITE_OVERLAP, {"strides": tuple(x.stride())})  # formatted with the error
    return ArrayView(tuple(x.shape), dtype, device, problem, storage_problem=torch_storage_problem(x))


def _host_dtype(x, frontend: str) -> str:
    name = dtype_name(x)
    return jax_dtype_name(name) if frontend == JAX else name


def _is_masked(x) -> bool:
    import numpy as np

    return isinstance(x, np.ma.MaskedArray)


def torch_layout(x) -> str:
    """A torch tensor's layout as ``ArrayView.layout`` names it: ``strided``, ``sparse_coo``, ..., ``jagged``, ``nested``."""
    layout = str(x.layout).removeprefix("torch.")
    if layout == checks.STRIDED and x.is_nested:  # a nested tensor of strided layout: no strides of its own
        return "nested"
    return layout


def torch_lazy_bit(x) -> str | None:
    """``checks.NEGATIVE_BIT`` or ``checks.CONJUGATE_BIT`` when the tensor's memory holds -x or conj(x); None otherwise.

    Read from the tensor's dispatch keys, of which both bits are two:
    TorchDynamo cannot trace ``is_neg()`` or ``is_conj()``, but it answers
    ``torch._C._dispatch_keys`` from the traced tensor's fake (no real value
    computed), and it guards every input tensor's dispatch keys, so a graph
    traced for one answer never runs for the other.
    """
    import torch

    keys = torch._C._dispatch_keys(x)
    if keys.has(torch._C.DispatchKey.Negative):
        return checks.NEGATIVE_BIT
    if keys.has(torch._C.DispatchKey.Conjugate):
        return checks.CONJUGATE_BIT
    return None


def torch_storage_problem(x) -> str | None:
    """The storage check's problem with a strided torch tensor: its lazy bit (``torch_lazy_bit``), else ``checks.NO_MEMORY``
    when ``torch_backed`` is False; None when its memory holds its values. Not asked of memory while TorchDynamo
    traces (see the module docstring)."""
    import torch

    bit = torch_lazy_bit(x)
    if bit is not None or torch.compiler.is_compiling():
        return bit
    return None if torch_backed(x) else checks.NO_MEMORY


def torch_backed(x) -> bool:
    """True when memory holds every element of the strided torch tensor ``x``: it has none, or its data pointer is not
    null and its storage reaches the last byte its sizes and strides address.

    False for a storage freed or shrunk under the tensor (``untyped_storage().resize_(0)``, as FSDP frees
    parameters) and for tensors with no data (a zero tensor, ``torch._efficientzerotensor``). A tensor wrapped by a
    ``torch.func`` transform (vmap, grad, functionalize) is True: its data pointer and storage are its transform's,
    not memory a kernel reads, and only the torch backend, which the transform follows, runs on it
    (``kv_canary_torch.backends``). Strides of torch tensors are never negative, so the last byte is
    ``(storage_offset + sum((size - 1) * stride) + 1) * itemsize``; the sum is a Python int, exact for any sizes.
    """
    import torch

    if x.numel() == 0:
        return True
    if torch._C._are_functorch_transforms_active() and torch._C._functorch.is_functorch_wrapped_tensor(x):
        return True
    if x.data_ptr() == 0:
        return False
    last = x.storage_offset() + sum((size - 1) * stride for size, stride in zip(x.shape, x.stride()))
    return (last + 1) * x.element_size() <= x.untyped_storage().nbytes()


def torch_inference_outside_mode(x) -> bool:
    """True for an inference tensor outside ``torch.inference_mode()``, which torch refuses to update in place."""
    import torch

    return x.is_inference() and not torch.is_inference_mode_enabled()


def torch_writable(pool) -> bool:
    """True when no two cells of the 2-D tensor ``pool`` share memory (so it can be written in place).

    Sufficient shortcuts answer the usual layouts in a few C++ calls and stay
    traceable by TorchDynamo under dynamic shapes: a contiguous tensor; rows
    of unit-stride columns spaced at least a row apart (a column slice of a
    wider pool); and any positive strides where one dimension's whole extent
    fits inside one step of the other (``s1 * C <= s0`` or ``s0 * R <= s1``:
    a transposed pool, most ``as_strided`` views), each one comparison that
    Dynamo turns into a guard. Every other layout goes to the spec's
    ``cells_overlap`` (whose Euclid loop Dynamo traces too, specializing on
    the strides). The torch frontend's fast check calls it on every launch.
    Whether torch lets the tensor be written at all (an inference tensor) is
    ``torch_inference_outside_mode``'s question, not this one's.
    """
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
    if x.itemsize == 0:  # no bytes per item (np.dtype([]), jax.dtypes.float0): no element strides; the dtype check refuses it first
        return None
    strides = tuple(s // x.itemsize for s in x.strides)
    if negative_strides(x):
        return errors.WRITE_NEGATIVE_STRIDES.format(strides=strides)
    if x.ndim == 2 and cells_overlap(x.shape, strides):
        return errors.WRITE_OVERLAP.format(strides=strides)
    return None
