"""The torch frontend on a real GPU: the compiled Triton kernel, graphs, compile, syncs, devices.

Skipped without CUDA (tests/conftest.py). Pools are always sentinel-filled.
The conformance cases and the contract's properties also run on the GPU through
test_torch_triton.py / test_torch_vectorized.py (their runners use cuda:0
there, which adds the device-mismatch cases).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given

from kv_canary_torch import launch_scatter_req_token_ids_kernel, pack_token_ids
from shared_spec import errors, scatter_reference
from tests.profiles import property_settings
from tests.strategies import batches, large_batch, sentinel_pool
from tests.torch_support import as_numpy, using_rule

pytestmark = pytest.mark.gpu

BACKENDS = ["triton", "torch"]


def on_gpu(batch, device="cuda"):
    return [torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in batch]


def launch(flat_in, offsets, rows, pool, **options):
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, **options)


def assert_matches_reference(batch, backend="triton"):
    flat_in, offsets, rows, pool = on_gpu(batch)
    launch(flat_in, offsets, rows, pool, backend=backend)
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*batch))


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_batches(backend):
    @property_settings(40)
    @given(batch=batches(max_rows=12, max_width=40, max_bs=12, max_tokens=120))
    def check(batch):
        assert_matches_reference(batch, backend)

    check()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "bs, width",
    [
        (70_000, 4),  # bs past 65535: requests must be on grid axis 0
        (3, 5000),  # several tiles per request
        (512, 8192),  # fewer lanes than tiles: each lane strides through several tiles
        (2, 300_000),  # long requests: hundreds of lanes each
    ],
)
def test_large_batches(backend, bs, width):
    assert_matches_reference(large_batch(bs=bs, width=width, seed=bs), backend)


def test_auto_picks_triton_on_cuda(monkeypatch):
    from kv_canary_torch import op

    calls = []
    for name in op.IMPLEMENTATIONS:
        monkeypatch.setitem(op.IMPLEMENTATIONS, name, lambda *args, name=name: calls.append(name))
    launch(*on_gpu(large_batch(bs=2, width=3)))
    assert calls == ["triton"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_column_slice_of_a_wider_pool(backend):
    flat_in, offsets, rows, pool = large_batch(bs=300, width=700, seed=7)
    wide = torch.full((pool.shape[0], pool.shape[1] + 9), -77, dtype=torch.int32, device="cuda")
    view = wide[:, 4 : 4 + pool.shape[1]]
    view.copy_(torch.from_numpy(pool))
    launch(*on_gpu((flat_in, offsets, rows)), view, backend=backend)
    np.testing.assert_array_equal(as_numpy(view), scatter_reference(flat_in, offsets, rows, pool))
    assert (wide[:, :4] == -77).all() and (wide[:, 4 + pool.shape[1] :] == -77).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, strides", [((2, 24), (2**31 + 16, 1)), ((24, 2), (1, 2**31 + 16))])
def test_addresses_past_int32(backend, shape, strides):
    # A pool whose cells lie more than 2**31 elements apart (8.6 GB of int32).
    fill = -3
    span = (shape[0] - 1) * strides[0] + (shape[1] - 1) * strides[1] + 1
    memory = torch.full((span,), fill, dtype=torch.int32, device="cuda")
    pool = memory.as_strided(shape, strides)
    sentinels = sentinel_pool(*shape, seed=13)
    pool.copy_(torch.from_numpy(sentinels))
    flat_in = np.arange(1000, 1000 + 2 * max(shape), dtype=np.int64)
    offsets = np.asarray([0, shape[1], 2 * shape[1]], dtype=np.int64)
    rows = np.asarray([shape[0] - 1, 0], dtype=np.int64)
    launch(*on_gpu((flat_in, offsets, rows)), pool, backend=backend)
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(flat_in, offsets, rows, sentinels))
    assert int((memory == fill).sum()) == span - pool.numel()  # nothing outside the pool's cells
    del memory, pool
    torch.cuda.empty_cache()


def fixed_shape_batch(seed: int, bs: int, width: int, n_tokens: int):
    """A batch whose array shapes depend only on (bs, width, n_tokens): graph replays need that."""
    rng = np.random.default_rng(seed)
    offsets = np.sort(rng.integers(0, n_tokens + 1, size=bs + 1)).astype(np.int64)
    rows = rng.permutation(bs + 1)[:bs].astype(np.int64)
    rows[rng.random(bs) < 0.1] = -1  # some requests name no row
    flat_in = rng.integers(-(2**63), 2**63 - 1, size=n_tokens, dtype=np.int64, endpoint=True)
    return flat_in, offsets, rows, sentinel_pool(bs + 1, width, seed)


def test_cuda_graph_capture_and_replay():
    shape = dict(bs=64, width=48, n_tokens=2000)
    static = on_gpu(fixed_shape_batch(0, **shape))
    flat_in, offsets, rows, pool = static
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up: compile the kernel and bind it for the call path outside the capture
        launch(flat_in, offsets, rows, pool)  # compiles, binds, loads the call path, remembers the signature
        assert_call_path_on()
        launch(flat_in, offsets, rows, pool)  # through the call path
    torch.cuda.current_stream().wait_stream(stream)
    assert_c_launcher_bound(flat_in, offsets, rows, pool)
    served = c_calls()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(flat_in, offsets, rows, pool)
    assert c_calls() == served + 1  # captured through the call path: the warm-up remembered the signature
    for seed in (1, 2, 3):
        batch = fixed_shape_batch(seed, **shape)
        for target, source in zip(static, on_gpu(batch)):
            target.copy_(source)
        graph.replay()
        torch.cuda.synchronize()
        np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*batch))


def test_threads_launching_one_shape_at_once():
    """The launcher's per-shape caches are shared by threads: each thread's pools hold its own batches."""
    import threading

    shape = dict(bs=16, width=200, n_tokens=3000)
    launch(*on_gpu(fixed_shape_batch(99, **shape)))  # compiled and remembered before the threads start
    failures = []

    def worker(t):
        try:
            for k in range(25):
                batch = fixed_shape_batch(100 * t + k, **shape)
                flat_in, offsets, rows, pool = on_gpu(batch)
                launch(flat_in, offsets, rows, pool)
                torch.cuda.current_stream().synchronize()
                if not np.array_equal(as_numpy(pool), scatter_reference(*batch)):
                    failures.append((t, k))
        except Exception as error:  # reported below, with the thread
            failures.append((t, repr(error)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures


# torch says, on every switch into the debug mode, that it is a prototype: its own notice, expected here.
@pytest.mark.filterwarnings("ignore:Synchronization debug mode is a prototype feature:UserWarning")
def test_no_host_sync():
    flat_in, offsets, rows, pool = on_gpu(large_batch(bs=32, width=16, seed=5))
    launch(flat_in, offsets, rows, pool)  # warm up (first launch compiles)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        launch(flat_in, offsets, rows, pool)
        launch(flat_in, offsets, rows, pool, backend="triton")
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()


def test_compile_fullgraph_on_gpu():
    def caller(flat_in, lengths, rows, pool):
        offsets = torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)])
        launch(flat_in, offsets, rows, pool)
        return pool.to(torch.int64).sum()

    torch._dynamo.reset()
    compiled = torch.compile(caller, fullgraph=True)
    for seed, bs in enumerate((40, 41, 90)):
        flat_in, offsets, rows, pool = large_batch(bs=bs, width=33, seed=seed)
        expected = scatter_reference(flat_in, offsets, rows, pool)
        tensors = on_gpu((flat_in, np.diff(offsets), rows, pool))
        total = compiled(*tensors)
        np.testing.assert_array_equal(as_numpy(tensors[3]), expected)
        assert int(total) == int(expected.astype(np.int64).sum())
    torch._dynamo.reset()


def test_pinned_packing_feeds_the_gpu():
    token_lists = [list(range(100, 100 + k)) for k in (5, 0, 17, 3)]
    flat_in, offsets = pack_token_ids(token_lists, pin_memory=True)
    rows = torch.tensor([3, 1, 0, 2], dtype=torch.int64)
    pool = torch.from_numpy(sentinel_pool(4, 20, seed=1))
    expected = scatter_reference(flat_in.numpy(), offsets.numpy(), rows.numpy(), pool.numpy())
    gpu = [t.to("cuda", non_blocking=True) for t in (flat_in, offsets, rows, pool)]
    launch(*gpu)
    np.testing.assert_array_equal(as_numpy(gpu[3]), expected)


needs_two = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")


@pytest.mark.multidevice
@needs_two
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_device_while_the_first_is_current(backend):
    torch.cuda.set_device(0)
    batch = large_batch(bs=100, width=30, seed=9)
    flat_in, offsets, rows, pool = on_gpu(batch, device="cuda:1")
    launch(flat_in, offsets, rows, pool, backend=backend)
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*batch))
    assert torch.cuda.current_device() == 0


@pytest.mark.multidevice
@needs_two
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_pool_per_device_like_one_rank_per_gpu(backend):
    """sglang runs one rank per GPU, each with its own pool: per-rank launches on two devices, interleaved."""
    batches = [large_batch(bs=200, width=40, seed=10 + rank) for rank in range(2)]
    tensors = [on_gpu(batch, device=f"cuda:{rank}") for rank, batch in enumerate(batches)]
    for _ in range(3):
        for rank in (0, 1):
            with torch.cuda.device(rank):  # each rank's current device, as set_device(rank) would make it
                launch(*tensors[rank], backend=backend)
    for rank in (0, 1):
        torch.cuda.synchronize(rank)
        np.testing.assert_array_equal(as_numpy(tensors[rank][3]), scatter_reference(*batches[rank]))


@pytest.mark.multidevice
@needs_two
def test_arguments_on_two_devices_are_refused():
    flat_in, offsets, rows, pool = on_gpu(large_batch(bs=3, width=4))
    pool1 = pool.to("cuda:1")
    before = as_numpy(pool1).copy()
    with pytest.raises(errors.KvCanaryValueError) as raised:
        launch(flat_in, offsets, rows, pool1)
    assert str(raised.value) == errors.DEVICE_MISMATCH.format(arg="flat_in", device="cuda:0", pool_device="cuda:1")
    np.testing.assert_array_equal(as_numpy(pool1), before)


@pytest.mark.parametrize(
    "bs, width, strided, kernel",
    [(1024, 4097, False, "tiled"), (64, 4097, True, "lanes"), (64, 2049, False, "lanes"), (4, 33, False, "lanes")],
    ids=["tiled", "strided-flat", "short-windows", "small"],
)
def test_the_fast_launch_path_serves_each_kernel(bs, width, strided, kernel):
    # The checked path launches through Triton, which compiles the variant; the first remembered call binds it
    # (launch.dispatch.remember_call), and the next call of the signature is the native piece's launch. Both must
    # serve both kernels and write what the reference does.
    from kv_canary_torch.launch import dispatch

    batch = full_batch(bs, width, seed=11)  # every window full: the tiled kernel takes only full batches
    flat_in, offsets, rows, _ = on_gpu(batch)
    if strided:
        flat_in = torch.repeat_interleave(flat_in, 2)[::2]
    for _ in range(3):
        pool = on_gpu(batch)[3]
        with dispatch.without_call_path():
            launch(flat_in, offsets, rows, pool, backend="triton")
        np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*batch))
    plan = dispatch.plan_of(flat_in, offsets, rows, pool)
    assert plan.tiled is (kernel == "tiled") and plan.variant in dispatch._kernels
    assert_c_launcher_bound(flat_in, offsets, rows, pool)
    served = c_calls()
    for _ in range(2):
        pool = on_gpu(batch)[3]
        launch(flat_in, offsets, rows, pool, backend="triton")
        np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*batch))
    assert c_calls() == served + 2


def full_batch(bs: int, width: int, seed: int):
    """``bs`` requests of ``width`` tokens each, one per row of a sentinel pool of ``bs + 1`` rows."""
    rng = np.random.default_rng(seed)
    offsets = np.arange(bs + 1, dtype=np.int64) * width
    flat_in = rng.integers(-(2**63), 2**63 - 1, size=bs * width, dtype=np.int64, endpoint=True)
    return flat_in, offsets, rng.permutation(bs + 1)[:bs].astype(np.int64), sentinel_pool(bs + 1, width, seed)


def assert_c_launcher_bound(flat_in, offsets, rows, pool):
    """The native piece (``launch.native``) loaded on this machine and bound the kernel of these arguments' plan."""
    from kv_canary_torch.launch import dispatch, native

    assert native.module() is not None, native.unavailable_reason()
    assert dispatch._kernels.get(dispatch.plan_of(flat_in, offsets, rows, pool).variant) is not None, "not bound"


