"""``IncrementalWriter``: the incremental serving step against the reference, buffer reuse, the reuse hazard, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kv_canary_torch import IncrementalWriter
from shared_spec import errors, scatter_reference
from tests.contract import assert_same_pool
from tests.strategies import sentinel_pool


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


class _InFlightEvent:
    """A stand-in for the CUDA event: ``record`` snapshots the staging buffer as the copy in flight would read it;
    ``synchronize`` (the copy done) checks that nothing overwrote it before; a record before the last one is
    waited for is a step that packed without waiting."""

    def __init__(self):
        self.writer = None
        self.snapshot = None
        self.records = 0

    def record(self):
        assert self.snapshot is None, "a step packed the staging buffer while the last copy was in flight"
        self.snapshot = self.writer._host.clone()
        self.records += 1

    def synchronize(self):
        assert torch.equal(self.writer._host, self.snapshot), "the staging buffer changed under a copy in flight"
        self.snapshot = None


def test_each_step_waits_for_the_last_copy_before_packing():
    pool = torch.from_numpy(sentinel_pool(6, 20, seed=3))
    event = _InFlightEvent()
    writer = IncrementalWriter(pool, max_requests=4, max_new_tokens=16, backend="torch", event=event)
    event.writer = writer
    expected = _serve(writer, pool.numpy().copy(), steps=8, seed=3)
    assert event.records == 8
    assert_same_pool(pool.numpy(), expected)


def test_a_refused_step_still_leaves_its_copy_waited_for():
    pool = torch.from_numpy(sentinel_pool(3, 6, seed=4))
    event = _InFlightEvent()
    writer = IncrementalWriter(pool, max_requests=2, max_new_tokens=4, backend="torch", event=event)
    event.writer = writer
    before = pool.clone()
    with pytest.raises(errors.KvCanaryValueError):
        writer.step([[1]], [7], [0], check_values=True)  # the launcher refuses row 7: after the copy
    assert torch.equal(pool, before)
    writer.step([[5]], [1], [2])  # waits for the refused step's copy (the event asserts it)
    assert pool[1, 2].item() == 5


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
    pool = torch.from_numpy(sentinel_pool(3, 6, seed=5))
    before = pool.clone()
    writer = IncrementalWriter(pool, max_requests=2, max_new_tokens=4, backend="torch")
    with pytest.raises(error) as raised:
        call(writer)
    assert str(raised.value) == message
    assert torch.equal(pool, before)


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
    # The copy of step 1 waits behind a long sleep on its stream; step 2 is packed at once. Without the wait on the
    # event, step 1's copy would read step 2's rows and tokens: rows 0-1 would keep their sentinels.
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
