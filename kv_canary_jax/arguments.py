"""Arguments of both operations: the spec's checks, int32 narrowing, and where host data goes.

``checked(op, arguments, batch_size=None) -> dict`` takes the call's arrays by name (``shared_spec.checks``'s
``SCATTER`` or ``ASSIGN`` order; an optional one only where given) and returns them ready for ``placed``, or raises:

1. the spec's first failing argument check (``first_failure``, on ``kv_canary_arrays.describe``'s views: only
   shapes, dtypes and devices, so under ``jax.jit`` it runs once, while tracing);
2. with x64 off, every concrete int64 argument (host data, a torch tensor, a JAX array made with x64 on) is read
   whole and becomes int32 when every value fits, else ``NOT_INT32`` names the first such argument and its first
   offending index (the assignment's message is retitled). With x64 on, int64 stays int64.

Torch tensors then become JAX arrays on their own device (zero-copy where DLPack shares them).
``placed(arguments, output)`` puts host data where the output is, else where the first placed argument is (every
argument whole on each device of an output over several devices, which the device check lets through: ``onto``),
and arrays in another memory of their device than the default (``pinned_host``) into it;
it returns the arrays and the platform that computes (None under tracing: the platform is picked when lowering).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from kv_canary_arrays.bridge import host_values, jax_input
from kv_canary_arrays.describe import describe, dtype_name, jax_platform, jax_single_device
from kv_canary_arrays.frameworks import is_torch, is_tracer
from kv_canary_jax.implementations import default_platform
from shared_spec import errors
from shared_spec.checks import ASSIGN, JAX, first_failure

INT32 = np.iinfo(np.int32)


def x64_enabled() -> bool:
    """Whether JAX holds int64 arrays here (``jax.enable_x64`` contexts included)."""
    return jax.dtypes.canonicalize_dtype(np.int64) == np.int64


def checked(op, arguments: dict, batch_size=None) -> dict:
    """The arguments, checked and narrowed (module docstring)."""
    failure = first_failure(op, {name: describe(x, JAX) for name, x in arguments.items()}, JAX, batch_size)
    if failure is not None:
        raise failure[1]
    if not x64_enabled():
        arguments = {name: _narrowed(op, name, x) for name, x in arguments.items()}
    return {name: jax_input(x) if is_torch(x) else x for name, x in arguments.items()}


def _narrowed(op, name: str, x):
    if is_tracer(x) or dtype_name(x) != "int64":
        return x
    values = host_values(x)
    outside = (values < INT32.min) | (values > INT32.max)
    if outside.any():
        index = int(np.argmax(outside))
        template = errors.for_assignment(errors.NOT_INT32) if op is ASSIGN else errors.NOT_INT32
        raise errors.value_error(template, arg=name, index=index, value=int(values[index]))
    if is_torch(x):
        import torch

        return x.to(torch.int32)
    if isinstance(x, jax.Array):
        return jax.device_put(values.astype(np.int32), jax_single_device(x) or x.sharding)
    return values.astype(np.int32)


def placed(arguments: dict, output: str) -> tuple[dict, str | None]:
    """``(arrays, platform)``: every argument a JAX array, host data on the first placed one's device."""
    if any(is_tracer(x) for x in arguments.values()):
        return {name: jax_input(x) for name, x in arguments.items()}, None
    arguments = {name: _default_memory(x) if isinstance(x, jax.Array) else x for name, x in arguments.items()}
    first = next((x for name in (output, *arguments) if isinstance(x := arguments[name], jax.Array)), None)
    device = None if first is None else jax_single_device(first)
    platform = default_platform() if first is None else jax_platform(next(iter(first.devices())))
    if first is not None and device is None:  # over several devices: the others whole on each of them
        mesh = getattr(first.sharding, "mesh", None)
        if mesh is None:
            mesh = Mesh(np.array(sorted(first.devices(), key=lambda d: d.id)), ("devices",))
        everywhere = NamedSharding(mesh, PartitionSpec())
        return {name: x if x is first else onto(x, everywhere) for name, x in arguments.items()}, platform
    return {name: jax_input(x, device) for name, x in arguments.items()}, platform


def _default_memory(x):
    """``x`` in its devices' default memory: an array in another (``pinned_host``, say) moved there, as host data is
    put where the computation reads."""
    kind, default = getattr(x.sharding, "memory_kind", None), next(iter(x.devices())).default_memory().kind
    return x if kind is None or kind == default else jax.device_put(x, x.sharding.with_memory_kind(default))


def onto(x, sharding):
    """``x`` as a JAX array laid out as ``sharding``: as it is where it already is, else put there."""
    if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(sharding, x.ndim):
        return x
    return jax.device_put(jax_input(x), sharding)
