"""The incremental serving step: each request's new tokens written at its current length, one copy and one launch.

Contract: ``IncrementalWriter(pool_out, max_requests, max_new_tokens, *, backend="auto", new_event=None)`` reserves,
once, one int64 staging buffer on the host (page-locked when ``pool_out`` is a CUDA tensor) and one int64 buffer on
``pool_out``'s device, each a ring of ``_SLOTS`` (8) slots (one slot off CUDA), each slot holding the launch's four
inputs for up to ``max_requests`` requests and ``max_new_tokens`` tokens (about ``8 * (3 * max_requests +
max_new_tokens)`` int64 in each buffer). ``step(new_tokens, rows, start_cols)`` then, for request ``r`` of this step,
writes ``new_tokens[r]`` into row ``rows[r]`` of ``pool_out`` from column ``start_cols[r]`` (the launcher's windowed
write, ``shared_spec.reference``): it packs the flat tokens, the offsets (a cumulative sum of the lengths), the rows
and the first columns into the next staging slot, copies the used part of it to the same slot of the device buffer in
one asynchronous copy on the current stream, and launches once on views of the device slot. The copy is the driver's
(``cuMemcpyHtoDAsync`` through the launcher's native piece, once the piece is loaded and where the process sees one
device: 2.8-4.3 us of host time where torch's ``copy_`` costs 4.9-7.8, and a step 13-27 us where it is 15-35, in
``benchmarks/incremental_parts.py`` on the H200, 2026-12-02), else ``copy_(non_blocking=True)``. The launch is the
launcher's: its call path's one C call once the views' signature is remembered (``launch.dispatch.call_bound``,
taken without the launcher's Python frame), else the launcher itself.
No tensor is allocated per step: the device views of a slot's ``(bs, count)`` are made once and kept (the last 8
shapes per slot), so a repeated shape runs no torch op before the launch. ``rows`` and ``start_cols`` are sequences of
ints, 1-D integer numpy arrays or CPU tensors of ``bs`` entries (numpy arrays and tensors cost one copy; a list costs
a conversion per element).

Two forms of the new tokens, one packing path each:

- nested (``lengths=None``): ``new_tokens`` one sequence per request (a list/tuple of ints, a 1-D integer numpy
  array or CPU tensor), ``bs = len(new_tokens)``; the offsets are the cumulative sum of their lengths.
- flat (``lengths=`` given; a runtime's usual form): ``new_tokens`` every request's tokens in order as one list of
  ints, 1-D integer numpy array or CPU tensor, converted at once (a list straight into the slot by the native
  piece's ``stage_ints`` once the piece is loaded, in the same call as ``rows`` and ``start_cols`` where they are
  int64 numpy arrays, else through one ``array("q")``; what it declines goes the second way, which names what is
  wrong). ``lengths`` an int ``k >= 1``: every request
  has ``k`` tokens (``1``: a decode step; ``k``: speculative tokens), ``bs = len(new_tokens) // k``, the offsets
  ``k * arange`` without a cumulative sum; or one count ``>= 0`` per request (list, numpy array or CPU tensor),
  ``bs = len(lengths)``, which must sum to ``len(new_tokens)``.

The serving pattern: a request's first step writes its prompt from column 0 (``start_cols[r] = 0``); each later
step writes only its new tokens at the request's current length (the number of tokens written so far), so a
step copies and writes its new tokens alone, never the whole context.

Errors (nothing is written, and the buffers keep no half-packed step that a launch could read): more requests
than ``max_requests`` (``errors.INCREMENTAL_TOO_MANY_REQUESTS``), more tokens than ``max_new_tokens``
(``INCREMENTAL_TOO_MANY_TOKENS``), ``rows`` or ``start_cols`` that are not one 1-D integer sequence
(``INCREMENTAL_NOT_INTS``) or of another length (``INCREMENTAL_LENGTHS``), an entry that is not token ids or a token
id no int64 holds (``pack_token_ids``' messages, naming ``new_tokens``);
in the flat form ``lengths`` that is not an int >= 1 nor counts >= 0 (``INCREMENTAL_FLAT_LENGTHS``) or that does
not cut ``new_tokens`` (``INCREMENTAL_FLAT_COUNT``), flat tokens that are not one 1-D sequence
(``INCREMENTAL_NOT_INTS``); then the launcher's own checks (a row outside the pool, a negative first column, ...
with ``check_values=True``).

Reuse hazard: the copy of step ``k`` reads its staging slot after ``step`` returns, whenever the stream gets to
it, and the launch of step ``k`` reads its device slot. A CUDA event recorded after a step marks every step queued
before it on that stream done, so one event is recorded every ``_FENCE_EVERY`` (4) steps, half a lap of the ring,
covering the slots used since the last one (``record`` costs microseconds of host time: a step records none,
three in four times; the stream it records on is kept by its raw id, since ``torch.cuda.current_stream`` costs
microseconds too). Before a step packs a slot still in use, it waits on the host
(``event.synchronize()``) for the event covering the slot's last use, so neither a staging slot a copy in flight
reads nor a device slot a kernel reads is overwritten; in a serving loop that event has long completed, and a host
more than half a lap ahead of the stream waits for it. Steps on another stream than the slots used since the last
event (``torch._C._cuda_getCurrentRawStream``, checked each step) first close those with an event recorded on
their own stream, so each event covers steps of its stream alone. A step refused before its copy leaves its slot
free. On the CPU the copy is a plain synchronous copy, the ring one slot and there are no events (``new_event``, a
callable making objects with ``record(stream)`` and ``synchronize()``, may be passed to test the ordering; they
record on stream ``None``). The writer's buffers live as long as it does: dropping it waits for its queued steps
(``__del__``), since the driver's copy, unlike torch's, leaves torch's pinned-memory cache no event to wait for.
"""

