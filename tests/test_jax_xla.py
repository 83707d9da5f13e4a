"""The shared contract for the JAX frontend's XLA implementation."""

import pytest

pytest.importorskip("jax")

from kv_canary_jax.conformance import XlaRunner  # noqa: E402
from tests.contract import ScatterContract  # noqa: E402


class TestJaxXla(ScatterContract):
    examples = 10  # XLA compiles each new shape (~0.1 s on a CPU)
    @classmethod
    def make_runner(cls):
        return XlaRunner()