def c_calls() -> int:
    """Calls served so far by the native piece's call path (``launch.dispatch.call_bound``)."""
    from kv_canary_torch.launch import native

    return native.module().served()


def assert_call_path_on():
    """The call path is configured: the process's first remembered call built (or loaded) the native piece before it returned."""
    from kv_canary_torch.launch import dispatch, native

    assert native.unavailable_reason() is None, native.unavailable_reason()
    assert dispatch._c is not None, "the call path is not configured"


def test_a_remembered_signature_launches_in_one_c_call():
    """After one checked launch, calls with the same signature go through the C call path; what it declines is checked."""
    from kv_canary_torch.launch import dispatch

    batch = large_batch(bs=16, width=700, seed=31)
    flat_in, offsets, rows, _ = on_gpu(batch)
    expected = scatter_reference(*batch)
    launch(flat_in, offsets, rows, on_gpu(batch)[3])  # compiles, loads the native piece, binds, remembers the signature
    assert_call_path_on()
    assert isinstance(dispatch._c.signature("auto", flat_in, offsets, rows, flat_in), bytes)
    served = c_calls()
    launch(flat_in, offsets, rows, on_gpu(batch)[3])  # the signature's second call: the call path
    assert c_calls() == served + 1
    served = c_calls()
    for _ in range(3):
        pool = on_gpu(batch)[3]
        launch(*(x.clone() for x in (flat_in, offsets, rows)), pool)  # other tensors, the same signature
        np.testing.assert_array_equal(as_numpy(pool), expected)
    assert c_calls() == served + 3
    shifted = torch.cat([flat_in.new_zeros(1), flat_in])[1:]  # the same signature, 8 bytes off 16-byte alignment
    for options, arguments in (
        (dict(), (shifted, offsets, rows)),
        (dict(check_values=True), (flat_in, offsets, rows)),
        (dict(backend="torch"), (flat_in, offsets, rows)),
        (dict(backend="triton"), (flat_in, offsets, rows)),  # another backend named: a signature of its own
    ):
        pool = on_gpu(batch)[3]
        launch(*arguments, pool, **options)
        np.testing.assert_array_equal(as_numpy(pool), expected)
    assert c_calls() == served + 3
    pool = on_gpu(batch)[3]
    before = as_numpy(pool).copy()
    with pytest.raises(errors.KvCanaryTypeError):  # another dtype: another signature, which the checks refuse
        launch(flat_in.to(torch.int32), offsets, rows, pool)
    with pytest.raises(errors.KvCanaryValueError):  # the signature remembered, offsets one short: the checks' error
        launch(flat_in, offsets[:-1], rows, pool)
    np.testing.assert_array_equal(as_numpy(pool), before)
    launch(flat_in, offsets, rows, pool, backend="triton")  # remembered by the call above
    np.testing.assert_array_equal(as_numpy(pool), expected)
    assert c_calls() == served + 4


