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


def tiled_everywhere(monkeypatch, block: int):
    """Make every contiguous batch launch the tiled kernel with ``block``-column tiles (small enough to reach every
    edge case on the interpreter); forgets every plan and bound kernel before and after. A generator: yield from it
    in a fixture."""
    from kv_canary_torch.launch import dispatch, plan as launch_plan

    monkeypatch.setattr(launch_plan, "LARGE", (block, 4, 4096, False))
    monkeypatch.setattr(launch_plan, "SMALL_CELLS", -1)
    monkeypatch.setattr(launch_plan, "TILED_FILL", 0)
    monkeypatch.setattr(launch_plan, "TILED_MIN_TILES", 0)
    monkeypatch.setattr(launch_plan, "TILED_MIN_TOKENS", 0)
    dispatch.forget()
    yield
    dispatch.forget()
