"""The pure-XLA implementation: any platform, vectorized, exact for any values, no host round trip.

Contract: ``scatter(flat_in, offsets, req_pool_indices, pool_out)`` takes int64
``flat_in[N]``, ``offsets[bs+1]``, ``req_pool_indices[bs]`` and an int32
``pool_out[R, C]`` whose checks have passed, and returns the pool with the
requests' tokens written, exactly as ``shared_spec.reference`` says, for any
values (offsets decreasing or overlapping, int64 extremes, rows anywhere).
The pool is written by scatters (in place when the caller donates it); when
``bs``, ``N``, ``R`` or ``C`` is 0 the pool is returned as is. No value is
read on the host: there is no ``lax.cond``, nothing on a GPU depends on a
value (XLA:GPU copies a conditional's or a loop's predicate to the host and
waits for it), and the one loop on a value (CPU, TPU) keeps its predicate on
the device.

The cells: request ``r`` writes columns ``lo <= j < hi`` of its row from
``flat_in[base + j]`` (``shared_spec.reference.written_columns``, the rule
every kernel uses); a row outside ``[0, R)`` writes nothing. Laid end to end in
request order, request ``r``'s cells are the enumeration indices ``first[r] <=
k < first[r] + length[r]``, ``T`` of them in all. ``T <= bs * min(C, N)``
(``longest_window``) always, and ``T <= N`` whenever ``offsets`` is
non-decreasing (every well-formed batch, whatever its range): segments are then
disjoint, and each written cell reads a distinct token of ``[0, N)``.

Two formulations, chosen per platform when lowering (``lax.platform_dependent``), and on CPUs and TPUs a third for a
batch of one request: ``xla_one_request``'s one ``dynamic_update_slice`` (on GPUs the grid below costs less there):

- CPU, TPU and any other platform: the per-request grid below where it has at
  most 3/2 cells per token (``PER_TOKENS * bs * min(C, N) <= GRID_CELLS * N``,
  a choice of shapes made when tracing: batches whose requests fill their rows),
  else by token, then by cell. On paper: the grid is a gather and a scatter of
  ``bs * min(C, N)`` cells and no pass over the tokens; the token pass is a
  scatter-add of ``2 * bs`` updates, one cumulative sum over the ``N`` tokens,
  one elementwise pass and one scatter of ``N`` updates (``plain``, what a user
  writes, does the same sum and two gathers of ``N`` more), after ``O(bs)``
  per-request work (``written_columns``, one ``cummax`` and an ``all``). On the
  2-core CPU machine (2026-12-01, jax 0.10.2) a grid cell costs about 0.6x a
  token of either pass, hence the 3/2; ``benchmarks/xla_cpu_step.py`` times
  both against ``plain`` in a jitted step (docs/jax.md, Performance).
  The token pass: when the
  non-empty windows (the token ranges requests read) are disjoint and in
  request order (``ordered``: every non-decreasing batch), each token is
  written by at most one cell, whose row and column shift the cumulative sum
  gives (``_by_token``): one scatter of ``N`` updates reading ``flat_in`` in
  order. Otherwise that scatter writes nothing, and a ``lax.while_loop``
  enumerates the ``T`` cells ``N`` at a time
  (``ceil(T / N)`` scatters of ``N`` updates, each cell finding its request by
  ``jnp.repeat`` over enumeration indices): work proportional to the cells written.
  A well-formed batch evaluates the loop's predicate once and runs no body.
  The predicate stays on the device: on a CPU the host is the device; on a TPU
  XLA runs a while loop in the TPU program itself (its scalar core reads the
  predicate from device memory), so no value crosses to the host either way
  (``tests/jax/test_jax_xla.py`` reads the TPU lowering: no conditional, no host
  transfer). Under ``jax.vmap`` one loop serves the batch, while any example
  has cells left (``checkify`` refuses a loop on a batched predicate, which
  JAX's own batching of the loop would give). ``xla_windowed`` takes this
  path on these platforms too, with its windows in pool columns.
- per request (CUDA and ROCm GPUs; elsewhere, the shapes of at most 3/2 cells
  per token): a grid of ``bs x min(C, N)`` cells, cell
  ``(r, w)`` writing column ``lo[r] + w`` when ``w < length[r]``: exact for any
  offsets with no value-dependent control at all, in steps of ``CELLS_PER_STEP``
  cells (one step for the benchmarks' batches; more steps are a loop with a
  trip count fixed when compiling, which XLA runs without reading anything
  back). It costs ``bs * min(C, N)`` cells whatever the batch, but a cell outside
  its request's window costs an index compare, never a load or a store, and it
  needs no cumulative sum over the tokens. For batches whose requests fill their rows that is about ``N``
  cells; for short requests in wide rows up to ``bs`` times more (``bs = 4096``
  requests of one token each: 16.7M cells, two steps). A GPU while loop would
  read its predicate back every call, which is why the GPU pays the static bound.

Skipped cells are never written: their scatter index is the row ``R`` (past the
pool; ``mode="drop"`` discards it). No index is ever negative, so JAX's
negative-index normalization never applies. Per-request quantities lie in
``[-C, N]`` (``written_columns``) and enumeration indices below
``bs * min(C, N) < 2**62``: no int64 arithmetic here overflows. The token
pass packs a row and a column shift as ``row * 2**32 + shift`` (rows in ``[0,
R]``, shifts in ``[-N, C]``, both below ``2**31`` in magnitude: it needs ``N + C
< 2**31`` and ``R < 2**31``, else it sums them apart in int64); the sum of
the packed differences up to any token is the packed pair of that token's
window, or ``(R, 0)``: it never leaves int64.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from kv_canary_jax import xla_one_request
from kv_canary_jax.windows import pool_window
from shared_spec.reference import longest_window

# Cells (request x column) the per-request formulation takes in one step:
# 16M cells is at most ~340 MB of int64/int32/bool temporaries where XLA does
# not fuse them into the scatter, small next to a GPU's memory, and enough for
# the step bench's batches (up to 256 x 32769) to take one step.
CELLS_PER_STEP = 1 << 24
# CPU, TPU: the per-request grid where it has at most 3/2 cells per token (a choice of shapes, made when tracing):
# on the 2-core CPU machine a grid cell costs about 0.6x a token of the token pass (no sum over the tokens).
GRID_CELLS, PER_TOKENS = 3, 2
# The token pass's indices are int32 where rows and N + C are below this (a module value so tests can lower it).
INDEX32_BOUND = 2**31


def scatter(flat_in, offsets, req_pool_indices, pool_out) -> jax.Array:
    """The pool with the requests' tokens written (see the module docstring); numpy arguments are taken as JAX arrays."""
    flat_in, offsets, req_pool_indices, pool_out = map(jnp.asarray, (flat_in, offsets, req_pool_indices, pool_out))
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, req_pool_indices.shape, pool_out.shape
    if min(bs, n_tokens, n_rows, width) == 0:
        return pool_out
    cells = _cells(offsets, req_pool_indices, n_rows, width, n_tokens)
    default = _enumeration
    if bs == 1:  # CPUs and TPUs: one dynamic_update_slice (module docstring)
        def default(flat_in, cells, pool):
            return xla_one_request.write(flat_in, offsets, req_pool_indices, pool)

    return lax.platform_dependent(flat_in, cells, pool_out, cuda=_per_request, rocm=_per_request, default=default)


