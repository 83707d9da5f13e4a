"""The shared contract for the JAX frontend's XLA implementation."""

import pytest

pytest.importorskip("jax")

from kv_canary_jax.conformance import XlaRunner  # noqa: E402
from tests.contract import ScatterContract  # noqa: E402


class TestJaxXla(ScatterContract):
    @classmethod
    def make_runner(cls):
        return XlaRunner()
