"""Choosing a backend: ``backend="auto" | "triton" | "torch"``.

``resolve(backend, output, transformed)`` names the implementation that runs on ``output``'s device, or raises
``errors.choice_error`` (not one of ``BACKENDS``, or not a str) or ``errors.unavailable_error`` (a backend that
cannot run here). ``"auto"``: Triton for CUDA tensors (triton installed), torch otherwise. ``"triton"``: CUDA
tensors; CPU tensors only where the kernels run in Triton's interpreter (``TRITON_INTERPRET=1`` when they were
defined). ``"torch"``: any device. Inside a ``torch.func`` transform, on its wrapped tensors (``transformed``),
only torch, whose ops the transform follows: the kernels read memory, which wrapped tensors do not have.
"""

from __future__ import annotations

import importlib.util

import torch

from shared_spec import errors

BACKENDS = ("auto", "triton", "torch")
HAVE_TRITON = importlib.util.find_spec("triton") is not None

_active = torch._C._are_functorch_transforms_active
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def transformed(*tensors) -> bool:
    """Whether a ``torch.func`` transform wraps one of ``tensors`` (None: an argument not given)."""
    return _active() and any(t is not None and _wrapped(t) for t in tensors)


def resolve(backend, output: torch.Tensor, transformed: bool = False) -> str:
    """The implementation to run (module docstring)."""
    if type(backend) is not str:
        if not isinstance(backend, str):  # before any comparison: a numpy array of names compares elementwise
            raise errors.choice_error("backend", backend, BACKENDS)
        backend = str(backend)
    if backend == "auto":
        return "torch" if transformed or not (output.is_cuda and HAVE_TRITON) else "triton"
    if backend not in BACKENDS:
        raise errors.choice_error("backend", backend, BACKENDS)
    if backend == "torch":
        return "torch"
    if transformed:
        raise errors.unavailable_error("backend", backend, errors.TORCH_FUNC_TRANSFORMED)
    if not HAVE_TRITON:
        raise errors.unavailable_error("backend", backend, errors.TRITON_NOT_INSTALLED)
    if not output.is_cuda:
        from kv_canary_torch import launch

        if output.device.type != "cpu" or not launch.interpreted():
            raise errors.unavailable_error("backend", backend, errors.TRITON_NEEDS_CUDA)
    return "triton"
