"""Arguments that passed the spec's checks, as the arrays a frontend computes with.

Contract (every argument has passed the checks of ``shared_spec.checks`` as
``describe.describe`` described it, so its rank, dtype and device are right):

- ``torch_input(x, device)``: a read-only argument (``flat_in``, ``offsets``,
  ``req_pool_indices``) as a ``torch.Tensor`` on ``device`` (pool_out's).
  Zero-copy where DLPack can share the memory; exactly one copy where it
  cannot: a numpy array in non-native byte order (byte-swapped), with
  unaligned items or negative strides (made contiguous), a JAX array DLPack
  refuses (sharded over several devices: gathered to the host, then moved).
  The argument itself is never written.
- ``torch_output(x)``: ``pool_out`` as a ``torch.Tensor`` over the same memory,
  so that writing the tensor writes ``x``; ``describe`` has already refused
  whatever cannot be (``write_problem``).
- ``jax_input(x, device=None)``: any argument as a ``jax.Array`` (the JAX
  frontend writes nothing in place: it returns a new pool). A JAX array as it
  is; a torch tensor on its own device, zero-copy through DLPack where JAX can
  import it and one contiguous copy where it cannot (strided views, column
  slices, transposed pools, data not aligned as JAX wants); host data (numpy)
  in native byte order (one byte-swapping copy if not) put on ``device``
  (JAX's default device when None).
- ``host_values(x)``: a concrete array of any framework as a numpy array on the
  host (a view of host memory where there is one, else a copy: a sync for
  device arrays), for the checked mode's rules.
"""

from __future__ import annotations

from kv_canary_arrays import bridge
from kv_canary_arrays.describe import negative_strides
from kv_canary_arrays.frameworks import is_jax, is_numpy, is_torch
from shared_spec import errors

__all__ = ["host_values", "jax_input", "torch_input", "torch_output"]


def _native(x):
    """A numpy array DLPack and JAX take as they are: ``x`` itself, or one native, aligned, C-ordered copy."""
    import numpy as np

    if x.dtype.isnative and x.flags.aligned and not negative_strides(x):
        return x
    return np.array(x, dtype=x.dtype.newbyteorder("="), order="C")


def torch_input(x, device=None):
    """A read-only argument as a torch tensor on ``device`` (zero-copy where possible; see the module docstring)."""
    if is_torch(x):
        return x
    if is_numpy(x):
        tensor = bridge.to_torch(_native(x))
    else:
        try:
            tensor = bridge.to_torch(x)
        except errors.KvCanaryValueError:
            if not is_jax(x):
                raise
            import numpy as np
            import torch

            tensor = torch.from_numpy(np.array(x))  # gathers a sharded array on the host: the one copy
    return tensor if device is None else tensor.to(device)


def torch_output(x):
    """``pool_out`` as a torch tensor over the same memory."""
    return bridge.to_torch(x)


def jax_input(x, device=None):
    """Any argument as a ``jax.Array`` (see the module docstring)."""
    import jax

    if isinstance(x, jax.Array):
        return x
    if is_torch(x):
        return bridge.to_jax(x, copy_ok=True)
    if is_numpy(x):
        x = _native(x)
    if device is None:
        import jax.numpy as jnp

        return jnp.asarray(x)
    return jax.device_put(x, device)


def host_values(x):
    """A concrete array's values as a numpy array on the host (see the module docstring)."""
    import numpy as np

    if is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)
