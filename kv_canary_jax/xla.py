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

Two formulations, chosen per platform when lowering (``lax.platform_dependent``):

- by token, then by cell (CPU, TPU and any other platform). When the
  non-empty windows (the token ranges requests read) are disjoint and in
  request order (``ordered``: every non-decreasing batch), each token is
  written by at most one cell, found as ``jnp.repeat`` finds it (a cumulative
  sum over the ``N`` tokens of markers at the window and gap boundaries): one
  scatter of ``N`` updates reading ``flat_in`` in order, the shape of what a
  user writes for well-formed batches. Otherwise that scatter writes nothing,
  and a ``lax.while_loop`` enumerates the ``T`` cells ``N`` at a time
  (``ceil(T / N)`` scatters of ``N`` updates, each cell finding its request the
  same way over enumeration indices): work proportional to the cells written.
  A well-formed batch evaluates the loop's predicate once and runs no body; a
  shape with ``bs * min(C, N) <= N`` needs no loop and runs one enumeration.
  The predicate stays on the device: on a CPU the host is the device; on a TPU
  XLA runs a while loop in the TPU program itself (its scalar core reads the
  predicate from device memory), so no value crosses to the host either way
  (``tests/jax/test_jax_xla.py`` reads the TPU lowering: no conditional, no host
  transfer). Under ``jax.vmap`` one loop serves the batch, while any example
  has cells left (``checkify`` refuses a loop on a batched predicate, which
  JAX's own batching of the loop would give).
- per request (CUDA and ROCm GPUs): a grid of ``bs x min(C, N)`` cells, cell
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
``bs * min(C, N) < 2**62``: no int64 arithmetic here overflows.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from shared_spec.reference import longest_window, written_columns

# Cells (request x column) the per-request formulation (GPUs) takes in one step:
# 16M cells is at most ~340 MB of int64/int32/bool temporaries where XLA does
# not fuse them into the scatter, small next to a GPU's memory, and enough for
# the step bench's batches (up to 256 x 32769) to take one step.
CELLS_PER_STEP = 1 << 24


def scatter(flat_in, offsets, req_pool_indices, pool_out) -> jax.Array:
    """The pool with the requests' tokens written (see the module docstring); numpy arguments are taken as JAX arrays."""
    flat_in, offsets, req_pool_indices, pool_out = map(jnp.asarray, (flat_in, offsets, req_pool_indices, pool_out))
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, req_pool_indices.shape, pool_out.shape
    if min(bs, n_tokens, n_rows, width) == 0:
        return pool_out
    cells = _cells(offsets, req_pool_indices, n_rows, width, n_tokens)
    return lax.platform_dependent(flat_in, cells, pool_out, cuda=_per_request, rocm=_per_request, default=_enumeration)


class Cells(NamedTuple):
    """Per request: its row, ``base``, ``lo`` (``written_columns``), ``width`` (``max(hi - lo, 0)``: the tokens its
    window reads), ``length`` (its cells: ``width``, or 0 for a row outside the pool) and ``first`` (its first cell's
    enumeration index)."""

    rows: jax.Array
    bases: jax.Array
    los: jax.Array
    widths: jax.Array
    lengths: jax.Array
    firsts: jax.Array


def _cells(offsets, rows, n_rows, width, n_tokens) -> Cells:
    bases, los, his = written_columns(offsets[:-1], offsets[1:], width, n_tokens, jnp)
    widths = jnp.maximum(his - los, 0)
    lengths = jnp.where((rows >= 0) & (rows < n_rows), widths, 0)
    return Cells(rows, bases, los, widths, lengths, jnp.cumsum(lengths) - lengths)


def _write(pool, ok, rows, columns, values):
    """``pool[rows, columns] = values`` where ``ok``; other cells are sent to row R and dropped."""
    n_rows = pool.shape[0]
    rows = jnp.where(ok, rows, n_rows)
    columns = jnp.where(ok, columns, 0)
    return pool.at[rows, columns].set(values, mode="drop")


def _enumeration(flat_in, cells, pool):
    (n_tokens,), (bs,) = flat_in.shape, cells[0].shape
    if bs * longest_window(pool.shape[1], n_tokens) <= n_tokens:
        # T <= N for any values of these shapes: one enumeration writes every cell.
        return _enumerate(flat_in, cells, pool, jnp.int64(0), n_tokens)
    pool, ordered = _by_token(flat_in, cells, pool)
    return _fix_up(flat_in, cells, pool, jnp.where(ordered, 0, cells.lengths.sum()))


def _by_token(flat_in, cells, pool):
    """``(pool, ordered)``: each token written to the cell of the window that reads it, when the windows are in order.

    ``ordered``: the non-empty windows (token ranges ``[a, a + width)``, ``a =
    base + lo``) are disjoint and in request order, which non-decreasing offsets
    give; then this writes every cell (one scatter of ``N`` updates, ``flat_in``
    read in order). Otherwise it writes nothing, and the caller writes the cells.
    Tokens are laid out as spans: the gap before the first window, then each
    request's window and the gap after it; token ``t`` in request ``r``'s window
    goes to column ``lo + t - a`` of its row (the row ``R``, dropped, for a row
    outside the pool, a gap, or a batch out of order).
    """
    (n_tokens,), (bs,), (n_rows, _) = flat_in.shape, cells.rows.shape, pool.shape
    own = cells.bases + cells.los  # in [0, N] where width > 0
    # An empty window takes the next non-empty one's start (N past the last): the starts are non-decreasing.
    starts = lax.cummin(jnp.where(cells.widths > 0, own, n_tokens), reverse=True)
    nexts = jnp.append(starts[1:], n_tokens)
    ordered = jnp.all((cells.widths == 0) | ((starts == own) & (own + cells.widths <= nexts)))
    gaps = jnp.maximum(nexts - starts - cells.widths, 0)
    spans = jnp.concatenate([starts[:1], jnp.stack([cells.widths, gaps], axis=1).reshape(-1)])
    into = ordered & (cells.rows >= 0) & (cells.rows < n_rows)
    nowhere = jnp.full((bs,), n_rows, cells.rows.dtype)
    rows = jnp.concatenate([nowhere[:1], jnp.stack([jnp.where(into, cells.rows, n_rows), nowhere], axis=1).reshape(-1)])
    shifts = jnp.where(ordered, cells.los - own, 0)
    shifts = jnp.concatenate([jnp.zeros((1,), shifts.dtype), jnp.stack([shifts, jnp.zeros_like(shifts)], axis=1).reshape(-1)])
    # Indices in int32 where they fit (rows <= R, columns in [0, N + C)): half the bytes of int64 per token.
    index = jnp.int32 if max(n_tokens + pool.shape[1], n_rows) < 2**31 else jnp.int64
    span = jnp.repeat(jnp.arange(2 * bs + 1, dtype=index), spans, total_repeat_length=n_tokens)
    columns = jnp.arange(n_tokens, dtype=index) + shifts.astype(index)[span]  # in [lo, hi) in a window, else t
    return pool.at[rows.astype(index)[span], columns].set(flat_in.astype(jnp.int32), mode="drop"), ordered


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
    rows, bases, los, _, lengths, firsts = cells
    (bs,) = rows.shape
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
    rows, bases, los, _, lengths, _ = cells

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
