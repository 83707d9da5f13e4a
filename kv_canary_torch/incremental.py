"""The incremental serving step: each request's new tokens written at its current length, one copy and one launch.

``IncrementalWriter(pool_out, max_requests, max_new_tokens, *, backend="auto", graphs=True)`` reserves once a ring
of slots, each holding one step's launch inputs (offsets, rows, first columns, tokens; ``8 * (3 * max_requests + 1 +
max_new_tokens)`` bytes): for a CUDA pool ``SLOTS`` of them in one pinned host buffer and one device buffer; for a
CPU pool one slot, launched from where it is packed; for another device one slot and a synchronous copy.
``pool_out`` must be a 2-D int32 tensor (``INCREMENTAL_POOL``); the capacities ints from 0 to ``MAX_REQUESTS``
(``2**20``) and ``MAX_NEW_TOKENS`` (``2**24``), which bound each buffer to about 1.3 GB (``INCREMENTAL_CAPACITY``).

``step(new_tokens, rows, start_cols, *, lengths=None, check_values=False)`` writes request ``r``'s tokens into row
``rows[r]`` from column ``start_cols[r]`` (the launcher's windowed write): it packs the step into the next slot,
copies it to the device in one ``copy_(non_blocking=True)`` on the current stream, and launches once through the
launcher's operation (its checks, ``backend`` and ``check_values``) on views of the slot. With ``graphs`` (a
CUDA pool, the Triton backend), a step whose slot and sizes ``(bs, count)`` ran before replays that copy and
launch as one CUDA graph, captured then: on the stream current when the writer was made, where the pool is the
tensor it was captured on (address, storage, shape, strides, dtype, device, bits) and ``check_values`` is False,
outside ``torch.func`` transforms and stream captures; any other step runs as above. The forms:

- nested (``lengths=None``): ``new_tokens`` one entry per request, each as ``pack_token_ids`` takes it (the same
  conversion, the same errors naming ``new_tokens``);
- flat: ``new_tokens`` every request's tokens in order (a list of ints, converted in one call, or a 1-D integer
  array or tensor: ``packing.host_ints``), cut by ``lengths``: an int ``k >= 1`` (every request has ``k``: 1 in a
  decode step) or one count ``>= 0`` per request, which must sum to ``len(new_tokens)``.

``rows`` and ``start_cols``: ``bs`` ints (a list, a 1-D integer array or tensor). A refused step raises the
spec's error (``INCREMENTAL_*``, ``PACK_*``, then the launcher's) and writes nothing; the next step runs as if it
had not been called.

The reuse hazard (docs/serving.md): a slot is packed again only once the CUDA event recorded after its last use
(one every ``FENCE_EVERY`` steps, on the current stream) has passed, so a host up to ``SLOTS - FENCE_EVERY`` steps
ahead of its stream never waits. A writer is not to be shared between threads.
"""

from __future__ import annotations

from array import array
from collections import deque
from itertools import chain
from typing import NamedTuple

import numpy as np
import torch

from kv_canary_arrays.describe import dtype_name
from kv_canary_torch import backends, launch
from kv_canary_torch.packing import described, host_ints, requests, token_ids
from kv_canary_torch.scatter import scatter
from shared_spec import errors
from shared_spec.checks import require_bool

MAX_REQUESTS = 2**20
MAX_NEW_TOKENS = 2**24
SLOTS = 8
FENCE_EVERY = 4  # half a lap: the host runs up to half a lap ahead of its stream unblocked
VIEWS_KEPT = 8  # (bs, count) shapes whose views each slot keeps (a decode loop repeats one)

_WHERE = {arg: errors.INCREMENTAL_WHERE.format(arg=arg) for arg in ("new_tokens", "lengths", "rows", "start_cols")}
_TOKENS = _WHERE["new_tokens"]
_active = torch._C._are_functorch_transforms_active
_raw_stream = launch._raw_stream
_capturing = torch._C._cuda_isCurrentStreamCapturing


def _capacity(name: str, value, limit: int) -> int:
    if type(value) is bool or not isinstance(value, (int, np.integer)) or not 0 <= value <= limit:
        raise errors.value_error(errors.INCREMENTAL_CAPACITY, arg=name, limit=limit, value=value)
    return int(value)


def _pool_state(pool) -> tuple:
    """What a graph bakes in of the pool, and what the launcher's checks read of it that can change in place."""
    return (pool.data_ptr(), pool.untyped_storage().nbytes(), pool.shape, pool.stride(), pool.dtype,
            pool.get_device(), pool.is_neg(), not pool.is_inference() or torch.is_inference_mode_enabled())


