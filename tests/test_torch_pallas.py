"""The contract on the torch frontend's ``backend="pallas"``: the JAX kernel on torch memory."""

from kv_canary_torch.conformance import TorchRunner
from tests.contract import ScatterContract


class TestTorchPallas(ScatterContract):
    examples = 15  # Pallas' interpreter on a CPU-only machine: slow per call

    @classmethod
    def make_runner(cls):
        return TorchRunner("pallas")
