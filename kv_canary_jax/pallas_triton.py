"""The Pallas kernel, Triton lowering: CUDA GPUs; anywhere with ``interpret=True``.

``scatter(flat_in, offsets, rows, pool, start_cols=None, *, interpret)`` takes checked arrays (``offsets``, ``rows``,
``start_cols`` of one index dtype that holds ``N, R, C``) and returns the pool with the requests' tokens written,
exactly as ``shared_spec.reference`` says, for any values. The pool is aliased to the output: under ``jax.jit(...,
donate_argnums=...)`` the kernel writes the donated buffer. ``jax.vmap`` takes Pallas's batching rule (a grid axis).

Grid ``(bs, tiles)``. Program ``(r, k)`` loads its request's scalars and computes ``(base, lo, hi)`` with
``reference.window`` in the index dtype: it writes columns ``lo <= j < hi`` of its row, reading ``flat_in[base + j]``,
with ``0 <= lo``, ``hi <= C``, ``hi - lo <= min(C, N)``. It covers the ``BLOCK`` columns of tile ``k`` counted from
``lo``'s tile, and stores nothing where the row is outside ``[0, R)`` or the tile starts at or past ``hi``.
``tiles = min(cdiv(C, BLOCK), cdiv(min(C, N), BLOCK) + 1)``: a run of at most ``min(C, N)`` columns starting inside a
tile spans at most that many tiles, so a pool far wider than the batch launches programs for the tokens.

Memory safety: every access goes through an index vector with a mask. Lane ``j`` reads ``flat_in[base + j]`` only
where ``lo <= j < hi``, inside ``[0, N)`` by the window's bounds; masked lanes read index 0 and are never
dereferenced (their ``base + j``, which may wrap in int32, is discarded). Stores go to ``pool[row, j]`` under the
same mask, ``row`` in range and ``j < hi <= C``. Columns (below ``C + 2 * BLOCK``) are int32 where that fits, else
int64. Masked store lanes keep distinct columns (the interpreter writes a masked lane's old value back, which would
race a real lane at the same index).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

from kv_canary_jax.xla import windows

# Columns one program covers: a power of two (Triton tensors are); 1024 lanes over 128 threads is 8 tokens each,
# enough loads in flight for a long segment, while a decode step's one column costs one mostly masked program.
BLOCK = 1024
NUM_WARPS = 4  # a masked copy with no reuse: more warps only add scheduling cost per (mostly short) program
NUM_STAGES = 1  # no loop to pipeline
NAME = "kv_canary_scatter_req_token_ids"


def _kernel(flat_ref, offsets_ref, rows_ref, *refs, n_tokens: int, n_rows: int, width: int, windowed: bool):
    start_cols_ref, pool_ref = (refs[0] if windowed else None), refs[-1]  # refs[-2]: the aliased input pool
    r, k = pl.program_id(0), pl.program_id(1)
    row = rows_ref[r]
    first_col = start_cols_ref[r] if windowed else None
    base, lo, hi = windows(offsets_ref[r], offsets_ref[r + 1], first_col, width, n_tokens)
    col = jnp.int32 if width + 2 * BLOCK < 2**31 else jnp.int64
    lo, hi = lo.astype(col), hi.astype(col)
    tile = (lax.div(lo, col(BLOCK)) + k.astype(col)) * BLOCK  # lo >= 0: div is floor

    @pl.when((row >= 0) & (row < n_rows) & (tile < hi))
    def _write():
        j = tile + jnp.arange(BLOCK, dtype=col)
        mask = (j >= lo) & (j < hi)
        t = jnp.where(mask, base + j.astype(base.dtype), jnp.zeros((), base.dtype))
        tokens = plt.load(flat_ref.at[t], mask=mask, other=flat_ref.dtype.type(0))
        plt.store(pool_ref.at[row, j], tokens.astype(jnp.int32), mask=mask)  # the low 32 bits


def scatter(flat_in, offsets, rows, pool, start_cols=None, *, interpret: bool = False) -> jax.Array:
    """The pool with the requests' tokens written (module docstring)."""
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, rows.shape, pool.shape
    if min(bs, n_tokens, n_rows, width) == 0:
        return pool
    windowed = start_cols is not None
    operands = (flat_in, offsets, rows) + ((start_cols,) if windowed else ()) + (pool,)
    tiles = min(pl.cdiv(width, BLOCK), pl.cdiv(min(width, n_tokens), BLOCK) + 1)
    return pl.pallas_call(
        functools.partial(_kernel, n_tokens=n_tokens, n_rows=n_rows, width=width, windowed=windowed),
        out_shape=jax.ShapeDtypeStruct(pool.shape, pool.dtype),
        grid=(bs, tiles),
        input_output_aliases={len(operands) - 1: 0},
        interpret=interpret,
        compiler_params=plt.CompilerParams(num_warps=NUM_WARPS, num_stages=NUM_STAGES),
        name=NAME,
    )(*operands)
