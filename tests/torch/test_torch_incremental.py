"""``IncrementalWriter``: the incremental serving step against the reference, buffer reuse, the reuse hazard, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from kv_canary_torch import IncrementalWriter
from shared_spec import errors, scatter_reference
from tests.contract import assert_same_pool
from tests.profiles import property_settings
from tests.strategies import INT64_MAX, INT64_MIN, sentinel_pool


def _reference_step(pool, new_tokens, rows, start_cols):
    flat = np.concatenate([np.asarray(t, dtype=np.int64) for t in new_tokens]) if new_tokens else np.zeros(0, np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in new_tokens])]).astype(np.int64)
    return scatter_reference(flat, offsets, np.asarray(rows, np.int64), pool, np.asarray(start_cols, np.int64))


def _serve(writer, pool_np, steps, seed=0):
    """Prompts from column 0, then each step's new tokens at the requests' current lengths; returns the expected pool."""
    rng = np.random.default_rng(seed)
    lengths = {}
    expected = pool_np
    for step in range(steps):
        rows = list(rng.permutation(pool_np.shape[0])[: rng.integers(1, 4)])
        new = [list(map(int, rng.integers(0, 2**40, size=(3 if row not in lengths else int(rng.integers(0, 3))))))
               for row in rows]
        firsts = [lengths.get(row, 0) for row in rows]
        kinds = step % 3  # lists, numpy arrays, CPU tensors
        given = new if kinds == 0 else [np.asarray(t, np.int64) for t in new] if kinds == 1 else [torch.tensor(t, dtype=torch.int64) for t in new]
        writer.step(given, rows if kinds != 1 else np.asarray(rows), firsts if kinds != 2 else torch.tensor(firsts))
        expected = _reference_step(expected, new, rows, firsts)
        for row, t in zip(rows, new):
            lengths[row] = lengths.get(row, 0) + len(t)
    return expected


def test_steps_write_what_the_reference_writes_and_reuse_the_buffers():
    pool = torch.from_numpy(sentinel_pool(6, 20, seed=1))
    writer = IncrementalWriter(pool, max_requests=4, max_new_tokens=16, backend="torch")
    host, device = writer._host.data_ptr(), writer._device.data_ptr()
    expected = _serve(writer, pool.numpy().copy(), steps=12)
    assert_same_pool(pool.numpy(), expected)
    assert (writer._host.data_ptr(), writer._device.data_ptr()) == (host, device)  # nothing reallocated


def test_a_step_launches_once_on_views_of_the_one_device_buffer(monkeypatch):
    from kv_canary_torch import incremental

    pool = torch.from_numpy(sentinel_pool(4, 10, seed=2))
    writer = IncrementalWriter(pool, max_requests=3, max_new_tokens=8, backend="torch")
    calls = []
    monkeypatch.setattr(incremental, "launch_scatter_req_token_ids_kernel", lambda **kw: calls.append(kw))
    writer.step([[1, 2], [3]], [0, 2], [0, 4])
    (kw,) = calls
    storage = writer._device.untyped_storage().data_ptr()
    for name in ("flat_in", "offsets", "req_pool_indices", "start_cols"):
        assert kw[name].untyped_storage().data_ptr() == storage, name
        assert kw[name].data_ptr() % 16 == 0, name  # aligned: one compiled variant every step
    assert kw["flat_in"].tolist() == [1, 2, 3] and kw["offsets"].tolist() == [0, 2, 3]
    assert kw["req_pool_indices"].tolist() == [0, 2] and kw["start_cols"].tolist() == [0, 4]


class _SlowStreams:
    """Fake CUDA streams that run nothing until an event recorded on them is waited for, and their fake events.

    Installed on a CPU writer (``new_event=streams.event``, then ``install``), each step's launch is queued on the
    current stream (``current``): when it runs, the step's copy reads the staging slot then (as a copy in flight
    reads it whenever the stream gets to it), and the launch follows. ``event.synchronize()`` runs the event's stream
    up to its record. Queuing a step into a slot that a queued step still reads is the hazard: it fails at once (and
    a copy reading another step's packing would write the wrong pool)."""

    def __init__(self):
        self.queued = {}  # stream -> every step queued on it, in order: (slot, launch kwargs)
        self.done = {}  # stream -> how many of them have run
        self.current = 0
        self.records = []  # (stream, steps queued on it before the record)
        self.waits = 0
        self.writer = self.launch = None

    def install(self, writer, monkeypatch):
        from kv_canary_torch import incremental

        self.writer, self.launch = writer, incremental.launch_scatter_req_token_ids_kernel
        writer._stream_id = lambda: self.current
        writer._stream = lambda raw: raw  # a fake stream object: its id

        def queue(**kw):
            slot = (kw["offsets"].data_ptr() - writer._device.data_ptr()) // 8 // writer._slot_size
            assert slot not in self.pending(), f"slot {slot} packed while a queued step still reads it"
            self.queued.setdefault(self.current, []).append((slot, kw))

        monkeypatch.setattr(incremental, "launch_scatter_req_token_ids_kernel", queue)

    def pending(self):
        return [slot for stream, steps in self.queued.items() for slot, _ in steps[self.done.get(stream, 0):]]

    def run(self, stream, upto):
        writer = self.writer
        steps = self.queued.get(stream, [])
        for slot, kw in steps[self.done.get(stream, 0): upto]:
            region = slice(slot * writer._slot_size, (slot + 1) * writer._slot_size)
            writer._device[region] = writer._host[region]  # the copy, reading the staging slot now
            self.launch(**kw)
        self.done[stream] = max(self.done.get(stream, 0), upto)

    def drain(self):
        for stream, steps in self.queued.items():
            self.run(stream, len(steps))

    def event(self):
        self.made = getattr(self, "made", 0) + 1
        return _SlowEvent(self)


class _SlowEvent:
    def __init__(self, streams):
        self.streams, self.at = streams, None

    def record(self, stream):
        self.at = (stream, len(self.streams.queued.get(stream, [])))
        self.streams.records.append(self.at)

    def synchronize(self):
        self.streams.waits += 1
        self.streams.run(*self.at)


def _slow_writer(monkeypatch, pool, **capacities):
    streams = _SlowStreams()
    writer = IncrementalWriter(pool, backend="torch", new_event=streams.event, **capacities)
    streams.install(writer, monkeypatch)
    return writer, streams


def test_a_slow_stream_never_reads_a_slot_a_later_step_packed(monkeypatch):
    from kv_canary_torch.incremental import _FENCE_EVERY, _SLOTS

    pool = torch.from_numpy(sentinel_pool(6, 40, seed=3))
    writer, streams = _slow_writer(monkeypatch, pool, max_requests=4, max_new_tokens=16)
    buffers = (writer._host.data_ptr(), writer._device.data_ptr(), writer._host.numel())
    expected = _serve(writer, pool.numpy().copy(), steps=3 * _SLOTS + 1, seed=3)
    # reserved once: the ring's buffers and its events, one per slot, made with the writer
    assert (writer._host.data_ptr(), writer._device.data_ptr(), writer._host.numel()) == buffers
    assert buffers[2] == _SLOTS * writer._slot_size and streams.made == _SLOTS
    # an event every _FENCE_EVERY steps; the host waits only when it laps the ring
    assert streams.records == [(0, k) for k in range(_FENCE_EVERY, 3 * _SLOTS + 1, _FENCE_EVERY)]
    assert 0 < streams.waits < 3 * _SLOTS // _FENCE_EVERY
    assert len(streams.pending()) > 0  # the last steps still in flight: the stream is slower than the host
    streams.drain()
    assert_same_pool(pool.numpy(), expected)


def test_steps_that_change_stream_close_the_last_ones_with_an_event_on_their_stream(monkeypatch):
    pool = torch.from_numpy(sentinel_pool(6, 80, seed=13))
    writer, streams = _slow_writer(monkeypatch, pool, max_requests=4, max_new_tokens=16)
    expected = pool.numpy().copy()
    rng = np.random.default_rng(13)
    for step in range(40):
        streams.current = (step // 3) % 2  # three steps on stream 0, three on stream 1, ...
        new = rng.integers(0, 2**40, size=2).tolist()
        writer.step(new, np.array([1, 4]), np.array([step, step]), lengths=1)
        expected = _reference_step(expected, [[t] for t in new], [1, 4], [step, step])
    # each block of three closed on its own stream when the next block starts on the other one
    assert streams.records == [(block % 2, 3 * (block // 2 + 1)) for block in range(13)]
    streams.drain()
    assert_same_pool(pool.numpy(), expected)


@property_settings(40)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3), st.integers(0, 15)), min_size=1, max_size=40))
def test_any_order_of_streams_and_waits_never_packs_a_slot_in_use(plan):
    # plan: per step (its stream, its requests, 0 where the host then waits for every stream: rarely, so most plans
    # lap the ring with steps in flight)
    pool_np = sentinel_pool(4, 64, seed=15)
    pool = torch.from_numpy(pool_np.copy())
    expected = pool_np
    with pytest.MonkeyPatch.context() as monkeypatch:
        writer, streams = _slow_writer(monkeypatch, pool, max_requests=3, max_new_tokens=3)
        for step, (stream, bs, drain) in enumerate(plan):
            streams.current = stream
            rows, new = [0, 1, 3][:bs], [100 * step + r for r in range(bs)]
            writer.step(new, np.array(rows), np.full(bs, step, np.int64), lengths=1)
            expected = _reference_step(expected, [[t] for t in new], rows, [step] * bs)
            if drain == 0:
                streams.drain()
        streams.drain()
    assert_same_pool(pool.numpy(), expected)


def test_a_refused_launch_keeps_its_slot_in_use_until_an_event_covers_it(monkeypatch):
    pool = torch.from_numpy(sentinel_pool(3, 6, seed=4))
    writer, streams = _slow_writer(monkeypatch, pool, max_requests=2, max_new_tokens=4)
    from kv_canary_torch import incremental

    queue = incremental.launch_scatter_req_token_ids_kernel

    def refuse_row_7(**kw):
        queue(**kw)  # the copy is queued before the launcher refuses
        if kw["req_pool_indices"].tolist() == [7]:
            raise errors.value_error(errors.START_COLS_NEGATIVE, i=0, value=-1)

    monkeypatch.setattr(incremental, "launch_scatter_req_token_ids_kernel", refuse_row_7)
    with pytest.raises(errors.KvCanaryValueError):
        writer.step([[1]], [7], [0])
    assert writer._busy[0] and writer._next == 1
    for k in range(12):  # laps the ring: slot 0 is packed again only after an event covering it
        writer.step([[5 + k]], [1], [2])
    streams.drain()
    assert pool[1, 2].item() == 16


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda w: w.step([[1]] * 3, [0, 1, 2], [0, 0, 0]), errors.KvCanaryValueError,
         errors.INCREMENTAL_TOO_MANY_REQUESTS.format(bs=3, limit=2)),
        (lambda w: w.step([[1, 2, 3], [4, 5]], [0, 1], [0, 0]), errors.KvCanaryValueError,
         errors.INCREMENTAL_TOO_MANY_TOKENS.format(count=5, limit=4)),
        (lambda w: w.step([[1]], [0, 1], [0]), errors.KvCanaryValueError,
         errors.INCREMENTAL_LENGTHS.format(arg="rows", length=2, bs=1)),
        (lambda w: w.step([[1.5]], [0], [0]), errors.KvCanaryTypeError,
         errors.PACK_NOT_TOKEN_IDS.format(where="IncrementalWriter.step new_tokens", index=0,
                                          what="list of shape (1,) and dtype float64")),
        (lambda w: w.step([[1], [2**63]], [0, 1], [0, 0]), errors.KvCanaryValueError,
         errors.PACK_OUT_OF_RANGE.format(where="IncrementalWriter.step new_tokens", index=1, position=0, value=2**63,
                                         low=-(2**63), high=2**63 - 1)),
        (lambda w: w.step([[1]], [0], [0.5]), errors.KvCanaryTypeError,
         errors.INCREMENTAL_NOT_INTS.format(arg="start_cols", what="shape (1,) and dtype float64")),
        (lambda w: w.step([[1]], [0], [-1], check_values=True), errors.KvCanaryValueError,
         errors.START_COLS_NEGATIVE.format(i=0, value=-1)),
    ],
    ids=["requests", "tokens", "lengths", "float-tokens", "int64-range", "float-first-column", "negative-first-column"],
)
def test_bad_steps_get_the_spec_errors_and_write_nothing(call, error, message):
    assert_refused_and_still_serving(call, error, message)