class Cells(NamedTuple):
    """Per request: its row, ``base``, ``lo`` (``written_columns``), ``width`` (``max(hi - lo, 0)``: the tokens its
    window reads) and ``length`` (its cells: ``width``, or 0 for a row outside the pool)."""

    rows: jax.Array
    bases: jax.Array
    los: jax.Array
    widths: jax.Array
    lengths: jax.Array


def _cells(offsets, rows, n_rows, width, n_tokens, start_cols=None) -> Cells:
    """The requests' windows in pool columns (``windows.pool_window``; ``start_cols`` None: ``written_columns``)."""
    bases, los, his = pool_window(offsets[:-1], offsets[1:], start_cols, width, n_tokens, jnp)
    widths = jnp.maximum(his - los, 0)
    lengths = jnp.where((rows >= 0) & (rows < n_rows), widths, 0)
    return Cells(rows, bases, los, widths, lengths)


def _write(pool, ok, rows, columns, values):
    """``pool[rows, columns] = values`` where ``ok``; other cells are sent to row R and dropped."""
    n_rows = pool.shape[0]
    rows = jnp.where(ok, rows, n_rows)
    columns = jnp.where(ok, columns, 0)
    return pool.at[rows, columns].set(values, mode="drop")


def _enumeration(flat_in, cells, pool):
    (n_tokens,), (bs,) = flat_in.shape, cells[0].shape
    if PER_TOKENS * bs * longest_window(pool.shape[1], n_tokens) <= GRID_CELLS * n_tokens:
        return _per_request(flat_in, cells, pool)
    return _token_pass(flat_in, cells, pool)


