"""The XLA path of a windowed call (``start_cols``): any platform, vectorized, exact for any values.

Contract: ``scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols, *, contiguous=False)`` takes int64
``flat_in[N]``, ``offsets[bs+1]``, ``req_pool_indices[bs]``, ``start_cols[bs]`` and an int32 ``pool_out[R, C]``
whose checks have passed, and returns the pool with the requests' tokens written from their first columns, exactly as
``shared_spec.reference`` says. ``contiguous=True`` is the caller's promise that ``offsets[0] = 0`` and ``offsets``
never decreases, so that the segments tile ``[0, offsets[bs])`` (the assignment's running sum of lengths that are
never negative): then every platform takes ``_contiguous`` for a batch of more than one request, what a JAX user
writes by hand with the spec's clipping added, and the per-platform choice below does not apply. Scatters write the pool (in place when the caller donates
it); when ``bs``, ``N``, ``R`` or ``C`` is 0 the pool is returned as is. Unwindowed calls take ``xla.scatter``.

A batch of one request is ``xla_one_request``'s one ``dynamic_update_slice``: on every platform where ``contiguous``
(there it costs less than ``_contiguous``'s repeat and scatter on GPUs too), else on CPUs and TPUs (the default
branch below). Per platform (``lax.platform_dependent``), both exact for any values (overlapping or decreasing
segments included):

- CUDA and ROCm GPUs (``_per_cell``): ``O(bs * min(C, N))`` cells, whatever the offsets: each request covers
  ``longest_window(C, N)`` pool columns from the ``lo`` of its window (``windows.pool_window``: the spec's
  ``windowed_columns`` in pool columns), which hold all of its writes; cell ``lo + i`` is written where it is below
  ``hi`` and the row is in ``[0, R)``, from ``flat_in[base + lo + i]``. Requests are processed ``CELLS_PER_STEP //
  longest_window`` at a time (one step for small batches, a ``fori_loop`` otherwise) so the temporaries stay bounded
  whatever ``bs``.
- CPU, TPU and any other platform: ``xla._enumeration`` on these windows (``xla._cells`` with ``start_cols``): the
  per-request grid where it has at most 3/2 cells per token, else the pass over the tokens with its loop on the
  device for windows out of order. ``xla``'s arguments hold for any windows with ``pool_window``'s bounds: a
  request writes columns ``[lo, hi)`` reading ``flat_in[base + c]``, the token range ``[base + lo, base + hi)``
  lies in ``[0, N]``, and ``hi - lo <= min(C, N)``; an append step's windows are in request order, so it takes
  no loop body.

Skipped cells are never written: their scatter index is the row ``R`` (past the pool; ``mode="drop"`` discards it),
and their token index 0 (``take`` with ``mode="clip"`` on an ``N > 0`` array). Written cells have ``0 <= lo + i <
hi <= C`` and ``base + lo + i`` in ``[0, N)`` (``windows``' bounds), so no index is ever negative or past its array
and JAX's index normalization never applies.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from kv_canary_jax import xla, xla_one_request
from kv_canary_jax.windows import pool_window
from shared_spec.reference import longest_window

# Cells (request x column) one step materializes: 4M cells is ~80 MB of int64/int32/bool temporaries, small next to
# any pool worth a loop, large enough that typical batches take one step.
CELLS_PER_STEP = 1 << 22


def scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols, *, contiguous: bool = False) -> jax.Array:
    """The pool with the requests' tokens written from their first columns (see the module docstring)."""
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, req_pool_indices.shape, pool_out.shape
    if min(bs, n_tokens, n_rows, width) == 0:
        return pool_out
    if contiguous:
        if bs == 1:
            return xla_one_request.write(flat_in, offsets, req_pool_indices, pool_out, start_cols)
        return _contiguous(flat_in, offsets, req_pool_indices, pool_out, start_cols)
    cells = xla._cells(offsets, req_pool_indices, n_rows, width, n_tokens, start_cols)
    default = _one_request if bs == 1 else _token_pass_or_grid
    return lax.platform_dependent(flat_in, offsets, req_pool_indices, pool_out, start_cols, cells,
                                  cuda=_per_cell, rocm=_per_cell, default=default)