def assert_refused_and_still_serving(call, error, message):
    """``call(writer)`` raises exactly ``error(message)``, writes nothing, and the writer serves the next step."""
    pool = torch.from_numpy(sentinel_pool(3, 6, seed=5))
    before = pool.clone()
    writer = IncrementalWriter(pool, max_requests=2, max_new_tokens=4, backend="torch")
    with pytest.raises(error) as raised:
        call(writer)
    assert str(raised.value) == message
    assert torch.equal(pool, before)
    writer.step([9], [2], [1], lengths=1)
    assert pool[2, 1].item() == 9


def test_capacities_must_be_non_negative_ints():
    pool = torch.zeros((2, 2), dtype=torch.int32)
    with pytest.raises(errors.KvCanaryValueError) as raised:
        IncrementalWriter(pool, -1, 4)
    assert str(raised.value) == errors.INCREMENTAL_CAPACITY.format(arg="max_requests", value=-1)


def test_an_empty_step_writes_nothing():
    pool = torch.from_numpy(sentinel_pool(3, 6, seed=6))
    before = pool.clone()
    writer = IncrementalWriter(pool, max_requests=2, max_new_tokens=4, backend="torch")
    writer.step([], [], [])
    writer.step([[], []], [0, 1], [0, 3])
    assert torch.equal(pool, before)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_slow_stream_never_reads_a_staging_buffer_the_next_step_packed():
    # The copy of step 1 waits behind a long sleep on its stream; step 2 is packed at once, into the ring's next slot:
    # were it packed into step 1's, step 1's copy would read step 2's rows and tokens and rows 0-1 keep their
    # sentinels (the test below laps the ring).
    pool = torch.from_numpy(sentinel_pool(8, 64, seed=7)).cuda()
    expected = pool.cpu().numpy()
    writer = IncrementalWriter(pool, max_requests=4, max_new_tokens=64)
    stream = torch.cuda.Stream()
    first = ([list(range(100, 116)), list(range(200, 216))], [0, 1], [0, 0])
    second = ([list(range(300, 316)), list(range(400, 416))], [2, 3], [5, 5])
    with torch.cuda.stream(stream):
        torch.cuda._sleep(200_000_000)  # about 0.1 s at H200 clocks
        writer.step(*first)
        writer.step(*second)
    torch.cuda.synchronize()
    for step in (first, second):
        expected = _reference_step(expected, *step)
    assert_same_pool(pool.cpu().numpy(), expected)
    assert writer._host.is_pinned()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("streams", [1, 2])
