"""benchmarks/import_cost.py on cheap statements: its turns, medians, differences, skips and output.

The script's statements import the frameworks (seconds each); here they are swapped for standard-library imports
(hundredths of a second), which exercise the same arithmetic and the same fresh interpreters. Whether
``import kv_canary_torch`` leaves ``torch._dynamo`` out is held where a worker's first calls are
(``tests/torch_support.first_calls_in_a_fresh_process``), not here.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def script(monkeypatch):
    spec = importlib.util.spec_from_file_location("import_cost", ROOT / "benchmarks" / "import_cost.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "STATEMENTS", {"torch": "import json", "kv_canary_torch": "import json, csv",
                                               "jax": "import json", "kv_canary_jax": "import json"})
    monkeypatch.setattr(module, "FRAMEWORK", {"torch": "json", "kv_canary_torch": "json",
                                              "jax": "no_such_framework_here", "kv_canary_jax": "no_such_framework_here"})
    monkeypatch.setattr(module, "NO_DYNAMO", "print(True)")
    return module


def test_each_statement_runs_every_round_and_the_difference_is_of_medians(script, monkeypatch):
    ran = []
    seconds = iter([0.5, 0.9, 0.4, 0.7, 0.3, 0.8])  # torch, kv_canary_torch, three rounds in turns
    monkeypatch.setattr(script, "fresh_seconds", lambda statement: ran.append(statement) or next(seconds))
    figures = script.measure(3)
    assert ran == ["import json", "import json, csv"] * 3
    torch_s = figures["seconds"]["torch"]
    assert (torch_s["median_s"], torch_s["min_s"], torch_s["max_s"]) == (0.4, 0.3, 0.5)
    assert figures["kv_canary_torch_over_torch_s"] == pytest.approx(statistics.median([0.9, 0.7, 0.8]) - 0.4)
    assert figures["skipped"] == ["jax", "kv_canary_jax"] and "kv_canary_jax_over_jax_s" not in figures
    assert figures["kv_canary_torch_leaves_dynamo_out"] is True


def test_a_real_round_in_fresh_interpreters_renders_and_prints_json(script, capsys):
    figures = script.measure(1)
    assert all(0 < f["median_s"] < 60 for f in figures["seconds"].values())
    text = script.render(figures)
    assert "import json, csv" in text and "kv_canary_torch_over_torch_s" in text and "skipped" in text
    assert script.main(["--rounds", "1", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["seconds"]) == {"torch", "kv_canary_torch"} and printed["rounds"] == 1
