"""benchmarks/mosaic_host_cost.py without a GPU: its floor kernel lowers like the scatter, and its arithmetic.

The script times on a GPU only; here its four-operand empty kernel is lowered
for CUDA (Pallas' Mosaic GPU lowering needs no GPU), so that the floor it
compares the scatter's host cost with is a custom call of the same form.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from kv_canary_jax import implementations  # noqa: E402
from tests.jax_support import ROOT, assert_one_bare_mosaic_call, lower_for_cuda  # noqa: E402

pytestmark = pytest.mark.skipif(implementations.mosaic_import_error() is not None, reason="no Mosaic GPU here")


@pytest.fixture(scope="module")
def script():
    """benchmarks/mosaic_host_cost.py as a module (benchmarks/ is not a package; it imports mosaic_launch_floor beside it)."""
    spec = importlib.util.spec_from_file_location("mosaic_host_cost", ROOT / "benchmarks" / "mosaic_host_cost.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(ROOT / "benchmarks"))


def test_the_four_operand_floor_is_a_call_of_the_scatters_form(script):
    shapes = [((1,), jnp.int64)] * 3 + [((8, 128), jnp.int32)]
    assert_one_bare_mosaic_call(lower_for_cuda(script.empty_mosaic_four_operands, *shapes))


def test_host_is_wall_minus_device_and_ours_is_beyond_the_empty_kernel(script):
    def rounds(*walls, device):
        return [{"wall": w, "device": device, "host": w - device} for w in walls]

    samples = {
        script.EMPTY_POOL: rounds(2.0, 2.2, 2.1, device=0.7),
        script.EMPTY_FOUR: rounds(2.1, 2.3, 2.2, device=0.7),
        "mosaic 64x8192": rounds(4.0, 4.4, 4.1, device=2.2),
    }
    table = script.summary(samples)
    assert table["mosaic 64x8192"] == pytest.approx({"wall": 4.1, "device": 2.2, "host": 1.9, "host_min": 1.8, "host_max": 2.2})
    lines = script.ours(table, ["64x8192", "256x2048"])
    assert lines == [
        "three more operands (empty kernel, 4 operands - pool alone): +0.10 us/app",
        "mosaic 64x8192: host 1.90 us/app, +0.50 beyond the empty kernel's 1.40",
    ]