def test_a_slow_stream_never_reads_a_slot_a_step_after_a_lap_packed(streams):
    # Every step of three laps of the ring is queued behind a long sleep; the host packs them at once, so it reuses
    # each slot while the stream has run nothing. With two streams the steps alternate between them, each behind its
    # own sleep. Without the events' waits, a copy would read a later lap's packing.
    from kv_canary_torch.incremental import _SLOTS

    pool = torch.from_numpy(sentinel_pool(8, 3 * _SLOTS + 4, seed=14)).cuda()
    expected = pool.cpu().numpy()
    writer = IncrementalWriter(pool, max_requests=4, max_new_tokens=16)
    side = [torch.cuda.Stream() for _ in range(streams)]
    for stream in side:
        with torch.cuda.stream(stream):
            torch.cuda._sleep(200_000_000)  # about 0.1 s at H200 clocks
    rows = np.array([1, 3, 6], np.int64)
    for step in range(3 * _SLOTS):
        new = [1000 * step + row for row in rows.tolist()]
        with torch.cuda.stream(side[step % streams]):
            writer.step(new, rows, np.full(3, step, np.int64), lengths=1)
        expected = _reference_step(expected, [[t] for t in new], rows, [step] * 3)
    torch.cuda.synchronize()
    assert_same_pool(pool.cpu().numpy(), expected)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_steps_copy_through_the_drivers_copy_once_the_native_piece_is_loaded():
    from kv_canary_torch.launch import dispatch

    pool = torch.from_numpy(sentinel_pool(8, 64, seed=15)).cuda()
    writer = IncrementalWriter(pool, max_requests=4, max_new_tokens=16)
    expected = _serve(writer, pool.cpu().numpy(), steps=3, seed=16)  # the first launch loads the piece
    copy = dispatch.device_copy()
    assert copy is not None, "the native piece did not load on this GPU machine"
    copies = []
    writer._copy = lambda *args: copies.append(args) or copy(*args)
    expected = _serve(writer, expected, steps=12, seed=17)
    torch.cuda.synchronize()
    assert len(copies) == 12
    assert_same_pool(pool.cpu().numpy(), expected)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_decode_steps_are_packed_by_the_native_piece_once_it_is_loaded():
    from kv_canary_torch.launch import dispatch

    rng = np.random.default_rng(18)
    pool = torch.from_numpy(sentinel_pool(6, 40, seed=18)).cuda()
    expected = pool.cpu().numpy()
    writer = IncrementalWriter(pool, max_requests=4, max_new_tokens=4)
    rows, lengths, staged = np.array([5, 1, 3], np.int64), np.zeros(3, np.int64), []
    for step in range(12):
        new = rng.integers(-(2**40), 2**40, size=3).tolist()
        writer.step(new, rows, lengths, lengths=1)
        expected = _reference_step(expected, [[t] for t in new], rows, lengths)
        lengths = lengths + 1
        if step == 0:  # the first launch loads the piece
            stage = dispatch.int_stage()
            assert stage is not None, "the native piece did not load on this GPU machine"
            writer._stage = lambda *args: staged.append(stage(*args)) or staged[-1]
    torch.cuda.synchronize()
    assert staged == [True] * 11
    assert_same_pool(pool.cpu().numpy(), expected)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_writer_dropped_with_steps_in_flight_waits_for_them():
    # The steps are queued behind a long sleep, then the writer is dropped and pinned memory of its size allocated
    # and overwritten at once: were its staging buffer freed before the queued copies ran, they would read the
    # new allocation's values.
    import gc

    pool = torch.from_numpy(sentinel_pool(8, 64, seed=18)).cuda()
    writer = IncrementalWriter(pool, max_requests=4, max_new_tokens=16)
    expected = _serve(writer, pool.cpu().numpy(), steps=3, seed=19)  # the native piece loaded
    torch.cuda.synchronize()
    size = writer._host.numel()
    stream = torch.cuda.Stream()
    rows = np.array([0, 2, 5], np.int64)
    with torch.cuda.stream(stream):
        torch.cuda._sleep(200_000_000)  # about 0.1 s at H200 clocks
        for step in range(3):
            new = [7000 + 10 * step + row for row in rows.tolist()]
            writer.step(new, rows, np.full(3, 40 + step, np.int64), lengths=1)
            expected = _reference_step(expected, [[t] for t in new], rows, [40 + step] * 3)
    del writer
    gc.collect()
    reused = [torch.full((size,), -1, dtype=torch.int64, pin_memory=True) for _ in range(4)]
    torch.cuda.synchronize()
    assert_same_pool(pool.cpu().numpy(), expected)
    del reused


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_steps_on_the_gpu_allocate_nothing():
    pool = torch.from_numpy(sentinel_pool(8, 64, seed=8)).cuda()
    writer = IncrementalWriter(pool, max_requests=4, max_new_tokens=16)
    writer.step([[1, 2]], [0], [0])
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_stats()["allocation.all.allocated"]
    expected = _serve(writer, pool.cpu().numpy(), steps=20, seed=9)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == allocated
    assert_same_pool(pool.cpu().numpy(), expected)