def serving_steps(bs_choices, lengths, steps, seed, n_rows):
    """numpy ``(flat_in, offsets, rows)`` per step, as a server's: the requests' lengths and the batch change every step."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):
        bs = int(rng.choice(bs_choices))
        counts = rng.integers(*lengths, size=bs)
        counts[rng.random(bs) < 0.05] = 0  # a request with nothing new
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        rows = rng.permutation(n_rows)[:bs].astype(np.int64)
        flat_in = rng.integers(-(2**63), 2**63 - 1, size=int(offsets[-1]) + int(rng.integers(0, 50)), dtype=np.int64)
        out.append((flat_in, offsets, rows))
    return out


@pytest.mark.parametrize(
    "width, bs_choices, lengths, kernels",
    [
        (4097, (1, 2, 8, 64, 100), (3000, 4098), {"tiled", "lanes"}),  # long windows: tiled for large batches (a
        # TILED_MIN_TOKENS of 100000 here, so that the reference keeps up)
        (2049, (1, 8, 64, 300), (1, 2050), {"lanes"}),  # sglang's rows: the lanes kernel, SMALL and LARGE
        (300, (1, 2, 3, 50, 500), (0, 301), {"lanes"}),  # decode-like steps
    ],
    ids=["tiled-and-lanes", "short-windows", "narrow"],
)
def test_shapes_that_change_every_call_match_the_reference(width, bs_choices, lengths, kernels):
    """A serving loop: a new len(flat_in) and bs at every call, one pool; each call's pool against the reference."""
    from kv_canary_torch.launch import dispatch

    for _ in using_rule(dispatch.launch_plan.RULE._replace(tiled_min_tokens=100000)):  # the C side too
        run_serving_loop(width, bs_choices, lengths, kernels)


