"""The Mosaic GPU kernel (``jax.experimental.pallas.mosaic_gpu``): Hopper and newer; anywhere with ``interpret=True``.

Contract: ``scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols=None, *, interpret)``
takes int64 ``flat_in[N]``, ``offsets[bs+1]``, ``req_pool_indices[bs]``, an
int32 ``pool_out[R, C]`` and, for a windowed call, int64 ``start_cols[bs]``,
whose checks have passed, and returns the pool with the
requests' tokens written, exactly as ``shared_spec.reference`` says, for any
values, repeated rows included. Whether the call is windowed is static: with
``start_cols`` None the kernel has the four operands and traces exactly as it
does unwindowed. ``pool_out`` is aliased to the output (the
kernel's pool operand is the output buffer), so under ``jax.jit(...,
donate_argnums=...)`` the kernel writes the donated buffer in place; without
donation XLA copies the pool first. When ``bs``, ``N``, ``R`` or ``C`` is 0
nothing can be written and the pool is returned without a kernel.
``interpret=True`` runs the same kernel body in the Pallas interpreter
(``pallas_call(..., interpret=True)``, what ``plgpu.kernel(...,
interpret=True)`` would run), on any platform: for tests (see "Launch" below).
``assign(req_pool_indices, req_to_token, start_offset, end_offset,
out_cache_loc, *, interpret)`` is ``shared_spec.assignment`` on the same
kernel and grid, each program computing its request's offsets itself (its
docstring).

No masks. Mosaic GPU has no masked loads or stores: a register array belongs to
a whole warpgroup (128 threads), a store writes every element of it, so the
smallest vector store writes ``VEC = 128`` consecutive cells, and the only
finer store is a scalar one. So the kernel never stores a vector reaching
outside the request's window: it places fixed-size vector copies *inside* the
window, overlapping where the window is not a multiple of their size, and
writes windows shorter than ``VEC`` with scalar stores. Overlapping copies of
one request write the same value to a cell (``flat_in[base + j]`` to column
``j``), so their order does not matter. No cell outside a window is ever
written, not even with its own old value (there is no read-modify-write), so
requests that name the same row (allowed when unchecked) never undo each
other's writes: a cell both write holds one of the two values, a cell one of
them writes holds its value, as the spec says.

The window. Program ``(lane, r)`` loads ``offsets[r]``, ``offsets[r+1]``,
``req_pool_indices[r]`` (and ``start_cols[r]``, windowed) and computes, on
scalars, ``(base, lo, hi)`` in pool columns with ``windows.pool_window`` (the
spec's own ``shared_spec.reference.written_columns``; windowed, its
``windowed_columns`` moved to pool columns, as ``windows.kernel_window``
computes it: a few scalar ops on an in-row request, the exact math on others): request
``r`` writes exactly the columns ``lo <= j < hi`` of its row, reading
``flat_in[base + j]``, with ``0 <= lo``, ``hi <= C``, and every such ``base +
j`` in ``[0, N)``. Everything below holds for any such window, wherever in
the row it starts, so the windowed kernel is the unwindowed one past those
scalar ops. With ``m = hi - lo``, at most
``longest_window(C, N) = min(C, N)``, and the tile ``T`` (a power of two,
``VEC <= T <= min(C, N)``, from the shapes alone: ``launch_shape``):

- ``m >= T``: tile ``k < cdiv(m, T)`` copies the ``T`` columns from
  ``s = lo + min(k * T, m - T)`` (``tile_copy``): tiles ``0, T, 2T, ...`` from
  ``lo``, the last one moved back to end exactly at ``hi``. ``[s, s + T)`` lies
  in ``[lo, hi)``: ``min(k * T, m - T) >= 0`` and ``s + T <= lo + m = hi``;
  the tiles cover ``[lo, hi)``. Lane ``lane`` copies the tiles ``lane,
  lane + lanes, ...`` (``lane_tiles`` of them, in a loop).
- ``VEC <= m < T``: lane 0 copies ``P`` columns from ``lo`` and ``P`` columns
  ending at ``hi``, for the power of two with ``P <= m < 2P``
  (``short_copies``); the two cover ``[lo, hi)`` since ``2P > m``.
- ``0 < m < VEC``: lane 0 stages the window in shared memory and stores it
  column by column (``staged_load``, ``staged_columns``): one vector load of
  ``VEC`` tokens from ``s = min(base + lo, N - VEC)`` (inside ``[0, N)``, and
  the window's ``m`` tokens are among them, at ``d = base + lo - s``), stored
  to shared memory so that column ``lo + j`` lands at ``stage[VEC + j]``; a
  barrier; then, in batches of ``STAGE_BATCH``, scalar stores of the columns
  ``lo + min(i, m - 1)``, ``i < cdiv(m, STAGE_BATCH) * STAGE_BATCH`` (each
  column of the window, the last repeated), each value read back from shared
  memory. A short window costs one memory latency for its tokens, like a
  long one, and the path holds few registers (the scalar stores read shared
  memory, not a register per column). Where ``N < VEC`` (no vector load of
  ``VEC`` tokens fits) the batches load their tokens from ``flat_in``
  directly, with the same columns.
- the row outside ``[0, R)``, or ``m <= 0``: nothing.

Every vector copy is one load of ``flat_in[base + s : base + s + size]`` (in
``[0, N)``, since ``[s, s + size)`` is inside the window) and one store to
``pool[row, s : s + size]`` (inside the window, hence inside the row); a scalar
store is the same for one column (its value read from ``stage``, shared
memory, where ``N >= VEC``). No access ever leaves its array, so nothing is
clipped or clamped: not by the GPU, not by the interpreter (which clamps slices
that reach past an array's end, where the GPU would not). Both run the same
index arithmetic on the same in-bounds slices.

Layout: a ``ref[pl.ds(...)]`` load or store uses the Lane semantics' default
strided layout: element ``i`` of a copy lives in thread ``i % 128``. For int64
that is one 8-byte element per thread per register (``vec_size = 1``), and the
int32 values keep that layout, so stores are 4-byte stores. No access needs
more than its element's natural alignment, which matters: neither ``base + s``
nor ``row * C + s`` has any (``C`` is often odd; sglang's pools are ``context
+ 1`` wide). The GPU build pins that layout (``plgpu.layout_cast`` to
``WG_STRIDED(vec_size=1)``) rather than trust a default. Each warp instruction
still moves 32 consecutive elements.

Grid: ``(lanes, bs)`` with ``lanes = min(cdiv(min(C, N), T),
cdiv(TARGET_PROGRAMS, bs))``: a lane per tile of the longest window, at most
``TARGET_PROGRAMS`` programs in all. Pallas's Mosaic GPU lowering reverses the grid
for CUDA, so requests run along CUDA's x axis (up to ``2**31 - 1``) and lanes
along y (at most ``TARGET_PROGRAMS``, below y's 65535). Like the Triton
kernels, a pool far wider than the batch's tokens launches programs for the
tokens (``min(C, N)``), not for the width. No TMA: a program is three
scalar loads, then per tile its loads, then its stores; the parallelism is
across programs. The only shared memory is the ``2 * VEC``-cell ``stage`` of
the short-window path (``pl.run_scoped``: JAX 0.11's ``pl.kernel`` takes no
scratch operands), and its barrier the only one.

Launch: two bodies around the one ``_kernel``, on the same grid, both
aliasing the pool in place. Compiled, ``pl.kernel`` over a ``plgpu.Mesh`` with
the pool handed in as a ref (``pl.run_state``), which ``pl.kernel`` aliases in
and out: the entry point Mosaic GPU keeps, in JAX 0.10.2 and 0.11 alike (the
Mosaic GPU lowering of ``pl.pallas_call`` with aliases, deprecated in JAX 0.10,
is gone in 0.11.2: an AssertionError in ``pallas_call.gpu_lowering``, H200,
2026-11-30). Interpreted,
``pl.pallas_call(..., interpret=True)`` with ``input_output_aliases``: the
Pallas interpreter runs neither ``pl.kernel``'s named grid axes nor its ref
operands (JAX 0.10), and Mosaic GPU's own interpreter,
``InterpretGPUParams``, is private in JAX 0.10 and there gives ``program_id``
0 to every program of a ``pallas_call`` grid.

``jax.vmap``: Mosaic GPU does not lower the batched ``pallas_call`` that
Pallas's batching rule builds (its grid gains a vmapped axis), so ``scatter``
carries its own rule (``batching.per_example``): one kernel per example, in a
``lax.map``. Correct for any batched arguments; a batch of pools
costs one launch per pool.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from kv_canary_jax import batching
from kv_canary_jax import windows
from kv_canary_jax.windows import pool_window
from shared_spec import assignment
from shared_spec.reference import longest_window

# The threads of one warpgroup, which executes a Mosaic GPU kernel in the Lane
# semantics: the smallest register array a warpgroup loads or stores is one
# element per thread, so vector copies come in multiples of this and shorter
# windows are staged in shared memory and stored column by column.
VEC = 128
# The tile (columns one program copies on a long window) is the largest power
# of two <= min(TILE, C, N), the cap by the longest window min(C, N): 8 int64
# per thread, as the Triton-lowered kernel has. History, on the H200 (jax
# 0.11.2): while the unrolled scalar path for short windows held the kernel at
# 128 registers per thread (4 programs resident per SM), tiles of 2048 columns
# won (profiler kernel durations, 256 x 2048: tile 512 4.03 us, 2048 2.53 us).
# With the staged short-window path (40-48 registers, 10-12 programs per SM) a
# sweep on the wall-clock chained figure (+-1 us of noise) chose 512. On the
# device clock (profiler timestamps of the 16-application chain, the bench's
# 'mosaic / pallas'; benchmarks/jax_kernel_times.py --set TILE=1024,...,
# 2026-11-30, commit 831826c) 1024 is faster at every uniform case of 0.5M-8M tokens, us
# per application, tile 512 / 1024 (pallas): 64 x 8192 2.33 / 2.26 (2.17),
# 256 x 2048 2.36 / 2.27 (2.33), 256 x 8192 5.04 / 4.83 (4.73), 1024 x 2048
# 5.12 / 4.91 (4.84), 256 x 32768 28.73 / 27.86 (27.04); 4096 x 512 keeps 512
# (its windows are 513 wide). The overlapping last tile re-writes at most T - 1
# columns.
TILE = 1024
# Windows shorter than VEC store their columns with scalar stores, this many
# per loop step (the step's shared-memory reads first, then its stores). Why
# not an unrolled store per column: on the H200 (jax 0.11.2, ptxas) the
# kernel with 2P - 1 unrolled scalar copies per length class took 96-128
# registers per thread, against 32-40 without them, and the register count of
# the largest path is the whole kernel's: it bounds how many programs an SM
# holds (benchmarks/mosaic_registers.py).
STAGE_BATCH = 16
# Programs per launch the lanes aim at, as in the torch Triton launcher: each
# request gets at most cdiv(TARGET_PROGRAMS, bs) lanes that stride through its
# tiles, so a long request alone still spreads over the GPU while a big batch
# launches one lane per request. It also keeps the lanes, on CUDA's y axis,
# far below that axis' limit of 65535.
TARGET_PROGRAMS = 4096
# Below that cap a request gets a lane per tile of the longest window min(C, N):
# on a ragged batch the lanes past a short window exit after its three scalar
# loads. History (H200, device clock, us per application, ragged 256 x 8192 /
# 64 x 32768, pallas 3.30 / 3.50): with 512-column tiles a lane per tile of
# the longest window was slow (16 lanes: kernel 4.00 against 3.49 with fewer),
# so lanes followed the mean window N / bs instead (a quarter of the longest
# window's tiles at least): 3.57 / 3.55. With 1024-column tiles that rule gives
# 3.69 / 3.54 and a lane per tile of the longest window 3.57 / 3.50, the
# uniform batches within 0.06 us of either (0.22 us at 256 x 32768, where both
# rules give 16 lanes: run noise).
# Column arithmetic is int32 while every column and tile offset stays below this.
INT32_COLUMNS_BELOW = 2**31
LANE_AXIS, REQUEST_AXIS = "kv_canary_lane", "kv_canary_request"
NAME = "kv_canary_scatter_req_token_ids_mosaic"


def _pow2_floor(x: int) -> int:
    return 1 << (x.bit_length() - 1)


def launch_shape(bs: int, width: int, n_tokens: int, block: int | None = None) -> tuple[int, int]:
    """``(tile, lanes)`` on the host, from shapes only (see the module docstring).

    ``block`` overrides the tile cap (a power of two >= ``VEC``; for tuning
    sweeps). ``tile`` is 0 when no window can reach ``VEC`` columns (``min(C,
    N) < VEC``): then every write is scalar and one lane per request suffices.
    """
    span = longest_window(width, n_tokens)
    cap = min(TILE if block is None else block, span)
    tile = _pow2_floor(cap) if cap >= VEC else 0
    if not tile:
        return 0, 1
    bs = max(bs, 1)
    tiles = pl.cdiv(span, tile)
    return tile, max(1, min(tiles, pl.cdiv(TARGET_PROGRAMS, bs)))


def vector_sizes(tile: int) -> tuple[int, ...]:
    """The static vector copy sizes below ``tile``: ``P`` with ``VEC <= P < tile``, largest first.

    A window of ``m`` columns, ``VEC <= m < tile``, uses the ``P`` with ``P <=
    m < 2P``; no ``P`` exceeds the longest window ``min(C, N)``, since the tile
    does not.
    """
    return tuple(p for p in _powers_below(tile) if p >= VEC)


def _powers_below(limit: int) -> list[int]:
    out, p = [], 1
    while p < limit:
        out.append(p)
        p *= 2
    return out[::-1]


def lane_tiles(lo, hi, lane, lanes: int, tile: int, xp=jnp):
    """How many tiles lane ``lane`` copies: tiles ``k = lane, lane + lanes, ...`` below ``cdiv(m, tile)``; 0 when ``m < tile``."""
    m = hi - lo
    ahead = m - lane * tile  # > 0: tile ``lane`` starts inside the window
    return xp.where((m >= tile) & (ahead > 0), (ahead + lanes * tile - 1) // (lanes * tile), 0)


def tile_copy(lo, hi, k, tile: int, xp=jnp):
    """Tile ``k < cdiv(m, tile)`` of a window ``[lo, hi)`` with ``m >= tile``: ``([start], tile)``.

    ``start = lo + min(k * tile, m - tile)``, so ``lo <= start`` and
    ``start + tile <= hi``; the tiles cover the window.
    """
    m = hi - lo
    return [lo + xp.minimum(k * tile, m - tile)], tile


def short_copies(lo, hi, vectors, xp=jnp):
    """The vector copies of a window shorter than the tile: ``[(when, starts, size)]``, at most one active.

    For the ``P`` with ``P <= m < 2P`` (``P >= VEC``): a copy of ``P`` columns
    from ``lo`` and one ending at ``hi``; they cover ``[lo, hi)`` since ``2P >
    m``.
    """
    m = hi - lo
    return [((m >= p) & (m < 2 * p), [lo, hi - p], p) for p in vectors]


def staged_load(first_token, n_tokens: int, xp=jnp):
    """Where a short window's one vector load of ``VEC`` tokens starts: ``(s, d)``, needs ``N >= VEC``.

    ``first_token = base + lo``, the window's first token, with ``m < VEC``
    tokens from it inside ``[0, N)``. ``s = min(first_token, N - VEC)``: the
    load ``[s, s + VEC)`` lies in ``[0, N)``, and the window's tokens are its
    elements ``d, ..., d + m - 1`` with ``d = first_token - s``, ``d + m <=
    VEC``. Stored to ``stage[VEC - d : 2 * VEC - d]``, column ``lo + j`` lands at
    ``stage[VEC + j]``.
    """
    start = xp.minimum(first_token, n_tokens - VEC)
    return start, first_token - start


def staged_batches(lo, hi):
    """How many loop steps of ``STAGE_BATCH`` scalar stores a window shorter than ``VEC`` takes: ``cdiv(m, STAGE_BATCH)``."""
    return (hi - lo + STAGE_BATCH - 1) // STAGE_BATCH


def staged_columns(lo, hi, k, xp=jnp):
    """Step ``k``'s columns, as offsets ``j`` from ``lo``: ``min(k * STAGE_BATCH + i, m - 1)``, ``i < STAGE_BATCH``.

    Over the steps ``k < staged_batches``, every ``j < m`` appears, and no
    ``j >= m``: the stores stay in the window, the last column repeated.
    """
    m = hi - lo
    return [xp.minimum(k * STAGE_BATCH + i, m - 1) for i in range(STAGE_BATCH)]


def _kernel(
    lane, r, flat_ref, request, rows_ref, pool_ref, stage_ref, *,
    n_tokens: int, n_rows: int, width: int, tile: int, lanes: int, vectors, interpret: bool,
):
    """Program ``(lane, r)``: lane ``lane`` of request ``r`` (see the module docstring).

    ``request(r)`` is request ``r``'s ``(start, end, start_col)`` in ``flat_ref`` (``start_col`` None for an
    unwindowed call). ``stage_ref`` is ``2 * VEC`` int32 of shared memory (unused where ``N <
    VEC``). Compiled (not ``interpret``), the kernel places the stage's barrier
    and pins the register layout where this JAX can; the interpreter
    (sequential, no layouts) has rules for neither.
    """
    pin_layout = not interpret and layout_pinnable()
    start, end, start_col = request(r)
    row = rows_ref[r]
    if start_col is None:
        base, lo, hi = pool_window(start, end, None, width, n_tokens, jnp)
    else:
        base, lo, hi = windows.kernel_window(start, end, start_col, width, n_tokens)
    # Columns and tile offsets (< C + lanes * tile) in int32 unless the pool is too
    # wide: fewer registers.
    col = jnp.int64 if width + (lanes + 1) * max(tile, VEC) >= INT32_COLUMNS_BELOW else jnp.int32
    lane, lo, hi = lane.astype(col), lo.astype(col), hi.astype(col)
    live = (row >= 0) & (row < n_rows) & (hi > lo)

    def token(j):
        """The index into ``flat_in`` of column ``j``: ``base + j``, in ``[0, N)`` for every written column."""
        return base + j.astype(jnp.int64)

    def element_per_thread(values):
        """Pins the layout the kernel relies on: one element per thread per register (4- and 8-byte accesses).

        It is the Lane semantics' default for these arrays; pinned so that a
        JAX whose default moves to wider vectors (which need alignment no
        window has) keeps it. The interpreter has no layouts (and no rule for
        the cast): there it is left out.
        """
        if not pin_layout:
            return values
        return plgpu.layout_cast(values, plgpu.Layout.WG_STRIDED(values.shape, vec_size=1))

    def vector_copy(starts, size: int):
        """``pool[row, s : s + size] = flat_in[base + s : base + s + size]`` for each start, all loads first."""
        values = [element_per_thread(flat_ref[pl.ds(token(s), size)]) for s in starts]
        for s, v in zip(starts, values):
            # Low 32 bits, two's complement: int64 -> int32 conversion truncates.
            pool_ref[row, pl.ds(s, size)] = v.astype(jnp.int32)

    def staged_copy():
        """A window shorter than ``VEC``: one vector load into ``stage_ref``, then scalar stores read from it."""
        staged = n_tokens >= VEC
        if staged:
            load_start, d = staged_load(token(lo), n_tokens)
            stage_ref[pl.ds(VEC - d, VEC)] = element_per_thread(flat_ref[pl.ds(load_start, VEC)]).astype(jnp.int32)
            if not interpret:
                plgpu.commit_smem()  # a warpgroup barrier: every thread's part of the stage is written

        def value(j):
            return stage_ref[VEC + j] if staged else flat_ref[token(lo + j)].astype(jnp.int32)

        def step(k, carry):
            columns = staged_columns(lo, hi, k)
            values = [value(j) for j in columns]  # all reads of the step before its stores
            for j, v in zip(columns, values):
                pool_ref[row, lo + j] = v
            return carry

        lax.fori_loop(0, staged_batches(lo, hi), step, 0)

    if tile:
        count = jnp.where(live, lane_tiles(lo, hi, lane, lanes, tile), 0)

        def one_tile(i, carry):
            vector_copy(*tile_copy(lo, hi, lane + i * lanes, tile))
            return carry

        lax.fori_loop(0, count, one_tile, 0)

    first = live & (lane == 0)
    for when, starts, size in short_copies(lo, hi, vectors):
        pl.when(first & when)(functools.partial(vector_copy, starts, size))
    pl.when(first & (hi - lo < VEC))(staged_copy)


def compiler_params():
    """Mosaic GPU's parameters: without the barriers it puts around every store, where the JAX has the switch.

    The barriers order shared-memory accesses between threads, and Pallas
    puts one before and after every store, global ones included, where they
    would only stall. The kernel's one shared-memory exchange (the short-window
    stage: every thread writes its part, then all read any cell) has its own
    barrier (``plgpu.commit_smem``), which it places with or without this switch.
    """
    fields = {f.name for f in dataclasses.fields(plgpu.CompilerParams)}
    if "unsafe_no_auto_barriers" in fields:
        return plgpu.CompilerParams(unsafe_no_auto_barriers=True)
    return plgpu.CompilerParams()


def layout_pinnable() -> bool:
    """Whether this JAX can state a register layout (``plgpu.layout_cast`` to ``Layout.WG_STRIDED``)."""
    return hasattr(plgpu, "layout_cast") and hasattr(getattr(plgpu, "Layout", None), "WG_STRIDED")


def _call(flat_in, offsets, req_pool_indices, pool_out, *start_cols, interpret: bool, block: int | None):
    """One launch: ``pl.kernel`` compiled, ``pl.pallas_call`` interpreted (see "Launch" in the module docstring).

    ``start_cols``: ``()``, or the one array of a windowed call, an operand after the three vectors.
    """
    windowed = bool(start_cols)

    def bind(refs):
        """The kernel's token ref, ``request`` and rows ref from the operands' refs."""
        flat_ref, offsets_ref, rows_ref = refs[:3]
        start_cols_ref = refs[3] if windowed else None

        def request(r):
            return offsets_ref[r], offsets_ref[r + 1], None if start_cols_ref is None else start_cols_ref[r]

        return flat_ref, request, rows_ref

    inputs = (flat_in, offsets, req_pool_indices, *start_cols)
    return _launch(inputs, pool_out, bind, flat_in.shape[0], req_pool_indices.shape[0], interpret, block)


def _launch(inputs, pool_out, bind, n_tokens: int, bs: int, interpret: bool, block: int | None = None):
    """``_kernel`` over the ``(lanes, bs)`` grid of ``launch_shape`` with ``pool_out`` written in place:
    ``pl.kernel`` compiled, ``pl.pallas_call`` interpreted (see "Launch" in the module docstring). ``bind(refs)``:
    the kernel's ``(flat_ref, request, rows_ref)`` from the refs of ``inputs``; ``n_tokens`` the length of the
    tokens' array."""
    n_rows, width = pool_out.shape
    tile, lanes = launch_shape(bs, width, n_tokens, block)
    kernel = functools.partial(
        _kernel, n_tokens=n_tokens, n_rows=n_rows, width=width, tile=tile, lanes=lanes,
        vectors=vector_sizes(tile), interpret=interpret,
    )
    grid = (lanes, bs)

    def staged(lane, r, *refs):
        """The kernel with its short-window stage in ``run_scoped`` shared memory (see the module docstring).

        ``refs``: the inputs' refs, then the pool's.
        """
        flat_ref, request, rows_ref = bind(refs[:-1])
        pl.run_scoped(
            lambda stage_ref: kernel(lane, r, flat_ref, request, rows_ref, refs[-1], stage_ref),
            plgpu.SMEM((2 * VEC,), jnp.int32),
        )

    if not interpret:
        def body(*refs):
            staged(lax.axis_index(LANE_AXIS), lax.axis_index(REQUEST_AXIS), *refs)

        def write(pool_ref):  # pl.kernel aliases a ref operand in and out: the pool is written in place
            pl.kernel(
                body,
                out_type=(),
                mesh=plgpu.Mesh(grid=grid, grid_names=(LANE_AXIS, REQUEST_AXIS)),
                compiler_params=compiler_params(),
                name=NAME,
            )(*inputs, pool_ref)

        # run_state keeps the ref inside one primitive that discharges itself (a bare
        # jax.new_ref inside custom_vmap cannot be discharged when lowering).
        return pl.run_state(write)(pool_out)

    def call_body(*refs):
        # refs[-2] is pool_in_ref, the same buffer as pool_ref (input_output_aliases).
        staged(pl.program_id(0), pl.program_id(1), *refs[:-2], refs[-1])

    gmem = pl.BlockSpec(memory_space=plgpu.GMEM)
    return pl.pallas_call(
        call_body,
        out_shape=jax.ShapeDtypeStruct(pool_out.shape, pool_out.dtype),
        grid=grid,
        in_specs=[gmem] * (len(inputs) + 1),
        out_specs=gmem,
        input_output_aliases={len(inputs): 0},
        interpret=interpret,
        compiler_params=compiler_params(),
        name=NAME,
    )(*inputs, pool_out)


