"""Devices and platforms as the JAX frontend names them.

Contract:

- ``device_name(device) -> str``: the spec's canonical device name, ``"cpu"``
  for the host and ``"cuda:N"`` for the N-th local CUDA GPU (``"rocm:N"``,
  ``"tpu:N"``, ... for other platforms), as ``ArrayView.device`` expects.
- ``single_device(x) -> jax.Device | None``: the one device a concrete
  ``jax.Array`` lives on; None for tracers (no device at trace time) and for
  arrays sharded over several devices (no single place to compare).
- ``platform(device) -> str``: the lowering platform of a device, as
  ``jax.lax.platform_dependent`` spells it (``"cpu"``, ``"cuda"``, ``"rocm"``,
  ``"tpu"``).
- ``default_platform() -> str``: the platform of ``jax.devices()[0]``, where
  JAX puts uncommitted data and what a jitted function compiles for by default.
- ``gpu_device() -> jax.Device | None``: the first CUDA GPU JAX sees, or None.
- ``accelerator_device() -> jax.Device | None``: that GPU, else the first TPU
  JAX sees, else None.
- ``is_tracer(x) -> bool``: ``x`` is being traced (no data, no device).

``platform``, ``device_name``, ``single_device`` and ``is_tracer`` are
``kv_canary_arrays.devices``' (the torch frontend names JAX devices too).
Nothing here touches array data.
"""

from __future__ import annotations

import functools

import jax

from kv_canary_arrays import devices
from kv_canary_arrays.devices import CPU, CUDA, is_tracer

__all__ = [
    "CPU", "CUDA", "TPU", "accelerator_device", "default_platform", "device_name", "gpu_device", "is_tracer",
    "platform", "single_device",
]
# The lowering platform of TPUs, as jax.lax.platform_dependent names it.
TPU = "tpu"

# The names both frontends need live in the neutral layer (kv_canary_arrays.devices);
# the JAX frontend keeps calling them by its own names.
platform = devices.jax_platform
device_name = devices.jax_device_name
single_device = devices.jax_single_device


def default_platform() -> str:
    """The platform JAX computes on when nothing says otherwise."""
    return platform(jax.devices()[0])


@functools.cache
def gpu_device():
    """The first CUDA GPU JAX sees (None on a machine without one, or with a CPU-only jaxlib)."""
    try:
        devices = jax.devices("gpu")
    except RuntimeError:  # no GPU backend in this jaxlib
        return None
    for device in devices:
        if platform(device) == CUDA:
            return device
    return None


@functools.cache
def accelerator_device():
    """The first CUDA GPU JAX sees, else its first TPU (None on a host without either)."""
    gpu = gpu_device()
    if gpu is not None:
        return gpu
    try:
        tpus = jax.devices(TPU)
    except RuntimeError:  # no TPU backend here
        return None
    return tpus[0] if tpus else None
