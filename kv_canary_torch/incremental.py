"""The incremental serving step: each request's new tokens written at its current length, one copy and one launch.

Contract: ``IncrementalWriter(pool_out, max_requests, max_new_tokens, *, backend="auto")`` reserves, once, one
int64 staging buffer on the host (page-locked when ``pool_out`` is a CUDA tensor) and one int64 buffer on
``pool_out``'s device, each holding the launch's four inputs for up to ``max_requests`` requests and
``max_new_tokens`` tokens. ``step(new_tokens, rows, start_cols)`` then, for request ``r`` of this step, writes
``new_tokens[r]`` into row ``rows[r]`` of ``pool_out`` from column ``start_cols[r]`` (the launcher's windowed
write, ``shared_spec.reference``): it packs the flat tokens, the offsets (a cumulative sum of the lengths), the
rows and the first columns into the staging buffer, copies the used part of it to the device buffer in one
``non_blocking`` copy on the current stream, and launches once on views of the device buffer. No tensor is
allocated per step. ``new_tokens`` is a sequence of per-request token ids, each a list/tuple of ints, a 1-D
integer numpy array or a 1-D integer CPU tensor; ``rows`` and ``start_cols`` are sequences of ints, numpy arrays
or CPU tensors of length ``len(new_tokens)``.

The serving pattern: a request's first step writes its prompt from column 0 (``start_cols[r] = 0``); each later
step writes only its new tokens at the request's current length (the number of tokens written so far), so a
step copies and writes its new tokens alone, never the whole context.

Errors (nothing is written, and the buffers keep no half-packed step that a launch could read): more requests
than ``max_requests`` (``errors.INCREMENTAL_TOO_MANY_REQUESTS``), more tokens than ``max_new_tokens``
(``INCREMENTAL_TOO_MANY_TOKENS``), ``rows`` or ``start_cols`` of another length (``INCREMENTAL_LENGTHS``), an
entry that is not token ids or a token id no int64 holds (``pack_token_ids``' messages, naming ``new_tokens``);
then the launcher's own checks (a row outside the pool, a negative first column, ... with ``check_values=True``).

Reuse hazard: the copy of step ``k`` reads the staging buffer after ``step`` returns, whenever the stream gets to
it, and the launch of step ``k`` reads the device buffer. An event recorded after the launch marks both done;
``step(k + 1)`` waits for it on the host before it packs anything (``event.synchronize()``), so neither buffer is
overwritten while a copy or a kernel of the previous step still reads it, whatever stream each step runs on.
In a serving loop the previous step's scatter has long finished by then; a host that runs ahead waits for it.
On the CPU the copy is a plain synchronous copy and there is no event (an ``event`` object may be passed
to test the ordering: anything with ``record()`` and ``synchronize()``).
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import torch

from kv_canary_torch.launcher import launch_scatter_req_token_ids_kernel
from kv_canary_torch.packing import _as_ids
from shared_spec import errors

# Each region of the buffers starts on a 16-byte boundary (an even int64 index): the views' pointers are aligned as
# the kernels' Triton specialization and the C launcher want them, the same compiled variant every step.
_ALIGN = 2


_TOKENS_WHERE = errors.INCREMENTAL_WHERE.format(arg="new_tokens")


def _rounded(count: int) -> int:
    return -(-count // _ALIGN) * _ALIGN


def _capacity(name: str, value) -> int:
    if type(value) is not int and not isinstance(value, np.integer) or value < 0:
        raise errors.value_error(errors.INCREMENTAL_CAPACITY, arg=name, value=value)
    return int(value)


class IncrementalWriter:
    """One reused staging buffer, one reused device buffer, one copy and one launch per step (module docstring)."""

    def __init__(self, pool_out: torch.Tensor, max_requests: int, max_new_tokens: int, *, backend: str = "auto",
                 event=None):
        self.pool_out = pool_out
        self.backend = backend
        self.max_requests = _capacity("max_requests", max_requests)
        self.max_new_tokens = _capacity("max_new_tokens", max_new_tokens)
        # Layout: offsets (max_requests + 1), rows, start_cols (max_requests each), tokens: the small metadata first,
        # so one copy of a prefix carries a step (metadata slots a smaller step leaves unused are a few ints).
        self._offsets_at = 0
        self._rows_at = _rounded(self.max_requests + 1)
        self._start_cols_at = self._rows_at + _rounded(self.max_requests)
        self._tokens_at = self._start_cols_at + _rounded(self.max_requests)
        size = self._tokens_at + self.max_new_tokens
        pinned = pool_out.is_cuda
        self._host = torch.zeros(size, dtype=torch.int64, pin_memory=pinned)
        self._device = torch.zeros(size, dtype=torch.int64, device=pool_out.device)
        self._staged = self._host.numpy()  # the host buffer as numpy: packing writes through it
        self._event = event if event is not None else (torch.cuda.Event() if pinned else None)
        self._pending = False  # a step's copy or launch may still read the buffers

    def _wait(self) -> None:
        """Block until the previous step's copy and launch have read the buffers."""
        if self._pending:
            self._event.synchronize()
            self._pending = False

    def step(self, new_tokens, rows, start_cols, *, check_values: bool = False) -> None:
        """Write ``new_tokens[r]`` into row ``rows[r]`` from column ``start_cols[r]``; see the module docstring."""
        bs = len(new_tokens)
        if bs > self.max_requests:
            raise errors.value_error(errors.INCREMENTAL_TOO_MANY_REQUESTS, bs=bs, limit=self.max_requests)
        for name, values in (("rows", rows), ("start_cols", start_cols)):
            if len(values) != bs:
                raise errors.value_error(errors.INCREMENTAL_LENGTHS, arg=name, length=len(values), bs=bs)
        self._wait()
        staged = self._staged
        offsets = staged[self._offsets_at: self._offsets_at + bs + 1]
        offsets[0] = 0
        lengths = np.fromiter(map(len, new_tokens), dtype=np.int64, count=bs)
        np.cumsum(lengths, out=offsets[1:])
        count = int(offsets[bs])
        if count > self.max_new_tokens:
            raise errors.value_error(errors.INCREMENTAL_TOO_MANY_TOKENS, count=count, limit=self.max_new_tokens)
        tokens = staged[self._tokens_at: self._tokens_at + count]
        self._pack_tokens(new_tokens, tokens)
        self._pack_ints(staged[self._rows_at: self._rows_at + bs], rows, "rows")
        self._pack_ints(staged[self._start_cols_at: self._start_cols_at + bs], start_cols, "start_cols")
        used = self._tokens_at + count
        device = self._device
        if self._event is None:
            device[:used].copy_(self._host[:used])
        else:
            device[:used].copy_(self._host[:used], non_blocking=True)
        try:
            launch_scatter_req_token_ids_kernel(
                flat_in=device[self._tokens_at: used],
                offsets=device[self._offsets_at: self._offsets_at + bs + 1],
                req_pool_indices=device[self._rows_at: self._rows_at + bs],
                pool_out=self.pool_out,
                start_cols=device[self._start_cols_at: self._start_cols_at + bs],
                check_values=check_values,
                backend=self.backend,
            )
        finally:  # after the copy, raised or not: the next step must wait for it
            if self._event is not None:
                self._event.record()
                self._pending = True

    @staticmethod
    def _pack_ints(out: np.ndarray, values, name: str) -> None:
        """``values`` (ints, an integer array or CPU tensor) into ``out``; ``INCREMENTAL_NOT_INTS`` for anything else."""
        array = values.numpy() if type(values) is torch.Tensor and values.device.type == "cpu" else values
        try:
            array = np.asarray(array)
        except (TypeError, ValueError, RuntimeError):
            array = None
        if array is not None and array.size == 0 and array.ndim == 1:
            return  # [] infers float64; there is nothing to pack
        if (array is None or array.ndim != 1 or array.dtype.kind not in "iu"
                or (array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max)):
            what = type(values).__name__ if array is None else f"shape {array.shape} and dtype {array.dtype.name}"
            raise errors.type_error(errors.INCREMENTAL_NOT_INTS, arg=name, what=what)
        out[:] = array

    @staticmethod
    def _pack_tokens(new_tokens, out: np.ndarray) -> None:
        """The requests' ids, concatenated, into ``out`` (``out`` holds exactly their count).

        Lists of ints (a decode step's usual form): one conversion of their concatenation. Integer arrays and CPU
        tensors: one concatenate. Anything else, or a conversion that does not give int64 (floats, ids past
        int64), per request through ``pack_token_ids``' conversion, which raises the spec's error for the first
        entry that is not token ids.
        """
        if out.shape[0] == 0:
            arrays = None  # nothing to copy; the per-request path still refuses entries that are not token ids
        elif type(new_tokens[0]) is list:
            try:
                flat = np.asarray(list(chain.from_iterable(new_tokens)))
            except (TypeError, ValueError, OverflowError):
                flat = None
            if flat is not None and flat.dtype == np.int64 and flat.shape == out.shape:
                out[:] = flat
                return
            arrays = None
        else:
            arrays = [ids.numpy() if type(ids) is torch.Tensor and ids.device.type == "cpu" else ids for ids in new_tokens]
            if all(type(a) is np.ndarray and a.ndim == 1 and a.dtype.kind in "iu" and a.dtype != np.uint64
                   for a in arrays):
                np.concatenate(arrays, out=out, casting="same_kind")
                return
        at = 0
        for index, ids in enumerate(new_tokens):
            array = _as_ids(index, ids, _TOKENS_WHERE)
            out[at: at + array.shape[0]] = array
            at += array.shape[0]
