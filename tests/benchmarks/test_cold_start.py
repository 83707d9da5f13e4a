"""benchmarks/cold_start.py without a GPU: its three cases run and report (the interpreter's times mean nothing)."""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.children import Child

ROOT = pathlib.Path(__file__).resolve().parents[2]
CASES = ("after_short_process", "after_killed_process", "never_run")


def cold_start(cases: tuple[str, ...]) -> Child:
    return Child([str(ROOT / "benchmarks" / "cold_start.py"), "--calls", "8", "--early", "3", "5", "--settled", "6", "8",
                  "--a-seconds", "0.3", "--json", *(f"--case={c}" for c in cases)],
                 set_env={"TRITON_INTERPRET": "1"}, timeout=600)


# By default the case with a kill (process A killed in its first call, then B); every case in the slow set. A
# case is a few fresh interpreters with torch (seconds each here), and B is the same child in each.
RUNS = {("after_killed_process",): cold_start(("after_killed_process",)), CASES: cold_start(CASES)}


@pytest.mark.parametrize("cases", [
    pytest.param(("after_killed_process",), id="killed", marks=RUNS["after_killed_process",].ahead),
    pytest.param(CASES, id="every-case", marks=[pytest.mark.slow, RUNS[CASES].ahead]),
])
def test_each_case_runs_and_reports_its_figures(cases):
    done = RUNS[cases].run()
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
