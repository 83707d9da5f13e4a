"""Host helper: per-request token id lists -> ``(flat_in, offsets)``.

Contract: ``pack_token_ids(token_lists, *, pin_memory=False)`` returns two
int64 CPU tensors: ``flat_in``, the requests' ids concatenated in order, and
``offsets`` of length ``len(token_lists) + 1`` with ``offsets[0] == 0`` and
``offsets[r+1] - offsets[r] == len(token_lists[r])`` -- exactly what the
launcher takes. Each entry is a list/tuple of ints, a 1-D integer numpy array or
a 1-D integer tensor (any device; copied to the host). Values are converted to
int64 (unsigned values above 2**63 - 1 wrap; the kernel keeps the low 32 bits
anyway). Anything else raises ``KvCanaryTypeError`` (``PACK_NOT_TOKEN_IDS``).

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


def _as_ids(index: int, ids) -> np.ndarray:
    """One request's ids as a 1-D int64 numpy array, or KvCanaryTypeError."""
    kind = type(ids).__name__
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    try:
        array = np.asarray(ids)
    except (TypeError, ValueError):  # ragged nesting and the like
        array = None
    if array is None or array.ndim != 1 or (array.dtype.kind not in "iu" and array.size > 0):
        what = kind if array is None else f"{kind} of shape {array.shape} and dtype {array.dtype.name}"
        raise errors.type_error(errors.PACK_NOT_TOKEN_IDS, index=index, what=what)
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
