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
- ``is_tracer(x) -> bool``: ``x`` is being traced (no data, no device).

Nothing here touches array data.
"""

from __future__ import annotations

import functools

import jax

try:  # public in every JAX this supports; the fallback guards against a later move
    from jax.core import Tracer
except ImportError:  # pragma: no cover
    from jax._src.core import Tracer

CPU, CUDA = "cpu", "cuda"


def is_tracer(x) -> bool:
    """True for a value being traced (under jit, vmap, checkify, ...): no data, no device."""
    return isinstance(x, Tracer)


def platform(device) -> str:
    """``"cpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``: the name lowering uses for ``device``'s platform."""
    name = device.platform
    if name != "gpu":
        return name
    version = str(getattr(device.client, "platform_version", "")).lower()
    return "rocm" if "rocm" in version else CUDA


def device_name(device) -> str:
    """Canonical name of one device: ``cpu`` or ``<platform>:<local index>``.

    The host is ``cpu``, as torch names it. JAX can split the host into several
    devices (``--xla_force_host_platform_device_count``); those past the first
    are ``cpu:1``, ``cpu:2``, ... so that arrays on two of them are told apart.
    """
    kind = platform(device)
    if kind == CPU:
        return CPU if device.id == 0 else f"{CPU}:{device.id}"
    index = getattr(device, "local_hardware_id", None)
    return f"{kind}:{device.id if index is None else index}"


def single_device(x):
    """The device of a concrete single-device ``jax.Array``; None for tracers and sharded arrays."""
    if is_tracer(x):
        return None
    devices = x.devices()
    if len(devices) != 1:
        return None
    (device,) = devices
    return device


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