def run_serving_loop(width, bs_choices, lengths, kernels):
    from kv_canary_torch.launch import dispatch

    n_rows = 600
    pool_np = sentinel_pool(n_rows, width, seed=3)
    pool = torch.from_numpy(pool_np.copy()).cuda()
    steps = serving_steps(bs_choices, lengths, 40, seed=width, n_rows=n_rows)
    launch(*on_gpu(steps[0]), pool)  # compiles, loads the native piece and binds before it returns
    assert_call_path_on()
    served, seen = c_calls(), set()
    for flat_in, offsets, rows in steps:
        tensors = on_gpu((flat_in, offsets, rows))
        seen.add("tiled" if dispatch.plan_of(*tensors, pool).tiled else "lanes")
        launch(*tensors, pool)
        pool_np = scatter_reference(flat_in, offsets, rows, pool_np)
        np.testing.assert_array_equal(as_numpy(pool), pool_np)
    assert seen == kernels
    assert c_calls() - served >= len(steps) - 2 * dispatch.launch_plan.SLOTS  # all but each variant's first call


def test_a_second_signature_takes_the_call_path_from_its_second_call():
    """Once every variant a serving loop needs has launched, a new signature (another pool) misses only its first call.

    Its family is filled from the kernels bound for the first pool's signature (``plan.slot_variants``), so N and bs
    changing every step never send a valid call back to the checked path.
    """
    from kv_canary_torch.launch import dispatch

    steps = serving_steps((1, 8, 64, 300), (1, 2050), 300, seed=7, n_rows=600)
    first = torch.from_numpy(sentinel_pool(600, 2049, seed=3)).cuda()
    launch(*on_gpu(steps[0]), first)
    assert_call_path_on()
    gpu_steps = [on_gpu(step) for step in steps]
    for tensors in gpu_steps:
        launch(*tensors, first)
    second = torch.from_numpy(sentinel_pool(601, 2049, seed=4)).cuda()  # another shape: another signature
    launch(*gpu_steps[0], second)
    served = c_calls()
    pool_np = scatter_reference(*steps[0], sentinel_pool(601, 2049, seed=4))
    for step, tensors in zip(steps, gpu_steps):
        launch(*tensors, second)
        pool_np = scatter_reference(*step, pool_np)
    np.testing.assert_array_equal(as_numpy(second), pool_np)
    assert len({dispatch.plan_of(*tensors, second).slot for tensors in gpu_steps}) > 1
    assert c_calls() - served == len(steps)