from __future__ import annotations

from array import array as _words
from collections import deque
from itertools import chain

import numpy as np
import torch

from kv_canary_torch.launch import dispatch as launch_dispatch
from kv_canary_torch.launcher import launch_scatter_req_token_ids_kernel
from kv_canary_torch.packing import _as_ids
from shared_spec import errors

# Each region of the buffers starts on a 16-byte boundary (an even int64 index): the views' pointers are aligned as
# the kernels' Triton specialization and the call path want them, the same compiled variant every step.
_ALIGN = 2

_SLOTS = 8  # staging slots in the ring (module docstring: the reuse hazard)
_FENCE_EVERY = 4  # steps between two recorded events: half a lap, so the host may run half a lap ahead unblocked
_VIEWS_KEPT = 8  # (bs, count) shapes whose device views each slot keeps (module docstring)
_STREAMS_KEPT = 8  # the Stream objects a writer keeps, by raw id, to record its events on

_TOKENS_WHERE = errors.INCREMENTAL_WHERE.format(arg="new_tokens")
_STAGED = object()  # the flat form's list of ints, left for the native piece to write into the slot


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
    if type(values) is np.ndarray and values.dtype == np.int64 and values.ndim == 1:  # the usual form, at once
        return values
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


def _refuse_ints(values, array, name: str, bs: int):
    """The error for ``rows`` or ``start_cols``: ``INCREMENTAL_NOT_INTS`` where ``_int_array`` did not take them
    (``array`` None), else ``INCREMENTAL_LENGTHS`` (not ``bs`` entries)."""
    if array is not None:
        return errors.value_error(errors.INCREMENTAL_LENGTHS, arg=name, length=array.shape[0], bs=bs)
    array = _as_array(values)
    what = type(values).__name__ if array is None else f"shape {array.shape} and dtype {array.dtype.name}"
    return errors.type_error(errors.INCREMENTAL_NOT_INTS, arg=name, what=what)