def _token_pass(flat_in, cells, pool):
    """The pass over the tokens, and the enumeration of the cells where the windows are out of order."""
    pool, ordered = _by_token(flat_in, cells, pool)
    return _fix_up(flat_in, cells, pool, jnp.where(ordered, 0, cells.lengths.sum()))


def _by_token(flat_in, cells, pool):
    """``(pool, ordered)``: each token written to the cell of the window that reads it, when the windows are in order.

    ``ordered``: the non-empty windows (token ranges ``[a, a + width)``, ``a =
    base + lo``) are disjoint and in request order, which non-decreasing offsets
    give; then this writes every cell (one scatter of ``N`` updates, ``flat_in``
    read in order). Otherwise it writes nothing, and the caller writes the cells.
    Token ``t`` in request ``r``'s window goes to column ``t + (lo - a)`` of its
    row; a token in no window, and every token of a batch out of order, to ``(R,
    t)`` (past the pool, dropped). Each token's ``(row, shift)`` is a cumulative
    sum of differences: ``(R, 0)`` at token 0, ``+(row - R, lo - a)`` at a
    window's first token and its negation at the token after its last (dropped
    at ``N``). In order, every earlier window has closed by ``t``, so the sum at
    ``t`` is the pair of the window holding ``t``, or ``(R, 0)`` in a gap. A
    request that writes nothing (empty window, row outside the pool, batch out of
    order) adds no difference, at the index ``N`` (dropped): no index is negative.
    """
    (n_tokens,), (bs,), (n_rows, _) = flat_in.shape, cells.rows.shape, pool.shape
    own = cells.bases + cells.los  # in [0, N] where width > 0
    ends = own + cells.widths
    nonempty = cells.widths > 0
    # In order: each non-empty window starts at or after every earlier non-empty window's end.
    closed = lax.cummax(jnp.where(nonempty, ends, 0))
    ordered = jnp.all(~nonempty | (own >= jnp.concatenate([jnp.zeros((1,), ends.dtype), closed[:-1]])))
    # Indices in int32 where they fit (rows <= R, columns in [0, N + C), shifts in [-N, C]): half the bytes of int64.
    index = jnp.int32 if max(n_tokens + pool.shape[1], n_rows) < INDEX32_BOUND else jnp.int64
    write = ordered & nonempty & (cells.rows >= 0) & (cells.rows < n_rows)
    at = jnp.concatenate([jnp.where(write, own, n_tokens), jnp.where(write, ends, n_tokens)])  # in [0, N]; N: dropped

    def summed(differences, first):
        steps = jnp.zeros((n_tokens,), jnp.int64).at[0].set(first)
        return jnp.cumsum(steps.at[at].add(jnp.concatenate([differences, -differences]), mode="drop"))

    row_steps, shift_steps = jnp.where(write, cells.rows - n_rows, 0), jnp.where(write, cells.los - own, 0)
    if index is jnp.int32:  # one sum for both: row * 2**32 + shift
        packed = summed(row_steps * 2**32 + shift_steps, n_rows * 2**32)
        rows = (packed + 2**31) >> 32
        shifts = packed - (rows << 32)
    else:
        rows, shifts = summed(row_steps, n_rows), summed(shift_steps, 0)
    columns = jnp.arange(n_tokens, dtype=index) + shifts.astype(index)  # in [lo, hi) in a window, else t
    rows = rows.astype(index)
    return pool.at[rows, columns].set(flat_in.astype(jnp.int32), mode="drop"), ordered