def test_windowed_serving_steps_take_the_call_path():
    """Each step appends every request's new tokens at its current length: one C call a step once its variants ran."""
    from kv_canary_torch.launch import dispatch

    n_rows, width = 300, 2049
    rng = np.random.default_rng(11)
    pool_np = sentinel_pool(n_rows, width, seed=5)
    pool = torch.from_numpy(pool_np.copy()).cuda()
    lengths = np.zeros(n_rows, dtype=np.int64)
    steps = []
    for step in range(200):
        bs = int(rng.choice([1, 8, 64, 256]))
        rows = rng.permutation(n_rows)[:bs].astype(np.int64)
        counts = rng.integers(1, 600 if step % 50 == 0 else 3, size=bs)  # a prefill now and then, decode steps between
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        flat_in = rng.integers(-(2**63), 2**63 - 1, size=int(offsets[-1]), dtype=np.int64)
        starts = lengths[rows].copy()
        lengths[rows] += counts
        steps.append((flat_in, offsets, rows, starts))
    served = None
    for index, (flat_in, offsets, rows, starts) in enumerate(steps):
        tensors = on_gpu((flat_in, offsets, rows, starts))
        launch(*tensors[:3], pool, start_cols=tensors[3])
        pool_np = scatter_reference(flat_in, offsets, rows, pool_np, starts)
        if index == 0:
            assert_call_path_on()
            served = c_calls()
    np.testing.assert_array_equal(as_numpy(pool), pool_np)
    assert c_calls() - served >= len(steps) - 1 - 2 * dispatch.launch_plan.SLOTS  # all but each variant's first call


