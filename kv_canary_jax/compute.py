"""The single-device computation under both entry points (``api`` and ``sharded``).

Contract:

- ``prepare(arguments, platform, implementation, interpret, check_values) ->
  (choice, staged)``: for arguments that passed the checks (the four, then
  ``start_cols`` for a windowed call), what runs
  (``implementations.choice`` for ``platform``; then ``check_values`` must be a
  bool, ``shared_spec.checks.require_bool``) and whether the checked mode's
  value rules are staged into the computation (``staged``: traced offsets,
  rows or start_cols) rather than checked now on the host (concrete ones: the first
  violation is raised here, before anything runs).
- ``scatter(flat_in, offsets, rows, pool, start_cols=None, *, choice, interpret, staged, contiguous=False)``: the
  jitted call on JAX arrays of one device (or one device's block under
  ``shard_map``): the chosen implementation, per platform when
  lowering; windowed where ``start_cols`` is an array (static: None has no
  leaves, so ``jit`` traces an unwindowed call apart and it compiles exactly
  as it does without the argument; every kernel gets ``start_cols`` only when
  windowed, and the XLA path of a windowed call is ``xla_windowed``, given
  ``contiguous``: the caller's promise that ``offsets`` starts at 0 and never decreases); with
  ``staged``, gated by the value rules (``values.staged_checks``:
  the pool comes back unchanged when one fails; around the kernels that run
  once per example under ``vmap``, ``implementations.PER_EXAMPLE``, the gate
  runs per example too).

``api`` calls these for one device, ``sharded`` inside ``shard_map`` for each
device's block; neither imports the other's private parts.
"""

from __future__ import annotations

import functools

import jax
from jax import lax

from kv_canary_jax import batching, implementations, platforms, values, xla, xla_windowed
from shared_spec.checks import require_bool


def prepare(arguments, platform, implementation, interpret: bool, check_values: bool):
    """``(choice, staged)`` for checked arguments; see the module docstring."""
    choice = implementations.choice(implementation, platform, interpret)
    flat_in, offsets, rows, pool, *window = arguments
    start_cols = window[0] if window else None
    if not require_bool("check_values", check_values):
        return choice, False
    if any(platforms.is_tracer(x) for x in (offsets, rows, *window)):
        return choice, True
    values.raise_eagerly(offsets, rows, flat_in.shape[0], pool.shape[0], start_cols)
    return choice, False


def _implementation(name: str, interpret: bool, windowed: bool = False, contiguous: bool = False):
    # The kernels are imported here, once chosen: jax.experimental.pallas.triton,
    # .mosaic_gpu and .tpu may not import (implementations says why), and the
    # default must fall through past them without touching them.
    if name == implementations.PALLAS:
        from kv_canary_jax import pallas_triton

        return functools.partial(pallas_triton.scatter, interpret=interpret)
    if name == implementations.MOSAIC:
        from kv_canary_jax import pallas_mosaic_gpu

        return functools.partial(pallas_mosaic_gpu.scatter, interpret=interpret)
    if name == implementations.MOSAIC_TPU:
        from kv_canary_jax import pallas_mosaic_tpu

        return functools.partial(pallas_mosaic_tpu.scatter, interpret=interpret)
    if windowed:
        return functools.partial(xla_windowed.scatter, contiguous=contiguous)
    return xla.scatter


@functools.partial(jax.jit, static_argnames=("choice", "interpret", "staged", "contiguous"))
def scatter(flat_in, offsets, rows, pool, start_cols=None, *, choice, interpret, staged, contiguous=False):
    """The chosen implementation on JAX arrays; see the module docstring."""
    windowed = start_cols is not None
    # The operands every branch takes: the four, and start_cols only for a windowed call.
    args = (flat_in, offsets, rows, pool) + ((start_cols,) if windowed else ())

    def write(*args):
        if len(choice) == 1 and choice[0][0] is None:
            return _implementation(choice[0][1], interpret, windowed, contiguous)(*args)
        per_platform = {p: _implementation(name, interpret, windowed, contiguous) for p, name in choice if p is not None}
        default = next((_implementation(name, interpret, windowed, contiguous) for p, name in choice if p is None), None)
        return lax.platform_dependent(*args, default=default, **per_platform)

    if not staged:
        return write(*args)
    ok = values.staged_checks(offsets, rows, flat_in.shape[0], pool.shape[0], start_cols)

    def gate(ok, *args):
        return lax.cond(ok, write, lambda *args: args[3], *args)

    if any(name in implementations.PER_EXAMPLE for _, name in choice):
        # Under vmap, JAX batches a cond into a select of both branches, which it refuses for a branch
        # with IO effects (Mosaic TPU's interpret mode): map the gate per example, as the kernel is.
        gate = batching.per_example(gate)
    return gate(ok, *args)
