"""``assign_req_to_token_pool`` for JAX: sglang's assignment as ``windows`` and the windowed scatter.

Contract::

    assign_req_to_token_pool(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, *,
                             batch_size=None, implementation=None, interpret=False) -> jax.Array

returns ``req_to_token`` with the assignment written (``shared_spec.assignment``: request ``r < batch_size``
writes ``out_cache_loc[pt_r : pt_r + end - start]`` from column ``start_offset[r]`` of row
``req_pool_indices[r]``, clipped to the table; a negative length writes nothing and leaves ``pt_r`` where it
is). ``batch_size``: a Python int (static under ``jit``), None for ``len(req_pool_indices)``. Index arrays int32
or int64, the table int32; x64 must be enabled (the offsets are int64; ``errors.ASSIGN_NEEDS_X64`` otherwise,
after the argument checks).

It is ``assignment.windows``' offsets (``offsets``: the running sum of ``assignment.lengths``) and
``scatter_req_token_ids(..., start_cols=start)`` (``api.scatter_contiguous``: the running sum starts at 0 and never
decreases, so the XLA path finds each token's request by ``jnp.repeat`` on every platform, GPUs included, where the
scatter's own XLA path pays a ``bs * min(C, N)`` grid), so it runs where and as the scatter runs: its default
implementation (the Pallas kernels on GPUs and TPUs, XLA on the CPU), or ``implementation=`` / ``interpret=`` as
given. Under ``jax.jit(..., donate_argnums=1)`` the table's buffer is reused (in place). The spec's argument
checks run first (at trace time under ``jit``), with the assignment's messages; an error of the scatter call is
retitled the same way.

Where the Mosaic GPU kernel runs (the default on Hopper GPUs, or ``implementation="mosaic"``), a batch that
``pallas_mosaic_gpu.takes_assignment`` accepts takes that kernel alone, with the running sum in it
(``pallas_mosaic_gpu.assign``): one kernel where the running sum and the scatter are two (in a jitted step on the
H200, decode 1 2.08 us against 2.98-3.07, decode 256 3.00 against 5.06, decode 1024 4.71 against 6.49;
docs/performance-notes.md, "The JAX assignment"). Other batches, and every other implementation, take the running sum
below and the scatter; a row-sharded table takes the scatter's sharded path.

The running sum on a GPU, for batches of at most ``MASKED_PREFIX_MAX`` requests, is one masked reduction (offset ``i``
is the sum of the lengths ``j < i``: ``(bs + 1) x bs`` cells, one XLA fusion with the lengths' own math) rather than
``jnp.cumsum`` (XLA's cumulative sum and the concatenation of the leading 0: two or three kernels): the whole
assignment takes 9-39% less device time at six of sglang's seven step cases on the H200 (docs/performance-notes.md,
"The JAX assignment"). Elsewhere (CPUs, TPUs, larger batches) it is ``jnp.cumsum``, whose work grows with ``bs`` and
not ``bs**2``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from kv_canary_arrays.adopt import jax_input
from kv_canary_arrays.describe import JAX, describe, jax_x64_enabled
from kv_canary_jax import implementations, platforms, sharded
from kv_canary_jax.api import placement, scatter_contiguous
from shared_spec import assignment, errors

# Batches up to this many requests take the masked running sum on a GPU (module docstring): 1M cells at most.
MASKED_PREFIX_MAX = 1024


def assign_req_to_token_pool(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, *,
    batch_size=None, implementation=None, interpret: bool = False,
) -> jax.Array:
    """Write each request's new slots into its row of ``req_to_token``; return the new table (module docstring)."""
    values = (req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc)
    views = {name: describe(value, frontend=JAX) for name, value in zip(assignment.ARGUMENT_NAMES, values)}
    error = assignment.first_error(views, batch_size)
    if error is not None:
        raise error
    if not jax_x64_enabled():
        raise errors.value_error(errors.ASSIGN_NEEDS_X64)
    bs = views["req_pool_indices"].shape[0] if batch_size is None else assignment.batch_size_value(batch_size)
    device = _table_device(values)
    rows, table, start, end, loc = (jax_input(value, device) for value in values)
    try:
        return _write(rows[:bs], table, start[:bs], end[:bs], loc, implementation, bool(interpret))
    except (errors.KvCanaryTypeError, errors.KvCanaryValueError) as error:
        raise errors.retitled(error) from None


def _write(rows, table, start, end, loc, implementation, interpret: bool):
    """The table with the batch written: Mosaic GPU's own kernel where it runs and takes the batch (module
    docstring), else the running sum and the windowed scatter."""
    bs = rows.shape[0]

    def by_offsets(rows, table, start, end, loc):
        offsets, start_cols = windows(start, end, bs, loc.shape[0])
        return scatter_contiguous(loc.astype(jnp.int64), offsets, rows.astype(jnp.int64), table, start_cols,
                                  implementation=implementation, interpret=interpret)

    args = (rows, table, start, end, loc)
    if sharded.row_layout(table) is not None:
        return by_offsets(*args)
    _, platform = placement((loc, None, rows, table, start, end))
    choice = implementations.choice(implementation, platform, interpret)
    if all(name != implementations.MOSAIC for _, name in choice):
        return by_offsets(*args)
    from kv_canary_jax import pallas_mosaic_gpu  # imported once chosen (it may not import: implementations)

    if not pallas_mosaic_gpu.takes_assignment(bs):
        return by_offsets(*args)

    def kernel(*args):
        return pallas_mosaic_gpu.assign(*args, interpret=interpret)

    branches = {p: kernel if name == implementations.MOSAIC else by_offsets for p, name in choice}
    if len(branches) == 1 and None in branches:
        return branches[None](*args)
    return lax.platform_dependent(*args, default=branches.pop(None, by_offsets), **branches)


def windows(start_offset, end_offset, batch_size: int, n_tokens: int):
    """``assignment.windows`` in jax.numpy, its running sum formulated per platform (module docstring)."""
    start = jnp.asarray(start_offset[:batch_size], dtype=jnp.int64)
    end = jnp.asarray(end_offset[:batch_size], dtype=jnp.int64)
    lengths = assignment.lengths(start, end, n_tokens, jnp)
    if batch_size > MASKED_PREFIX_MAX:
        return summed_prefix(lengths), start
    return lax.platform_dependent(lengths, cuda=masked_prefix, rocm=masked_prefix, default=summed_prefix), start


def summed_prefix(lengths):
    """``[0, cumsum(lengths)]``: the spec's ``assignment.running_sum`` in jax.numpy (``jnp.cumsum``)."""
    return assignment.running_sum(lengths, jnp)


def masked_prefix(lengths):
    """``[0, cumsum(lengths)]`` as one masked reduction: entry ``i`` sums ``lengths[j]`` for ``j < i``."""
    (bs,) = lengths.shape
    before = jnp.arange(bs)[None, :] < jnp.arange(bs + 1)[:, None]
    return jnp.where(before, lengths[None, :], 0).sum(axis=1)


def _table_device(values):
    """Where host data goes: the table's device, else the first placed argument's (None: JAX's default)."""
    for x in (values[1], values[0], *values[2:]):
        if isinstance(x, jax.Array) and not platforms.is_tracer(x):
            device = platforms.single_device(x)
            if device is not None:
                return device
    return None
