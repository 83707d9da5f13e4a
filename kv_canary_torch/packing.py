"""Host helper: per-request token id lists -> ``(flat_in, offsets)``.

Contract: ``pack_token_ids(token_lists, *, pin_memory=False)`` returns two
int64 CPU tensors: ``flat_in``, the requests' ids concatenated in order, and
``offsets`` of length ``len(token_lists) + 1`` with ``offsets[0] == 0`` and
``offsets[r+1] - offsets[r] == len(token_lists[r])`` -- exactly what the
launcher takes. Each entry is a list/tuple of ints, a 1-D integer numpy array or
a 1-D integer tensor (any device; copied to the host). Every token id must fit
in int64: the first one that does not (a Python int of 2**63 or more, or below
-2**63; an unsigned array value above 2**63 - 1) raises ``KvCanaryValueError``
(``PACK_OUT_OF_RANGE``, naming the request, the position and the value).
Anything that is not a 1-D sequence of integers raises ``KvCanaryTypeError``
(``PACK_NOT_TOKEN_IDS``). Nothing is returned on an error.

Cost: one conversion per request (a C loop inside numpy), one concatenate and
one cumsum; no Python loop per token. ``pin_memory=True`` returns page-locked
tensors, so ``flat_in.to("cuda", non_blocking=True)`` is a real async copy
(it needs CUDA; torch raises without it).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from shared_spec import errors

INT64 = np.iinfo(np.int64)


def _out_of_range(ids, array: np.ndarray) -> tuple[int, int] | None:
    """``(position, value)`` of the first token id no int64 holds, or None.

    Two ways a sequence of integers escapes int64: an unsigned array with a
    value above its maximum, and Python ints beyond it, for which numpy infers
    float64 (losing the value) or object; only those go through a Python loop.
    """
    if array.dtype == np.uint64:
        above = np.flatnonzero(array > INT64.max)
        return (int(above[0]), int(array[above[0]])) if above.size else None
    if array.dtype.kind in "fO" and not isinstance(ids, np.ndarray):
        values = list(ids)
        if all(isinstance(v, (int, np.integer)) for v in values):
            for position, value in enumerate(values):
                if not INT64.min <= value <= INT64.max:
                    return position, int(value)
    return None


def _as_ids(index: int, ids, where: str = errors.PACK_WHERE) -> np.ndarray:
    """One request's ids as a 1-D int64 numpy array; KvCanaryValueError or KvCanaryTypeError otherwise (the
    messages name ``where``, the caller and its argument)."""
    kind = type(ids).__name__
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    try:
        array = np.asarray(ids)
    except (TypeError, ValueError):  # ragged nesting and the like
        array = None
    if array is not None and array.ndim == 1:
        found = _out_of_range(ids, array)
        if found is not None:
            position, value = found
            raise errors.value_error(
                errors.PACK_OUT_OF_RANGE, where=where, index=index, position=position, value=value, low=INT64.min, high=INT64.max
            )
    if array is None or array.ndim != 1 or (array.dtype.kind not in "iu" and array.size > 0):
        what = kind if array is None else f"{kind} of shape {array.shape} and dtype {array.dtype.name}"
        raise errors.type_error(errors.PACK_NOT_TOKEN_IDS, where=where, index=index, what=what)
    return array.astype(np.int64, copy=False)


def pack_token_ids(token_lists: Sequence, *, pin_memory: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(flat_in, offsets)`` for ``launch_scatter_req_token_ids_kernel``; see the module docstring."""
    arrays = [_as_ids(i, ids) for i, ids in enumerate(token_lists)]
    lengths = np.fromiter((a.shape[0] for a in arrays), dtype=np.int64, count=len(arrays))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    flat_in, offsets_t = torch.from_numpy(flat), torch.from_numpy(offsets)
    if pin_memory:
        flat_in, offsets_t = flat_in.pin_memory(), offsets_t.pin_memory()
    return flat_in, offsets_t
