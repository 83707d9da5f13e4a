"""The contract on the torch frontend's vectorized torch backend."""

from kv_canary_torch.conformance import TorchRunner
from tests.contract import ScatterContract


class TestTorchVectorized(ScatterContract):
    examples = 40  # no compile: cheap per example
    @classmethod
    def make_runner(cls):
        return TorchRunner("torch")
