"""The shared contract for the JAX frontend's Pallas kernel (interpreted without a GPU)."""

import pytest

pytest.importorskip("jax")

from kv_canary_jax.conformance import PallasRunner  # noqa: E402
from tests.contract import INTERPRETED_CASE_EVERY, ScatterContract  # noqa: E402


class TestJaxPallas(ScatterContract):
    case_every = INTERPRETED_CASE_EVERY  # a compile per case: a sample by default (tests/contract.py)
    # Each new shape recompiles the interpreted kernel; keep the property cheap.
    examples = 6
    few_shapes = True

    @classmethod
    def make_runner(cls):
        return PallasRunner()
