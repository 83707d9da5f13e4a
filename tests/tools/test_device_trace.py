"""The device-clock figures of ``kv-canary bench`` (kv_canary.device_trace), on synthetic profiler traces."""

from __future__ import annotations

import gzip
import json

import pytest

from kv_canary import bench, device_trace


def _trace(kernels, host=(), name="kv_canary_scatter_req_token_ids"):
    """A trace with one device process holding ``kernels`` ((start, dur) pairs) and a host process holding ``host``."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "/device:GPU:0"}},
    ]
    events += [{"ph": "X", "pid": 7, "tid": 3, "name": name, "ts": ts, "dur": dur} for ts, dur in kernels]
    events += [{"ph": "X", "pid": 1, "tid": 1, "name": name, "ts": ts, "dur": dur} for ts, dur in host]
    events.append({"ph": "X", "pid": 7, "tid": 3, "name": "memset", "ts": 0.5, "dur": 0.1})
    return {"traceEvents": events}


def _chain(start, n, dur, gap):
    return [(start + i * (dur + gap), dur) for i in range(n)]


def test_kernel_events_are_the_device_events_of_that_name_sorted():
    kernels = [(30.0, 2.0), (10.0, 1.0)]
    data = _trace(kernels, host=[(5.0, 50.0)])
    assert device_trace.kernel_events(data, "kv_canary") == sorted(kernels)
    assert device_trace.device_pids(data) == {7}


def test_kernel_events_without_a_match_is_empty_and_says_what_there_is(capsys):
    assert device_trace.kernel_events(_trace([(1.0, 1.0)]), "no_such_kernel") == []
    assert "kv_canary_scatter_req_token_ids" in capsys.readouterr().out


@pytest.mark.parametrize("dur, gap", [(2.0, 0.5), (5.0, 0.0), (0.7, 3.0)])
def test_chained_device_us_is_duration_plus_gap_per_application(dur, gap):
    chain = 16
    events = _chain(100.0, chain, dur, gap) + _chain(900.0, chain, dur, gap) + _chain(2000.0, chain, dur, gap + 10)
    got = device_trace.chained_device_us(events, chain)
    assert got == pytest.approx(dur + gap)  # the median call; the third (slower) one is outvoted


def test_chained_device_us_refuses_events_that_are_not_whole_chains():
    events = _chain(0.0, 16, 1.0, 1.0)
    assert device_trace.chained_device_us(events[:-1], 16) is None
    assert device_trace.chained_device_us([], 16) is None
    assert device_trace.chained_device_us(events[:1], 1) is None


def test_load_trace_reads_the_profilers_file(tmp_path):
    data = _trace([(1.0, 2.0)])
    folder = tmp_path / "plugins" / "profile" / "run"
    folder.mkdir(parents=True)
    with gzip.open(folder / "host.trace.json.gz", "wt") as f:
        json.dump(data, f)
    assert device_trace.load_trace(str(tmp_path)) == data
    assert device_trace.load_trace(str(folder.parent.parent.parent / "plugins" / "profile")) == data


def test_load_trace_without_a_file_is_none(tmp_path, capsys):
    assert device_trace.load_trace(str(tmp_path)) is None
    assert "no trace file" in capsys.readouterr().out


def test_bench_ratios_of_device_and_chained_figures():
    measures = {"jax_pallas_us": 4.0, "jax_mosaic_us": 6.0, "jax_pallas_device_us": 2.0, "jax_mosaic_device_us": 2.1}
    out = bench.derived(measures, empty_us=3.0)
    assert out["mosaic_over_pallas"] == pytest.approx(1.5)
    assert out["mosaic_over_pallas_device"] == pytest.approx(1.05)
    assert out["mosaic_minus_pallas_device_us"] == pytest.approx(0.1)
    assert "mosaic_over_pallas_device" not in bench.derived({"jax_pallas_device_us": 2.0}, empty_us=3.0)


def test_bench_host_work_per_application_is_chained_minus_device():
    measures = {"jax_pallas_us": 2.0, "jax_mosaic_us": 4.5, "jax_pallas_device_us": 2.25, "jax_mosaic_device_us": 2.25}
    out = bench.derived(measures, empty_us=3.0)
    assert out["mosaic_host_us"] == pytest.approx(2.25)
    assert out["pallas_host_us"] == pytest.approx(-0.25)  # the chained figure's noise can put it below the device's
    assert "mosaic_host_us" not in bench.derived({"jax_mosaic_us": 4.5}, empty_us=3.0)
    assert {"pallas_host_us", "mosaic_host_us"} <= {key for key, _ in bench.COLUMNS}


def test_bench_ratios_of_the_triton_kernel_flushed_and_chained():
    measures = {"torch_triton_us": 9.0, "per_request_tile_us": 10.0, "same_bytes_copy_us": 8.0, "empty_kernel_us": 4.0,
                "torch_triton_chained_us": 6.0, "per_request_tile_chained_us": 5.0}
    out = bench.derived(measures, empty_us=3.0)
    assert out["triton_over_baseline"] == pytest.approx(0.9)
    assert out["triton_over_copy"] == pytest.approx(1.125)
    assert out["triton_over_baseline_chained"] == pytest.approx(1.2)
    assert out["triton_over_empty_us"] == pytest.approx(5.0)
    assert "triton_over_baseline_chained" not in bench.derived({"torch_triton_chained_us": 6.0}, empty_us=3.0)


def test_trace_runs_the_function_under_the_profiler_and_returns_its_trace():
    jax = pytest.importorskip("jax")
    ran = []
    f = jax.jit(lambda x: x + 1)
    data = device_trace.trace(lambda: ran.append(f(jax.numpy.ones(4)).block_until_ready()))
    assert ran and data is not None and data["traceEvents"]


def test_trace_calls_threads_the_pool_through_every_call():
    jax = pytest.importorskip("jax")
    f = jax.jit(lambda a, p: p + a)
    seen = []
    data = device_trace.trace_calls(lambda a, p: seen.append(1) or f(a, p), (jax.numpy.int32(2),), jax.numpy.zeros(3, "int32"), 4)
    assert data is not None and len(seen) == 4


def test_added_kernel_us_sums_the_device_events_the_step_without_the_op_lacks(monkeypatch):
    """The op's own kernels per call: device events named as none of the step without it, host events left out."""
    without = _trace([(0.0, 50.0)], name="gemm")
    with_op = _trace([(0.0, 50.0), (60.0, 50.0)], name="gemm")
    with_op["traceEvents"] += [{"ph": "X", "pid": 7, "tid": 3, "name": "input_scatter_fusion", "ts": 120.0, "dur": 3.0},
                               {"ph": "X", "pid": 7, "tid": 3, "name": "input_scatter_fusion", "ts": 130.0, "dur": 5.0},
                               {"ph": "X", "pid": 1, "tid": 1, "name": "host_only", "ts": 0.0, "dur": 99.0}]
    names = device_trace.kernel_names(without)
    assert names == {"gemm", "memset"}
    monkeypatch.setattr(device_trace, "trace", lambda run: with_op)
    assert device_trace.added_kernel_us(lambda: None, names, calls=2) == 4.0
    monkeypatch.setattr(device_trace, "trace", lambda run: None)
    assert device_trace.added_kernel_us(lambda: None, names, calls=2) is None
