"""``kv_canary.bench_incremental`` in its tiny configuration on the CPU (Triton's interpreter): the times mean nothing
here; what is checked is the structure of the figures, the method (steps taking turns, a timed step's host and wall
time, the kernels' rounds on pools of their own) and that every pool a part writes is the reference's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kv_canary import bench_host, bench_incremental
from kv_canary.bench_incremental import TINY
from kv_canary.platform import cuda_available

# TINY runs the Triton kernels on CPU tensors, which only Triton's interpreter takes (tests/conftest.py sets it where
# there is no CUDA); on a GPU machine `kv-canary bench --incremental` is the run.
pytestmark = pytest.mark.skipif(cuda_available(), reason="Triton's interpreter is on only without CUDA")


def fake_timers(log: list):
    """Stand-ins for ``bench.flushed_us`` and ``chained_us`` on the CPU: every run called in turns, round by round."""

    def flushed(torch_, runs, rounds, before_round):
        for k in range(rounds):
            before_round(k)
            for name, fn in runs.items():
                log.append(("flushed", k, name))
                fn()
        return {name: 2.0 + i for i, name in enumerate(runs)}

    def chained(torch_, runs):
        for name, fn in runs.items():
            log.append(("chained", name))
            fn()
        return {name: 1.0 for name in runs}

    return flushed, chained


@pytest.fixture(scope="module")
def figures():
    log = []
    flushed, chained = fake_timers(log)
    return bench_incremental.measure(torch, TINY, flushed=flushed, chained=chained), log


def test_every_step_of_every_size_has_host_and_wall_figures(figures):
    measured, _ = figures
    assert [(r["bs"], r["context"]) for r in measured["steps"]] == list(TINY.step_sizes)
    for row in measured["steps"]:
        assert row["snapshot_tokens"] == row["bs"] * row["context"]
        for step in ("full_pageable", "full_pinned", "incremental"):
            f = row[step]
            full = step != "incremental"
            assert set(f) == {"wall_us", "wall_p90_us", "host_us", "host_p90_us"} | ({"snapshot_us"} if full else set())
            assert 0 < f["host_us"] <= f["wall_us"] and f["wall_us"] <= f["wall_p90_us"]
            assert not full or 0 < f["snapshot_us"] < f["host_us"]
        incremental = row["incremental"]["wall_us"]
        assert row["pinned_over_incremental"] == row["full_pinned"]["wall_us"] / incremental
        assert row["pinned_unbuilt_over_incremental"] == (row["full_pinned"]["wall_us"] - row["full_pinned"]["snapshot_us"]) / incremental


def test_the_windowed_kernel_rows_take_turns_on_a_pool_of_their_own_each_round(figures):
    measured, log = figures
    assert [(r["bs"], r["seq"], r["ragged"]) for r in measured["windowed"]] == [c[:3] for c in TINY.window_cases]
    order = [entry for entry in log if entry[0] == "flushed"][: TINY.window_rounds * 3]
    assert order == [("flushed", k, name) for k in range(TINY.window_rounds) for name in bench_incremental.WINDOWINGS]
    for row in measured["windowed"]:
        assert row["zeros_ratio"] == row["zeros_us"] / row["unwindowed_us"] == 3.0 / 2.0
        assert row["append_minus_us"] == row["append_us"] - row["unwindowed_us"] == 2.0
        assert row["append_chained_ratio"] == 1.0


def test_host_time_with_start_cols_beside_the_launcher_and_one_torch_op(figures):
    measured, _ = figures
    expected = {f"{p}/{r}" for p in bench_host.PATTERNS for r in bench_incremental.HOST_RUNS}
    assert set(measured["host"]) == expected
    assert all(v["median_us"] > 0 for v in measured["host"].values())


def test_the_tables_hold_every_row(figures):
    measured, _ = figures
    text = bench_incremental.render(measured)
    assert text.count("\n## ") == 2 and text.startswith("## torch: the serving step")
    assert text.count(" |\n|---|") == 3  # each table's head right above its rule
    for bs, context in TINY.step_sizes:
        assert f"| {bs} x {context} | {bs * context} |" in text
    assert "| ragged 4 x 24 |" in text and "| (b) bs and N change every call |" in text


def test_a_step_that_writes_the_wrong_pool_fails(monkeypatch):
    """The check after the timing compares with the reference: a step that skips its launch is caught."""
    monkeypatch.setattr(bench_incremental.IncrementalStep, "__call__", lambda self, requests, new: None)
    with pytest.raises(AssertionError, match="step incremental at 3x16: the pool differs from the reference"):
        bench_incremental.step_figures(torch, 3, 16, TINY)


def test_a_windowed_kernel_that_writes_the_wrong_cells_fails(monkeypatch):
    """A windowed launch one column off (every start_cols + 1) is caught by the check after the timing."""
    import kv_canary_torch

    launch = kv_canary_torch.launch_scatter_req_token_ids_kernel

    def one_off(**kw):
        if kw["start_cols"] is not None:
            kw["start_cols"] = kw["start_cols"] + 1
        launch(**kw)

    monkeypatch.setattr(kv_canary_torch, "launch_scatter_req_token_ids_kernel", one_off)
    flushed, chained = fake_timers([])
    with pytest.raises(AssertionError, match=r"zeros at \(3, 16, False, False\): pool 0 differs from the reference"):
        bench_incremental.window_figures(torch, (3, 16, False, False), TINY, flushed, chained)


def test_append_positions_keep_every_token_in_the_row():
    offsets = np.array([0, 5, 5, 17, 30])
    for seed in range(20):
        cols = bench_incremental.append_columns(offsets, 12, seed)
        assert cols.dtype == np.int64 and cols.shape == (4,)
        assert np.all(cols >= 0) and np.all(cols <= np.maximum(12 - np.diff(offsets), 0))
