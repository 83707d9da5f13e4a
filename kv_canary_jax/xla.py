"""The pure-XLA implementation: any platform, vectorized, exact for any values.

Contract: ``scatter(flat_in, offsets, req_pool_indices, pool_out)`` takes int64
``flat_in[N]``, ``offsets[bs+1]``, ``req_pool_indices[bs]`` and an int32
``pool_out[R, C]`` whose checks have passed, and returns the pool with the
requests' tokens written, exactly as ``shared_spec.reference`` says. One
scatter writes the pool (in place when the caller donates it); when ``bs``,
``N``, ``R`` or ``C`` is 0 the pool is returned as is.

Two formulations, chosen on the device by ``lax.cond`` on whether ``offsets``
is non-decreasing (the contract every well-formed batch meets, and what the
checked mode enforces):

- per token (non-decreasing offsets, whatever their range), ``O(N log bs)``:
  segments are disjoint, so token ``t`` belongs to at most one request, the
  last ``r`` with ``offsets[r] <= t`` (``searchsorted``); it lands in column
  ``j = t - offsets[r]`` when ``t < offsets[r+1]``, ``j < C`` and the row is in
  ``[0, R)``. ``t - offsets[r]`` wraps negative only when its true value is
  ``>= 2**63``, far past ``C``, so ``0 <= j < C`` is exact.
- per cell (offsets that decrease somewhere, so segments may overlap and a
  token may be read by several requests), ``O(bs * min(C, N))``: each request
  covers ``longest_window`` columns from the ``lo`` of its window
  (``shared_spec.reference.written_columns``), which hold all of its writes. Requests are processed
  ``CELLS_PER_STEP // longest_window`` at a time (one step for small batches, a
  ``fori_loop`` otherwise) so the temporaries stay bounded whatever ``bs``.

The ``lax.cond`` costs one device-side predicate (on GPUs, XLA may read it
back to pick the branch); the per-token branch is what well-formed batches run.

Skipped cells are never written: their scatter index is the row ``R`` (past the
pool; ``mode="drop"`` discards it). No index is ever negative, so JAX's
negative-index normalization never applies. Int64 arithmetic wraps, as the
spec's ``segment_lengths`` assumes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from shared_spec.reference import longest_window, written_columns

# Cells (request x column) the per-cell formulation materializes at once:
# 4M cells is ~80 MB of int64/int32/bool temporaries, small next to any pool
# worth a fallback loop, large enough that typical batches take one step.
CELLS_PER_STEP = 1 << 22


def scatter(flat_in, offsets, req_pool_indices, pool_out) -> jax.Array:
    """The pool with the requests' tokens written (see the module docstring)."""
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, req_pool_indices.shape, pool_out.shape
    if min(bs, n_tokens, n_rows, width) == 0:
        return pool_out
    non_decreasing = jnp.all(offsets[1:] >= offsets[:-1])
    return lax.cond(non_decreasing, _per_token, _per_cell, flat_in, offsets, req_pool_indices, pool_out)


def _write(pool, ok, rows, columns, values):
    """``pool[rows, columns] = values`` where ``ok``; other cells are sent to row R and dropped."""
    n_rows = pool.shape[0]
    rows = jnp.where(ok, rows, n_rows)
    columns = jnp.where(ok, columns, 0)
    return pool.at[rows, columns].set(values, mode="drop")


def _per_token(flat_in, offsets, rows, pool):
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, rows.shape, pool.shape
    t = jnp.arange(n_tokens, dtype=jnp.int64)
    r = jnp.searchsorted(offsets, t, side="right").astype(jnp.int64) - 1  # in [-1, bs]
    inside = (r >= 0) & (r < bs)
    r = jnp.clip(r, 0, bs - 1)
    start, end, row = offsets[r], offsets[r + 1], rows[r]
    j = t - start
    ok = inside & (t < end) & (j >= 0) & (j < width) & (row >= 0) & (row < n_rows)
    return _write(pool, ok, row, j, flat_in.astype(jnp.int32))


def _per_cell(flat_in, offsets, rows, pool):
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, rows.shape, pool.shape
    span = longest_window(width, n_tokens)
    bases, los, his = written_columns(offsets[:-1], offsets[1:], width, n_tokens, jnp)

    def step(pool, bases, los, his, rows):
        j = los[:, None] + jnp.arange(span, dtype=jnp.int64)[None, :]
        row_ok = (rows >= 0) & (rows < n_rows)
        ok = (j < his[:, None]) & row_ok[:, None]
        t = bases[:, None] + j  # in [0, N) wherever ok
        values = jnp.take(flat_in, jnp.where(ok, t, 0), mode="clip").astype(jnp.int32)
        return _write(pool, ok, jnp.broadcast_to(rows[:, None], ok.shape), j, values)

    chunk = max(1, min(bs, CELLS_PER_STEP // span))
    steps = -(-bs // chunk)
    if steps == 1:
        return step(pool, bases, los, his, rows)
    # Pad to whole chunks with requests on row R: skipped like any row outside the pool.
    pad = steps * chunk - bs
    padded = [jnp.pad(a, (0, pad)) for a in (bases, los, his)]
    padded.append(jnp.pad(rows, (0, pad), constant_values=n_rows))

    def body(i, pool):
        part = [lax.dynamic_slice_in_dim(a, i * chunk, chunk) for a in padded]
        return step(pool, *part)

    return lax.fori_loop(0, steps, body, pool)
