"""The Mosaic TPU kernel (``jax.experimental.pallas.tpu``): TPUs; anywhere with ``interpret=True``.

Contract: ``scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols=None, *, interpret)``
takes int64 ``flat_in[N]``, ``offsets[bs+1]``, ``req_pool_indices[bs]``, an
int32 ``pool_out[R, C]`` and, for a windowed call, int64 ``start_cols[bs]``,
whose checks have passed, and returns the pool with the
requests' tokens written, exactly as ``shared_spec.reference`` says, for any
values, repeated rows included. A windowed call changes only the XLA
arithmetic before the kernel (the windows' first columns); the kernel is the
same. ``pool_out`` stays in HBM (``memory_space=
pl.ANY``) and is aliased to the output (``input_output_aliases``), so under
``jax.jit(..., donate_argnums=...)`` the kernel writes the donated buffer in
place; without donation XLA copies the pool first. When ``bs``, ``N``, ``R`` or
``C`` is 0 nothing can be written and the pool is returned without a kernel.
When ``N``, ``R`` or ``C`` is ``2**31`` or more (a row, a pool or a token array
of 8 GiB and up) the windows do not fit the TPU's 32-bit scalars, and the XLA
implementation (``xla.scatter``; windowed, ``xla_windowed.scatter``) computes
the result instead: the same pool, without this kernel. ``interpret=True`` runs the kernel in Pallas's TPU
interpreter (``interpret=pltpu.InterpretParams()``; ``interpret`` may also be
an ``InterpretParams``, e.g. with ``detect_races=True``), which simulates SMEM,
DMAs and DMA semaphores on any platform, checking every DMA's bounds.

What a TPU changes, and how the kernel deals with it:

- No 64-bit integers in the kernel. A TPU has no 64-bit integer vector
  arithmetic, and its scalar core and SMEM hold 32-bit words. So everything
  64-bit is done by XLA before the kernel (XLA emulates int64 exactly on a
  TPU):
  the token ids become their low 32 bits (``flat_in.astype(int32)``: the
  conversion truncates, two's complement, which is what the spec stores),
  shaped ``(1, N)``; and each request's window comes from
  ``windows.pool_window`` in int64 (the spec's own
  ``shared_spec.reference.written_columns``, or windowed its
  ``windowed_columns`` in pool columns), exactly as every other kernel
  computes it: request ``r`` writes columns ``lo <= j < hi`` of its row from
  ``flat_in[base + j]``, every ``base + j`` in ``[0, N)``, ``0 <= lo`` and
  ``hi <= C``. The kernel
  gets four int32 per request (``windows``): the row, the first column
  ``lo``, the first token ``base + lo`` and the length ``m = hi - lo``, with
  ``m = 0`` (and the rest 0) for a request that writes nothing (row outside
  ``[0, R)``, or an empty window). Each fits int32 because ``N, R, C < 2**31``
  (see above): ``lo < C``, ``base + lo < N``, ``m <= min(C, N)``.
- No vector work at all: a token id is copied, not computed, so the kernel is
  scalar code issuing DMAs, HBM to HBM. A TPU's DMA engines copy between HBM
  locations directly, so going through VMEM would only add a second DMA per
  copy and VMEM buffers to size; the copies here never touch VMEM.
- DMA shapes are static. A window of ``m`` columns is split into the binary
  digits of ``m``: for each bit ``b`` set in ``m`` (``2**b <= min(C, N)``: the
  longest window), one DMA of ``2**b`` tokens from ``flat[base + lo + o]`` to
  ``pool[row, lo + o : lo + o + 2**b]``, with ``o = m`` with bits ``0..b``
  cleared (the higher bits' copies come first). The copies are disjoint and
  cover exactly ``[lo, hi)``: no cell outside the window is ever written, not
  even with its own value (no read-modify-write), so requests that name the
  same row never undo each other's writes (a cell both write holds one of the
  two values, as the spec allows). Every DMA lies inside its arrays:
  ``o + 2**b <= m``, so columns stay below ``hi <= C`` and tokens below
  ``base + hi <= N``. A request issues ``popcount(m) <= log2(min(C, N)) + 1``
  DMAs: one for a decode step (``m = 1``), a few for a prefill, and moves
  exactly its ``4 m`` bytes (read) and ``4 m`` bytes (written).
- SMEM is small (1 MiB per core from v4 on, 16 KiB on v2 and v3), and the
  spec has no limit on ``bs``: scalar-prefetching every window (16 bytes a
  request) would cap the batch (at 64K requests on v4). So the windows
  arrive in blocks of ``REQUESTS_PER_STEP`` requests through a ``BlockSpec``
  in SMEM, which Pallas double-buffers: grid step ``i`` handles requests
  ``i * REQUESTS_PER_STEP ...`` (the last block padded with empty windows). A
  step starts every DMA of its requests, then waits for all of them on one DMA
  semaphore (each wait consumes its own copy's bytes, so the order of
  completion does not matter; a wait names a copy of the same shape at the
  arrays' origin, since only the shape counts); nothing is in flight when a
  step ends.
- The grid axis is ``parallel``: on chips with two TensorCores per device
  (v4, v5p, v7x) the blocks are split between them. Two cores may write the
  same row only for repeated rows, and then only cells of their own windows.

Bytes per token, HBM: XLA's conversion reads 8 and writes 4, the kernel's DMAs
read 4 and write 4: 20 in all, against 12 for a kernel that read the int64 ids
itself (which Mosaic cannot), plus 16 read and 16 written per request for the
windows. The kernel is bound by DMA issue for many short windows (one
descriptor per set bit of each window, issued by the scalar core) and by HBM
bandwidth for long ones; see docs/performance-notes.md.

Unverified on hardware (no TPU here): Mosaic's DMA lowering may require
minor-dimension DMA windows aligned to the (8, 128) tiling of 32-bit HBM
arrays, and these windows start at any column and have any power-of-two
width; a step may also have more DMAs in flight than a DMA queue holds.
``tests/jax/test_jax_mosaic_tpu.py`` lowers the kernel for TPU (Pallas's lowering
to Mosaic, no TPU needed), but Mosaic's own passes run only on a TPU host,
where the first ``kv-canary check`` tells (docs/performance-notes.md: the
risks and what to do).

``jax.vmap``: Pallas's batching rule does not apply to a kernel whose operands
live in HBM and are addressed by DMA, so ``scatter`` carries its own rule
(``batching.per_example``): one kernel per example, in a ``lax.map``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from kv_canary_jax import batching, xla, xla_windowed
from kv_canary_jax.windows import pool_window
from shared_spec.reference import longest_window

# Requests whose windows one grid step reads from SMEM and whose DMAs it
# issues before waiting. 4 int32 per request: 2 KiB a block, 4 KiB
# double-buffered, inside even the 16 KiB of SMEM of v2 and v3 cores. Enough
# requests per step to amortize the step's fixed cost (a few hundred ns) over
# a decode batch; 4 * 128 = 512 int32 is a power of two >= 128, the shape
# Pallas TPU accepts for a 1-D block.
REQUESTS_PER_STEP = 128
# The int32 fields of each request's window, in this order.
FIELDS = ("row", "column", "token", "length")
# Shapes at or past this do not fit the kernel's int32 scalars (see the docstring).
INT32_LIMIT = 2**31
NAME = "kv_canary_scatter_req_token_ids_mosaic_tpu"


def copy_bits(width: int, n_tokens: int) -> tuple[int, ...]:
    """The bits ``b`` a window's length can have (``2**b <= min(C, N)``), highest first: one DMA size each."""
    span = longest_window(width, n_tokens)
    return tuple(range(span.bit_length() - 1, -1, -1)) if span > 0 else ()


