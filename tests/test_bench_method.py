"""``kv_canary.bench``'s helpers that hold its method: the cases it takes (``parse_case``, ``selected_cases``),
interleaved rounds (every run once a round, each round starting one run later) and the kernels' own durations from
a profiler's events.

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


def test_kernel_durations_are_the_named_device_kernels():
    from torch.autograd import DeviceType

    def event(name, device, us):
        return SimpleNamespace(name=name, device_type=device, time_range=SimpleNamespace(elapsed_us=lambda: us))

    events = [event("scatter_req_token_ids_kernel", DeviceType.CUDA, 3.0), event("vectorized_elementwise_kernel", DeviceType.CUDA, 70.0),
              event("scatter_req_token_ids_kernel", DeviceType.CPU, 9.0),  # the host side of a launch
              event("scatter_req_token_ids_tiled_kernel", DeviceType.CUDA, 4.0), event("per_request_tile_kernel", DeviceType.CUDA, 5.0)]
    assert bench.kernel_durations_us(events, bench.KERNEL_MARKERS["torch_triton_kernel_us"]) == [3.0, 4.0]
    assert bench.kernel_durations_us(events, bench.KERNEL_MARKERS["per_request_tile_kernel_us"]) == [5.0]


@pytest.mark.gpu
def test_the_flushed_kernel_figures_count_one_kernel_a_call():
    import torch

    kernels = bench.KernelRuns(torch, bench.make_inputs(64, 2048, False), rounds=2)
    runs = {"ours": ("scatter_req_token_ids", kernels.ours), "baseline": ("per_request_tile", kernels.baseline)}
    figures = bench.flushed_kernel_us(torch, runs, 2, before_round=kernels.next_pool, calls=5)
    assert set(figures) == {"ours", "baseline"} and all(0 < us < 1000 for us in figures.values())
    runs["none"] = ("no_such_kernel", lambda: None)
    with pytest.raises(RuntimeError, match="saw 0 kernels named"):
        bench.flushed_kernel_us(torch, runs, 1, calls=2)
