"""``kv_canary.bench_assign`` in its tiny configuration on the CPU (Triton's interpreter; JAX's XLA): the times mean
nothing here; what is checked is the correctness gate (identical tables against the baseline and the reference),
the figures' structure and their rendering."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kv_canary import bench_assign
from kv_canary.bench_assign import TINY
from kv_canary.platform import cuda_available
from tests.tools.test_bench_incremental import fake_timers

pytestmark = pytest.mark.skipif(cuda_available(), reason="Triton's interpreter is on only without CUDA")


@pytest.fixture(scope="module")
def figures():
    log = []
    flushed, chained = fake_timers(log)
    return bench_assign.measure(torch, TINY, flushed=flushed, chained=chained), log


def test_every_case_has_both_runs_flushed_and_chained(figures):
    measured, log = figures
    assert [r["case"] for r in measured["device"]] == [c[0] for c in TINY.cases]
    for row in measured["device"]:
        assert row["ratio"] == row["ours_us"] / row["baseline_us"]
        assert row["ratio_chained"] == row["ours_chained_us"] / row["baseline_chained_us"]
    assert {name for kind, *rest, name in log if kind == "flushed"} == set(bench_assign.RUNS)


def test_host_figures_cover_every_pattern_and_run(figures):
    measured, _ = figures
    assert set(measured["host"]) == {f"{p}/{r}" for p in bench_assign.HOST_PATTERNS for r in bench_assign.HOST_RUNS}
    assert all(0 < f["median_us"] <= f["p90_us"] for f in measured["host"].values())
    # the share of our calls the native call path served: off on the CPU (no driver), else a fraction
    shares = [measured["host"][f"{p}/ours"]["native_share"] for p in bench_assign.HOST_PATTERNS]
    assert all(share is None or 0 <= share <= 1 for share in shares)
    assert "ours served natively" in bench_assign.render(dict(measured, jax=None))


def test_the_gate_refuses_a_table_that_differs_from_the_baseline(monkeypatch):
    flushed, chained = fake_timers([])
    real = bench_assign._calls

    def broken(torch_):
        calls = real(torch_)
        return calls | {"baseline": lambda rows, table, *rest: table[0].fill_(5) if table.shape[0] else None}

    monkeypatch.setattr(bench_assign, "_calls", broken)
    with pytest.raises(AssertionError, match="differs from the baseline"):
        bench_assign.device_figures(torch, TINY.cases[1], TINY, flushed, chained)


def test_sglang_inputs_are_well_formed():
    rows, start, end, loc = bench_assign.sglang_inputs(30, (1, 9), (40, 12))
    assert len(set(rows.tolist())) == 30 and (rows < 40).all()
    assert (0 <= start).all() and (start < end).all() and (end <= 12).all() and loc.shape[0] == (end - start).sum()


def test_plain_xla_assign_is_the_reference_on_sglangs_inputs():
    jax = pytest.importorskip("jax")
    inputs = bench_assign.sglang_inputs(20, (1, 30), TINY.table)
    table = np.full(TINY.table, bench_assign.SENTINEL, np.int32)
    got = bench_assign.plain_xla_assign(*(jax.numpy.asarray(x) for x in inputs), jax.numpy.asarray(table))
    np.testing.assert_array_equal(np.asarray(got), bench_assign.expected_table(inputs, TINY.table))


def test_jax_part_and_rendering(figures):
    pytest.importorskip("jax")
    measured, _ = figures
    rows = bench_assign.measure_jax(TINY)
    assert [r["case"] for r in rows] == [c[0] for c in TINY.cases]
    for r in rows:
        assert set(r["library_marginal_us"]) == {"median", "q1", "q3", "min", "max"}
    text = bench_assign.render(measured | {"jax": rows})
    assert text.count("\n## ") == 2 and text.startswith("## torch: assign_req_to_token_pool")
    for case, *_ in TINY.cases:
        assert text.count(f"| {case} |") == 2
    assert "## JAX" not in bench_assign.render(measured | {"jax": None})
