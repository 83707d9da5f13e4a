"""Canonical device names, as ``shared_spec.checks.ArrayView.device`` expects them.

Contract:

- ``torch_device_name(tensor) -> str``: ``cpu``, ``cuda:0`` (torch always gives
  a CUDA tensor an index), ``meta``, ...
- ``jax_device_name(device) -> str``: ``cpu`` for the host and ``cuda:N`` for
  the N-th local CUDA GPU (``rocm:N``, ``tpu:N``, ... for other platforms), so
  that a JAX array and a torch tensor on one GPU get one name.
- ``jax_platform(device) -> str``: the lowering platform of a JAX device, as
  ``jax.lax.platform_dependent`` spells it (``cpu``, ``cuda``, ``rocm``, ``tpu``).
- ``jax_single_device(x)``: the one device a concrete ``jax.Array`` lives on;
  None for tracers (no device at trace time) and for arrays sharded over
  several devices (no single place to compare).
- ``is_tracer(x) -> bool``: ``x`` is a JAX value being traced (no data, no device).

Nothing here touches array data; JAX is imported only by the JAX questions.
"""

from __future__ import annotations

import sys

CPU, CUDA = "cpu", "cuda"


def torch_device_name(tensor) -> str:
    return str(tensor.device)


_tracer = None  # jax's Tracer class, looked up at the first question


def _tracer_class():
    # A global rather than functools.cache: TorchDynamo, tracing a torch caller that passes a JAX
    # array, warns about every cache-wrapped function it meets.
    global _tracer
    if _tracer is None:
        try:  # public in every JAX this supports; the fallback guards against a later move
            from jax.core import Tracer
        except ImportError:  # pragma: no cover
            from jax._src.core import Tracer
        _tracer = Tracer
    return _tracer


def is_tracer(x) -> bool:
    """True for a value being traced (under jit, vmap, checkify, ...)."""
    return "jax" in sys.modules and isinstance(x, _tracer_class())


def jax_platform(device) -> str:
    name = device.platform
    if name != "gpu":
        return name
    version = str(getattr(device.client, "platform_version", "")).lower()
    return "rocm" if "rocm" in version else CUDA


def jax_device_name(device) -> str:
    """Canonical name of one JAX device: ``cpu`` or ``<platform>:<local index>``.

    The host is ``cpu``, as torch names it. JAX can split the host into several
    devices (``--xla_force_host_platform_device_count``); those past the first
    are ``cpu:1``, ``cpu:2``, ... so that arrays on two of them are told apart.
    """
    kind = jax_platform(device)
    if kind == CPU:
        return CPU if device.id == 0 else f"{CPU}:{device.id}"
    index = getattr(device, "local_hardware_id", None)
    return f"{kind}:{device.id if index is None else index}"


def jax_single_device(x):
    if is_tracer(x):
        return None
    devices = x.devices()
    if len(devices) != 1:
        return None
    (device,) = devices
    return device
