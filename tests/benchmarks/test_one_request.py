"""benchmarks/one_request.py without a GPU: every way it times writes the reference's pool (its check), and it
reports each way at each token count; the device figures are a GPU's only."""

from __future__ import annotations

import importlib.util

import pytest

jax = pytest.importorskip("jax")

from tests.jax_support import ROOT  # noqa: E402


def load_script():
    spec = importlib.util.spec_from_file_location("one_request", ROOT / "benchmarks" / "one_request.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_way_is_checked_and_reported_at_each_count(monkeypatch):
    script = load_script()
    monkeypatch.setattr(script, "POOL", (9, 40))
    monkeypatch.setattr(script, "FIRST_COLUMN", 3)  # windows inside the row, one clipped at its end
    rows = script.measure([1, 3, 40], calls=2, traces=1)
    assert [row["tokens"] for row in rows] == [1, 3, 40]
    for row in rows:
        assert set(row["alone_us"]) == set(script.ways(False)) and "device_us" not in row
        assert all(us > 0 for us in row["alone_us"].values())


def test_a_wrong_way_fails_the_check(monkeypatch):
    script = load_script()
    monkeypatch.setattr(script, "POOL", (9, 40))
    monkeypatch.setattr(script, "FIRST_COLUMN", 3)
    ways = script.ways
    monkeypatch.setattr(script, "ways", lambda kernels: {**ways(kernels), "one request": lambda f, o, r, s, p: p})
    with pytest.raises(AssertionError, match="one request at 3 tokens"):
        script.measure([3], calls=1, traces=1)
