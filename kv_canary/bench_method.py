"""How ``kv-canary bench`` times a call (the method ``kv_canary/bench.py``'s docstring describes), framework-free.

Torch's device figures: calls taken in turns (``interleaved_samples``), each between CUDA events with the L2
flushed (``flushed_us``) or chained in a CUDA graph (``chained_us``), against a same-bytes copy and an empty
kernel; JAX's: a jit of ``CHAIN`` applications minus one of a single (``jax_chained``), its device-clock twin
under the profiler (``jax_device_chained_us``), and back-to-back wall time (``wall_s``). The frameworks are
passed in or imported inside the functions, so the JAX child imports no torch.
"""

from __future__ import annotations

import functools
import statistics
import time

import numpy as np


CHAIN = 16
CHAINED_REPLAYS = 100  # timed replays of each graph of the torch chained figures
# Interleaved rounds of the torch device figures (kernel, baseline, copy, empty kernel).
ROUNDS = 5
# The JAX implementations that run one kernel per application, all named kv_canary_...
# (the device-clock chained figure counts their kernels in a profiler trace).
DEVICE_CLOCK_IMPLEMENTATIONS = ("pallas", "mosaic")
KERNEL_MARKER = "kv_canary"
WALL_CALLS = 200


def interleaved_samples(runs: dict, timer, rounds: int, before_round=None) -> dict:
    """``{name: [timer(run) per round]}``: every round times every run once, each round starting one run later.

    Interleaved so that a drift of the machine hits every run alike, and rotated so that no run always comes
    first or after the same one. ``before_round(k)``, where given, runs before round ``k``.
    """
    names = list(runs)
    samples: dict = {name: [] for name in names}
    for k in range(rounds):
        if before_round is not None:
            before_round(k)
        for name in names[k % len(names):] + names[:k % len(names)]:
            samples[name].append(timer(runs[name]))
    return samples


def interleaved(runs: dict, timer, rounds: int, before_round=None) -> dict:
    """Each run's median of ``timer(run)`` over the rounds of ``interleaved_samples``."""
    samples = interleaved_samples(runs, timer, rounds, before_round)
    return {name: statistics.median(t) for name, t in samples.items()}


FLUSH_BYTES = 256 * 2**20  # what do_bench writes to flush the L2 before each call
FLUSHED_CALLS = 60  # timed calls of each run per round of the flushed figures
FLUSHED_WARMUP = 10  # untimed turns before each round's timed ones


def flushed_us(torch, runs: dict, rounds: int = ROUNDS, before_round=None, calls: int = FLUSHED_CALLS,
               warmup: int = FLUSHED_WARMUP) -> dict:
    """``{name: us}``: each of ``runs``' median over ``rounds * calls`` calls, each timed by CUDA events around it
    with the L2 flushed just before (``FLUSH_BYTES`` written, as ``do_bench`` flushes it), the runs taking turns.

    Each turn calls every run once, starting one run later than the turn before (a round of ``interleaved_samples``
    per turn); each round opens with ``warmup`` untimed turns, and ``before_round(k)``, where given, runs before
    round ``k``. Turns, not a ``do_bench`` run of each: on the H200 (2026-12-01, three runs of ROUNDS interleaved ``do_bench`` rounds at each of 9 cases) the
    difference between the Triton kernel's figure and the baseline's at one case moved by up to 1.1 us from run to
    run, more than the bars it is held to, while over calls taken in turns it moved by 0.1 us or less at 7 of the 9.
    """
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def flushed(fn):
        flush.zero_()
        return event_timed(torch, fn)

    timed: dict = {name: [] for name in runs}
    for k in range(rounds):
        if before_round is not None:
            before_round(k)
        for name, pairs in interleaved_samples(runs, flushed, warmup + calls).items():
            timed[name] += pairs[warmup:]
    torch.cuda.synchronize()
    return {name: statistics.median(start.elapsed_time(end) for start, end in pairs) * 1e3
            for name, pairs in timed.items()}


