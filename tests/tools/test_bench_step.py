"""``python -m kv_canary.bench_step``: the scatter's marginal cost in a server-like jitted step.

On the CPU the bench runs its whole path on tiny shapes with XLA (and the
default, which is XLA here); the GPU test runs every implementation there.
"""

from __future__ import annotations

import json

import numpy as np

import pytest

pytest.importorskip("jax")

from kv_canary import bench_step  # noqa: E402
from kv_canary_jax import available_implementations, platforms  # noqa: E402
from tests.jax_support import default_gpu_kernel  # noqa: E402

TINY = ["--rounds", "3", "--steps", "2", "--warmup", "1", "--size", "32", "--json"]


def test_every_implementation_gets_a_marginal_cost_with_its_spread(capsys):
    assert bench_step.main(["--impl", "xla", "--impl", "default", "--case", "3x40", "--case", "2x16ra", *TINY]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["case"], r["implementation"]) for r in out["rows"]] == [
        ("3x40", "xla"), ("3x40", "default"), ("2x16ra", "xla"), ("2x16ra", "default"),
    ]
    assert out["default"] == bench_step.default_name()  # xla on a CPU, the platform's kernel where there is one
    for row in out["rows"]:
        m = row["marginal_us"]
        assert m["min"] <= m["q1"] <= m["median"] <= m["q3"] <= m["max"]
        assert row["step_without_us"] > 0 and row["step_with_us"] > 0
    assert out["rows"][0]["tokens"] == 120 and out["meta"]["rounds"] == 3


def test_the_plain_formulation_is_a_column_and_each_row_is_compared_with_it(capsys):
    assert bench_step.main(["--impl", "xla", "--impl", "plain", "--case", "3x40", *TINY]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["implementation"] for r in rows] == ["xla", "plain"]
    plain = rows[1]["marginal_us"]["median"]
    for r in rows:  # a ratio of medians, None where plain's marginal cost came out <= 0 (noise at these sizes)
        assert r["vs_plain"] == (r["marginal_us"]["median"] / plain if plain > 0 else None)


def test_the_plain_formulation_is_right_for_well_formed_batches():
    import jax

    from shared_spec import scatter_reference
    from tests.contract import assert_same_pool
    from tests.strategies import large_batch

    for seed in range(3):
        b = large_batch(bs=30, width=9, seed=seed)
        assert_same_pool(np.asarray(jax.jit(bench_step.plain_xla_scatter)(*b)), scatter_reference(*b))


def test_short_is_the_cpu_variant(capsys):
    assert bench_step.main(["--short", "--case", "2x16", "--impl", "plain", "--rounds", "2", "--steps", "2", "--warmup", "1", "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)["meta"]
    assert (meta["size"], meta["rounds"], meta["steps"]) == (bench_step.SHORT_SIZE, 2, 2)


def test_fresh_inputs_are_copied_every_step(capsys):
    assert bench_step.main(["--impl", "xla", "--case", "2x16", "--fresh-inputs", *TINY]) == 0
    assert json.loads(capsys.readouterr().out)["meta"]["fresh_inputs"] is True


def test_a_result_that_disagrees_with_the_reference_fails(monkeypatch, capsys):
    import kv_canary_jax

    monkeypatch.setattr(kv_canary_jax, "scatter_req_token_ids", lambda f, o, r, pool, **kw: pool)  # writes nothing
    assert bench_step.main(["--impl", "xla", "--case", "2x16", *TINY]) == 1
    assert "disagrees with the reference: 2x16 xla" in capsys.readouterr().err


def test_windowed_each_implementation_also_with_start_cols_and_the_ratio(capsys):
    assert bench_step.main(["--impl", "xla", "--impl", "plain", "--case", "3x40r", "--windowed", *TINY]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["implementation"], r["windowed"]) for r in rows] == [
        ("xla", False), ("plain", False), ("xla", True), ("plain", True)]
    unwindowed, plain, windowed, plain_windowed = (r["marginal_us"]["median"] for r in rows)
    assert rows[2]["over_unwindowed"] == (windowed / unwindowed if unwindowed > 0 else None)
    assert rows[0]["over_unwindowed"] is None and rows[1]["over_unwindowed"] is None
    # a windowed row is compared with the windowed plain formulation
    assert rows[2]["vs_plain"] == (windowed / plain_windowed if plain_windowed > 0 else None)
    assert rows[0]["vs_plain"] == (unwindowed / plain if plain > 0 else None)
    assert bench_step.main(["--impl", "xla", "--case", "3x40r", "--windowed", *TINY[:-1]]) == 0
    assert "| xla, start_cols |" in capsys.readouterr().out


def test_the_plain_windowed_formulation_is_right_for_well_formed_windowed_batches():
    import jax

    from kv_canary.bench import make_inputs
    from kv_canary.bench_incremental import append_columns
    from shared_spec.reference import scatter_reference
    from tests.contract import assert_same_pool

    for bs, seq, ragged in ((3, 40, False), (5, 24, True)):
        flat_in, offsets, rows, pool = make_inputs(bs, seq, ragged)
        start_cols = append_columns(offsets, pool.shape[1])
        out = jax.jit(bench_step.plain_windowed_scatter)(flat_in, offsets, rows, start_cols, pool)
        assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool, start_cols))