def scatter(
    flat_in, offsets, req_pool_indices, pool_out, start_cols=None, *, interpret: bool = False, block: int | None = None
) -> jax.Array:
    """The pool with the requests' tokens written (see the module docstring).

    ``start_cols``: None (unwindowed) or each request's first column.
    ``block`` (a power of two >= ``VEC``) overrides the tile cap, for tuning
    sweeps; None picks it from the shapes.
    """
    if block is not None and (block < VEC or block & (block - 1)):
        raise ValueError(f"block must be a power of two >= {VEC}, got {block}")
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, req_pool_indices.shape, pool_out.shape
    if min(bs, n_tokens, n_rows, width) == 0:
        return pool_out
    call = functools.partial(_call, interpret=interpret, block=block)
    window = () if start_cols is None else (start_cols,)
    return batching.per_example(call)(flat_in, offsets, req_pool_indices, pool_out, *window)


# The assignment (``assign``) sums the lengths before a request in each program: as scalars in batches of at most
# SCALAR_SUM_MAX requests (two loads for each request before it), as vectors of VEC requests in batches of VEC to
# VECTOR_SUM_MAX (each program loads the lengths before it: O(bs**2) loads in all, 16 MB at 1024 requests). Mosaic
# GPU has no masked vector load, so the batches between the two have no vector form; those and larger ones take their
# running sum from XLA (kv_canary_jax.assign). Measured to VECTOR_SUM_MAX (H200, 2026-12-02, 957fced with the bound a
# switch; the op's kernels in a jitted step, vectors / XLA's sum and the scatter): decode 128 2.71 / 3.56 us, 256 3.00 /
# 5.06, 512 3.43 / 6.52, 1024 4.71 / 6.49, extend 256 x 1-511 5.97 / 7.06 (docs/performance-notes.md, "The JAX
# assignment").
SCALAR_SUM_MAX = 16
VECTOR_SUM_MAX = 1024