def event_timed(torch, fn) -> tuple:
    """``(start, end)``: CUDA events recorded on the stream around ``fn()`` (read them after a synchronize)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    return start, end


def chained_us(torch, runs: dict, replays: int = CHAINED_REPLAYS) -> dict:
    """``{name: us}``: microseconds per call of each of ``runs`` chained: a CUDA graph of ``CHAIN`` calls minus one of
    1, over ``CHAIN - 1``.

    Each run is called once first (nothing compiles during capture), then both of its graphs are captured. Each
    turn replays every run's two graphs, each replay timed by CUDA events on the stream, the runs starting one
    later each turn (a round of ``interleaved_samples`` per turn); one untimed turn first, then ``replays``; a graph's figure is the median of its replays. No
    flush and no host work between the calls: what a captured serving step sees, the inputs warm in L2 where they
    fit. In turns, so that the state of the machine hits the runs alike: timed one run after the other, at
    kernels of 1-2 us the same run's figure read 0.7 in one run and 1.4 in the next (H200, 2026-12-01).
    """
    for fn in runs.values():
        fn()
    torch.cuda.synchronize()
    graphs = {}
    for name, fn in runs.items():
        for k in (1, CHAIN):
            graphs[name, k] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graphs[name, k]):
                for _ in range(k):
                    fn()
    samples = interleaved_samples({name: name for name in runs},
                                  lambda name: [event_timed(torch, graphs[name, k].replay) for k in (1, CHAIN)],
                                  1 + replays)
    torch.cuda.synchronize()

    def median_ms(turns, i):
        return statistics.median(turn[i][0].elapsed_time(turn[i][1]) for turn in turns[1:])

    return {name: (median_ms(turns, 1) - median_ms(turns, 0)) / (CHAIN - 1) * 1e3 for name, turns in samples.items()}


def copy_bandwidth(torch, triton) -> float:
    """Bytes per second of a 1 GiB device-to-device copy, counting read + write."""
    src = torch.empty(2**28, dtype=torch.int32, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
    return 2 * src.numel() * 4 / (ms * 1e-3)


def same_bytes_copy(torch, tokens: int, device="cuda"):
    """A call copying the scatter's 12 bytes per token (read 8, write 4) as one copy of 6 bytes per token.

    Timed like the kernel, it is what the L2 flush and the launch floor leave
    for any kernel of this size.
    """
    src = torch.empty(max(1, tokens * 6 // 4), dtype=torch.int32, device=device).random_()
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


@functools.cache
def empty_kernel(torch, triton):
    """A call that launches a Triton kernel doing nothing: the floor of the flushed figures on this machine."""
    @triton.jit
    def empty(x_ptr):
        pass

    x = torch.empty(1, device="cuda")
    return lambda: empty[(1,)](x)


def empty_kernel_us(torch, triton) -> float:
    """The flushed figures' floor on this machine: the median time of a kernel that does nothing (``flushed_us``)."""
    return flushed_us(torch, {"empty": empty_kernel(torch, triton)})["empty"]


def wall_s(fn, args, calls: int, rounds: int = 5) -> float:
    """Seconds per call of ``fn(*args[:3], pool)`` back to back, the pool threaded through.

    The median over ``rounds`` rounds of ``calls // rounds`` calls each, so one
    stall of the host does not move the figure.
    """
    pool = fn(*args)
    pool.block_until_ready()
    per_round = max(1, calls // rounds)
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(per_round):
            pool = fn(*args[:3], pool)
        pool.block_until_ready()
        samples.append((time.perf_counter() - start) / per_round)
    return statistics.median(samples)


def jax_chained(apply, args, pool, expected, what: str):
    """``(seconds per application, fns)`` of ``apply(flat_in, offsets, rows, pool) -> pool`` by the chained method:
    ``jax_chain``, then ``chained_wall_s``."""
    fns, pools = jax_chain(apply, args, pool, expected, what)
    return chained_wall_s(fns, args, pools), fns


def jax_chain(apply, args, pool, expected, what: str) -> tuple[dict, dict]:
    """``(fns, pools)``: jitted functions applying ``apply`` once and ``CHAIN`` times (unrolled), ``{1: ..., CHAIN:
    ...}``, both donating the pool and compiled, with the pools they returned.

    One application is checked against ``expected`` (``what`` names it in the failure).
    """
    import jax

    def chain(k):
        def run(f, o, r, p):
            for _ in range(k):
                p = apply(f, o, r, p)
            return p

        return jax.jit(run, donate_argnums=3)

    fns = {k: chain(k) for k in (1, CHAIN)}
    pools = {k: fn(*args, jax.device_put(pool)) for k, fn in fns.items()}  # compiles both
    assert np.array_equal(np.asarray(pools[1]), expected), f"{what} disagrees with the reference"
    jax.block_until_ready(pools)
    return fns, pools


def chained_wall_s(fns: dict, args, pools: dict, repeats: int = 30) -> float:
    """Seconds per application: the median over ``repeats`` interleaved rounds of the ``CHAIN`` function's synced
    call minus that of the single one's, over ``CHAIN - 1``; ``pools`` (``jax_chain``'s) threaded through."""
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            start = time.perf_counter()
            pools[k] = fn(*args, pools[k])
            pools[k].block_until_ready()
            times[k].append(time.perf_counter() - start)
    return (statistics.median(times[CHAIN]) - statistics.median(times[1])) / (CHAIN - 1)


def jax_device_chained_us(fn, args, pool, calls: int = 5) -> float | None:
    """Device microseconds per application of the ``CHAIN``-application jit ``fn``, on the device clock.

    ``calls`` calls of ``fn`` under the profiler; from its kernel records, per
    call the end of the last kernel minus the end of the first, over
    ``CHAIN - 1`` (``device_trace.chained_device_us``); None when the trace
    has no whole calls of ``CHAIN`` kernels.
    """
    import jax

    from kv_canary import device_trace

    data = device_trace.trace_calls(fn, args, jax.device_put(pool), calls)
    if data is None:
        return None
    return device_trace.chained_device_us(device_trace.kernel_events(data, KERNEL_MARKER), CHAIN)
