"""Which framework an object belongs to (without importing any), and what this machine has.

``is_torch``, ``is_jax``, ``is_numpy`` look in ``sys.modules``: an object can only be a torch tensor if torch is
imported. ``installed(module)`` asks the import system without importing; ``cuda_available()`` imports torch.
"""

from __future__ import annotations

import functools
import importlib.util
import sys


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


def is_tracer(x) -> bool:
    """A JAX value being traced (under jit, vmap, checkify): no data, no device."""
    core = sys.modules.get("jax._src.core")  # where Tracer lives in every JAX this supports
    return core is not None and isinstance(x, core.Tracer)
