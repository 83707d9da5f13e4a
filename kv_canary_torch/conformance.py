"""``shared_spec.conformance.Runner``s for the torch frontend: one per backend.

Contract: ``runners()`` returns a runner for ``backend="triton"``,
``backend="torch"`` and ``backend="pallas"``. Each computes on ``cuda:0`` when torch sees a GPU (so the
device-mismatch cases apply) and on the CPU otherwise, writes ``pool_out`` in
place, and sets ``unavailable`` (with the launcher's own reason) where its
backend cannot run here -- Triton on a CPU-only machine without
``TRITON_INTERPRET=1``, or without triton installed.
"""

from __future__ import annotations

import numpy as np
import torch

from kv_canary_arrays.frameworks import cuda_available
from kv_canary_torch import backends
from kv_canary_torch.assign import assign_req_to_token_pool_func
from kv_canary_torch.launcher import launch_scatter_req_token_ids_kernel
from shared_spec.assignment import ARGUMENT_NAMES, BATCH_SIZE
from shared_spec.cases import ArrayData
from shared_spec.conformance import Runner


# assign_req_to_token_pool_func's positional arguments, in sglang's order.
ASSIGN_NAMES = (*ARGUMENT_NAMES, BATCH_SIZE)


class TorchRunner(Runner):
    """The torch launcher with a fixed ``backend=``."""

    frontend = "torch"
    in_place = True
    assigns = True

    def __init__(self, backend: str):
        self.backend = backend
        self.accelerator = "cuda:0" if cuda_available() else None
        self.unavailable = self._why_unavailable()

    def _why_unavailable(self) -> str | None:
        probe = torch.empty((0, 0), dtype=torch.int32, device=self.device)
        try:
            backends.resolve(self.backend, probe)
        except ValueError as error:
            return str(error)
        return None

    # -- hooks -------------------------------------------------------------
    def array(self, data: ArrayData, device: str) -> torch.Tensor:
        tensor = torch.tensor(data.data, dtype=getattr(torch, data.dtype)).reshape(data.shape)
        return tensor.to(device)

    def call(self, args: dict, check_values: bool) -> torch.Tensor:
        launch_scatter_req_token_ids_kernel(**args, check_values=check_values, backend=self.backend)
        return args["pool_out"]

    def assign(self, args: dict) -> torch.Tensor:
        assign_req_to_token_pool_func(*(args[name] for name in ASSIGN_NAMES), backend=self.backend)
        return args["req_to_token"]

    def numpy(self, native: torch.Tensor) -> np.ndarray:
        native = native.detach().cpu()
        if native.dtype == torch.bfloat16:  # numpy has no bfloat16; float32 holds every value
            native = native.float()
        return native.numpy()

    def column_slice(self, parent: torch.Tensor, start: int, width: int) -> torch.Tensor:
        return parent[:, start : start + width]

    def broadcast_rows(self, row: torch.Tensor, n_rows: int) -> torch.Tensor:
        return row.expand(n_rows, -1)


def runners() -> list[Runner]:
    """One runner per torch backend: Triton, vectorized torch, and the Pallas kernel through DLPack."""
    return [TorchRunner(backends.TRITON), TorchRunner(backends.TORCH), TorchRunner(backends.PALLAS)]
