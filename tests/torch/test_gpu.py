"""The torch frontend on a CUDA GPU: what only a GPU shows (skipped without one). The contract, the launch-path
tests and the rest run there too, on ``cuda:0``, through the compiled kernels."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from kv_canary_torch import IncrementalWriter, assign_req_to_token_pool_func, launch_scatter_req_token_ids_kernel
from shared_spec import arg_specs, errors
from shared_spec.reference import assign_reference, scatter_reference
from tests.torch_support import BACKENDS, as_numpy, sentinel, tensors

pytestmark = pytest.mark.gpu
needs_two = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")


def launch(flat_in, offsets, rows, pool, start_cols=None, **options):
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool,
                                        start_cols=start_cols, **options)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, strides", [((2, 24), (2**31 + 16, 1)), ((24, 2), (1, 2**31 + 16))])
def test_addresses_past_int32(backend, shape, strides):
    span = (shape[0] - 1) * strides[0] + (shape[1] - 1) * strides[1] + 1  # 8.6 GB of int32
    memory = torch.full((span,), -3, dtype=torch.int32, device="cuda")
    pool = memory.as_strided(shape, strides)
    sentinels = sentinel(*shape, seed=13)
    pool.copy_(sentinels)
    flat_in = np.arange(1000, 1000 + 2 * max(shape), dtype=np.int64)
    offsets, rows = np.array([0, shape[1], 2 * shape[1]]), np.array([shape[0] - 1, 0])
    launch(*tensors(flat_in, offsets, rows, device="cuda"), pool, backend=backend)
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(flat_in, offsets, rows, sentinels.numpy()))
    assert int((memory == -3).sum()) == span - pool.numel()  # nothing outside the pool's cells
    del memory, pool
    torch.cuda.empty_cache()


def fixed_batch(seed: int, bs=64, width=48, n_tokens=2000):
    """A batch whose array shapes depend on its sizes alone (what a graph replays)."""
    rng = np.random.default_rng(seed)
    offsets = np.sort(rng.integers(0, n_tokens + 1, size=bs + 1))
    rows = rng.permutation(bs + 1)[:bs]
    rows[rng.random(bs) < 0.1] = -1
    flat_in = rng.integers(-(2**63), 2**63 - 1, size=n_tokens, dtype=np.int64, endpoint=True)
    start_cols = rng.integers(0, width, size=bs)
    return flat_in, offsets, rows, sentinel(bs + 1, width, seed).numpy(), start_cols


@pytest.mark.parametrize("windowed", [False, True])
def test_cuda_graph_capture_and_replay(windowed):
    static = tensors(*fixed_batch(0), device="cuda")
    window = static[4] if windowed else None
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up: the variant compiled outside the capture
        launch(*static[:4], window)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(*static[:4], window)
    for seed in (1, 2, 3):
        batch = fixed_batch(seed)
        for target, source in zip(static, tensors(*batch, device="cuda")):
            target.copy_(source)
        graph.replay()
        torch.cuda.synchronize()
        expected = scatter_reference(*batch[:4], batch[4] if windowed else None)
        np.testing.assert_array_equal(as_numpy(static[3]), expected)


@pytest.mark.filterwarnings("ignore:Synchronization debug mode is a prototype feature:UserWarning")
def test_launches_and_writer_steps_do_not_sync():
    flat_in, offsets, rows, pool, start_cols = tensors(*fixed_batch(5), device="cuda")
    table = sentinel(8, 16, device="cuda")
    assign = (torch.tensor([3, 1], device="cuda"), table, torch.tensor([0, 4], device="cuda"),
              torch.tensor([5, 9], device="cuda"), torch.arange(9, device="cuda"), 2)
    writer = IncrementalWriter(sentinel(8, 16, device="cuda"), max_requests=4, max_new_tokens=8)
    rows_host, starts_host = np.array([1, 2]), np.array([0, 3])
    def calls():
        launch(flat_in, offsets, rows, pool)
        launch(flat_in, offsets, rows, pool, start_cols, backend="triton")
        assign_req_to_token_pool_func(*assign)
        for _ in range(3):  # fewer steps than the ring has slots
            writer.step([5, 6], rows_host, starts_host, lengths=1)

    calls()  # compiles the variants
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        calls()
    finally:
        torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize("graphs", [True, False])
def test_a_writer_far_ahead_of_its_stream_never_overwrites_a_slot_in_flight(graphs):
    """Each step sleeps on the stream first: the host laps the ring many times; every step lands (from the second
    lap on, with graphs, each a replay)."""
    pool = sentinel(40, 64, device="cuda")
    expected = as_numpy(pool).copy()
    writer = IncrementalWriter(pool, max_requests=8, max_new_tokens=16, graphs=graphs)
    rng = np.random.default_rng(1)
    for step in range(60):
        torch.cuda._sleep(200_000)
        rows = rng.permutation(40)[:8]
        new = rng.integers(0, 2**31, size=16)
        starts = np.full(8, step % 31)
        writer.step(new.tolist(), rows, starts, lengths=2)
        expected = scatter_reference(new, np.arange(9) * 2, rows, expected, starts)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(as_numpy(pool), expected)


def test_writer_graphs_never_write_a_pool_changed_in_place():
    """Steps replayed from graphs, then the pool's tensor given other memory (``.data``), a shape and strides of its
    own (``as_strided_``), a negative view's bits: every step writes the pool as it is, or is refused; the memory
    the pool left is not written again."""
    pool = sentinel(40, 64, device="cuda")
    writer = IncrementalWriter(pool, max_requests=4, max_new_tokens=8)
    expected = as_numpy(pool).copy()
    left = None
    for step in range(60):  # the ring's 8 slots: graphs from step 16 on
        if step == 30:
            left, left_values = pool.detach(), as_numpy(pool).copy()
            pool.data = sentinel(40, 64, seed=5, device="cuda")
            expected = as_numpy(pool).copy()
        if step == 45:
            pool.as_strided_((20, 64), (128, 1))
            expected = as_numpy(pool).copy()
        rows = np.array([step % 5, 5 + step % 5, 12, 17])  # distinct, inside both shapes
        new = np.arange(4 * step, 4 * step + 8)
        writer.step(new.tolist(), rows, np.full(4, step % 60), lengths=2)
        expected = scatter_reference(new, np.arange(5) * 2, rows, expected, np.full(4, step % 60))
        torch.cuda.synchronize()
        np.testing.assert_array_equal(as_numpy(pool), expected, err_msg=f"step {step}")
        if left is not None:
            np.testing.assert_array_equal(as_numpy(left), left_values)
    pool.data = pool.data._neg_view()
    before = as_numpy(pool.data._neg_view()).copy()
    with pytest.raises(errors.KvCanaryValueError, match="negative bit"):
        writer.step(list(range(8)), np.array([0, 1, 2, 3]), np.zeros(4, np.int64), lengths=2)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(as_numpy(pool.data._neg_view()), before)


def test_a_writer_whose_graph_capture_fails_writes_every_step_eagerly(monkeypatch):
    pool = sentinel(20, 40, device="cuda")
    writer = IncrementalWriter(pool, max_requests=2, max_new_tokens=4)

    def refused(views):
        raise RuntimeError("capture refused")

    monkeypatch.setattr(writer, "_capture", refused)
    expected = as_numpy(pool).copy()
    for step in range(20):  # every slot twice: the second time a capture is tried
        writer.step([step, step + 100], np.array([1, 7]), np.array([step, step]), lengths=1)
        expected = scatter_reference(np.array([step, step + 100]), np.arange(3), np.array([1, 7]), expected,
                                     np.array([step, step]))
    torch.cuda.synchronize()
    np.testing.assert_array_equal(as_numpy(pool), expected)


def test_writer_steps_that_change_stream():
    pool = sentinel(10, 80, device="cuda")
    expected = as_numpy(pool).copy()
    writer = IncrementalWriter(pool, max_requests=4, max_new_tokens=8)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for step in range(40):
        current, other = streams[(step // 3) % 2], streams[1 - (step // 3) % 2]
        current.wait_stream(other)  # the caller orders the pool's writes across streams
        with torch.cuda.stream(current):
            torch.cuda._sleep(100_000)
            new = [100 * step + 1, 100 * step + 2]
            writer.step([[t] for t in new], [1, 4], [step, step])
        expected = scatter_reference(np.array(new), np.arange(3), np.array([1, 4]), expected, np.array([step, step]))
    torch.cuda.synchronize()
    np.testing.assert_array_equal(as_numpy(pool), expected)


@needs_two
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_device_while_the_first_is_current(backend):
    torch.cuda.set_device(0)
    for device in ("cuda:1", "cuda:0", "cuda:1"):  # a variant compiled per device
        batch = arg_specs.make_batch("100x30r", seed=9)
        flat_in, offsets, rows, pool = tensors(*batch, device=device)
        launch(flat_in, offsets, rows, pool, backend=backend)
        np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*batch))
        table = sentinel(4, 8, device=device)
        args = [torch.tensor(a, device=device) for a in ([2, 0], [1, 3], [4, 8], list(range(8)))]
        assign_req_to_token_pool_func(args[0], table, *args[1:], 2, backend=backend)
        np.testing.assert_array_equal(as_numpy(table), assign_reference([2, 0], sentinel(4, 8).numpy(), [1, 3],
                                                                        [4, 8], np.arange(8), 2))
        assert torch.cuda.current_device() == 0
    writer = IncrementalWriter(sentinel(4, 8, device="cuda:1"), max_requests=2, max_new_tokens=4, backend=backend)
    writer.step([[1, 2], [3]], [0, 3], [1, 2])
    assert as_numpy(writer.pool_out)[0, 1:3].tolist() == [1, 2] and as_numpy(writer.pool_out)[3, 2] == 3


@needs_two
def test_arguments_on_two_devices_are_refused():
    flat_in, offsets, rows, pool = tensors(*arg_specs.make_batch("3x4"), device="cuda:0")
    pool1 = pool.to("cuda:1")
    before = as_numpy(pool1).copy()
    with pytest.raises(errors.KvCanaryValueError) as raised:
        launch(flat_in, offsets, rows, pool1)
    assert str(raised.value) == errors.DEVICE_MISMATCH.format(arg="flat_in", device="cuda:0", pool_device="cuda:1")
    np.testing.assert_array_equal(as_numpy(pool1), before)


def test_pinned_packing_feeds_the_gpu():
    from kv_canary_torch import pack_token_ids

    flat_in, offsets = pack_token_ids([list(range(100, 100 + k)) for k in (5, 0, 17, 3)], pin_memory=True)
    assert flat_in.is_pinned() and offsets.is_pinned()
    rows, pool = torch.tensor([3, 1, 0, 2]), sentinel(4, 20, seed=1)
    expected = scatter_reference(flat_in.numpy(), offsets.numpy(), rows.numpy(), pool.numpy())
    gpu = [t.to("cuda", non_blocking=True) for t in (flat_in, offsets, rows, pool)]
    launch(*gpu)
    np.testing.assert_array_equal(as_numpy(gpu[3]), expected)