def _contiguous(flat_in, offsets, req_pool_indices, pool_out, start_cols):
    """Segments that tile ``[0, offsets[bs])`` (``contiguous``): each token's request by ``jnp.repeat``, one scatter.

    Token ``t < min(N, offsets[bs])`` lies in exactly one segment, request ``r = repeat(arange(bs), lengths)[t]``
    (empty segments repeat nothing), and goes to column ``c = start_cols[r] + (t - offsets[r])`` of row ``rows[r]``:
    the spec's window (``windowed_columns``) for such offsets. The tokens past ``offsets[bs]`` belong to one more
    request on row ``R``, past the pool. One ``lax.scatter`` of int64 ``(row, column)`` indices in
    ``FILL_OR_DROP`` mode drops every index outside the pool as it is (no negative index wraps, none is narrowed),
    so no cell needs a mask: a row outside ``[0, R)`` and a column outside ``[0, C)`` are dropped, and where
    ``start_cols[r] + j`` passes ``2**63 - 1`` it wraps negative and is dropped, as its true value (past ``C``)
    would be. ``t - offsets[r]`` lies in ``[0, N)``. No value-dependent control, no ``bs * min(C, N)`` grid.
    """
    (n_tokens,), (bs,), (n_rows, _) = flat_in.shape, req_pool_indices.shape, pool_out.shape
    rows = jnp.concatenate((req_pool_indices.astype(jnp.int64), jnp.full((1,), n_rows, jnp.int64)))
    lengths = jnp.concatenate((offsets[1:] - offsets[:-1], jnp.full((1,), n_tokens, offsets.dtype)))
    starts = jnp.concatenate((start_cols.astype(jnp.int64), jnp.zeros((1,), jnp.int64)))
    request = jnp.repeat(jnp.arange(bs + 1), lengths, total_repeat_length=n_tokens)
    column = starts[request] + (jnp.arange(n_tokens, dtype=jnp.int64) - offsets[request])
    cells = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0, 1),
                                        scatter_dims_to_operand_dims=(0, 1))
    return lax.scatter(pool_out, jnp.stack((rows[request], column), axis=1), flat_in.astype(jnp.int32), cells,
                       mode=lax.GatherScatterMode.FILL_OR_DROP)


def _one_request(flat_in, offsets, req_pool_indices, pool_out, start_cols, cells):
    return xla_one_request.write(flat_in, offsets, req_pool_indices, pool_out, start_cols)


def _token_pass_or_grid(flat_in, offsets, req_pool_indices, pool_out, start_cols, cells):
    return xla._enumeration(flat_in, cells, pool_out)


def _per_cell(flat_in, offsets, req_pool_indices, pool_out, start_cols, cells):
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, req_pool_indices.shape, pool_out.shape
    span = longest_window(width, n_tokens)
    bases, los, his = pool_window(offsets[:-1], offsets[1:], start_cols, width, n_tokens, jnp)

    def step(pool, bases, los, his, rows):
        c = los[:, None] + jnp.arange(span, dtype=jnp.int64)[None, :]
        row_ok = (rows >= 0) & (rows < n_rows)
        ok = (c < his[:, None]) & row_ok[:, None]
        t = bases[:, None] + c  # in [0, N) wherever ok
        values = jnp.take(flat_in, jnp.where(ok, t, 0), mode="clip").astype(jnp.int32)  # low 32 bits
        target = jnp.where(ok, jnp.broadcast_to(rows[:, None], ok.shape), n_rows)
        return pool.at[target, jnp.where(ok, c, 0)].set(values, mode="drop")

    chunk = max(1, min(bs, CELLS_PER_STEP // span))
    steps = -(-bs // chunk)
    if steps == 1:
        return step(pool_out, bases, los, his, req_pool_indices)
    # Pad to whole chunks with requests on row R: skipped like any row outside the pool.
    pad = steps * chunk - bs
    padded = [jnp.pad(a, (0, pad)) for a in (bases, los, his)]
    padded.append(jnp.pad(req_pool_indices, (0, pad), constant_values=n_rows))

    def body(i, pool):
        part = [lax.dynamic_slice_in_dim(a, i * chunk, chunk) for a in padded]
        return step(pool, *part)

    return lax.fori_loop(0, steps, body, pool_out)
