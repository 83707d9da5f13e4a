"""``jax.vmap`` for kernels that Pallas's batching rule cannot batch: one call per example.

Contract: ``per_example(call)(*args)`` (array arguments, such as
``flat_in, offsets, req_pool_indices, pool_out``, returning one array) is
``call(*args)`` unbatched; under ``jax.vmap`` (over any of the arguments,
nested or not) it runs ``call`` once per example in a ``lax.map`` and returns
the stacked results, batched along axis 0. Correct for any batched arguments;
a batch of pools costs one kernel launch per pool.

Why: Pallas's batching rule adds a grid axis and a block dimension, which
Mosaic GPU does not lower (its grid gains a vmapped axis) and which does not
apply to a Mosaic TPU kernel whose operands stay in HBM and are addressed by
DMA. ``jax.custom_batching.custom_vmap`` replaces the rule. ``compute`` also
maps the checked mode's gate (a ``lax.cond`` around such a kernel) this way:
JAX cannot batch a ``cond`` whose branch has IO effects, which Mosaic TPU's
interpret mode has (its callbacks), while a ``lax.map`` of it is fine.
"""

from __future__ import annotations

import jax
from jax import lax


def per_example(call):
    """``call``, with a batching rule that maps it over the examples (see the module docstring)."""

    @jax.custom_batching.custom_vmap
    def write(*args):
        return call(*args)

    @write.def_vmap
    def _write_batched(axis_size, in_batched, *args):
        batched = [a for a, b in zip(args, in_batched) if b]

        def one(example):
            example = iter(example)
            full = [next(example) if b else a for a, b in zip(args, in_batched)]
            return write(*full)  # itself batchable: nested vmaps nest lax.maps

        return lax.map(one, batched), True

    return write
