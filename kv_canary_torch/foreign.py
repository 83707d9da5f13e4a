"""Other frameworks' arrays as the torch frontend's checks see them.

Contract: ``describe(x, *, written)`` is the ``ArrayView`` (or ``NotAnArray``)
of an argument that is not a torch tensor, by the same rules the tensor's own
frontend uses, so the torch launcher raises for a JAX or numpy array exactly
what it raises for the equivalent tensor:

- a ``jax.Array``: as the JAX frontend describes it (``kv_canary_jax.inputs``);
  as ``pool_out`` (``written``) it cannot be written in place: JAX arrays are
  immutable.
- a ``numpy.ndarray``: its own shape and dtype, on the CPU; as ``pool_out`` it
  must be writable and its cells must not share memory.
- anything else: not an array.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kv_canary import bridge
from shared_spec import errors
from shared_spec.checks import ArrayView, NotAnArray, cells_overlap


def describe(x, *, written: bool = False) -> ArrayView | NotAnArray:
    if bridge.is_jax(x):
        from kv_canary_jax.inputs import adopt

        view = adopt(x).view
        problem = errors.WRITE_IMMUTABLE.format(type_name="jax.Array") if written else None
        return dataclasses.replace(view, write_problem=problem)
    if isinstance(x, np.ndarray):
        problem = None
        strides = tuple(s // x.itemsize for s in x.strides)
        if written and not x.flags.writeable:
            problem = errors.WRITE_IMMUTABLE.format(type_name="read-only numpy.ndarray")
        elif written and x.ndim == 2 and cells_overlap(x.shape, strides):
            problem = errors.WRITE_OVERLAP.format(strides=strides)
        return ArrayView(tuple(x.shape), x.dtype.name, "cpu", problem)
    return NotAnArray(type(x).__name__)
