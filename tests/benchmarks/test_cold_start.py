"""benchmarks/cold_start.py without a GPU: its three cases run and report (the interpreter's times mean nothing)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


CASES = ("after_short_process", "after_killed_process", "never_run")


# By default the case with a kill (process A killed in its first call, then B); every case in the slow set. A
# case is a few fresh interpreters with torch (seconds each here), and B is the same child in each.
@pytest.mark.parametrize("cases", [pytest.param(("after_killed_process",), id="killed"),
                                   pytest.param(CASES, id="every-case", marks=pytest.mark.slow)])
def test_each_case_runs_and_reports_its_figures(cases):
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cold_start.py"), "--calls", "8", "--early", "3", "5",
                           "--settled", "6", "8", "--a-seconds", "0.3", "--json", *(f"--case={c}" for c in cases)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert tuple(results["cases"]) == cases
    for found in results["cases"].values():
        b = found["b"]
        assert b["early_median_us"] > 0 and b["settled_us"] > 0 and b["first_call_us"] > 0 and b["partials_left"] == []
    assert results["cases"]["after_killed_process"]["a"]["killed"]
    if "after_short_process" in cases:
        assert set(results["bars"]) == {"early_within_2x", "settled_at_most_10us", "no_partial"}
    else:
        assert results["bars"] is None  # the bars are after_short_process's
