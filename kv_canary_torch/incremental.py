"""The incremental serving step: each request's new tokens written at its current length, one copy and one launch.

Contract: ``IncrementalWriter(pool_out, max_requests, max_new_tokens, *, backend="auto")`` reserves, once, one
int64 staging buffer on the host (page-locked when ``pool_out`` is a CUDA tensor) and one int64 buffer on
``pool_out``'s device, each holding the launch's four inputs for up to ``max_requests`` requests and
``max_new_tokens`` tokens. ``step(new_tokens, rows, start_cols)`` then, for request ``r`` of this step, writes
``new_tokens[r]`` into row ``rows[r]`` of ``pool_out`` from column ``start_cols[r]`` (the launcher's windowed
write, ``shared_spec.reference``): it packs the flat tokens, the offsets (a cumulative sum of the lengths), the
rows and the first columns into the staging buffer, copies the used part of it to the device buffer in one
``non_blocking`` copy on the current stream, and launches once on views of the device buffer. No tensor is
allocated per step: the device views of a step's ``(bs, count)`` are made once and kept (the last 8 shapes),
so a repeated shape runs one torch op, the copy, before the launch. ``rows`` and ``start_cols`` are sequences of
ints, 1-D integer numpy arrays or CPU tensors of ``bs`` entries (numpy arrays and tensors cost one copy; a list
costs a conversion per element).

Two forms of the new tokens, one packing path each:

- nested (``lengths=None``): ``new_tokens`` one sequence per request (a list/tuple of ints, a 1-D integer numpy
  array or CPU tensor), ``bs = len(new_tokens)``; the offsets are the cumulative sum of their lengths.
- flat (``lengths=`` given; a runtime's usual form): ``new_tokens`` every request's tokens in order as one list of
  ints, 1-D integer numpy array or CPU tensor, converted at once. ``lengths`` an int ``k >= 1``: every request
  has ``k`` tokens (``1``: a decode step; ``k``: speculative tokens), ``bs = len(new_tokens) // k``, the offsets
  ``k * arange`` without a cumulative sum; or one count ``>= 0`` per request (list, numpy array or CPU tensor),
  ``bs = len(lengths)``, which must sum to ``len(new_tokens)``.

The serving pattern: a request's first step writes its prompt from column 0 (``start_cols[r] = 0``); each later
step writes only its new tokens at the request's current length (the number of tokens written so far), so a
step copies and writes its new tokens alone, never the whole context.

Errors (nothing is written, and the buffers keep no half-packed step that a launch could read): more requests
than ``max_requests`` (``errors.INCREMENTAL_TOO_MANY_REQUESTS``), more tokens than ``max_new_tokens``
(``INCREMENTAL_TOO_MANY_TOKENS``), ``rows`` or ``start_cols`` of another length (``INCREMENTAL_LENGTHS``), an
entry that is not token ids or a token id no int64 holds (``pack_token_ids``' messages, naming ``new_tokens``);
in the flat form ``lengths`` that is not an int >= 1 nor counts >= 0 (``INCREMENTAL_FLAT_LENGTHS``) or that does
not cut ``new_tokens`` (``INCREMENTAL_FLAT_COUNT``), flat tokens that are not one 1-D sequence
(``INCREMENTAL_NOT_INTS``); then the launcher's own checks (a row outside the pool, a negative first column, ...
with ``check_values=True``).

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
# the kernels' Triton specialization and the call path want them, the same compiled variant every step.
_ALIGN = 2


_VIEWS_KEPT = 8  # (bs, count) shapes whose device views a writer keeps (module docstring)

_TOKENS_WHERE = errors.INCREMENTAL_WHERE.format(arg="new_tokens")


def _rounded(count: int) -> int:
    return -(-count // _ALIGN) * _ALIGN


def _as_array(values):
    """``values`` as a numpy array (a CPU tensor's own memory), or None where numpy cannot take it."""
    if type(values) is np.ndarray:
        return values
    if type(values) is torch.Tensor and values.device.type == "cpu":
        values = values.numpy()
    try:
        return np.asarray(values)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None


def _int_array(values):
    """``values`` as a 1-D integer numpy array whose every entry an int64 holds, or None; ``[]`` (numpy infers
    float64) is the empty int64 array."""
    array = _as_array(values)
    if array is None or array.ndim != 1:
        return None
    if array.dtype.kind not in "iu":
        return _EMPTY if array.size == 0 else None
    if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
        return None
    return array


_EMPTY = np.zeros(0, dtype=np.int64)


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
        self._arange = np.arange(self.max_requests + 1, dtype=np.int64)  # the offsets of one token per request
        self._cached_views: dict = {}  # (bs, count) -> the views of one step's copy and launch (``_views``)

    def _wait(self) -> None:
        """Block until the previous step's copy and launch have read the buffers."""
        if self._pending:
            self._event.synchronize()
            self._pending = False

    def step(self, new_tokens, rows, start_cols, *, lengths=None, check_values: bool = False) -> None:
        """Write request ``r``'s new tokens into row ``rows[r]`` from column ``start_cols[r]``; see the module docstring.

        ``lengths=None``: ``new_tokens`` holds one sequence per request. Otherwise ``new_tokens`` is flat, every
        request's tokens in order, and ``lengths`` cuts it: an int ``k >= 1`` (every request has ``k`` tokens; ``1``
        is a decode step) or one count per request.
        """
        if lengths is None:
            bs, flat, count = len(new_tokens), None, None
        else:
            flat, count = self._flat(new_tokens)
            bs, lengths = self._requests(count, lengths)
        if bs > self.max_requests:
            raise errors.value_error(errors.INCREMENTAL_TOO_MANY_REQUESTS, bs=bs, limit=self.max_requests)
        for name, values in (("rows", rows), ("start_cols", start_cols)):
            if len(values) != bs:
                raise errors.value_error(errors.INCREMENTAL_LENGTHS, arg=name, length=len(values), bs=bs)
        self._wait()
        staged = self._staged
        offsets = staged[self._offsets_at: self._offsets_at + bs + 1]
        if lengths is None:
            offsets[0] = 0
            np.cumsum(np.fromiter(map(len, new_tokens), dtype=np.int64, count=bs), out=offsets[1:])
            count = int(offsets[bs])
        elif type(lengths) is int:  # every request the same count: no cumulative sum
            np.multiply(self._arange[: bs + 1], lengths, out=offsets)
        else:
            offsets[0] = 0
            np.cumsum(lengths, out=offsets[1:])
            if int(offsets[bs]) != count:
                raise errors.value_error(errors.INCREMENTAL_FLAT_COUNT, count=count, lengths="[...]",
                                         expected=f"they sum to {int(offsets[bs])}")
        if count > self.max_new_tokens:
            raise errors.value_error(errors.INCREMENTAL_TOO_MANY_TOKENS, count=count, limit=self.max_new_tokens)
        tokens = staged[self._tokens_at: self._tokens_at + count]
        if lengths is None:
            self._pack_tokens(new_tokens, tokens)
        elif flat is not None:
            tokens[:] = flat
        else:
            self._refuse_flat(new_tokens, offsets)
        self._pack_ints(staged[self._rows_at: self._rows_at + bs], rows, "rows")
        self._pack_ints(staged[self._start_cols_at: self._start_cols_at + bs], start_cols, "start_cols")
        dst, src, flat_in, offsets_in, rows_in, start_cols_in = self._views(bs, count)
        if self._event is None:
            dst.copy_(src)
        else:
            dst.copy_(src, non_blocking=True)
        try:
            launch_scatter_req_token_ids_kernel(
                flat_in=flat_in, offsets=offsets_in, req_pool_indices=rows_in, pool_out=self.pool_out,
                start_cols=start_cols_in, check_values=check_values, backend=self.backend,
            )
        finally:  # after the copy, raised or not: the next step must wait for it
            if self._event is not None:
                self._event.record()
                self._pending = True

    def _views(self, bs: int, count: int) -> tuple:
        """The copy's destination and source and the launch's four inputs for ``bs`` requests and ``count`` tokens:
        views of the two buffers, made once per ``(bs, count)`` (a decode loop repeats one) and kept for the last
        ``_VIEWS_KEPT`` of them, since slicing a tensor costs about a microsecond of host time each."""
        key = (bs, count)
        views = self._cached_views.get(key)
        if views is None:
            if len(self._cached_views) >= _VIEWS_KEPT:
                del self._cached_views[next(iter(self._cached_views))]  # the oldest
            used, device = self._tokens_at + count, self._device
            views = self._cached_views[key] = (
                device[:used], self._host[:used], device[self._tokens_at: used],
                device[self._offsets_at: self._offsets_at + bs + 1], device[self._rows_at: self._rows_at + bs],
                device[self._start_cols_at: self._start_cols_at + bs])
        return views

    @staticmethod
    def _flat(new_tokens) -> tuple:
        """The flat form's tokens as ``(array, count)``; ``array`` None where they are not one 1-D int64 sequence
        (``_refuse_flat`` then names the first bad entry, once the lengths cut them)."""
        flat = _int_array(new_tokens)
        if flat is not None:
            return flat, flat.shape[0]
        try:
            return None, len(new_tokens)
        except TypeError:
            raise errors.type_error(errors.INCREMENTAL_NOT_INTS, arg="new_tokens", what=type(new_tokens).__name__) from None

    @staticmethod
    def _requests(count: int, lengths) -> tuple:
        """The flat form's ``(bs, lengths)``: ``lengths`` an int ``k`` or a checked 1-D int array of counts."""
        if type(lengths) is not bool and isinstance(lengths, (int, np.integer)):
            if lengths < 1:
                raise errors.value_error(errors.INCREMENTAL_FLAT_LENGTHS, what=repr(lengths))
            if count % lengths:
                raise errors.value_error(errors.INCREMENTAL_FLAT_COUNT, count=count, lengths=int(lengths),
                                         expected=f"not a multiple of {int(lengths)}")
            return count // int(lengths), int(lengths)
        array = _int_array(lengths)
        if array is None or array.size and array.min() < 0:
            what = type(lengths).__name__ if array is None else "a negative count"
            raise errors.value_error(errors.INCREMENTAL_FLAT_LENGTHS, what=what)
        return array.shape[0], array

    @staticmethod
    def _refuse_flat(new_tokens, offsets: np.ndarray) -> None:
        """Flat tokens that are not one 1-D int64 sequence: ``pack_token_ids``' error for the first request whose
        tokens are not token ids, else ``INCREMENTAL_NOT_INTS``."""
        array = _as_array(new_tokens)
        if array is None or array.ndim == 1:  # one sequence: its first request that is not token ids
            try:
                segments = [new_tokens[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
            except (TypeError, IndexError, ValueError):
                segments = []
            for index, ids in enumerate(segments):
                _as_ids(index, ids, _TOKENS_WHERE)
        what = type(new_tokens).__name__ if array is None else f"shape {array.shape} and dtype {array.dtype.name}"
        raise errors.type_error(errors.INCREMENTAL_NOT_INTS, arg="new_tokens", what=what)

    @staticmethod
    def _pack_ints(out: np.ndarray, values, name: str) -> None:
        """``values`` (ints, an integer array or CPU tensor) into ``out``; ``INCREMENTAL_NOT_INTS`` for anything else."""
        array = _int_array(values)
        if array is None:
            array = _as_array(values)
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
