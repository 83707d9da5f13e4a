"""Choosing a backend: ``backend="auto" | "triton" | "torch" | "pallas"``.

Contract: ``resolve(backend, pool_out, *inputs) -> "triton" | "torch" | "pallas"``
names the implementation that will run, or raises ``errors.choice_error``
(``backend`` is not one of ``BACKENDS``: an unknown name, or not a ``str`` at
all, such as a numpy array of names) or ``errors.unavailable_error`` (a known
backend that cannot run on these tensors here). It reads the device type of
``pool_out`` (the argument checks have already put every argument there) and,
only inside a ``torch.func`` transform, whether ``pool_out`` or one of
``inputs`` is one of its wrapped tensors; it never touches data.

- ``"auto"``: Triton for CUDA tensors (when triton is installed), the
  vectorized torch path for every other device.
- ``"triton"``: CUDA tensors; CPU tensors only in Triton's interpreter, i.e.
  when the kernel was defined with ``TRITON_INTERPRET=1`` (Triton reads that
  variable when a kernel is defined, so the kernel module is imported lazily,
  at the first Triton use).
- ``"torch"``: any device torch runs on.
- inside a ``torch.func`` transform (``vmap``, ``grad``, ...), on its wrapped
  tensors: only ``"torch"``, whose tensor ops the transform follows; the
  kernels of ``"triton"`` and ``"pallas"`` read the tensors' memory, which
  wrapped tensors do not have (``errors.TORCH_FUNC_TRANSFORMED``), and
  ``"auto"`` runs ``"torch"``.
- ``"pallas"``: the JAX frontend's Pallas kernel on these tensors, moved
  through DLPack (``pallas_backend``): the one JAX's default picks, compiled
  for CUDA tensors (Mosaic GPU on Hopper and newer), in Pallas' interpreter
  for CPU tensors. Needs jax installed (not x64: the backend enables it for
  its own call only, ``pallas_backend.x64_scope``) and a Pallas kernel JAX can
  run on that device here; otherwise the reason is
  ``pallas_backend.unavailable_reason``'s, written for a torch caller.

Answers are cached per ``(backend, device type)``; under ``torch.compile`` the
cache lookup is a constant dict read that Dynamo traces, and ``_triton_reason``
and ``_pallas_reason`` (which import modules) are kept out of the graph with
``assume_constant_result``. Only ``"pallas"`` imports JAX, at its first
resolution for a device type.
"""

from __future__ import annotations

import importlib.util

import torch

from kv_canary_torch.traced import assume_constant_result
from shared_spec import errors

BACKENDS: tuple[str, ...] = ("auto", "triton", "torch", "pallas")
AUTO, TRITON, TORCH, PALLAS = "auto", "triton", "torch", "pallas"

_HAVE_TRITON = importlib.util.find_spec("triton") is not None
_HAVE_JAX = importlib.util.find_spec("jax") is not None

# (backend, device type) -> implementation name, or the reason it cannot run.
_resolved: dict[tuple[str, str], tuple[str | None, str | None]] = {}


@assume_constant_result
def _triton_reason(device_type: str) -> str | None:
    """Why Triton cannot run on tensors of ``device_type`` here (None: it can)."""
    if not _HAVE_TRITON:
        return errors.TRITON_NOT_INSTALLED
    if device_type == "cuda":
        return None
    if device_type == "cpu":
        from kv_canary_torch.launch import dispatch

        return None if dispatch.interpreted() else errors.TRITON_NEEDS_CUDA
    return errors.TRITON_NEEDS_CUDA


@assume_constant_result
def _pallas_reason(device_type: str) -> str | None:
    """Why no JAX Pallas kernel can run on tensors of ``device_type`` here (None: one can)."""
    if not _HAVE_JAX:
        return errors.PALLAS_NEEDS_JAX
    from kv_canary_torch import pallas_backend

    return pallas_backend.unavailable_reason(device_type)


def _resolve_uncached(backend: str, device_type: str) -> tuple[str | None, str | None]:
    if backend == TORCH:
        return TORCH, None
    if backend == TRITON:
        reason = _triton_reason(device_type)
    elif backend == PALLAS:
        reason = _pallas_reason(device_type)
    else:  # auto
        return (TRITON, None) if device_type == "cuda" and _HAVE_TRITON else (TORCH, None)
    return (None, reason) if reason is not None else (backend, None)


def _transformed(tensors) -> bool:
    """Whether one of ``tensors`` (None: an argument not given, such as ``start_cols``) is wrapped by a
    ``torch.func`` transform (one C++ call when none is active)."""
    if not torch._C._are_functorch_transforms_active():
        return False
    return any(t is not None and torch._C._functorch.is_functorch_wrapped_tensor(t) for t in tensors)


def resolve(backend, pool_out: torch.Tensor, *inputs: torch.Tensor) -> str:
    """The implementation to run for ``backend`` on ``pool_out``'s device, or raise (see the module docstring)."""
    if type(backend) is not str:
        # A str first: a membership test on another object (a numpy array of names) is an array, not a
        # bool. A str subclass (numpy.str_) is its plain str, which is what the cache below may hold.
        if not isinstance(backend, str):
            raise errors.choice_error("backend", backend, BACKENDS)
        backend = str(backend)
    if backend not in BACKENDS:
        raise errors.choice_error("backend", backend, BACKENDS)
    if backend != TORCH and _transformed((pool_out, *inputs)):
        if backend == AUTO:
            return TORCH
        raise errors.unavailable_error("backend", backend, errors.TORCH_FUNC_TRANSFORMED)
    key = (backend, "cuda" if pool_out.is_cuda else pool_out.device.type)
    found = _resolved.get(key)
    if found is None:
        found = _resolved[key] = _resolve_uncached(*key)
    name, reason = found
    if name is None:
        raise errors.unavailable_error("backend", backend, reason)
    return name