class _Views(NamedTuple):
    """One step's views of its slot: the copy's destination and source (None for a CPU pool), the launch's inputs."""

    copy_to: torch.Tensor | None
    copy_from: torch.Tensor | None
    flat_in: torch.Tensor
    offsets: torch.Tensor
    rows: torch.Tensor
    start_cols: torch.Tensor


class IncrementalWriter:
    """A ring of staging slots; one copy and one launch a step (module docstring)."""

    def __init__(self, pool_out, max_requests, max_new_tokens, *, backend="auto", graphs=True):
        if not isinstance(pool_out, torch.Tensor):
            raise errors.type_error(errors.INCREMENTAL_POOL, what=type(pool_out).__name__)
        if pool_out.dim() != 2 or pool_out.dtype != torch.int32 or pool_out.is_meta:
            what = f"a tensor of shape {tuple(pool_out.shape)} and dtype {dtype_name(pool_out)} on {pool_out.device}"
            raise errors.type_error(errors.INCREMENTAL_POOL, what=what)
        self.pool_out, self.backend = pool_out, backend
        self.max_requests = _capacity("max_requests", max_requests, MAX_REQUESTS)
        self.max_new_tokens = _capacity("max_new_tokens", max_new_tokens, MAX_NEW_TOKENS)
        # A slot: offsets (max_requests + 1), rows, start_cols (max_requests each), tokens: one prefix per step.
        r = self.max_requests
        self._rows_at, self._start_cols_at, self._tokens_at = r + 1, 2 * r + 1, 3 * r + 1
        self._slot_size = 3 * r + 1 + self.max_new_tokens
        device = pool_out.device
        ring = pool_out.is_cuda
        self._slots = SLOTS if ring else 1
        self._host = torch.empty(self._slots * self._slot_size, dtype=torch.int64, pin_memory=ring)
        self._device = self._host if device.type == "cpu" else torch.empty_like(self._host, device=device)
        self._staged = self._host.numpy()
        self._arange = np.arange(r + 1, dtype=np.int64)
        self._offsets_each = [None] * self._slots  # k where the slot's offsets hold k * arange
        self._kept = [{} for _ in range(self._slots)]  # per slot: (bs, count) -> its views
        self._next = 0
        self._busy = [False] * self._slots  # a queued copy or launch may still read the slot
        self._open: list = []  # slots used since the last event
        self._fences: deque = deque()  # (event, the slots whose last use it covers), oldest first
        self._free_events = [torch.cuda.Event() for _ in range(self._slots)] if ring else []
        self._ring = ring
        triton = type(backend) is str and backend in ("auto", "triton") and backends.HAVE_TRITON
        # (slot, bs, count) -> its graph; None where steps never replay one
        self._graphs = {} if require_bool("graphs", graphs, errors.INCREMENTAL_NOT_A_BOOL) and ring and triton else None
        self._home_id = torch.cuda.current_stream(device).cuda_stream if ring else None  # where the buffers were made
        self._index = pool_out.get_device()
        self._checked = None  # _pool_state of the pool the last eager step wrote: the one graphs may write

    def step(self, new_tokens, rows, start_cols, *, lengths=None, check_values=False) -> None:
        """Write request ``r``'s new tokens into row ``rows[r]`` from column ``start_cols[r]`` (module docstring)."""
        if lengths is None:
            bs, count, tokens, cut = self._nested(new_tokens)
        else:
            bs, count, tokens, cut = self._flat(new_tokens, lengths)
        rows_array = self._per_request(rows, "rows", bs)
        start_cols_array = self._per_request(start_cols, "start_cols", bs)
        slot = self._acquire()
        base = slot * self._slot_size
        staged = self._staged
        offsets = staged[base: base + bs + 1]
        if type(cut) is int:  # k tokens a request: k * arange, left in the slot from its last step where it can
            if self._offsets_each[slot] != cut:
                np.multiply(self._arange, cut, out=staged[base: base + self.max_requests + 1])
                self._offsets_each[slot] = cut
        else:
            self._offsets_each[slot] = None
            offsets[:] = cut
        at = base + self._tokens_at
        staged[at: at + count] = tokens
        staged[base + self._rows_at: base + self._rows_at + bs] = rows_array
        staged[base + self._start_cols_at: base + self._start_cols_at + bs] = start_cols_array
        self._send(slot, bs, count, check_values)

    def _nested(self, new_tokens) -> tuple:
        """``(bs, count, tokens, offsets)`` of the nested form, or the spec's error."""
        new_tokens = requests(new_tokens, _TOKENS)
        bs = len(new_tokens)
        if bs > self.max_requests:
            raise errors.value_error(errors.INCREMENTAL_TOO_MANY_REQUESTS, bs=bs, limit=self.max_requests)
        tokens = None
        if set(map(type, new_tokens)) <= {list, tuple}:  # the usual form: every entry's ints in one call
            try:
                tokens = np.frombuffer(array("q", chain.from_iterable(new_tokens)), dtype=np.int64)
                lengths = np.fromiter(map(len, new_tokens), dtype=np.int64, count=bs)
            except (TypeError, OverflowError):
                pass  # an entry that is not ids: the per-request conversion names it
        if tokens is None:
            arrays = [token_ids(i, ids, _TOKENS, self.max_new_tokens) for i, ids in enumerate(new_tokens)]
            lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=bs)
            tokens = np.concatenate(arrays) if arrays else lengths
        offsets = np.zeros(bs + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        count = int(offsets[bs])
        if count > self.max_new_tokens:
            raise errors.value_error(errors.INCREMENTAL_TOO_MANY_TOKENS, count=count, limit=self.max_new_tokens)
        return bs, count, tokens, offsets

    def _flat(self, new_tokens, lengths) -> tuple:
        """``(bs, count, tokens, k or offsets)`` of the flat form, or the spec's error."""
        tokens = host_ints(new_tokens, _TOKENS, self.max_new_tokens)
        if tokens is not None:
            count = tokens.shape[0]
        else:
            try:
                count = len(new_tokens)
            except TypeError:
                what = described(new_tokens)
                raise errors.type_error(errors.INCREMENTAL_NOT_INTS, arg="new_tokens", what=what) from None
        if type(lengths) is not bool and isinstance(lengths, (int, np.integer)):
            k = int(lengths)
            if k < 1:
                raise errors.value_error(errors.INCREMENTAL_FLAT_LENGTHS, what=repr(lengths))
            if count % k:
                raise errors.value_error(errors.INCREMENTAL_FLAT_COUNT, count=count, lengths=k,
                                         expected=f"not a multiple of {k}")
            bs, cut = count // k, k if count else 1  # no requests: offsets [0], whatever k is
        else:
            counts = host_ints(lengths, _WHERE["lengths"], self.max_requests)
            if counts is None or (counts.size and counts.min() < 0):
                what = "a negative count" if counts is not None else described(lengths)
                raise errors.value_error(errors.INCREMENTAL_FLAT_LENGTHS, what=what)
            bs, cut = counts.shape[0], counts
        if bs > self.max_requests:
            raise errors.value_error(errors.INCREMENTAL_TOO_MANY_REQUESTS, bs=bs, limit=self.max_requests)
        if count > self.max_new_tokens:
            raise errors.value_error(errors.INCREMENTAL_TOO_MANY_TOKENS, count=count, limit=self.max_new_tokens)
        if type(cut) is not int:
            # Each count at most ``count``, so the int64 sum of at most 2**20 of them cannot wrap; past that, the
            # exact sum in Python ints names it.
            total = sum(cut.tolist()) if cut.size and cut.max() > count else int(cut.sum())
            if total != count:
                raise errors.value_error(errors.INCREMENTAL_FLAT_COUNT, count=count, lengths="[...]",
                                         expected=f"they sum to {total}")
            cut = np.concatenate(([0], np.cumsum(cut, dtype=np.int64)))
        if tokens is None:
            self._refuse_tokens(new_tokens, bs, cut)
        return bs, count, tokens, cut

    @staticmethod
    def _refuse_tokens(new_tokens, bs: int, cut) -> None:
        """Flat tokens that are not int64 ids: the first request's whose are not (``pack_token_ids``' error), else
        ``INCREMENTAL_NOT_INTS``."""
        if type(new_tokens) is list or type(new_tokens) is tuple:  # one sequence of ints: name the request
            offsets = (np.arange(bs + 1) * cut if type(cut) is int else cut).tolist()
            for index, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])):
                token_ids(index, new_tokens[a:b], _TOKENS)
        raise errors.type_error(errors.INCREMENTAL_NOT_INTS, arg="new_tokens", what=described(new_tokens))

    def _per_request(self, values, name: str, bs: int) -> np.ndarray:
        found = host_ints(values, _WHERE[name], self.max_requests)
        if found is None:
            raise errors.type_error(errors.INCREMENTAL_NOT_INTS, arg=name, what=described(values))
        if found.shape[0] != bs:
            raise errors.value_error(errors.INCREMENTAL_LENGTHS, arg=name, length=found.shape[0], bs=bs)
        return found

    def _send(self, slot: int, bs: int, count: int, check_values) -> None:
        """The packed slot's copy and launch; on the ring, the slot is in use after them, raised or not."""
        kept = self._kept[slot].get((bs, count))
        try:
            if kept is not None and self._graphs is not None and self._replay(slot, bs, count, kept, check_values):
                return
            views = kept or self._views(slot, bs, count)
            if views.copy_to is not None:
                views.copy_to.copy_(views.copy_from, non_blocking=self._ring)
            scatter(views.flat_in, views.offsets, views.rows, self.pool_out, views.start_cols, check_values,
                    self.backend)
            if self._graphs is not None:
                self._checked = _pool_state(self.pool_out)  # the pool the launcher took: graphs may write it
        finally:
            if self._ring:
                self._release(slot)

    def _replay(self, slot: int, bs: int, count: int, views, check_values) -> bool:
        """Replay the step's graph, captured first if need be, where the module docstring allows; else False."""
        if (check_values is not False or _raw_stream(self._index) != self._home_id or _active()
                or _capturing()):
            return False
        if _pool_state(self.pool_out) != self._checked:  # the pool changed in place: its graphs go, the launcher
            self._graphs.clear()                          # checks it again
            return False
        graph = self._graphs.get((slot, bs, count))
        if graph is None:
            try:
                graph = self._capture(views)
            except RuntimeError:  # a capture this process's CUDA setup refuses: the writer's steps stay eager
                self._graphs = None
                return False
            self._graphs[(slot, bs, count)] = graph
        graph.replay()
        return True

    def _capture(self, views):
        """A graph of the step's copy and launch, on a side stream (nothing runs while it is captured); the
        launcher's checks passed on these views and this pool in an earlier step."""
        graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream(self.pool_out.device)
        with torch.cuda.stream(side):
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                views.copy_to.copy_(views.copy_from, non_blocking=True)
                launch.scatter(views.flat_in, views.offsets, views.rows, self.pool_out, views.start_cols)
            finally:
                graph.capture_end()
        return graph

    def _views(self, slot: int, bs: int, count: int) -> _Views:
        """A step's views of ``slot``, made once per ``(bs, count)`` and kept for ``VIEWS_KEPT`` of them, the first
        made leaving first (slicing a tensor costs host time)."""
        kept = self._kept[slot]
        if len(kept) >= VIEWS_KEPT:
            oldest = next(iter(kept))
            del kept[oldest]
            if self._graphs:
                self._graphs.pop((slot, *oldest), None)
        base, device = slot * self._slot_size, self._device
        used = base + self._tokens_at + count
        copy = (None, None) if device is self._host else (device[base:used], self._host[base:used])
        views = kept[(bs, count)] = _Views(
            *copy, device[base + self._tokens_at: used], device[base: base + bs + 1],
            device[base + self._rows_at: base + self._rows_at + bs],
            device[base + self._start_cols_at: base + self._start_cols_at + bs])
        return views

    def _acquire(self) -> int:
        """The slot the next step packs, once nothing queued reads it (the module docstring's reuse hazard)."""
        slot = self._next
        if self._ring and self._busy[slot]:
            if slot in self._open:
                self._fence()
            while self._busy[slot]:  # the oldest first: the slot's own event is usually the first
                event, slots = self._fences.popleft()
                event.synchronize()
                for used in slots:
                    self._busy[used] = False
                self._free_events.append(event)
        return slot

    def _release(self, slot: int) -> None:
        self._busy[slot] = True
        self._open.append(slot)
        self._next = (slot + 1) % self._slots
        if len(self._open) >= FENCE_EVERY:
            self._fence()

    def _fence(self) -> None:
        """Record an event on the current stream, after every step queued so far: the open slots' last uses."""
        stream = torch.cuda.current_stream(self._index)
        event = self._free_events.pop()  # one is free: each outstanding event covers at least one busy slot
        event.record(stream)
        self._fences.append((event, self._open))
        self._open = []
        if stream.cuda_stream != self._home_id:  # the device buffer, freed with the writer, waits for this stream too
            self._device.record_stream(stream)