# -- the flat form: step(tokens, rows, start_cols, lengths=...) --------------------------------------------------------


def _as_form(values, form):
    if form == "list":
        return list(map(int, values))
    if form == "numpy":
        return np.asarray(values, np.int64)
    if form == "strided":  # every other entry of a longer array: a view with a 16-byte stride
        return np.repeat(np.asarray(values, np.int64), 2)[::2]
    if form == "int32":
        return np.asarray(values, np.int64).astype(np.int32) if all(-(2**31) <= v < 2**31 for v in values) else np.asarray(values, np.int64)
    return torch.tensor(list(map(int, values)), dtype=torch.int64)


@st.composite
def flat_steps(draw):
    """A pool, then ``(tokens, rows, start_cols, lengths, nested)``: a step in the flat form and its nested twin."""
    n_rows, width = draw(st.integers(1, 6)), draw(st.integers(1, 12))
    bs = draw(st.integers(0, n_rows))
    rows = draw(st.permutations(range(n_rows)))[:bs]
    each = draw(st.one_of(st.none(), st.integers(1, 3)))  # None: a count per request
    counts = [each] * bs if each is not None else draw(st.lists(st.integers(0, 4), min_size=bs, max_size=bs))
    nested = [draw(st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=c, max_size=c)) for c in counts]
    firsts = draw(st.lists(st.integers(0, width + 2), min_size=bs, max_size=bs))
    forms = draw(st.tuples(*[st.sampled_from(["list", "numpy", "strided", "int32", "tensor"])] * 4))
    tokens = _as_form([t for ids in nested for t in ids], forms[0])
    lengths = each if each is not None else _as_form(counts, forms[3])
    return (sentinel_pool(n_rows, width, seed=draw(st.integers(0, 99))),
            (tokens, _as_form(rows, forms[1]), _as_form(firsts, forms[2]), lengths), (nested, rows, firsts))


