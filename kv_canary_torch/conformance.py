"""``shared_spec.conformance.Runner``s for the torch frontend: ``runners()``, a ``TorchRunner`` per backend.

Each runs the launchers with its ``backend=`` on ``cuda:0`` when torch sees a GPU (so the device-mismatch cases
apply) and on the CPU otherwise, writes in place, is judged by the ``"torch"`` mode, and names the launcher's own
reason in ``unavailable`` where its backend cannot run here.
"""

from __future__ import annotations

import numpy as np
import torch

from kv_canary_arrays.frameworks import cuda_available
from kv_canary_torch.assign import assign_req_to_token_pool_func
from kv_canary_torch.backends import resolve
from kv_canary_torch.launcher import launch_scatter_req_token_ids_kernel
from shared_spec.cases import ArrayData
from shared_spec.checks import ASSIGN
from shared_spec.conformance import Runner


class TorchRunner(Runner):
    frontend = "torch"
    mode = "torch"
    in_place = True

    def __init__(self, backend: str):
        self.backend = backend
        self.accelerator = "cuda:0" if cuda_available() else None
        try:
            resolve(backend, torch.empty((0, 0), dtype=torch.int32, device=self.device))
        except ValueError as error:
            self.unavailable = str(error)

    def array(self, data: ArrayData, device: str) -> torch.Tensor:
        return torch.tensor(data.data, dtype=getattr(torch, data.dtype)).reshape(data.shape).to(device)

    def scatter(self, args: dict, check_values: bool):
        launch_scatter_req_token_ids_kernel(**args, check_values=check_values, backend=self.backend)
        return args["pool_out"]

    def assign(self, args: dict):
        assign_req_to_token_pool_func(*(args[arg.name] for arg in ASSIGN.args), args["batch_size"],
                                      backend=self.backend)
        return args["req_to_token"]

    def numpy(self, native) -> np.ndarray:
        native = native.detach().cpu()
        return (native.float() if native.dtype == torch.bfloat16 else native).numpy()

    def column_slice(self, parent, start: int, width: int):
        return parent[:, start: start + width]

    def broadcast_rows(self, row, n_rows: int):
        return row.expand(n_rows, -1)


def runners() -> list[TorchRunner]:
    """``torch/triton`` and ``torch/torch``."""
    return [TorchRunner("triton"), TorchRunner("torch")]
