"""Which framework an object belongs to, and what this machine can run.

Contract: ``is_torch(x)``, ``is_jax(x)`` and ``is_numpy(x)`` answer without
importing anything: an object can only be a torch tensor (a JAX array) if torch
(JAX) is already imported, so they look in ``sys.modules``. ``installed(name)``
asks the import system without importing; ``cuda_available()`` imports torch
(once) and is False without it.
"""

from __future__ import annotations

import functools
import importlib.util
import sys

# The frontends' frameworks, as kv_canary_arrays.describe takes them.
TORCH, JAX = "torch", "JAX"


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@functools.cache
def cuda_available() -> bool:
    """True when torch sees a CUDA GPU (False without torch)."""
    if not installed("torch"):
        return False
    import torch

    return torch.cuda.is_available()


def is_torch(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_jax(x) -> bool:
    """A ``jax.Array``, concrete or traced."""
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def is_numpy(x) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(x, numpy.ndarray)