@property_settings(60)
@given(flat_steps())
def test_the_flat_form_writes_what_the_reference_and_the_nested_form_write(case):
    pool_np, (tokens, rows, firsts, lengths), nested = case
    flat_pool, nested_pool = torch.from_numpy(pool_np.copy()), torch.from_numpy(pool_np.copy())
    IncrementalWriter(flat_pool, 6, 24, backend="torch").step(tokens, rows, firsts, lengths=lengths)
    IncrementalWriter(nested_pool, 6, 24, backend="torch").step(*nested)
    assert_same_pool(flat_pool.numpy(), _reference_step(pool_np, *nested))
    assert torch.equal(flat_pool, nested_pool)


def test_a_decode_loop_in_the_flat_form_matches_the_reference():
    rng = np.random.default_rng(10)
    pool = torch.from_numpy(sentinel_pool(5, 30, seed=10))
    expected = pool.numpy().copy()
    writer = IncrementalWriter(pool, max_requests=5, max_new_tokens=5, backend="torch")
    rows, lengths = np.array([4, 0, 2], np.int64), np.zeros(3, np.int64)
    for _ in range(20):
        new = rng.integers(0, 2**40, size=3).tolist()  # the sampler's output: one int per request
        writer.step(new, rows, lengths, lengths=1)
        expected = _reference_step(expected, [[t] for t in new], rows, lengths)
        lengths = lengths + 1
    assert_same_pool(pool.numpy(), expected)


