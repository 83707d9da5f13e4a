"""The Mosaic GPU kernel (``jax.experimental.pallas.mosaic_gpu``): Hopper and newer; anywhere with ``interpret=True``.

``scatter(flat_in, offsets, rows, pool, start_cols=None, *, interpret, block=None)`` takes checked arrays
(``offsets``, ``rows``, ``start_cols`` of one index dtype that holds ``N, R, C``) and returns the pool with the
requests' tokens written, exactly as ``shared_spec.reference`` says, for any values, repeated rows included. The
pool is aliased to the output: under ``jax.jit(..., donate_argnums=...)`` the kernel writes the donated buffer.
``block`` (a power of two >= ``VEC``) overrides the tile cap, for tuning.

No masks. Mosaic GPU has no masked loads or stores: a register array belongs to a warpgroup (128 threads) and a
store writes all of it, so the smallest vector store writes ``VEC`` consecutive cells. The kernel places fixed-size
vector copies inside the window, overlapping where its length is not a multiple of theirs (an overlapped cell gets
the same value twice), and writes windows shorter than ``VEC`` with scalar stores. No cell outside a window is
written, not even with its old value, so requests naming the same row never undo each other's writes.

Program ``(lane, r)`` computes ``(base, lo, hi)`` with ``reference.window`` in the index dtype: request ``r`` writes
columns ``lo <= j < hi`` of its row from ``flat_in[base + j]``, with ``0 <= lo``, ``hi <= C`` and every such ``base
+ j`` in ``[0, N)``. With ``m = hi - lo <= min(C, N)`` and the tile ``T`` (a power of two, ``VEC <= T <= min(C,
N)``, from the shapes: ``launch_shape``):

- ``m >= T``: tile ``k < K = cdiv(m, T)`` copies ``T`` columns from ``s = lo + min(k * T, m - T)``: ``[s, s + T)``
  lies in ``[lo, hi)`` and the tiles cover it. Lane ``lane`` copies tiles ``lane, lane + lanes, ...`` below ``K``.
- ``VEC <= m < T``: lane 0 copies ``P`` columns from ``lo`` and ``P`` ending at ``hi``, ``P <= m < 2P`` a power of two.
- ``0 < m < VEC``: lane 0 loads ``VEC`` tokens from ``s = min(base + lo, N - VEC)`` (in ``[0, N)``, holding the
  window's ``m`` tokens at ``d = base + lo - s``) into shared memory so that column ``lo + j`` lands at
  ``stage[VEC + j]``; after a barrier, scalar stores of columns ``lo + min(i, m - 1)`` in batches of
  ``STAGE_BATCH`` read their values from there. Where ``N < VEC`` the scalar stores read ``flat_in`` directly.
- the row outside ``[0, R)``, or ``m <= 0``: nothing.

Every vector copy loads ``flat_in[base + s : base + s + size]`` and stores ``pool[row, s : s + size]`` with ``[s, s +
size)`` inside the window; a scalar store is the same for one column. No access leaves its array, so nothing is
clamped, by the GPU or by the interpreter. Column arithmetic is int32 where ``C < 2**31``: every column value and
``k * T <= m - 1`` stay in ``[0, C]``, and ``K`` is computed as ``(m - 1) // T + 1``.

Layout: a ``pl.ds`` load or store uses the Lane semantics' strided layout, one element per thread per register, so
accesses need only their element's alignment (``base + s`` and ``row * C + s`` have no more: sglang's pools are
``context + 1`` wide); the compiled kernel pins it (``WG_STRIDED(vec_size=1)``) rather than trust a default.

Grid ``(lanes, bs)``, ``lanes = min(cdiv(min(C, N), T), cdiv(TARGET_PROGRAMS, bs))``; Pallas reverses it for CUDA, so
requests run along x (up to ``2**31 - 1``) and lanes along y. Launch: compiled, ``pl.kernel`` over a ``plgpu.Mesh``
with the pool handed in as a ref (``pl.run_state``), which it aliases in and out (the Mosaic GPU ``pallas_call`` with
aliases is gone in JAX 0.11.2); interpreted, ``pl.pallas_call(..., interpret=True)`` with ``input_output_aliases``
(the interpreter runs neither ``pl.kernel``'s named axes nor its ref operands). ``jax.vmap`` runs one kernel per
example (``compute.per_example``): Mosaic GPU does not lower Pallas's batched grid.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from kv_canary_jax.compute import per_example
from kv_canary_jax.xla import Typed, windows

VEC = 128  # a warpgroup's threads: the smallest vector copy, one element per thread
# The tile cap: 1024 columns, 8 tokens a thread (docs/design.md, "The JAX kernels"); a window shorter than the tile
# takes the short copies.
TILE = 1024
# Scalar stores per loop step of a short window, in a loop rather than unrolled: the largest path's register count
# is the whole kernel's (docs/design.md).
STAGE_BATCH = 16
# Programs a launch aims at: a request gets at most cdiv(TARGET_PROGRAMS, bs) lanes, so one long request spreads
# over the GPU while a big batch takes a lane per request; it keeps the lanes far below CUDA's y limit of 65535.
TARGET_PROGRAMS = 4096
LANE_AXIS, REQUEST_AXIS = "kv_canary_lane", "kv_canary_request"
NAME = "kv_canary_scatter_req_token_ids_mosaic"


def launch_shape(bs: int, width: int, n_tokens: int, block: int | None = None) -> tuple[int, int]:
    """``(tile, lanes)`` from the shapes; ``tile`` 0 where no window reaches ``VEC`` columns (scalar stores only)."""
    span = min(width, n_tokens)
    cap = min(TILE if block is None else block, span)
    if cap < VEC:
        return 0, 1
    tile = 1 << (cap.bit_length() - 1)
    return tile, max(1, min(pl.cdiv(span, tile), pl.cdiv(TARGET_PROGRAMS, max(bs, 1))))


def _kernel(lane, r, flat_ref, offsets_ref, rows_ref, start_cols_ref, pool_ref, stage_ref, *,
            n_tokens: int, n_rows: int, width: int, tile: int, lanes: int, compiled: bool):
    """Program ``(lane, r)`` (module docstring); ``stage_ref``: ``2 * VEC`` int32 of shared memory."""
    row = rows_ref[r]
    first_col = None if start_cols_ref is None else start_cols_ref[r]
    base, lo, hi = windows(offsets_ref[r], offsets_ref[r + 1], first_col, width, n_tokens)
    col = jnp.int32 if width < 2**31 else jnp.int64
    lane, lo, hi = lane.astype(col), lo.astype(col), hi.astype(col)
    m = hi - lo
    live = (row >= 0) & (row < n_rows) & (m > 0)

    def div(a, b: int):
        return lax.div(a, col(b))  # a >= 0 wherever the quotient is used: truncation is floor

    def token(j):
        return base + j.astype(base.dtype)  # in [0, N) for a column of the window

    def strided(values):
        if not compiled or not hasattr(plgpu, "layout_cast"):  # the interpreter has no layouts
            return values
        return plgpu.layout_cast(values, plgpu.Layout.WG_STRIDED(values.shape, vec_size=1))

    def vector_copy(starts, size: int):
        loaded = [strided(flat_ref[pl.ds(token(s), size)]) for s in starts]  # every load before the stores
        for s, values in zip(starts, loaded):
            pool_ref[row, pl.ds(s, size)] = values.astype(jnp.int32)  # the low 32 bits

    def staged_copy():
        staged = n_tokens >= VEC
        if staged:
            load = jnp.minimum(token(lo), n_tokens - VEC)
            d = (token(lo) - load).astype(col)
            stage_ref[pl.ds(VEC - d, VEC)] = strided(flat_ref[pl.ds(load, VEC)]).astype(jnp.int32)
            if compiled:
                plgpu.commit_smem()  # a warpgroup barrier: every thread's part of the stage is written

        def step(k, carry):
            columns = [jnp.minimum(k * STAGE_BATCH + i, m - 1) for i in range(STAGE_BATCH)]
            values = [stage_ref[VEC + j] if staged else flat_ref[token(lo + j)].astype(jnp.int32) for j in columns]
            for j, v in zip(columns, values):
                pool_ref[row, lo + j] = v

        lax.fori_loop(col(0), div(m + STAGE_BATCH - 1, STAGE_BATCH), step, None)

    if tile:
        tiles = div(m - 1, tile) + 1  # K, for m >= 1
        count = Typed(col).where(live & (m >= tile) & (lane < tiles), div(tiles - lane - 1, lanes) + 1, 0)

        def one_tile(i, carry):
            vector_copy([lo + jnp.minimum((lane + i * lanes) * tile, m - tile)], tile)

        lax.fori_loop(col(0), count, one_tile, None)
    first = live & (lane == 0)
    p = VEC
    while p < tile:  # the short copies: P <= m < 2P
        pl.when(first & (m >= p) & (m < 2 * p))(functools.partial(vector_copy, [lo, hi - p], p))
        p *= 2
    pl.when(first & (m < VEC))(staged_copy)


def compiler_params():
    """Without the barriers Pallas puts around every store, where this JAX has the switch: they would only stall,
    and the one shared-memory exchange (the stage) has its own barrier."""
    if "unsafe_no_auto_barriers" in {f.name for f in dataclasses.fields(plgpu.CompilerParams)}:
        return plgpu.CompilerParams(unsafe_no_auto_barriers=True)
    return plgpu.CompilerParams()


def _call(flat_in, offsets, rows, pool, start_cols, *, interpret: bool, block: int | None):
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, rows.shape, pool.shape
    tile, lanes = launch_shape(bs, width, n_tokens, block)
    compiled = not interpret
    kernel = functools.partial(_kernel, n_tokens=n_tokens, n_rows=n_rows, width=width, tile=tile, lanes=lanes,
                               compiled=compiled)
    inputs = (flat_in, offsets, rows) + (() if start_cols is None else (start_cols,))

    def staged(lane, r, *refs):  # refs: the inputs', then the pool's
        start_cols_ref = refs[3] if start_cols is not None else None
        pl.run_scoped(lambda stage: kernel(lane, r, *refs[:3], start_cols_ref, refs[-1], stage),
                      plgpu.SMEM((2 * VEC,), jnp.int32))

    grid = (lanes, bs)
    if compiled:
        def body(*refs):
            staged(lax.axis_index(LANE_AXIS), lax.axis_index(REQUEST_AXIS), *refs)

        def write(pool_ref):
            pl.kernel(body, out_type=(), mesh=plgpu.Mesh(grid=grid, grid_names=(LANE_AXIS, REQUEST_AXIS)),
                      compiler_params=compiler_params(), name=NAME)(*inputs, pool_ref)

        # run_state keeps the ref inside one primitive that discharges itself (a bare jax.new_ref inside
        # custom_vmap cannot be discharged when lowering).
        return pl.run_state(write)(pool)

    gmem = pl.BlockSpec(memory_space=plgpu.GMEM)
    return pl.pallas_call(
        lambda *refs: staged(pl.program_id(0), pl.program_id(1), *refs[:-2], refs[-1]),  # refs[-2]: the aliased pool
        out_shape=jax.ShapeDtypeStruct(pool.shape, pool.dtype),
        grid=grid,
        in_specs=[gmem] * (len(inputs) + 1),
        out_specs=gmem,
        input_output_aliases={len(inputs): 0},
        interpret=True,
        compiler_params=compiler_params(),
        name=NAME,
    )(*inputs, pool)


def scatter(flat_in, offsets, rows, pool, start_cols=None, *, interpret: bool = False,
            block: int | None = None) -> jax.Array:
    """The pool with the requests' tokens written (module docstring)."""
    if block is not None and (block < VEC or block & (block - 1)):
        raise ValueError(f"block must be a power of two >= {VEC}, got {block}")
    if min(*flat_in.shape, *rows.shape, *pool.shape) == 0:
        return pool
    call = functools.partial(_call, interpret=interpret, block=block)
    return per_example(call)(flat_in, offsets, rows, pool, start_cols)
