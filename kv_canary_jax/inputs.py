"""What the caller passed: described for the checks, then made into JAX arrays.

Contract:

- ``adopt(x) -> Adopted``: the one place that decides what counts as an array.
  ``Adopted.view`` is what ``shared_spec.checks`` needs (an ``ArrayView`` or
  ``NotAnArray``); ``Adopted.value`` is the array to compute with later (None
  for non-arrays). It never copies or converts data, so a call that fails its
  checks moves nothing.
- ``materialize(value, device) -> jax.Array``: ``value`` as a JAX array; host
  data goes to ``device`` (None: JAX's default device); a torch tensor crosses
  through ``kv_canary.bridge.to_jax``, zero-copy on its own device.

What is an array:

- a ``jax.Array``, concrete or traced: shape and dtype as is; device the
  canonical name of its single device (``platforms.device_name``), None for a
  tracer (no device at trace time) or an array sharded over several devices.
- a ``numpy.ndarray``: described as the JAX array it becomes, i.e. with the
  dtype JAX gives it (``jax.dtypes.canonicalize_dtype``). With x64 enabled that
  is its own dtype; with x64 disabled JAX turns int64 into int32 (and float64
  into float32), so an int64 ``flat_in`` is reported as int32, the dtype check
  fails exactly as for a JAX array created without x64, and the caller attaches
  ``errors.X64_NOTE``. Never "must be int64, got int64", never a silent
  truncation of token ids. Its device is None: host data has no accelerator to
  disagree with; it is copied to where the computation runs (pool_out's device).
- a ``torch.Tensor`` (outside ``jit``): described as the torch frontend
  describes it (``kv_canary_torch.checks.describe``), so both frontends raise
  the same error for the same tensor; it then crosses through DLPack, which
  refuses (never silently casts) an int64 tensor while x64 is off.
- anything else (lists, tuples, scalars, None, numpy scalars):
  ``NotAnArray(type(x).__name__)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from kv_canary import bridge
from kv_canary_jax import platforms
from shared_spec.checks import ArrayView, NotAnArray


@dataclasses.dataclass(frozen=True)
class Adopted:
    view: ArrayView | NotAnArray
    value: Any  # jax.Array, numpy.ndarray, or None for a non-array


def x64_enabled() -> bool:
    """Whether JAX keeps int64 arrays int64 here (reads the flag, including context overrides)."""
    return jax.dtypes.canonicalize_dtype(np.int64) == np.dtype(np.int64)


def jax_dtype_name(dtype) -> str:
    """The name of the dtype JAX gives host data of ``dtype``."""
    try:
        return np.dtype(jax.dtypes.canonicalize_dtype(dtype)).name
    except TypeError:  # a dtype JAX has no arrays of (object, str): reported as it is
        return np.dtype(dtype).name


def adopt(x) -> Adopted:
    """Describe one argument for the checks; keep what to compute with."""
    if isinstance(x, jax.Array):  # tracers included
        device = platforms.single_device(x)
        name = None if device is None else platforms.device_name(device)
        return Adopted(ArrayView(tuple(x.shape), np.dtype(x.dtype).name, name), x)
    if isinstance(x, np.ndarray):
        return Adopted(ArrayView(tuple(x.shape), jax_dtype_name(x.dtype), None), x)
    if bridge.is_torch(x):
        from kv_canary_torch.checks import describe

        return Adopted(describe(x), x)
    return Adopted(NotAnArray(type(x).__name__), None)


def materialize(value, device=None) -> jax.Array:
    """A JAX array for ``value``; host data is put on ``device`` (JAX's default when None)."""
    if isinstance(value, jax.Array):
        return value
    if bridge.is_torch(value):
        return bridge.to_jax(value)
    if device is None:
        return jnp.asarray(value)
    return jax.device_put(value, device)