class _Ops(TorchDispatchMode):
    """Every torch op run inside it, by name."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("form", ["flat", "nested"])
def test_a_repeated_step_runs_one_torch_op_the_copy_and_makes_no_tensor(monkeypatch, form):
    # Without the kept views, each step slices six tensors (aten.slice) before its copy.
    from kv_canary_torch import incremental

    pool = torch.from_numpy(sentinel_pool(4, 10, seed=11))
    writer = IncrementalWriter(pool, max_requests=3, max_new_tokens=8, backend="torch")
    calls = []
    monkeypatch.setattr(incremental, "launch_scatter_req_token_ids_kernel", lambda **kw: calls.append(kw))

    def step(k):
        if form == "flat":
            writer.step([k, k + 1, k + 2], np.array([0, 1, 3]), np.array([k, k, k]), lengths=1)
        else:
            writer.step([[k], [k + 1], [k + 2]], [0, 1, 3], [k, k, k])

    step(1)
    ops = _Ops()
    with ops:
        step(2)
    assert ops.names == ["aten.copy_.default"]
    first, second = calls
    assert all(first[name] is second[name] for name in ("flat_in", "offsets", "req_pool_indices", "start_cols"))
    assert second["flat_in"].tolist() == [2, 3, 4] and second["offsets"].tolist() == [0, 1, 2, 3]


def test_the_kept_views_are_bounded_and_stay_views_of_their_slot(monkeypatch):
    from kv_canary_torch.incremental import _SLOTS, _VIEWS_KEPT

    pool = torch.from_numpy(sentinel_pool(4, 40, seed=12))
    writer, streams = _slow_writer(monkeypatch, pool, max_requests=4, max_new_tokens=32)
    for count in range(1, 3 * _VIEWS_KEPT):
        writer.step(list(range(count)), [1], [0], lengths=count)
        assert all(len(kept) <= _VIEWS_KEPT for kept in writer._cached_views)
    streams.drain()
    size = writer._slot_size * 8
    for slot, kept in enumerate(writer._cached_views):
        for views in kept.values():
            for view, buffer in zip(views, (writer._device, writer._host) + (writer._device,) * 4):
                assert view.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
                assert buffer.data_ptr() + slot * size <= view.data_ptr() < buffer.data_ptr() + (slot + 1) * size
    assert len(writer._cached_views) == _SLOTS
    assert pool[1, :23].tolist() == list(range(23))


_WHERE = "IncrementalWriter.step new_tokens"


BAD_FLAT_STEPS = [
        (lambda w: w.step([1, 2, 3], [0, 1, 2], [0, 0, 0], lengths=1), errors.KvCanaryValueError,
         errors.INCREMENTAL_TOO_MANY_REQUESTS.format(bs=3, limit=2)),
        (lambda w: w.step([1, 2, 3, 4, 5], [0, 1], [0, 0], lengths=[3, 2]), errors.KvCanaryValueError,
         errors.INCREMENTAL_TOO_MANY_TOKENS.format(count=5, limit=4)),
        (lambda w: w.step([1, 2], [0], [0, 1], lengths=1), errors.KvCanaryValueError,
         errors.INCREMENTAL_LENGTHS.format(arg="rows", length=1, bs=2)),
        (lambda w: w.step([1, 2, 3], [0], [0], lengths=2), errors.KvCanaryValueError,
         errors.INCREMENTAL_FLAT_COUNT.format(count=3, lengths=2, expected="not a multiple of 2")),
        (lambda w: w.step([1, 2, 3], [0, 1], [0, 0], lengths=np.array([1, 1])), errors.KvCanaryValueError,
         errors.INCREMENTAL_FLAT_COUNT.format(count=3, lengths="[...]", expected="they sum to 2")),
        (lambda w: w.step([1], [0], [0], lengths=0), errors.KvCanaryValueError,
         errors.INCREMENTAL_FLAT_LENGTHS.format(what="0")),
        (lambda w: w.step([1], [0, 1], [0, 0], lengths=[2, -1]), errors.KvCanaryValueError,
         errors.INCREMENTAL_FLAT_LENGTHS.format(what="a negative count")),
        (lambda w: w.step([1], [0], [0], lengths=[1.0]), errors.KvCanaryValueError,
         errors.INCREMENTAL_FLAT_LENGTHS.format(what="list")),
        (lambda w: w.step([1, 2.5], [0, 1], [0, 0], lengths=1), errors.KvCanaryTypeError,
         errors.PACK_NOT_TOKEN_IDS.format(where=_WHERE, index=1, what="list of shape (1,) and dtype float64")),
        (lambda w: w.step([1, 2, 2**63], [0, 1], [0, 0], lengths=[1, 2]), errors.KvCanaryValueError,
         errors.PACK_OUT_OF_RANGE.format(where=_WHERE, index=1, position=1, value=2**63, low=-(2**63), high=2**63 - 1)),
        (lambda w: w.step(np.zeros((2, 1), np.int64), [0, 1], [0, 0], lengths=1), errors.KvCanaryTypeError,
         errors.INCREMENTAL_NOT_INTS.format(arg="new_tokens", what="shape (2, 1) and dtype int64")),
        (lambda w: w.step(7, [0], [0], lengths=1), errors.KvCanaryTypeError,
         errors.INCREMENTAL_NOT_INTS.format(arg="new_tokens", what="int")),
        (lambda w: w.step([1], [0], [0.5], lengths=1), errors.KvCanaryTypeError,
         errors.INCREMENTAL_NOT_INTS.format(arg="start_cols", what="shape (1,) and dtype float64")),
        (lambda w: w.step([1], [0], [-1], lengths=1, check_values=True), errors.KvCanaryValueError,
         errors.START_COLS_NEGATIVE.format(i=0, value=-1)),
]
BAD_FLAT_IDS = ["requests", "tokens", "rows-length", "indivisible", "sum", "zero-each", "negative-count", "float-lengths",
         "float-token", "int64-range", "two-dimensional", "not-a-sequence", "float-first-column", "negative-first-column"]


@pytest.mark.parametrize("call, error, message", BAD_FLAT_STEPS, ids=BAD_FLAT_IDS)
def test_bad_flat_steps_get_the_spec_errors_and_write_nothing(call, error, message):
    assert_refused_and_still_serving(call, error, message)


# -- the flat form packed by the native piece's stage_ints ------------------------------------------------------------


@pytest.fixture(scope="module")
def stage_ints(tmp_path_factory):
    from tests.torch_support import native_module

    return native_module(tmp_path_factory).stage_ints


@pytest.fixture
def native_stage(monkeypatch, stage_ints):
    """Writers take the native piece's stage_ints as they do once it is loaded; what each call answered, kept."""
    from kv_canary_torch.launch import dispatch

    served = []

    def counting(*args):
        served.append(stage_ints(*args))
        return served[-1]

    monkeypatch.setattr(dispatch, "int_stage", lambda: counting)
    return served