def window_copies(length, bits, xp=jnp):
    """``[(when, offset, size)]``: the DMAs of a window of ``length`` columns (see the module docstring).

    Copy ``b`` runs when bit ``b`` of ``length`` is set and covers columns
    ``offset .. offset + 2**b`` of the window, ``offset`` being ``length``
    with bits ``0..b`` cleared. ``xp`` is ``jnp`` in the kernel, ``numpy`` to
    check the plan on the host.
    """
    plan = []
    for b in bits:
        size = 1 << b
        plan.append(((length & size) != 0, length & ~(2 * size - 1), size))
    return plan


def windows(offsets, req_pool_indices, n_tokens: int, n_rows: int, width: int, steps: int, start_cols=None):
    """int32 ``[steps * REQUESTS_PER_STEP * 4]``: each request's ``FIELDS``, XLA's exact int64 arithmetic before the kernel.

    Requests past ``bs`` (padding) and requests that write nothing get length 0.
    """
    base, lo, hi = pool_window(offsets[:-1], offsets[1:], start_cols, width, n_tokens, jnp)
    rows = req_pool_indices
    live = (rows >= 0) & (rows < n_rows) & (hi > lo)
    fields = [jnp.where(live, value, 0).astype(jnp.int32) for value in (rows, lo, base + lo, hi - lo)]
    table = jnp.stack(fields, axis=1)  # [bs, 4]: one request's fields side by side
    pad = steps * REQUESTS_PER_STEP - rows.shape[0]
    return jnp.pad(table, ((0, pad), (0, 0))).reshape(-1)