class IncrementalWriter:
    """A ring of staging slots in one pinned and one device buffer; one copy and one launch a step (module docstring)."""

    def __init__(self, pool_out: torch.Tensor, max_requests: int, max_new_tokens: int, *, backend: str = "auto",
                 new_event=None):
        self.pool_out = pool_out
        self.backend = backend
        self.max_requests = _capacity("max_requests", max_requests)
        self.max_new_tokens = _capacity("max_new_tokens", max_new_tokens)
        # A slot's layout: offsets (max_requests + 1), rows, start_cols (max_requests each), tokens: the small metadata
        # first, so one copy of a prefix carries a step (metadata slots a smaller step leaves unused are a few ints).
        self._offsets_at = 0
        self._rows_at = _rounded(self.max_requests + 1)
        self._start_cols_at = self._rows_at + _rounded(self.max_requests)
        self._tokens_at = self._start_cols_at + _rounded(self.max_requests)
        self._slot_size = _rounded(self._tokens_at + self.max_new_tokens)
        cuda = pool_out.is_cuda
        if new_event is None and cuda:
            new_event = torch.cuda.Event
        self._slots = _SLOTS if new_event is not None else 1  # no event: every copy and launch synchronous
        size = self._slots * self._slot_size
        self._host = torch.zeros(size, dtype=torch.int64, pin_memory=cuda)
        self._device = torch.zeros(size, dtype=torch.int64, device=pool_out.device)
        self._staged = self._host.numpy()  # the host buffer as numpy: packing writes through it
        self._staged_words = memoryview(self._staged).cast("B").cast("q")  # as a buffer: an ``array("q")`` copies in
        # The ring (module docstring): the events not recorded, made once (at most one outstanding per slot); the
        # recorded ones, oldest first, each with the slots whose last use it covers; the slots used since the last.
        self._free_events = [new_event() for _ in range(self._slots)] if new_event is not None else None
        self._fences: deque = deque()
        self._busy = [False] * self._slots  # a copy or launch of the slot's last step may still read it
        self._open: list = []  # slots used since the last recorded event, all on one stream
        self._open_stream = None  # that stream (None off CUDA: fake events record on no stream)
        self._open_stream_id = 0
        if cuda:
            index = pool_out.device.index
            self._stream_id = lambda: torch._C._cuda_getCurrentRawStream(index)  # cheap: an int, no Stream object
            streams: dict = {}  # raw stream id -> its Stream, the last _STREAMS_KEPT: ``current_stream`` costs us

            def stream(raw: int):  # the current stream's object, ``raw`` its id
                kept = streams.get(raw)
                if kept is None:
                    if len(streams) >= _STREAMS_KEPT:
                        streams.clear()
                    kept = streams[raw] = torch.cuda.current_stream(pool_out.device)
                return kept

            self._stream = stream
        else:
            self._stream_id, self._stream = (lambda: 0), (lambda raw: None)
        self._next = 0  # the slot the next step packs
        self._arange = np.arange(self.max_requests + 1, dtype=np.int64)  # the offsets of one token per request
        self._offsets_each: list = [None] * self._slots  # k where the slot's offsets hold k * _arange, else None
        self._cached_views = [{} for _ in range(self._slots)]  # per slot: (bs, count) -> ``_views``
        # The copy: the native piece's driver copy where it is loaded and the process sees one device (the stream
        # read is the pool device's, the thread's context that device's), else torch's ``copy_``, which also records
        # an event for torch's pinned-memory cache: the writer's own events guard the buffer (``__del__``).
        self._copy = None
        self._stage = None  # the native piece's stage_ints, once it is loaded: the flat form's list and the arrays
        self._one_device = cuda and torch.cuda.device_count() == 1
        self._host_at, self._device_at = self._host.data_ptr(), self._device.data_ptr()

    def step(self, new_tokens, rows, start_cols, *, lengths=None, check_values: bool = False) -> None:
        """Write request ``r``'s new tokens into row ``rows[r]`` from column ``start_cols[r]``; see the module docstring.

        ``lengths=None``: ``new_tokens`` holds one sequence per request. Otherwise ``new_tokens`` is flat, every
        request's tokens in order, and ``lengths`` cuts it: an int ``k >= 1`` (every request has ``k`` tokens; ``1``
        is a decode step) or one count per request.
        """
        if lengths is None:
            bs, flat, count = len(new_tokens), None, None
        else:
            if type(new_tokens) is list and (self._stage or self._native_stage()) is not None:
                flat, count = _STAGED, len(new_tokens)  # for the native piece's packing, below
            else:
                flat, count = self._flat(new_tokens)
            if type(lengths) is int and lengths == 1:  # a decode step: one request per token
                bs = count
            else:
                bs, lengths = self._requests(count, lengths)
        if bs > self.max_requests:
            raise errors.value_error(errors.INCREMENTAL_TOO_MANY_REQUESTS, bs=bs, limit=self.max_requests)
        raw = self._stream_id()
        if flat is _STAGED and count <= self.max_new_tokens:
            # The usual step (the sampler's list, rows and first columns as int64 arrays) packed by one native call;
            # anything it declines is packed, or refused by name, below.
            slot = self._acquire(raw)
            views = self._views(slot, bs, count)
            if self._stage(new_tokens, rows, start_cols, *views[11]):
                self._pack_offsets(slot, bs, new_tokens, count, lengths)
                self._send(slot, raw, views, check_values)
                return
            flat, count = self._flat(new_tokens)
        rows_array = _int_array(rows)
        if rows_array is None or rows_array.shape[0] != bs:
            raise _refuse_ints(rows, rows_array, "rows", bs)
        start_cols_array = _int_array(start_cols)
        if start_cols_array is None or start_cols_array.shape[0] != bs:
            raise _refuse_ints(start_cols, start_cols_array, "start_cols", bs)
        if type(lengths) is int and count > self.max_new_tokens:
            raise errors.value_error(errors.INCREMENTAL_TOO_MANY_TOKENS, count=count, limit=self.max_new_tokens)
        slot = self._acquire(raw)
        count, offsets = self._pack_offsets(slot, bs, new_tokens, count, lengths)
        views = self._views(slot, bs, count)
        if type(flat) is _words:
            views[7][:] = flat  # the memoryview of the slot's tokens: one copy of the array's buffer
        elif flat is not None:
            np.copyto(views[6], flat, casting="unsafe")  # an integer array int64 holds (``_int_array``)
        elif lengths is None:
            self._pack_tokens(new_tokens, views[6])
        else:
            self._refuse_flat(new_tokens, self._arange[: bs + 1] * lengths if offsets is None else offsets)
        np.copyto(views[8], rows_array, casting="unsafe")
        np.copyto(views[9], start_cols_array, casting="unsafe")
        self._send(slot, raw, views, check_values)

    def _send(self, slot: int, raw: int, views: tuple, check_values) -> None:
        """The packed ``slot``'s copy and launch on the stream of raw id ``raw`` (synchronous off CUDA); on the ring,
        the slot is released after them, raised or not."""
        dst, src, flat_in, offsets_in, rows_in, start_cols_in = views[:6]
        ring = self._free_events is not None
        try:
            if not ring:
                dst.copy_(src)
            else:
                copy = self._copy or self._native_copy()
                if copy is None or not copy(*views[10], raw):
                    dst.copy_(src, non_blocking=True)
            # The launcher's first step for a remembered signature (its call path), taken here without its frame;
            # anything else (a first call, checked values, the CPU) through the launcher itself.
            if check_values is not False or launch_dispatch.call_bound(
                    self.backend, flat_in, offsets_in, rows_in, self.pool_out, start_cols_in) is not True:
                launch_scatter_req_token_ids_kernel(
                    flat_in=flat_in, offsets=offsets_in, req_pool_indices=rows_in, pool_out=self.pool_out,
                    start_cols=start_cols_in, check_values=check_values, backend=self.backend,
                )
        finally:  # after the copy, raised or not: the slot is in use until an event after it completes
            if ring:
                self._release(slot, raw)

    def _native_stage(self):
        """The native piece's ``stage_ints`` once it is loaded (kept from then on), else None."""
        self._stage = launch_dispatch.int_stage()
        return self._stage

    def _native_copy(self):
        """The native piece's ``copy_to_device`` once it is loaded (kept from then on), else None."""
        if self._one_device:
            self._copy = launch_dispatch.device_copy()
        return self._copy

    def __del__(self):
        """Wait for every queued step: a copy still in flight reads the pinned buffer, which is freed with the writer."""
        try:
            if self._free_events is not None:
                if self._open:
                    self._fence()
                for event, _ in self._fences:
                    event.synchronize()
        except Exception:  # a writer half made, or torch torn down at exit: nothing left to wait for
            pass

    def _pack_offsets(self, slot: int, bs: int, new_tokens, count, lengths) -> tuple:
        """The slot's offsets for this step; returns ``(count, offsets)``: the tokens' total, checked against the
        capacity, and the slot's offsets (None for an int ``lengths``). An int ``k``: ``k * arange``, written only
        where the slot does not hold them from an earlier step; else the cumulative sum of the nested form's lengths
        or of the flat form's counts, which must sum to ``count``."""
        at = slot * self._slot_size + self._offsets_at
        if type(lengths) is int:
            if self._offsets_each[slot] != lengths:
                np.multiply(self._arange, lengths, out=self._staged[at: at + self.max_requests + 1])
                self._offsets_each[slot] = lengths
            return count, None
        self._offsets_each[slot] = None
        offsets = self._staged[at: at + bs + 1]
        offsets[0] = 0
        if lengths is None:
            np.cumsum(np.fromiter(map(len, new_tokens), dtype=np.int64, count=bs), out=offsets[1:])
            count = int(offsets[bs])
        else:
            np.cumsum(lengths, out=offsets[1:])
            if int(offsets[bs]) != count:
                raise errors.value_error(errors.INCREMENTAL_FLAT_COUNT, count=count, lengths="[...]",
                                         expected=f"they sum to {int(offsets[bs])}")
        if count > self.max_new_tokens:
            raise errors.value_error(errors.INCREMENTAL_TOO_MANY_TOKENS, count=count, limit=self.max_new_tokens)
        return count, offsets

    def _acquire(self, raw: int) -> int:
        """The slot the next step packs on the stream of raw id ``raw``, once nothing in flight reads it: a slot whose
        last use no completed event covers is waited for (``event.synchronize()``), after an event is recorded to
        cover it where none is yet."""
        slot = self._next
        if self._free_events is None:
            return slot
        if self._open and raw != self._open_stream_id:
            self._fence()  # the steps since the last event ran on another stream: an event on it covers them
        if self._busy[slot]:
            if self._open and slot in self._open:
                self._fence()
            fences, busy = self._fences, self._busy
            while busy[slot]:  # the oldest first: the slot's own event is usually the first
                event, slots = fences.popleft()
                event.synchronize()
                for used in slots:
                    busy[used] = False
                self._free_events.append(event)
        return slot

    def _release(self, slot: int, raw: int) -> None:
        """``slot``'s copy and launch are queued on the stream of raw id ``raw``: it is in use until an event recorded
        after them completes; one is recorded every ``_FENCE_EVERY`` steps."""
        self._busy[slot] = True
        if not self._open:
            self._open_stream_id = raw
            self._open_stream = self._stream(raw)
        self._open.append(slot)
        self._next = slot + 1 if slot + 1 < self._slots else 0
        if len(self._open) >= _FENCE_EVERY:
            self._fence()

    def _fence(self) -> None:
        """Record an event on the open slots' stream, covering them (every step queued on it so far)."""
        event = self._free_events.pop()  # one is free: each outstanding event covers at least one other busy slot
        event.record(self._open_stream)
        self._fences.append((event, self._open))
        self._open = []

    def _views(self, slot: int, bs: int, count: int) -> tuple:
        """The views of one step of ``bs`` requests and ``count`` tokens in ``slot``: the copy's destination and
        source, the launch's four inputs (device), then the packing's destinations (host): the tokens as numpy and
        as a memoryview, the rows and the first columns; the copy's addresses and size; ``stage_ints``' addresses
        and sizes (the tokens', the rows' and the first columns' host addresses, ``count`` and ``bs``).
        Made once per ``(bs, count)`` (a decode loop repeats one) and kept for the last ``_VIEWS_KEPT`` of them per
        slot, since slicing costs host time (a tensor's about a microsecond)."""
        kept = self._cached_views[slot]
        views = kept.get((bs, count))
        if views is None:
            if len(kept) >= _VIEWS_KEPT:
                del kept[next(iter(kept))]  # the oldest
            base, device, staged = slot * self._slot_size, self._device, self._staged
            used, tokens = base + self._tokens_at + count, base + self._tokens_at
            offsets, rows, start_cols = base + self._offsets_at, base + self._rows_at, base + self._start_cols_at
            views = kept[(bs, count)] = (
                device[base:used], self._host[base:used], device[tokens:used], device[offsets: offsets + bs + 1],
                device[rows: rows + bs], device[start_cols: start_cols + bs],
                staged[tokens:used], self._staged_words[tokens:used], staged[rows: rows + bs],
                staged[start_cols: start_cols + bs],
                (self._device_at + 8 * base, self._host_at + 8 * base, 8 * (used - base)),
                (self._host_at + 8 * tokens, self._host_at + 8 * rows, self._host_at + 8 * start_cols, count, bs))
        return views

    @staticmethod
    def _flat(new_tokens) -> tuple:
        """The flat form's tokens as ``(array, count)``; ``array`` None where they are not one 1-D int64 sequence
        (``_refuse_flat`` then names the first bad entry, once the lengths cut them). A list (the sampler's output)
        becomes an ``array("q")``: one pass that refuses anything but ints in the int64 range, cheaper than numpy's
        dtype discovery and conversion."""
        if type(new_tokens) is list:
            try:
                return _words("q", new_tokens), len(new_tokens)
            except (TypeError, OverflowError):
                return None, len(new_tokens)
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
    def _pack_tokens(new_tokens, out: np.ndarray) -> None:
        """The requests' ids, concatenated, into ``out`` (``out`` holds exactly their count).

        Lists of ints (a decode step's usual form): one ``array("q")`` of their concatenation. Integer arrays and CPU
        tensors: one concatenate. Anything else, or a conversion that does not give int64 (floats, ids past
        int64), per request through ``pack_token_ids``' conversion, which raises the spec's error for the first
        entry that is not token ids.
        """
        if out.shape[0] == 0:
            arrays = None  # nothing to copy; the per-request path still refuses entries that are not token ids
        elif type(new_tokens[0]) is list:
            try:
                flat = _words("q", list(chain.from_iterable(new_tokens)))  # only ints int64 holds; from a list: faster
            except (TypeError, OverflowError):
                flat = None
            if flat is not None and len(flat) == out.shape[0]:
                out[:] = np.frombuffer(flat, dtype=np.int64)
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
