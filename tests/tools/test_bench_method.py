"""``kv_canary.bench``'s helpers that hold its method: the cases it takes (``parse_case``, ``selected_cases``),
interleaved rounds (every run once a round, each round starting one run later), the flushed figures (calls between
CUDA events after an L2 flush, the runs taking turns) and the chained ones (CUDA graphs replayed in turns).

The benchmarks time competing runs in such rounds (``bench_torch``, ``bench_step``, ``benchmarks/tune_triton.py``),
so that a drift of the machine, or a run's place in a round, favours none of them.
"""

from __future__ import annotations

from argparse import Namespace
from types import SimpleNamespace

import pytest

from kv_canary import bench


def test_cases_are_sizes_with_suffixes_or_a_skewed_workload():
    assert bench.parse_case("256x8192") == (256, 8192, False, False)
    assert bench.parse_case("64x32768r") == (64, 32768, True, False)
    assert bench.parse_case("256x32768a") == (256, 32768, False, True)
    assert bench.parse_case("3x5ra") == (3, 5, True, True)
    assert bench.parse_case("one_long_among_short_bs64") == (64, 32768, "one_long_among_short_bs64", False)
    for text in ("5x", "x5", "0x5", "5x0", "axb", "5x5rr", "5x5ar", "5x5 ", "-1x5", "one_long"):
        with pytest.raises(ValueError, match="is not a case: BSxSEQ"):
            bench.parse_case(text)


def test_the_selected_cases():
    assert bench.selected_cases(Namespace(case=None, quick=False)) == list(bench.CASES)
    assert all(bs * seq <= 2**21 for bs, seq, _, _ in bench.selected_cases(Namespace(case=None, quick=True)))
    named = Namespace(case=["256x32768", "many_medium_bs256", "8x128"], quick=False)
    assert bench.selected_cases(named) == [(256, 32768, False, False), (256, 64, "many_medium_bs256", False), (8, 128, False, False)]
    named.quick = True
    assert bench.selected_cases(named) == [(256, 64, "many_medium_bs256", False), (8, 128, False, False)]


def test_rounds_interleave_every_run_starting_one_later_each_round():
    order = []
    runs = {"without": "a", "mosaic": "b", "xla": "c"}
    samples = bench.interleaved_samples(runs, lambda run: order.append(run) or len(order), 3,
                                        before_round=lambda k: order.append(str(k)))
    assert "".join(order) == "0abc" "1bca" "2cab"
    assert samples == {"without": [2, 8, 11], "mosaic": [3, 6, 12], "xla": [4, 7, 10]}


def test_a_figure_is_the_median_over_rounds():
    values = iter([5.0, 1.0, 4.0, 2.0, 9.0, 3.0])  # round 0: a b, round 1: b a, round 2: a b
    assert bench.interleaved({"a": "a", "b": "b"}, lambda run: next(values), 3) == {"a": 5.0, "b": 3.0}


def event_class(clock: list):
    """A stand-in for ``torch.cuda.Event`` on a fake clock (``clock[0]``, in milliseconds, as CUDA events count)."""

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing

        def record(self):
            self.at = clock[0]

        def elapsed_time(self, end):
            return end.at - self.at

    return Event


def test_flushed_figures_time_each_call_after_a_flush_the_runs_taking_turns():
    log, clock = [], [0.0]
    Event = event_class(clock)

    def run(name, costs):
        costs = iter(costs)

        def call():
            log.append(name)
            clock[0] += next(costs)
        return call

    flush = SimpleNamespace(zero_=run("flush", iter(lambda: 50.0, None)))  # before each call: outside its events
    torch = SimpleNamespace(empty=lambda n, dtype, device: flush if n * 4 == bench.FLUSH_BYTES else None, int32=None,
                            cuda=SimpleNamespace(Event=Event, synchronize=lambda: log.append("sync")))
    runs = {"a": run("a", [1.0, 0.002, 0.004, 0.003] * 2), "b": run("b", [1.0, 0.005, 0.006, 0.007] * 2)}
    figures = bench.flushed_us(torch, runs, rounds=2, before_round=lambda k: log.append(f"round {k}"), calls=3, warmup=1)
    assert figures == {"a": pytest.approx(3.0), "b": pytest.approx(6.0)}  # microseconds; the warm-up turn's 1 ms left out
    turns = ["flush", "a", "flush", "b", "flush", "b", "flush", "a"] * 2
    assert log == ["round 0", *turns, "round 1", *turns, "sync"]


def test_chained_figures_replay_both_graphs_of_every_run_in_turns():
    log, clock, capturing = [], [0.0], []
    Event = event_class(clock)

    class Graph:
        def __init__(self):
            self.costs = []

        def replay(self):  # a launch's overhead, then the captured calls
            log.append(f"{self.name} x{len(self.costs)}")
            clock[0] += 0.004 + sum(self.costs)

    class Capture:
        def __init__(self, graph):
            self.graph = graph

        def __enter__(self):
            capturing.append(self.graph)

        def __exit__(self, *_):
            capturing.pop()

    def run(name, ms):
        def call():
            if capturing:
                capturing[-1].name = name
                capturing[-1].costs.append(ms)
            else:
                log.append(f"{name} warm")
        return call

    torch = SimpleNamespace(cuda=SimpleNamespace(Event=Event, CUDAGraph=Graph, graph=Capture, synchronize=lambda: None))
    figures = bench.chained_us(torch, {"a": run("a", 0.002), "b": run("b", 0.003)}, replays=2)
    assert figures == {"a": pytest.approx(2.0), "b": pytest.approx(3.0)}  # microseconds a call; the overhead cancels
    chain = f"x{bench.CHAIN}"
    turn = {name: [f"{name} x1", f"{name} {chain}"] for name in "ab"}
    assert log == ["a warm", "b warm", *turn["a"], *turn["b"], *turn["b"], *turn["a"], *turn["a"], *turn["b"]]


@pytest.mark.gpu
def test_the_flushed_and_chained_figures_of_the_two_kernels():
    import torch

    kernels = bench.KernelRuns(torch, bench.make_inputs(64, 2048, False), rounds=2)
    rounds = []
    figures = bench.flushed_us(torch, {"ours": kernels.ours, "baseline": kernels.baseline}, rounds=2,
                               before_round=lambda k: rounds.append(k) or kernels.next_pool(k), calls=5, warmup=1)
    assert rounds == [0, 1] and set(figures) == {"ours", "baseline"} and all(0 < us < 1000 for us in figures.values())
    chained = bench.chained_us(torch, {"ours": kernels.ours, "baseline": kernels.baseline}, replays=3)
    assert set(chained) == {"ours", "baseline"} and all(0 < us < 1000 for us in chained.values())