def takes_assignment(bs: int) -> bool:
    """Whether ``assign`` computes the running sum of a batch of ``bs`` requests (see ``SCALAR_SUM_MAX``)."""
    return bs <= SCALAR_SUM_MAX or VEC <= bs <= VECTOR_SUM_MAX


def assign(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, *, interpret: bool = False):
    """``shared_spec.assignment``'s table, the running sum in the kernel: request ``r`` is the windowed scatter's,
    with ``offsets[r] = pt_r`` (the sum of the spec's ``lengths`` before it), ``offsets[r + 1] = pt_r +
    lengths[r]`` and ``start_cols[r] = start_offset[r]``, on the scatter's kernel and grid.

    Takes ``bs``-long int32 or int64 ``req_pool_indices``, ``start_offset``, ``end_offset`` (cut to the batch), int32
    or int64 ``out_cache_loc`` and the int32 table, checked, for a batch ``takes_assignment`` accepts. The table is
    written in place (aliased), as the scatter's pool is, and ``jax.vmap`` maps it per example, as the scatter
    (``batching.per_example``). Each program sums ``pt_r`` from scalars, two loads for each of the ``bs - 1``
    requests that can come before one, or from ``cdiv(bs, VEC)`` vectors of ``VEC`` requests' lengths (vector ``k``
    loaded from ``min(k * VEC, bs - VEC)``, inside the batch; a lane counts where its request lies in ``[k * VEC, (k
    + 1) * VEC)`` and before ``r``) and one reduction. No load of the sum waits on another: all are in flight together.
    """
    (n_tokens,), (bs,), (n_rows, width) = out_cache_loc.shape, req_pool_indices.shape, req_to_token.shape
    if not takes_assignment(bs):
        raise ValueError(f"the kernel does not sum {bs} requests' lengths (takes_assignment)")
    if min(bs, n_tokens, n_rows, width) == 0:
        return req_to_token
    pin = not interpret and layout_pinnable()

    def bind(refs):
        loc_ref, rows_ref, start_ref, end_ref = refs

        def length(j):
            return assignment.lengths(start_ref[j].astype(jnp.int64), end_ref[j].astype(jnp.int64), n_tokens, jnp)

        def request(r):
            if bs >= VEC:
                before = _vector_sum(start_ref, end_ref, r, bs, n_tokens, pin)
            else:
                before = jnp.int64(0)
                for j in range(bs - 1):
                    before = before + jnp.where(j < r, length(j), 0)
            return before, before + length(r), start_ref[r].astype(jnp.int64)

        return loc_ref, request, rows_ref

    def call(*inputs):
        return _launch(inputs[:-1], inputs[-1], bind, n_tokens, bs, interpret)

    return batching.per_example(call)(out_cache_loc, req_pool_indices, start_offset, end_offset, req_to_token)


