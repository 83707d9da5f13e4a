"""The Mosaic TPU kernel (``jax.experimental.pallas.tpu``): TPUs; anywhere with ``interpret=True``.

``scatter(flat_in, offsets, rows, pool, start_cols=None, *, interpret)`` takes checked arrays (``offsets``, ``rows``,
``start_cols`` of one index dtype) and returns the pool with the requests' tokens written, exactly as
``shared_spec.reference`` says, for any values, repeated rows included. The pool stays in HBM and is aliased to the
output: under ``jax.jit(..., donate_argnums=...)`` the kernel writes the donated buffer. ``interpret=True`` runs
Pallas's TPU interpreter, which simulates SMEM, DMAs and their semaphores on any platform and checks every DMA's
bounds; its DMAs run as they start, in request order (``dma_execution_mode="eager"``), so a cell two requests write
keeps the later one's value as the reference does (on a TPU the copies run concurrently: one of the two, as the
spec allows). Where ``N``, ``R`` or ``C`` is ``2**31`` or more, ``xla.scatter`` computes
the same pool instead (the kernel's scalars are int32).

- No 64-bit integers in the kernel (a TPU's scalar core and SMEM hold 32-bit words). XLA computes each request's
  window with ``reference.window`` in the index dtype and hands the kernel four int32 per request: the row, the
  first column ``lo``, the first token ``base + lo`` and the length ``m = hi - lo``, all 0 for a request that writes
  nothing (row outside ``[0, R)``, empty window). Each fits int32 since ``N, R, C < 2**31``. The tokens are cut to
  their low 32 bits (``astype(int32)``) before the kernel.
- A token id is copied, not computed: the kernel issues DMAs, HBM to HBM. DMA shapes are static, so a window of
  ``m`` columns is copied as the binary digits of ``m``: for each bit ``b`` set (``2**b <= min(C, N)``), ``2**b``
  tokens from ``token + o`` to columns ``lo + o ...`` of the row, ``o`` = ``m`` with bits ``0..b`` cleared. The
  copies are disjoint and cover exactly ``[lo, hi)``, and ``o + 2**b <= m`` keeps each inside its arrays: no cell
  outside a window is written, so requests naming the same row never undo each other's writes.
- SMEM is small and the spec has no limit on ``bs``: the windows arrive ``REQUESTS_PER_STEP`` requests at a time
  through an SMEM ``BlockSpec`` (Pallas double-buffers it). A grid step starts every DMA of its requests, then waits
  for each on one semaphore (a wait consumes its copy's byte count; a copy of the same shape at the origin stands
  for it). The axis is ``parallel``: two TensorCores split the blocks.

Unverified on hardware: Mosaic may require DMA windows aligned to the (8, 128) tiling of 32-bit HBM arrays, which
these are not. ``jax.vmap`` runs one kernel per example (``compute.per_example``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from kv_canary_jax import xla
from kv_canary_jax.compute import per_example

# 4 int32 per request: a 2 KiB block, 4 KiB double-buffered, inside even the 16 KiB of SMEM of v2 and v3; enough
# requests to amortize a step's fixed cost over a decode batch; 512 int32 is a 1-D block shape Pallas TPU takes.
REQUESTS_PER_STEP = 128
FIELDS = 4  # row, column, token, length
NAME = "kv_canary_scatter_req_token_ids_mosaic_tpu"


def copies(length, bits):
    """``[(when, offset, size)]``: the DMAs of a window of ``length`` columns, highest bit first."""
    return [((length & (1 << b)) != 0, length & ~((2 << b) - 1), 1 << b) for b in bits]


def _kernel(windows_ref, tokens_ref, pool_in_ref, pool_ref, sem, *, bits, bs: int):
    del pool_in_ref  # the same buffer as pool_ref
    requests = jnp.minimum(jnp.int32(REQUESTS_PER_STEP), jnp.int32(bs) - pl.program_id(0) * REQUESTS_PER_STEP)

    def for_each_request(body):
        lax.fori_loop(jnp.int32(0), requests, lambda i, carry: (body(i), carry)[1], jnp.int32(0))

    def start(i):
        row, column, token, length = (windows_ref[FIELDS * i + f] for f in range(FIELDS))
        for when, offset, size in copies(length, bits):
            @pl.when(when)
            def _(offset=offset, size=size):
                pltpu.make_async_copy(tokens_ref.at[pl.ds(0, 1), pl.ds(token + offset, size)],
                                      pool_ref.at[pl.ds(row, 1), pl.ds(column + offset, size)], sem).start()

    def wait(i):
        for when, _, size in copies(windows_ref[FIELDS * i + 3], bits):
            @pl.when(when)
            def _(size=size):
                pltpu.make_async_copy(tokens_ref.at[pl.ds(0, 1), pl.ds(0, size)],
                                      pool_ref.at[pl.ds(0, 1), pl.ds(0, size)], sem).wait()

    for_each_request(start)
    for_each_request(wait)


def _call(flat_in, offsets, rows, pool, start_cols, *, interpret: bool):
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, rows.shape, pool.shape
    base, lo, hi = xla.windows(offsets[:-1], offsets[1:], start_cols, width, n_tokens)
    live = (rows >= 0) & (rows < n_rows) & (hi > lo)
    zero = jnp.zeros((), jnp.int32)
    table = jnp.stack([jnp.where(live, v.astype(jnp.int32), zero) for v in (rows, lo, base + lo, hi - lo)], axis=1)
    steps = pl.cdiv(bs, REQUESTS_PER_STEP)
    table = jnp.concatenate([table, jnp.zeros((steps * REQUESTS_PER_STEP - bs, FIELDS), jnp.int32)]).reshape(-1)
    span = min(width, n_tokens)
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    return pl.pallas_call(
        functools.partial(_kernel, bits=tuple(range(span.bit_length() - 1, -1, -1)), bs=bs),
        out_shape=jax.ShapeDtypeStruct(pool.shape, pool.dtype),
        grid=(steps,),
        in_specs=[pl.BlockSpec((FIELDS * REQUESTS_PER_STEP,), lambda i: (i,), memory_space=pltpu.SMEM), hbm, hbm],
        out_specs=hbm,
        scratch_shapes=[pltpu.SemaphoreType.DMA(())],
        input_output_aliases={2: 0},
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=pltpu.InterpretParams(dma_execution_mode="eager") if interpret else False,
        name=NAME,
    )(table, flat_in.astype(jnp.int32).reshape(1, n_tokens), pool)  # the tokens' low 32 bits


def scatter(flat_in, offsets, rows, pool, start_cols=None, *, interpret: bool = False) -> jax.Array:
    """The pool with the requests' tokens written (module docstring)."""
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, rows.shape, pool.shape
    if min(bs, n_tokens, n_rows, width) == 0:
        return pool
    if max(n_tokens, n_rows, width) >= 2**31:
        return xla.scatter(flat_in, offsets, rows, pool, start_cols)
    return per_example(functools.partial(_call, interpret=interpret))(flat_in, offsets, rows, pool, start_cols)
