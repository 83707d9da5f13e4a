"""The Pallas kernel (Triton lowering, CUDA GPUs; anywhere with ``interpret=True``).

Contract: ``scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols=None, *, interpret)``
takes int64 ``flat_in[N]``, ``offsets[bs+1]``, ``req_pool_indices[bs]``, an
int32 ``pool_out[R, C]`` and, for a windowed call, int64 ``start_cols[bs]``,
whose checks have passed, and returns the pool with the
requests' tokens written, exactly as ``shared_spec.reference`` says, for any
values. Whether the call is windowed is static: with ``start_cols`` None the
kernel has the four operands and traces exactly as it does unwindowed. ``pool_out`` is aliased to the output (``input_output_aliases``), so
under ``jax.jit(..., donate_argnums=...)`` the kernel writes the donated buffer
in place; without donation XLA copies the pool first. When ``bs``, ``N``, ``R``
or ``C`` is 0 nothing can be written and the pool is returned without a kernel.

Grid: ``(bs, tiles)``. Program ``(r, k)`` loads the three scalars
``offsets[r]``, ``offsets[r+1]``, ``req_pool_indices[r]`` (and ``start_cols[r]``,
windowed) and computes, on scalars, the request's window ``(base, lo, hi)`` in
pool columns with ``windows.pool_window`` (the spec's own
``shared_spec.reference.written_columns``, or ``windowed_columns`` moved to
pool columns; windowed, ``windows.kernel_window``: a few scalar ops on a serving step's
in-row request, the spec's exact math on any other): it writes exactly the columns
``lo <= j < hi`` of its row, reading ``flat_in[base + j]``, with ``0 <= lo``,
``hi <= C`` and ``hi - lo <= min(C, N)``. The per-element code is the same
either way. It covers the ``BLOCK`` columns
of tile ``k`` counted from ``lo``'s tile, and exits early (``pl.when``) when the
row is outside ``[0, R)`` (nothing is stored at all) or the tile starts at or
past ``hi``. Per element that leaves two int32 compares.

``tiles = min(cdiv(C, BLOCK), cdiv(longest_window(C, N), BLOCK) + 1)``: a
request writes at most ``min(C, N)`` consecutive columns of ``[0, C)`` (from
any first column, windowed), and such a run,
starting anywhere inside a tile, spans at most ``cdiv(min(C, N), BLOCK) + 1``
tiles, and never more than the pool's ``cdiv(C, BLOCK)``. A pool far wider than the batch's tokens (the usual
``req_to_token`` pool: ``C`` is the context limit, ``N`` the tokens of this
batch) thus launches programs for the tokens, not for the width.

Memory safety: every access goes through an index vector with a mask. Lane
``j`` reads ``flat_in[base + j]`` only when ``lo <= j < hi``, which the spec's
window guarantees is inside ``[0, N)``; masked lanes use index 0 and are never
dereferenced. Stores go to ``pool[row, j]`` under the same mask, with ``row`` in
range (the early exit) and ``j < hi <= C``. No dynamic slice is used: the interpreter clamps
slices that reach past an array's end while the GPU would not, so a slice could
pass in interpret mode and fault on the GPU (or the reverse). Masked store
lanes keep distinct column indices (``base + arange``), because the interpreter
writes a masked lane's old value back and would race a real lane sharing its
index; lanes past ``C`` are dropped by the interpreter's scatter and never
touched on the GPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

from kv_canary_jax import windows
from kv_canary_jax.windows import pool_window
from shared_spec.reference import longest_window

# Columns one program covers. A power of two (Triton tensors must be); 1024
# lanes over NUM_WARPS * 32 = 128 threads is 8 tokens per thread, enough
# independent loads in flight to stream a long prefill segment in few programs,
# while a short segment (a decode step writes one column) costs one program
# whose masked lanes do no memory traffic.
BLOCK = 1024
# 4 warps: the kernel is a masked copy with no reuse; more warps only add
# scheduling cost per (mostly short) program.
NUM_WARPS = 4
# No loop to software-pipeline.
NUM_STAGES = 1


def tile_programs(width: int, n_tokens: int) -> int:
    """Programs per request along the columns (see the module docstring)."""
    return min(pl.cdiv(width, BLOCK), pl.cdiv(longest_window(width, n_tokens), BLOCK) + 1)


def _kernel(flat_ref, offsets_ref, rows_ref, *refs, n_tokens: int, n_rows: int, width: int, windowed: bool):
    # refs: (start_cols_ref,) when windowed, then pool_in_ref (the same buffer as pool_ref:
    # input_output_aliases) and pool_ref.
    start_cols_ref = refs[0] if windowed else None
    pool_ref = refs[-1]
    r = pl.program_id(0)
    k = pl.program_id(1)
    start = offsets_ref[r]
    end = offsets_ref[r + 1]
    row = rows_ref[r]
    if windowed:
        base, lo, hi = windows.kernel_window(start, end, start_cols_ref[r], width, n_tokens)
    else:
        base, lo, hi = pool_window(start, end, None, width, n_tokens, jnp)
    row_ok = (row >= 0) & (row < n_rows)
    # Columns fit int32 (a pool narrower than 2**31 - 2 * BLOCK; wider ones use int64).
    col = jnp.int32 if width < 2**31 - 2 * BLOCK else jnp.int64
    lo, hi = lo.astype(col), hi.astype(col)
    tile = (lax.div(lo, col(BLOCK)) + k.astype(col)) * BLOCK  # lo >= 0: div is floor

    @pl.when(row_ok & (tile < hi))
    def _write():
        j = tile + jnp.arange(BLOCK, dtype=col)
        mask = (j >= lo) & (j < hi)
        t = base + j.astype(jnp.int64)
        tokens = plt.load(flat_ref.at[jnp.where(mask, t, 0)], mask=mask, other=0)
        # Low 32 bits, two's complement: int64 -> int32 conversion truncates.
        values = tokens.astype(jnp.int32)
        plt.store(pool_ref.at[jnp.where(row_ok, row, 0), j], values, mask=mask)


def scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols=None, *, interpret: bool = False) -> jax.Array:
    """The pool with the requests' tokens written (see the module docstring)."""
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, req_pool_indices.shape, pool_out.shape
    if min(bs, n_tokens, n_rows, width) == 0:
        return pool_out
    windowed = start_cols is not None
    kernel = functools.partial(_kernel, n_tokens=n_tokens, n_rows=n_rows, width=width, windowed=windowed)
    # Operand order: the three vectors, start_cols (windowed), then the pool, which is aliased to the output.
    operands = (flat_in, offsets, req_pool_indices) + ((start_cols,) if windowed else ()) + (pool_out,)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(pool_out.shape, pool_out.dtype),
        grid=(bs, tile_programs(width, n_tokens)),
        input_output_aliases={len(operands) - 1: 0},
        interpret=interpret,
        compiler_params=plt.CompilerParams(num_warps=NUM_WARPS, num_stages=NUM_STAGES),
        name="kv_canary_scatter_req_token_ids",
    )(*operands)
