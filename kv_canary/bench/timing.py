"""How ``kv-canary bench`` times a call; torch is passed in, so the pure helpers run anywhere.

- ``interleaved_samples``: every round times every run once, the order rotated by one each round, so that a drift of
  the machine hits every run alike and no run always goes first.
- ``flushed_us``: device time of one call between CUDA events, the L2 flushed just before (256 MiB written, as
  ``triton.testing.do_bench`` flushes it), each call replayed from a one-call CUDA graph, calls taking turns.
- ``chained_us``: a CUDA graph of ``CHAIN`` calls minus one of a single call, over ``CHAIN - 1``: calls back to back
  with no flush and no host work between them, as in a captured serving step.
- ``host_ns``: host time per call, no sync between calls, rounds of calls taking turns, a warm-up round first.
- ``summary``, ``spread``: median and 90th percentile; median, quartiles and range.
"""

from __future__ import annotations

import statistics
import time

ROUNDS = 5
FLUSH_BYTES = 256 * 2**20
FLUSHED_CALLS, FLUSHED_WARMUP = 60, 10  # timed and untimed turns of each round
CHAIN, CHAINED_REPLAYS = 16, 100
HOST_ROUNDS = 7  # each of HOST_CALLS calls: fewer than CUDA's launch queue holds, so no launch waits for the GPU
HOST_CALLS = 400


def interleaved_samples(runs: dict, timer, rounds: int, before_round=None) -> dict[str, list]:
    """``{name: [timer(runs[name]) per round]}``, round ``k`` starting ``k`` runs later; ``before_round(k)`` first."""
    names = list(runs)
    samples: dict = {name: [] for name in names}
    for k in range(rounds):
        if before_round is not None:
            before_round(k)
        shift = k % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(timer(runs[name]))
    return samples


def summary(values) -> dict:
    """``median`` and ``p90`` (nearest rank) of ``values``."""
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "p90": ordered[round(0.9 * (len(ordered) - 1))]}


def spread(values) -> dict:
    """``median``, quartiles ``q1``/``q3`` and ``min``/``max`` of per-round figures."""
    values = list(values)
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {"median": statistics.median(values), "q1": q1, "q3": q3, "min": min(values), "max": max(values)}


def event_timed(torch, fn) -> tuple:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    return start, end


def graphs_of(torch, runs: dict, calls: int) -> dict:
    """``{name: a CUDA graph of calls to runs[name]}`` (each run called once first: nothing compiles in a capture)."""
    for fn in runs.values():
        fn()
    torch.cuda.synchronize()
    graphs = {}
    for name, fn in runs.items():
        graphs[name] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[name]):
            for _ in range(calls):
                fn()
    return graphs


def flushed_us(torch, runs: dict, rounds: int = ROUNDS, before_round=None, calls: int = FLUSHED_CALLS,
               warmup: int = FLUSHED_WARMUP) -> dict:
    """``{name: median us}`` over ``rounds * calls`` flushed calls of each run, the runs taking turns call by call;
    each call replayed from a one-call CUDA graph captured at the round's start (after ``before_round(k)``), so
    that no launcher's host time reaches the figure."""
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def flushed(fn):
        flush.zero_()
        return event_timed(torch, fn)

    timed: dict = {name: [] for name in runs}
    for k in range(rounds):
        if before_round is not None:
            before_round(k)
        replays = {name: graph.replay for name, graph in graphs_of(torch, runs, 1).items()}
        for name, pairs in interleaved_samples(replays, flushed, warmup + calls).items():
            timed[name] += pairs[warmup:]
    torch.cuda.synchronize()
    return {name: statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e3 for name, pairs in timed.items()}


def chained_us(torch, runs: dict, replays: int = CHAINED_REPLAYS) -> dict:
    """``{name: us per call}`` chained: each run's graphs of 1 and ``CHAIN`` calls, replays taking turns."""
    graphs = {(name, k): graph for k in (1, CHAIN) for name, graph in graphs_of(torch, runs, k).items()}
    samples = interleaved_samples({name: name for name in runs},
                                  lambda name: [event_timed(torch, graphs[name, k].replay) for k in (1, CHAIN)],
                                  1 + replays)
    torch.cuda.synchronize()

    def median_ms(turns, i):
        return statistics.median(turn[i][0].elapsed_time(turn[i][1]) for turn in turns[1:])

    return {name: (median_ms(t, 1) - median_ms(t, 0)) / (CHAIN - 1) * 1e3 for name, t in samples.items()}


def host_ns(runs: dict, sync, rounds: int = HOST_ROUNDS, clock=time.perf_counter_ns) -> dict[str, list]:
    """``{name: ns of every timed call}`` of ``runs[name] = (fn, steps)``: ``fn(*step)`` for each step, timed alone;
    rounds taking turns (``interleaved_samples``), a warm-up round first, ``sync()`` after each run's round."""

    def one_round(run):
        fn, steps = run
        times = []
        for step in steps:
            begin = clock()
            fn(*step)
            times.append(clock() - begin)
        sync()
        return times

    samples = interleaved_samples(runs, one_round, rounds + 1)
    return {name: [t for r in rounds_[1:] for t in r] for name, rounds_ in samples.items()}


def device_sync(torch, device: str = "cuda"):
    """The device's synchronize itself (``torch.cuda.synchronize`` without its Python device guard, which costs a
    timer microseconds of its own); a no-op off CUDA."""
    if device != "cuda":
        return lambda: None
    return getattr(torch._C, "_cuda_synchronize", torch.cuda.synchronize)
