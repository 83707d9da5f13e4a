"""Choosing an implementation: ``implementation=None | "pallas" | "mosaic" | "mosaic_tpu" | "xla" | sequence``.

``choice(implementation, platform, interpret) -> Choice`` names what runs, or raises ``errors.choice_error`` (a
name, or a sequence entry, not in ``IMPLEMENTATIONS``), ``errors.unavailable_error`` (one name that cannot run
here) or ``errors.none_available_error`` (a sequence none of which can). ``available_implementations(interpret)``
names those that run on the platform of JAX's default device.

- ``"xla"``: every platform. ``"pallas"``: the Triton-lowered kernel, CUDA GPUs. ``"mosaic"``: Mosaic GPU, CUDA GPUs
  of compute capability 9.0 or newer (the first CUDA GPU JAX sees decides). ``"mosaic_tpu"``: TPUs. With
  ``interpret=True`` each Pallas kernel runs in its interpreter on any platform. Each kernel needs its Pallas module
  (``.triton``, ``.mosaic_gpu``, ``.tpu``) to import; that module is imported only when the name is probed, after
  the platform allows it, and its import error is the reason it is unavailable.
- A sequence (``list`` or ``tuple``): the first name that runs. None: ``DEFAULT``. On a Hopper GPU the default
  never probes the Triton lowering (deprecated in JAX 0.11): "mosaic" comes first and runs.
- ``platform`` None (traced arrays carry no device): a name per platform this process has devices for, picked
  when lowering (``lax.platform_dependent``); errors are raised for the default platform's choice only. Platforms
  absent here are not probed, so a CPU process never imports a GPU lowering by default.

A ``Choice`` is a tuple of ``(platform, name)`` pairs (hashable: a static jit argument); platform None is the
default branch.
"""

from __future__ import annotations

import functools
import importlib

import jax

from kv_canary_arrays.describe import jax_platform
from shared_spec import errors

PALLAS, MOSAIC, MOSAIC_TPU, XLA = "pallas", "mosaic", "mosaic_tpu", "xla"
IMPLEMENTATIONS = (PALLAS, MOSAIC, MOSAIC_TPU, XLA)
# Mosaic GPU first (Hopper and newer, and it keeps the deprecated Triton lowering unimported), the Triton-lowered
# kernel for older GPUs while JAX ships it, XLA everywhere. A TPU takes XLA until the Mosaic TPU kernel has passed
# on a TPU (it is tested interpreted only).
DEFAULT = (MOSAIC, PALLAS, XLA)
OPTION = "implementation"
MODULES = {PALLAS: "jax.experimental.pallas.triton", MOSAIC: "jax.experimental.pallas.mosaic_gpu",
           MOSAIC_TPU: "jax.experimental.pallas.tpu"}
NOT_IMPORTABLE = {PALLAS: errors.PALLAS_NOT_IMPORTABLE, MOSAIC: errors.MOSAIC_NOT_IMPORTABLE,
                  MOSAIC_TPU: errors.MOSAIC_TPU_NOT_IMPORTABLE}

Choice = tuple[tuple[str | None, str], ...]


def requested(implementation) -> tuple[tuple[str, ...], bool]:
    """The names to try, in order, and whether exactly one name was asked for."""
    if implementation is None:
        return DEFAULT, False
    if isinstance(implementation, str):
        names, single = (implementation,), True
    elif isinstance(implementation, (list, tuple)) and implementation:
        names, single = tuple(implementation), False
    else:
        raise errors.choice_error(OPTION, implementation, IMPLEMENTATIONS)
    for name in names:
        if not isinstance(name, str) or name not in IMPLEMENTATIONS:
            raise errors.choice_error(OPTION, str(name) if isinstance(name, str) else name, IMPLEMENTATIONS)
    return tuple(str(name) for name in names), single


@functools.cache
def import_error(name: str) -> str | None:
    """Why the Pallas module of kernel ``name`` does not import here, as ``"Class: message"`` (None: it does)."""
    try:
        importlib.import_module(MODULES[name])
    except Exception as error:  # ImportError, or a lowering that fails to initialize
        return f"{type(error).__name__}: {error}"
    return None


@functools.cache
def gpu_capability() -> tuple[int, int] | None:
    """``(major, minor)`` of the first CUDA GPU JAX sees (None: none, or it does not say)."""
    device = first_device("cuda")
    try:
        major, minor = str(device.compute_capability).split(".")[:2]
        return int(major), int(minor)
    except (AttributeError, ValueError):
        return None


def first_device(platform: str):
    """The first device JAX sees of ``platform`` (cpu, cuda, rocm, tpu); None without one."""
    try:
        devices = jax.devices("gpu" if platform in ("cuda", "rocm") else platform)
    except RuntimeError:  # no backend of that kind in this jaxlib
        return None
    return next((d for d in devices if jax_platform(d) == platform), None)


def default_platform() -> str:
    """The platform of JAX's default device (a ``jax.default_device`` context included)."""
    device = jax.config.jax_default_device
    if isinstance(device, str):
        device = jax.devices(device)[0]
    return jax_platform(device or jax.devices()[0])


def unavailable_reason(name: str, platform: str, interpret: bool) -> str | None:
    """Why ``name`` cannot run on ``platform`` (None: it can)."""
    if name == XLA:
        return None
    if not interpret:
        if name == PALLAS and platform != "cuda":
            return errors.PALLAS_NEEDS_GPU
        if name == MOSAIC_TPU and platform != "tpu":
            return errors.MOSAIC_TPU_NEEDS_TPU
        if name == MOSAIC:
            capability = gpu_capability() if platform == "cuda" else None
            if capability is None:
                return errors.MOSAIC_NEEDS_GPU
            if capability < errors.MOSAIC_MIN_CAPABILITY:
                return errors.MOSAIC_NEEDS_HOPPER.format(capability="{}.{}".format(*capability))
    error = import_error(name)
    return None if error is None else NOT_IMPORTABLE[name].format(error=error)


def choose(implementation, platform: str, interpret: bool) -> str:
    """The first requested name that runs on ``platform``; raises when none does."""
    names, single = requested(implementation)
    reasons: dict[str, str] = {}
    for name in names:
        reason = unavailable_reason(name, platform, interpret)
        if reason is None:
            return name
        reasons.setdefault(name, reason)
    if single:
        raise errors.unavailable_error(OPTION, names[0], reasons[names[0]])
    raise errors.none_available_error(OPTION, reasons)


def choice(implementation, platform: str | None, interpret: bool) -> Choice:
    """What runs: one name for a known platform, one per platform present here under tracing."""
    if platform is not None:
        return ((None, choose(implementation, platform, interpret)),)
    likely = default_platform()
    default = choose(implementation, likely, interpret)  # raises for the likely platform
    branches: dict[str | None, str] = {None: default}
    for other in ("cpu", "cuda", "rocm", "tpu"):
        if other != likely and first_device(other) is not None:
            try:
                name = choose(implementation, other, interpret)
            except errors.KvCanaryValueError:
                continue
            if name != default:
                branches[other] = name
    return tuple(branches.items())


def available_implementations(interpret: bool = False) -> tuple[str, ...]:
    """The implementations that can run on JAX's default platform here."""
    platform = default_platform()
    return tuple(name for name in IMPLEMENTATIONS if unavailable_reason(name, platform, interpret) is None)