def _vector_sum(start_ref, end_ref, r, bs: int, n_tokens: int, pin: bool):
    """The sum of the spec's lengths of the requests before ``r`` from vectors of ``VEC`` (``assign``, ``bs >=
    VEC``). ``pin`` (compiled): the layouts stated, one element per thread, and the sum read back from shared memory
    as a scalar (the reduction gives a register array of shape ``()``, which the window's ``lax.cond`` does not take
    beside scalars)."""

    def strided(values):
        return plgpu.layout_cast(values, plgpu.Layout.WG_STRIDED((VEC,), vec_size=1)) if pin else values

    lane = strided(lax.broadcasted_iota(jnp.int32, (VEC,), 0))
    total = None
    for k in range(pl.cdiv(bs, VEC)):
        at = min(k * VEC, bs - VEC)
        request = lane + at
        counted = (request >= k * VEC) & (request < r)
        start = strided(start_ref[pl.ds(at, VEC)]).astype(jnp.int64)
        end = strided(end_ref[pl.ds(at, VEC)]).astype(jnp.int64)
        part = jnp.where(counted, assignment.lengths(start, end, n_tokens, jnp), 0)
        total = part if total is None else total + part
    before = jnp.sum(total)
    if not pin:
        return before

    def scalar(cell):
        cell[0] = before
        plgpu.commit_smem()  # a warpgroup barrier: the cell is written before any thread reads it
        return cell[0]

    return pl.run_scoped(scalar, plgpu.SMEM((1,), jnp.int64))