def test_windowed_alone_defaults_to_the_library_implementations(capsys):
    assert bench_step.main(["--case", "2x16", "--windowed", *TINY]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    here = [i for i in bench_step.IMPLEMENTATIONS if i in available_implementations()]
    assert [(r["implementation"], r["windowed"]) for r in rows] == [(i, False) for i in here] + [(i, True) for i in here]


def test_a_windowed_result_that_ignores_start_cols_fails(monkeypatch, capsys):
    import kv_canary_jax

    scatter = kv_canary_jax.scatter_req_token_ids
    monkeypatch.setattr(kv_canary_jax, "scatter_req_token_ids",
                        lambda f, o, r, pool, start_cols=None, **kw: scatter(f, o, r, pool, **kw))
    assert bench_step.main(["--impl", "xla", "--case", "3x40r", "--windowed", *TINY]) == 1
    assert "disagrees with the reference: 3x40r xla windowed" in capsys.readouterr().err


def test_spread_of_per_round_figures():
    assert bench_step.spread([5.0, 1.0, 3.0, 2.0, 4.0]) == {"median": 3.0, "q1": 2.0, "q3": 4.0, "min": 1.0, "max": 5.0}
    assert bench_step.spread([7.0]) == {"median": 7.0, "q1": 7.0, "q3": 7.0, "min": 7.0, "max": 7.0}


@pytest.mark.gpu
@pytest.mark.skipif(platforms.gpu_device() is None, reason="JAX sees no CUDA GPU")
def test_on_a_gpu_every_implementation_runs_and_the_default_is_the_gpu_kernel(capsys):
    assert bench_step.main(["--case", "64x512", "--case", "8x2048r", *TINY]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["default"] == default_gpu_kernel("cuda", False)
    expected = {i for i in bench_step.IMPLEMENTATIONS if i in available_implementations()} | {bench_step.PLAIN, bench_step.DEFAULT}
    assert {r["implementation"] for r in out["rows"]} == expected


def test_process_clock_times_the_cpu_work_of_this_process(capsys):
    assert bench_step.main(["--impl", "xla", "--impl", "plain", "--case", "3x40", "--clock", "process", *TINY]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["meta"]["clock"] == "process" and len(out["rows"]) == 2
    calls = []
    step = lambda: calls.append(1)  # noqa: E731
    assert bench_step.median_step_us(step, 3, clock=iter([0.0, 1e-6, 2.0, 2.0 + 3e-6, 5.0, 5.0 + 2e-6]).__next__) == pytest.approx(2.0)
    assert len(calls) == 3