def test_stage_ints_writes_a_steps_ints_as_int64_and_declines_what_it_cannot(stage_ints):
    out = np.full(12, -1, np.int64)
    tokens_at, rows_at, cols_at = (out.ctypes.data + 8 * k for k in (0, 6, 9))
    rows, cols = np.array([7, 8], np.int64), np.repeat(np.array([-3, INT64_MAX], np.int64), 2)[::2]
    assert stage_ints([3, INT64_MIN, INT64_MAX, True, -5], rows, cols, tokens_at, rows_at, cols_at, 5, 2) is True
    assert out.tolist() == [3, INT64_MIN, INT64_MAX, 1, -5, -1, 7, 8, -1, -3, INT64_MAX, -1]
    assert stage_ints([], np.zeros(0, np.int64), np.zeros(0, np.int64), tokens_at, rows_at, cols_at, 0, 0) is True
    for declined in ([1, 2**63], [1, -(2**63) - 1], [1, 2.0], [1, np.int64(2)], [1, "2"], (1, 2), [1, 2, 3], [1]):
        assert stage_ints(declined, rows, cols, tokens_at, rows_at, cols_at, 2, 2) is False, declined
    for declined in ([7, 8], rows.astype(np.int32), rows.astype(np.uint64), rows.astype(np.float64), rows[:1],
                     rows.reshape(1, 2), rows.astype(">i8"), torch.tensor([7, 8]), b"ab"):
        assert stage_ints([1, 2], declined, cols, tokens_at, rows_at, cols_at, 2, 2) is False, declined
        assert stage_ints([1, 2], rows, declined, tokens_at, rows_at, cols_at, 2, 2) is False, declined
    with pytest.raises(ValueError):
        stage_ints([], rows, cols, tokens_at, rows_at, cols_at, -1, 0)
    with pytest.raises(TypeError):
        stage_ints([1], rows, cols, tokens_at, rows_at, cols_at, 1)


@property_settings(40)
@given(flat_steps())
def test_the_flat_form_through_the_native_stage_writes_what_the_reference_writes(native_stage, case):
    pool_np, (tokens, rows, firsts, lengths), nested = case
    native_stage.clear()  # the fixture's, for every example
    native_pool = torch.from_numpy(pool_np.copy())
    IncrementalWriter(native_pool, 6, 24, backend="torch").step(tokens, rows, firsts, lengths=lengths)
    assert_same_pool(native_pool.numpy(), _reference_step(pool_np, *nested))
    staged = all(type(a) is np.ndarray and a.dtype == np.int64 for a in (rows, firsts))
    if type(tokens) is list:
        assert native_stage == [staged]  # taken where the arrays are int64, declined (and packed in Python) else


@pytest.mark.parametrize("call, error, message", BAD_FLAT_STEPS, ids=BAD_FLAT_IDS)
def test_bad_flat_steps_through_the_native_stage_get_the_same_errors(native_stage, call, error, message):
    """What the native piece declines (a float, an int past int64, rows of another length) goes to the Python
    packing, which names it."""
    assert_refused_and_still_serving(call, error, message)