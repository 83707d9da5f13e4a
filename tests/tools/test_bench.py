"""kv-canary bench's pure helpers with fake timers, its page, and its parts in miniature on the CPU (interpreted)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from kv_canary.bench import report, timing, torch_parts
from shared_spec.reference import assign_reference, scatter_reference
from tests.tools.frontends import frontends_load, needs_frontends


def test_interleaved_rounds_rotate_the_order():
    order = []
    timing.interleaved_samples({"a": "a", "b": "b", "c": "c"}, order.append, rounds=4)
    assert order == list("abc" "bca" "cab" "abc")


def test_host_timer_drops_the_warmup_round_and_syncs_after_each_round():
    ticks, syncs, calls = itertools.count(0, 10), [], []
    runs = {"ours": (lambda *step: calls.append(step), [(1,), (2,), (3,)]), "op": (lambda *step: None, [(1,), (2,), (3,)])}
    ns = timing.host_ns(runs, lambda: syncs.append(1), rounds=2, clock=ticks.__next__)
    assert ns == {"ours": [10] * 6, "op": [10] * 6}
    assert len(calls) == 9 and len(syncs) == 6


def test_summary_and_spread():
    assert timing.summary(range(1, 11)) == {"median": 5.5, "p90": 9}
    assert timing.spread([5, 1, 3, 2, 4]) == {"median": 3, "q1": 2, "q3": 4, "min": 1, "max": 5}
    assert timing.spread([7.0])["q1"] == 7.0


def row(workload, tokens, ours, sglang, chained=(1.0, 1.0)):
    return {"workload": workload, "tokens": tokens, "ours_us": ours, "sglang_us": sglang,
            "ours_chained_us": chained[0], "sglang_chained_us": chained[1]}


def test_ratio_summary_splits_at_256k_tokens():
    rows = [row("a", 2**18, 9.0, 10.0), row("b", 2**20, 11.0, 10.0), row("c", 100, 5.5, 5.0), row("d", 10, 4.0, 5.0)]
    found = report.ratio_summary(rows)
    assert found["large"] == {"workloads": 2, "worst_ratio": 1.1, "worst": "b", "mean_ratio": pytest.approx(1.0)}
    assert found["small"] == {"workloads": 2, "worst_diff_us": 0.5, "worst": "c"}
    assert "small" not in report.ratio_summary(rows[:2], "_chained")


def fake_parts() -> dict:
    stamp = {"date": "2026-01-01", "python": "3.12", "torch": "2.11", "gpu": "Test GPU", "driver": "1",
             "command": "kv-canary bench --device --write"}
    f = {"median": 5.0, "p90": 6.0}
    host = {p: {n: f for n in ("ours", "ours_start_cols", "sglang", "torch_op")} for p in torch_parts.HOST_PATTERNS}
    step = {"case": "256x64", "tokens": 16384, "step_us": 300.0, "noise_us": 4.0, "errors": {},
            "marginal_us": {n: timing.spread([2.0, 3.0]) for n in ("default", "xla", "plain")},
            "vs_plain": {"default": 0.5, "xla": 0.5, "plain": 1.0}}
    side = {"wall_us": 20.0, "wall_p90_us": 22.0, "host_us": 15.0}
    return {
        "device": {"measured": stamp, "rows": [row("8x128", 1024, 5.0, 5.5), row("256x8192", 2**21, 12.0, 12.5)]},
        "host": {"measured": stamp, "patterns": host},
        "first_call": {"measured": stamp, "launchers": {n: {"import_s": 3.0, "first_call_s": 2.0, "early_us": 9.0,
                                                             "settled_us": 6.0} for n in ("ours", "sglang")}},
        "incremental": {"measured": stamp, "rows": [{"requests": 64, "context": 2048, "full_pinned": side | {"snapshot_us": 5.0},
                                                    "incremental": side, "incremental_eager": side, "timer_us": 2.0,
                                                    "pinned_over_incremental": 1.0}]},
        "step": {"measured": stamp, "rows": [step]},
        "assign": {"measured": stamp, "device": [{**row("x", 1, 1.0, 2.0), "case": "decode 1", "slots": 1}],
                   "host": {"decode": {n: f for n in ("ours", "sglang", "torch_op")}},
                   "step": [{**step, "case": "decode 1", "slots": 1}]},
    }


def test_the_page_has_every_section_with_its_command_and_a_row_per_figure():
    page = report.render(fake_parts())
    for _, title, _ in report.SECTIONS:
        assert f"## {title}" in page
    assert page.count("`kv-canary bench --device --write` (? s), 2026-01-01, Test GPU (driver 1)") == 6
    assert "| 256x8192 | 2097152 | 12.00 | 12.50 | 0.96 |" in page
    assert "ratio worst 0.960 (256x8192)" in page and "ours at most -0.50 us" in page
    assert "| new_n | 5.00 / 6.00 |" in page and "| 256x64 | 16384 | 300 | 4.0 | 2.5 (0.50x) |" in page


def test_write_merges_parts_into_the_page(tmp_path):
    parts = fake_parts()
    report.write(tmp_path, {"device": parts["device"]})
    report.write(tmp_path, {"host": parts["host"]})
    merged = json.loads((tmp_path / "performance.json").read_text())["parts"]
    assert set(merged) == {"device", "host"}
    page = (tmp_path / "performance.md").read_text()
    assert "## torch: device time" in page and "## torch: host time" in page


def test_host_patterns():
    new_n = torch_parts.host_steps("new_n", 4)
    assert [int(s[1][-1]) for s in new_n] == [64 * 16, 64 * 17, 64 * 18, 64 * 19]
    new_bs_n = torch_parts.host_steps("new_bs_n", 6)
    sizes = [s[2].shape[0] for s in new_bs_n]
    assert all(a != b for a, b in zip(sizes, sizes[1:])) and max(s[2].max() for s in new_bs_n) < torch_parts.HOST_POOL[0]
    repeat = torch_parts.host_steps("repeat", 3)
    assert repeat[0] is repeat[2]


def test_assign_inputs_are_the_windowed_scatter():
    rows, table, start, end, loc = torch_parts.assign_inputs(5, 3, context=40)
    offsets = np.concatenate([[0], np.cumsum(end - start)])
    assert np.array_equal(assign_reference(rows, table, start, end, loc), scatter_reference(loc, offsets, rows, table, start))


def test_the_jax_step_in_miniature_on_the_cpu():
    from kv_canary.bench import jax_step
    from shared_spec import arg_specs

    implementations = [jax_step.PLAIN] + ([jax_step.DEFAULT] if frontends_load() else [])
    flat_in, offsets, rows, pool = arg_specs.make_batch("4x24r", dtype=np.int32)
    failures, small = [], {"rounds": 2, "steps": 2, "warmup": 1, "size": 8}
    found = jax_step.measure_case("scatter", "4x24r", (flat_in, offsets, rows), pool,
                                  scatter_reference(flat_in, offsets, rows, pool), implementations, failures, **small)
    rows_, table, start, end, loc = torch_parts.assign_inputs(6, 4, context=30, dtype=np.int32)
    jax_step.measure_case("assign", "a", (rows_, start, end, loc), table, assign_reference(rows_, table, start, end, loc),
                          implementations, failures, **small)
    assert failures == [] and set(found["marginal_us"]) == set(implementations)


@needs_frontends
def test_the_torch_parts_in_miniature_on_the_cpu():
    import torch

    from kv_canary.bench import first_call, incremental

    small = {"calls": 2, "rounds": 1, "device": "cpu"}
    host = torch_parts.host(torch, print, pool=(97, 512), **small)
    assert set(host) == set(torch_parts.HOST_PATTERNS) and set(host["new_n"]) == {"ours", "ours_start_cols", "sglang", "torch_op"}
    assert set(torch_parts.assign_host(torch, print, table=(97, 512), **small)) == {"decode", "extend"}
    step = incremental.step_figures(torch, 3, 16, device="cpu", rounds=1, calls=2, warmup=1)
    for launcher in first_call.LAUNCHERS:
        assert first_call.child(launcher, device="cpu", calls=6)["first_call_s"] > 0
    assert step["full_pinned"]["wall_us"] > 0 and step["incremental"]["host_us"] > 0
    assert step["incremental_eager"]["wall_us"] > 0


def test_bench_runs_every_part_writes_each_and_reports_a_failed_one(monkeypatch, tmp_path, capsys):
    import torch

    from kv_canary import bench, cli
    from kv_canary.bench import first_call, incremental

    parts = fake_parts()

    def mismatch(*args):
        raise torch_parts.Mismatch("assign ours at decode 1: the pool differs from shared_spec.reference")

    monkeypatch.setattr(bench, "gpu_visible", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench, "jax_child", lambda kinds, quiet: {
        "meta": {}, "step": parts["step"]["rows"], "assign_step": [], "failures": [], "seconds": {"step": 60.0}})
    monkeypatch.setattr(torch_parts, "device", lambda torch, workloads, say: parts["device"]["rows"])
    monkeypatch.setattr(torch_parts, "host", lambda torch, say: parts["host"]["patterns"])
    monkeypatch.setattr(first_call, "first_call", lambda say: parts["first_call"]["launchers"])
    monkeypatch.setattr(incremental, "incremental", lambda torch, say: parts["incremental"]["rows"])
    monkeypatch.setattr(torch_parts, "assign_device", mismatch)
    code = cli.main(["bench", "--json", "-q", "--write", str(tmp_path)])
    found = json.loads(capsys.readouterr().out)
    assert code == cli.EXIT_FAILED and found["failures"] == [
        "assign: Mismatch: assign ours at decode 1: the pool differs from shared_spec.reference"]
    assert set(found["parts"]) == {"device", "host", "first_call", "incremental", "step"}
    assert found["parts"]["device"]["summary"]["flushed"]["large"]["worst"] == "256x8192"
    assert set(json.loads((tmp_path / "performance.json").read_text())["parts"]) == set(found["parts"])
    assert "(60 s)" in (tmp_path / "performance.md").read_text()