def test_a_changing_n_across_the_int32_boundary():
    """Calls whose len(flat_in) steps over 2**31 and back: the ints switch to i64 (Triton's generic path) and back.

    flat_in is arange (16 GB): token t holds t, so the reference needs only the tokens the windows can read.
    """
    big = 2**31
    flat = torch.arange(big + 5000, dtype=torch.int64, device="cuda")
    try:
        for width, bs in ((64, 4), (4097, 4)):  # the lanes kernel (SMALL), then the tiled one
            pool_np = sentinel_pool(bs + 1, width, seed=width)
            pool = torch.from_numpy(pool_np.copy()).cuda()
            plans = set()
            for n in (big - 3000, big - 1, big, big + 1, big - 2, big + 4999, big - 1):
                starts = n - 2 * width + np.arange(bs + 1, dtype=np.int64) * (width // 2 + 1)  # the last windows pass N
                rows = np.arange(bs, dtype=np.int64)[::-1].copy()
                launch(flat[:n], torch.from_numpy(starts).cuda(), torch.from_numpy(rows).cuda(), pool)
                plans.add((dispatch_plan(flat[:n], starts, rows, pool).small_ints, dispatch_plan(flat[:n], starts, rows, pool).tiled))
                low = int(starts.min())
                pool_np = scatter_reference(np.arange(low, n, dtype=np.int64), starts - low, rows, pool_np)
                np.testing.assert_array_equal(as_numpy(pool), pool_np)
            assert {small for small, _ in plans} == {True, False} and len({kind for _, kind in plans}) == 1
    finally:
        del flat
        torch.cuda.empty_cache()


def dispatch_plan(flat_in, offsets, rows, pool):
    from kv_canary_torch.launch import dispatch

    return dispatch.plan_of(flat_in, torch.from_numpy(offsets), torch.from_numpy(rows), pool)


def test_nothing_accumulates_over_distinct_shapes():
    """20,000 calls, each a len(flat_in) not seen before: no remembered signature, kernel or plan more."""
    from kv_canary_torch.launch import dispatch

    batch = large_batch(bs=64, width=513, seed=41)
    flat_in, offsets, rows, pool = on_gpu(batch)
    buffer = torch.cat([flat_in, flat_in.new_zeros(25_000)])
    launch(flat_in, offsets, rows, pool)
    assert_call_path_on()
    launch(flat_in, offsets, rows, pool)
    sizes = len(dispatch._memo), len(dispatch._kernels)
    served = c_calls()
    n = flat_in.shape[0]
    for extra in range(20_000):
        launch(buffer[: n + extra], offsets, rows, pool)
    assert (len(dispatch._memo), len(dispatch._kernels)) == sizes
    assert c_calls() == served + 20_000
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*batch))


def test_the_c_launcher_on_a_thread_that_never_touched_cuda():
    """A thread whose first CUDA call is the launch (its tensors made elsewhere): correct either way it launches."""
    import threading

    batch = large_batch(bs=8, width=300, seed=21)
    flat_in, offsets, rows, pool = on_gpu(batch)
    launch(flat_in, offsets, rows, on_gpu(batch)[3])  # compiled and bound for the call path
    torch.cuda.synchronize()
    errors_seen = []

    def worker():
        try:
            launch(flat_in, offsets, rows, pool)
        except Exception as error:  # reported below
            errors_seen.append(repr(error))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert not errors_seen, errors_seen
    torch.cuda.synchronize()
    np.testing.assert_array_equal(as_numpy(pool), scatter_reference(*batch))
