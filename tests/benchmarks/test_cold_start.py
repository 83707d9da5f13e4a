"""benchmarks/cold_start.py without a GPU: its three cases run and report (the interpreter's times mean nothing)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_case_runs_and_reports_its_figures():
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cold_start.py"), "--calls", "8", "--early", "3", "5",
                           "--settled", "6", "8", "--a-seconds", "0.3", "--json"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert set(results["cases"]) == {"after_short_process", "after_killed_process", "never_run"}
    for found in results["cases"].values():
        b = found["b"]
        assert b["early_median_us"] > 0 and b["settled_us"] > 0 and b["first_call_us"] > 0 and b["partials_left"] == []
    assert results["cases"]["after_killed_process"]["a"]["killed"]
    assert set(results["bars"]) == {"early_within_2x", "settled_at_most_10us", "no_partial"}
