"""The jitted single-device computation under ``api`` and ``sharded``.

- ``scatter(flat_in, offsets, rows, pool, start_cols=None, *, choice, interpret, staged, contiguous=False)``: the
  implementation ``choice`` names (per platform when lowering) on checked JAX arrays of one device; with
  ``staged``, gated by the value rules staged as checkify checks (a failed rule writes nothing).
- ``assign(rows, table, start, end, loc, *, bs, choice, interpret)``: the assignment's running sum
  (``assignment_offsets``) and the scatter, ``contiguous``, in one jitted program.
- ``write(...)``: the unjitted body of both, which ``sharded`` runs per device.

The index dtype: ``offsets``, ``rows`` and ``start_cols`` compute in their common dtype (int64 if any is int64), and
in int64 where ``N``, ``R`` or ``C`` does not fit int32 (x64 on; with x64 off JAX itself indexes in int32);
``flat_in`` keeps its width (its values are cut to their low 32 bits). int32 inputs of int32 sizes compute in int32 only. Every
array made here is made inside the jitted program, so it lives where the inputs do.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from kv_canary_jax import implementations, values, xla
from kv_canary_jax.arguments import x64_enabled
from shared_spec.reference import assign_lengths

INT32_SIZES = 2**31  # N, R and C below this index in int32
PER_EXAMPLE = (implementations.MOSAIC, implementations.MOSAIC_TPU)  # kernels vmapped one example at a time


def index_dtype(arrays, sizes):
    """The dtype ``offsets``, ``rows`` and ``start_cols`` compute in (module docstring)."""
    dtype = jnp.result_type(*(a.dtype for a in arrays if a is not None))
    if max(sizes) >= INT32_SIZES and x64_enabled():
        return jnp.dtype(jnp.int64)
    return dtype


def per_example(call):
    """``call`` whose ``jax.vmap`` runs it once per example in a ``lax.map`` (for kernels Pallas cannot batch)."""

    @jax.custom_batching.custom_vmap
    def one(*args):
        return call(*args)

    @one.def_vmap
    def _batched(axis_size, in_batched, *args):
        def example(batched):
            batched = iter(batched)
            return one(*(next(batched) if b else a for a, b in zip(args, in_batched)))

        return lax.map(example, [a for a, b in zip(args, in_batched) if b]), True

    return one


def _implementation(name: str, interpret: bool, contiguous: bool):
    # Kernel modules are imported once chosen: their Pallas modules may not import (implementations).
    if name == implementations.XLA:
        return functools.partial(xla.scatter, contiguous=contiguous)
    if name == implementations.PALLAS:
        from kv_canary_jax import pallas_triton as module
    elif name == implementations.MOSAIC:
        from kv_canary_jax import pallas_mosaic_gpu as module
    else:
        from kv_canary_jax import pallas_mosaic_tpu as module
    return functools.partial(module.scatter, interpret=interpret)


def write(flat_in, offsets, rows, pool, start_cols=None, *, choice, interpret: bool, staged: bool,
          contiguous: bool = False):
    """The body of ``scatter`` (module docstring)."""
    dtype = index_dtype((offsets, rows, start_cols), (flat_in.shape[0], *pool.shape))
    offsets, rows = offsets.astype(dtype), rows.astype(dtype)
    start_cols = None if start_cols is None else start_cols.astype(dtype)

    def run(flat_in, offsets, rows, pool, start_cols):
        branches = {platform: _implementation(name, interpret, contiguous) for platform, name in choice}
        if len(branches) == 1:
            return branches[None](flat_in, offsets, rows, pool, start_cols)
        return lax.platform_dependent(flat_in, offsets, rows, pool, start_cols, default=branches.pop(None), **branches)

    args = (flat_in, offsets, rows, pool, start_cols)
    if not staged:
        return run(*args)
    ok = values.staged_checks(offsets, rows, flat_in.shape[0], pool.shape[0], start_cols)

    def gate(ok, *args):
        return lax.cond(ok, run, lambda *args: args[3], *args)

    if any(name in PER_EXAMPLE for _, name in choice):
        # JAX batches a cond into a select of both branches, which it refuses for a branch with IO effects (the
        # Mosaic TPU interpreter's callbacks): the gate goes per example too.
        gate = per_example(gate)
    return gate(ok, *args)


scatter = jax.jit(write, static_argnames=("choice", "interpret", "staged", "contiguous"))


def assignment_offsets(rows, start, end, n_tokens: int, bs: int):
    """``(offsets, rows, start)`` of the first ``bs`` requests: ``offsets = [0, min(cumsum(lengths), N)]``
    (``reference.assign_windows``), saturated so that nothing wraps in the index dtype."""
    dtype = index_dtype((rows, start, end), (n_tokens,))
    rows, start, end = (a[:bs].astype(dtype) for a in (rows, start, end))
    sums = xla.running_sum(assign_lengths(start, end, n_tokens, xla.Typed(dtype)), n_tokens, n_tokens)
    return jnp.concatenate([jnp.zeros((1,), dtype), sums]), rows, start


@functools.partial(jax.jit, static_argnames=("bs", "choice", "interpret"))
def assign(rows, table, start, end, loc, *, bs: int, choice, interpret: bool):
    """The table with the assignment of the first ``bs`` requests written (module docstring)."""
    offsets, rows, start = assignment_offsets(rows, start, end, loc.shape[0], bs)
    return write(loc, offsets, rows, table, start, choice=choice, interpret=interpret, staged=False, contiguous=True)
