"""benchmarks/jax_windowed_kernel_times.py without a GPU: the smoke case checked in the interpreter, the clean skip,
and the table's ratios (per round, windowed over unwindowed, the median over rounds)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import jax
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("jax_windowed_kernel_times", ROOT / "benchmarks" / "jax_windowed_kernel_times.py")
times = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(times)

NO_GPU = jax.devices()[0].platform != "gpu"


def test_the_smoke_case_checks_every_variant_of_each_implementation(capsys):
    assert times.main(["--smoke"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{times.SMOKE_CASE} {impl} {variant}: agrees with the reference (interpreted, not timed)"
                     for impl in times.IMPLEMENTATIONS for variant in times.VARIANTS]


def test_the_variants_write_the_same_bytes():
    inputs = times.variant_inputs("8x32r")
    assert inputs["unwindowed"][3] is None and not inputs["zeros"][3].any()
    assert (inputs["unwindowed"][5] == inputs["zeros"][5]).all()
    # append: every token still written, at a moved position
    assert (inputs["append"][5] != -7).sum() == (inputs["unwindowed"][5] != -7).sum()
    assert inputs["append"][3].any()


@pytest.mark.skipif(not NO_GPU, reason="the skip is for machines without a GPU")
def test_without_a_gpu_it_says_so_and_measures_nothing(capsys):
    assert times.main(["--case", "256x32768"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip() == times.NO_GPU


def test_the_ratios_pair_each_round_and_take_the_median():
    figures = {"unwindowed": {"kernel": [10.0, 20.0, 10.0], "chain": [5.0, 5.0, 5.0]},
               "zeros": {"kernel": [11.0, 20.0, 10.5], "chain": [5.0, 6.0, 5.5]},
               "append": {"kernel": [10.0, 30.0, 10.0], "chain": [4.0, 5.0, 6.0]}}
    assert times.ratios(figures, "zeros", "kernel") == pytest.approx(1.05)
    assert times.ratios(figures, "append", "kernel") == 1.0
    assert times.ratios(figures, "zeros", "chain") == pytest.approx(1.1)
    row = times.table_row("64x8192", "mosaic", 524288, figures)
    assert row == "| 64x8192 | 524288 | mosaic | 10.00 | 11.00 | 1.050 | 1.100 | 10.00 | 1.000 | 1.000 |"
    assert len(row.split("|")) == len(times.HEADER.splitlines()[0].split("|"))
    assert math.isnan(times.ratios({"unwindowed": {"kernel": []}, "zeros": {"kernel": []}}, "zeros", "kernel"))


def test_measure_chains_checks_and_traces_every_variant_in_rounds():
    # In the interpreter no GPU kernel runs, so every figure is NaN; the chains, their checks and the rounds run.
    figures = times.measure(times.variant_inputs(times.SMOKE_CASE), times.SMOKE_CASE, "pallas", rounds=2, calls=1,
                            interpret=True)
    assert set(figures) == set(times.VARIANTS)
    assert all(len(f["kernel"]) == len(f["chain"]) == 2 and all(map(math.isnan, f["kernel"])) for f in figures.values())