def _kernel(windows_ref, tokens_ref, pool_in_ref, pool_ref, sem, *, bits, bs: int):
    """One grid step: start every DMA of its requests, then wait for them all (see the module docstring)."""
    del pool_in_ref  # the same buffer as pool_ref (input_output_aliases)
    count = len(FIELDS)
    # The last block's padding requests write nothing: the loops stop at bs.
    # int32 throughout: loop indices stay int32 scalars even with x64 enabled.
    requests = jnp.minimum(jnp.int32(REQUESTS_PER_STEP), jnp.int32(bs) - pl.program_id(0) * REQUESTS_PER_STEP)

    def for_each_request(body):
        lax.fori_loop(jnp.int32(0), requests, lambda i, carry: (body(i), carry)[1], jnp.int32(0))

    def field(i, name):
        return windows_ref[count * i + FIELDS.index(name)]

    def start(i):
        length = field(i, "length")

        @pl.when(length > 0)  # a request that writes nothing reads no more of its window
        def _():
            row, column, token = field(i, "row"), field(i, "column"), field(i, "token")
            for when, offset, size in window_copies(length, bits):
                @pl.when(when)
                def _(offset=offset, size=size):
                    pltpu.make_async_copy(
                        tokens_ref.at[pl.ds(0, 1), pl.ds(token + offset, size)],
                        pool_ref.at[pl.ds(row, 1), pl.ds(column + offset, size)],
                        sem,
                    ).start()

    def wait(i):
        # A wait consumes its copy's byte count on the semaphore: only the
        # shape of the copy matters, so one of the same size at the origin
        # (inside both arrays: size <= min(C, N)) stands for it.
        for when, _, size in window_copies(field(i, "length"), bits):
            @pl.when(when)
            def _(size=size):
                pltpu.make_async_copy(
                    tokens_ref.at[pl.ds(0, 1), pl.ds(0, size)], pool_ref.at[pl.ds(0, 1), pl.ds(0, size)], sem
                ).wait()

    for_each_request(start)
    for_each_request(wait)


def interpret_params(interpret):
    """What ``pallas_call`` gets as ``interpret``: False, or TPU interpret mode's parameters."""
    if isinstance(interpret, pltpu.InterpretParams):
        return interpret
    return pltpu.InterpretParams() if interpret else False


def fits_int32(n_tokens: int, n_rows: int, width: int) -> bool:
    """Whether the kernel's int32 scalars hold every window of these shapes."""
    return max(n_tokens, n_rows, width) < INT32_LIMIT


def _call(flat_in, offsets, req_pool_indices, pool_out, *start_cols, interpret):
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, req_pool_indices.shape, pool_out.shape
    steps = pl.cdiv(bs, REQUESTS_PER_STEP)
    table = windows(offsets, req_pool_indices, n_tokens, n_rows, width, steps, *start_cols)
    # Low 32 bits, two's complement: int64 -> int32 conversion truncates.
    tokens = flat_in.astype(jnp.int32).reshape(1, n_tokens)
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    block = len(FIELDS) * REQUESTS_PER_STEP
    return pl.pallas_call(
        functools.partial(_kernel, bits=copy_bits(width, n_tokens), bs=bs),
        out_shape=jax.ShapeDtypeStruct(pool_out.shape, pool_out.dtype),
        grid=(steps,),
        in_specs=[pl.BlockSpec((block,), lambda i: (i,), memory_space=pltpu.SMEM), hbm, hbm],
        out_specs=hbm,
        scratch_shapes=[pltpu.SemaphoreType.DMA(())],
        input_output_aliases={2: 0},
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=interpret_params(interpret),
        name=NAME,
    )(table, tokens, pool_out)


def scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols=None, *, interpret=False) -> jax.Array:
    """The pool with the requests' tokens written (see the module docstring)."""
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, req_pool_indices.shape, pool_out.shape
    if min(bs, n_tokens, n_rows, width) == 0:
        return pool_out
    if not fits_int32(n_tokens, n_rows, width):
        if start_cols is not None:
            return xla_windowed.scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols)
        return xla.scatter(flat_in, offsets, req_pool_indices, pool_out)
    window = () if start_cols is None else (start_cols,)
    return batching.per_example(functools.partial(_call, interpret=interpret))(
        flat_in, offsets, req_pool_indices, pool_out, *window
    )