def _chunks_while(remaining, write, n_tokens: int, pool):
    """``write(k0, pool)`` for ``k0 = 0, N, 2N, ...`` while ``remaining(k0)``."""
    def body(state):
        k0, pool = state
        return k0 + n_tokens, write(k0, pool)

    return lax.while_loop(lambda state: remaining(state[0]), body, (jnp.int64(0), pool))[1]


@jax.custom_batching.custom_vmap
def _fix_up(flat_in, cells, pool, limit):
    """The cells of enumeration indices ``k < limit``, ``N`` at a time (none when ``limit`` is 0)."""
    (n_tokens,) = flat_in.shape
    write = lambda k0, pool: _enumerate(flat_in, cells, pool, k0, n_tokens)  # noqa: E731
    return _chunks_while(lambda k0: k0 < limit, write, n_tokens, pool)


@_fix_up.def_vmap
def _fix_up_batched(axis_size, in_batched, flat_in, cells, pool, limit):
    # JAX batches a while loop on a batched predicate into one that checkify refuses
    # (checkify-of-vmap-of-while): one loop for the whole batch instead, on an unbatched
    # predicate, while any example has cells left (an example with none left writes nothing).
    flat_in, cells, pool, limit = jax.tree.map(
        lambda a, b: a if b else jnp.broadcast_to(a, (axis_size, *a.shape)), (flat_in, cells, pool, limit), tuple(in_batched))
    n_tokens = flat_in.shape[1]
    each = jax.vmap(lambda f, c, p, k0, n: _enumerate(f, c, p, k0, n_tokens, n), in_axes=(0, 0, 0, None, 0))
    write = lambda k0, pool: each(flat_in, cells, pool, k0, limit)  # noqa: E731
    return _chunks_while(lambda k0: jnp.any(k0 < limit), write, n_tokens, pool), True


def _enumerate(flat_in, cells, pool, k0, size: int, limit=None):
    """Writes the cells of enumeration indices ``k0 <= k < k0 + size`` (and ``k < limit``, where given)."""
    rows, bases, los, _, lengths = cells
    (bs,) = rows.shape
    firsts = jnp.cumsum(lengths) - lengths  # each request's first cell's enumeration index
    ends = firsts + lengths
    in_chunk = jnp.clip(ends - k0, 0, size) - jnp.clip(firsts - k0, 0, size)
    r = jnp.repeat(jnp.arange(bs), in_chunk, total_repeat_length=size)  # past the last cell: the last request
    k = k0 + jnp.arange(size, dtype=jnp.int64)
    ok = (k < ends[r]) if limit is None else (k < ends[r]) & (k < limit)
    j = los[r] + (k - firsts[r])
    values = jnp.take(flat_in, jnp.where(ok, bases[r] + j, 0), mode="clip").astype(jnp.int32)
    return _write(pool, ok, rows[r], j, values)


def _per_request(flat_in, cells, pool):
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, cells[0].shape, pool.shape
    span = longest_window(width, n_tokens)
    rows, bases, los, _, lengths = cells

    def step(pool, rows, bases, los, lengths):
        w = jnp.arange(span, dtype=jnp.int64)[None, :]
        ok = w < lengths[:, None]
        j = los[:, None] + w
        values = jnp.take(flat_in, jnp.where(ok, bases[:, None] + j, 0), mode="clip").astype(jnp.int32)
        return _write(pool, ok, jnp.broadcast_to(rows[:, None], ok.shape), j, values)

    chunk = max(1, min(bs, CELLS_PER_STEP // span))
    steps = -(-bs // chunk)
    if steps == 1:
        return step(pool, rows, bases, los, lengths)
    # Pad to whole chunks with requests of no cells.
    pad = steps * chunk - bs
    padded = [jnp.pad(a, (0, pad)) for a in (rows, bases, los, lengths)]

    def body(i, pool):
        return step(pool, *(lax.dynamic_slice_in_dim(a, i * chunk, chunk) for a in padded))

    return lax.fori_loop(0, steps, body, pool)
