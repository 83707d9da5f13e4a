"""The contract on the torch frontend's two backends (Triton interpreted on a CPU-only machine)."""

import pytest

from kv_canary_arrays.frameworks import cuda_available
from kv_canary_torch.conformance import TorchRunner
from tests.contract import Contract


class _Torch(Contract):
    backend = ""

    @classmethod
    def make_runner(cls):
        return TorchRunner(cls.backend)


class TestTriton(_Torch):
    backend = "triton"
    # Interpreted, each program runs in numpy: a few examples, a sample of the value cases, and a large batch just
    # past the 256-column launch shape (2000 requests of 9 columns are 18000 cells).
    examples = 20 if cuda_available() else 6
    case_every = 1 if cuda_available() else 4
    large_bs = 3000 if cuda_available() else 2000


class TestTorch(_Torch):
    backend = "torch"
