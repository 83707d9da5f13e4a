"""What this machine can run, asked without starting more than needed."""

from __future__ import annotations

import functools
import importlib.util


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@functools.cache
def cuda_available() -> bool:
    """True when torch sees a CUDA GPU (False without torch)."""
    if not installed("torch"):
        return False
    import torch

    return torch.cuda.is_available()
