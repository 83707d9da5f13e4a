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
    edge case on the interpreter), through ``dispatch.use_rule``; the default rule again after. A generator: yield
    from it in a fixture."""
    from kv_canary_torch.launch import plan as launch_plan

    yield from using_rule(launch_plan.RULE._replace(large_block=block, small_cells=-1, tiled_fill=0, tiled_min_tiles=0,
                                                    tiled_min_tokens=0))


def using_rule(rule):
    """Every launch planned under ``rule`` inside (``dispatch.use_rule``), the default rule after. A generator."""
    from kv_canary_torch.launch import dispatch, plan as launch_plan

    dispatch.use_rule(rule)
    try:
        yield
    finally:
        dispatch.use_rule(launch_plan.RULE)


def native_module(tmp_path_factory):
    """The launcher's native piece built into a cache folder the test run's workers share (not the default cache:
    its static state is this path's own)."""
    from kv_canary_torch.launch import native

    return native.load_module(native.build(shared_native_cache(tmp_path_factory)))


def shared_native_cache(tmp_path_factory):
    """The cache folder the test run's workers share for the native piece."""
    return tmp_path_factory.getbasetemp().parent / "kv-canary-native"
