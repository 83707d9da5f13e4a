"""Shared bits of the torch frontend's tests (not a test module)."""

from __future__ import annotations

import numpy as np
import torch


def device_for(backend: str) -> str:
    """Where a test runs ``backend``: Triton needs CUDA tensors unless it is interpreted (no GPU here)."""
    from kv_canary.platform import cuda_available

    return "cuda" if backend == "triton" and cuda_available() else "cpu"


def sentinel(n_rows: int, width: int, seed: int = 0, device="cpu") -> torch.Tensor:
    """A pool of distinct non-zero sentinels, as a tensor."""
    from tests.strategies import sentinel_pool

    return torch.from_numpy(sentinel_pool(n_rows, width, seed)).to(device)


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()
