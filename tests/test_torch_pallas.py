"""The contract on the torch frontend's ``backend="pallas"``: the JAX kernel on torch memory."""

from kv_canary_torch.conformance import TorchRunner
from tests.contract import ScatterContract


class TestTorchPallas(ScatterContract):
    examples = 4  # Pallas' interpreter on a CPU-only machine: a compile per shape

    @classmethod
    def make_runner(cls):
        return TorchRunner("pallas")
