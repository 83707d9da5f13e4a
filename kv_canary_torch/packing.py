"""Per-request token ids as the launcher's ``(flat_in, offsets)``, and the one conversion of a request's ids.

``pack_token_ids(token_lists, *, pin_memory=False)`` returns two int64 CPU tensors: ``flat_in``, the requests' ids
concatenated in order, and ``offsets``, ``[0, cumsum(lengths)]``. ``pin_memory=True`` page-locks them (a bool;
True needs CUDA: ``PACK_PIN_NEEDS_CUDA``), so that ``.to("cuda", non_blocking=True)`` copies asynchronously.

``token_lists`` is a sequence with one entry per request (a list, tuple or other sequence but a str, a numpy
array or a tensor of one or more dimensions), else ``KvCanaryTypeError`` (``PACK_NOT_REQUESTS``). Each entry
(``token_ids``) is a list or tuple of ints (Python or numpy ints; a bool counts as its int), or anything numpy makes
a 1-D integer array of: an integer numpy array, a tensor on any device (copied to the host), a range. Anything else
is ``KvCanaryTypeError`` (``PACK_NOT_TOKEN_IDS``), and an id no int64 holds ``KvCanaryValueError``
(``PACK_OUT_OF_RANGE``), naming the request and the position; a tensor whose memory does not hold its elements
(freed or shrunk storage, meta) ``KvCanaryValueError`` (``HOST_NO_MEMORY``). ``IncrementalWriter.step`` takes the
same entries, through ``host_ints`` as ``token_ids`` does.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np
import torch

from kv_canary_arrays.describe import dtype_name, torch_backed, torch_layout
from shared_spec import errors
from shared_spec.checks import STRIDED, require_bool

INT64 = np.iinfo(np.int64)


def requests(token_lists, where: str = errors.PACK_WHERE):
    """``token_lists`` if it is a sequence of requests (module docstring), else the spec's ``KvCanaryTypeError``."""
    kind = type(token_lists)
    if kind is list or kind is tuple:
        return token_lists
    if isinstance(token_lists, (np.ndarray, torch.Tensor)):
        if token_lists.ndim >= 1:
            return token_lists
        what = f"{kind.__name__} of shape {tuple(token_lists.shape)}"
    elif isinstance(token_lists, Sequence) and not isinstance(token_lists, (str, bytes)):
        return token_lists
    else:
        what = kind.__name__
    raise errors.type_error(errors.PACK_NOT_REQUESTS, where=where, what=what)


def token_ids(index: int, ids, where: str = errors.PACK_WHERE, limit: int | None = None) -> np.ndarray:
    """Request ``index``'s ids as a 1-D int64 numpy array (module docstring; ``limit`` as ``host_ints``'), or the
    spec's error naming ``where``."""
    found = host_ints(ids, where, limit, index)
    if found is None:
        raise _refusal(index, ids, where)
    return found


def host_ints(values, where: str, limit: int | None = None, index: int | None = None) -> np.ndarray | None:
    """``values`` as a 1-D int64 numpy array: a list or tuple of ints in one call, or anything numpy makes a 1-D
    integer array of whose entries int64 holds (a tensor's values read on the host); None for anything else, and for
    a sequence of more than ``limit`` entries not yet in memory (a ``range``). A tensor whose memory does not hold its
    elements raises ``HOST_NO_MEMORY`` naming ``where`` (``where[index]`` for request ``index``'s)."""
    kind = type(values)
    if kind is np.ndarray and values.dtype == np.int64 and values.ndim == 1:
        return values
    if kind is list or kind is tuple:
        try:
            return np.frombuffer(array("q", values), dtype=np.int64)
        except (TypeError, OverflowError):
            return None
    if isinstance(values, torch.Tensor):
        if torch_layout(values) != STRIDED:
            return None
        if values.is_meta or not torch_backed(values):
            raise errors.value_error(errors.HOST_NO_MEMORY, where=where if index is None else f"{where}[{index}]")
        try:
            values = values.detach().resolve_neg().cpu().numpy()
        except (TypeError, RuntimeError):  # a dtype numpy lacks (bfloat16): no integers either
            return None
    elif limit is not None and not isinstance(values, np.ndarray) and not _at_most(values, limit):
        return None
    try:
        found = np.asarray(values)
    except (TypeError, ValueError):
        return None
    if found.ndim != 1 or (found.dtype.kind not in "iu" and found.size):
        return None
    if found.dtype == np.uint64 and found.size and found.max() > INT64.max:
        return None
    return found.astype(np.int64, copy=False)


def _at_most(values, limit: int) -> bool:
    try:
        return len(values) <= limit
    except (TypeError, OverflowError):  # no length (numpy makes a 0-d array of it), or one past sys.maxsize
        return not hasattr(values, "__len__")


def described(values) -> str:
    """How a message names a value it refuses: an array's or a sequence's kind, shape and dtype, else its type."""
    kind = type(values).__name__
    if isinstance(values, torch.Tensor):
        if (layout := torch_layout(values)) != STRIDED:
            return f"{kind} of layout {layout}"
        return f"{kind} of shape {tuple(values.shape)} and dtype {dtype_name(values)}"
    if not isinstance(values, (list, tuple, np.ndarray)):  # nothing else is read whole to be named
        return kind
    try:
        found = np.asarray(values)
    except (TypeError, ValueError):  # ragged nesting and the like
        return kind
    return kind if found.ndim == 0 else f"{kind} of shape {found.shape} and dtype {found.dtype.name}"


def _refusal(index: int, ids, where: str) -> Exception:
    """The error for request ``index``'s ids, which ``token_ids`` did not take: an int out of int64's range by its
    position, anything else by ``described``."""
    try:
        values = np.asarray(ids) if isinstance(ids, (list, tuple, np.ndarray)) else None
    except (TypeError, ValueError):
        values = None
    if values is not None and values.ndim == 1:
        items = values.tolist() if values.dtype == np.uint64 else list(ids) if values.dtype.kind in "fO" else []
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
            for position, value in enumerate(items):
                if not INT64.min <= value <= INT64.max:
                    return errors.value_error(errors.PACK_OUT_OF_RANGE, where=where, index=index, position=position,
                                              value=int(value), low=INT64.min, high=INT64.max)
    return errors.type_error(errors.PACK_NOT_TOKEN_IDS, where=where, index=index, what=described(ids))


def pack_token_ids(token_lists, *, pin_memory: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(flat_in, offsets)`` for ``launch_scatter_req_token_ids_kernel`` (module docstring)."""
    if require_bool("pin_memory", pin_memory, errors.PACK_NOT_A_BOOL) and not torch.cuda.is_available():
        raise errors.value_error(errors.PACK_PIN_NEEDS_CUDA)
    arrays = [token_ids(i, ids) for i, ids in enumerate(requests(token_lists))]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([a.shape[0] for a in arrays], out=offsets[1:])
    flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    flat_in, offsets_t = torch.from_numpy(flat), torch.from_numpy(offsets)
    if pin_memory:
        flat_in, offsets_t = flat_in.pin_memory(), offsets_t.pin_memory()
    return flat_in, offsets_t
