"""A batch of one request on XLA: one ``dynamic_update_slice`` of ``min(C, N)`` pool cells.

Contract: ``write(flat_in, offsets, req_pool_indices, pool_out, start_cols=None)`` takes the checked arguments of
a batch of one request (``bs == 1``: int64 ``flat_in[N]``, ``offsets[2]``, ``req_pool_indices[1]``, an int32
``pool_out[R, C]`` with ``N, R, C >= 1`` and, windowed, int64 ``start_cols[1]``) and returns the pool with the
request's tokens written, exactly as ``shared_spec.reference`` says, for any values.

The request writes columns ``lo <= j < hi`` of its row from ``flat_in[base + j]`` (``windows.pool_window``: the
spec's window in pool columns), and ``hi - lo <= w = min(C, N)``. The ``w`` columns from ``c0 = min(lo, C - w)``
hold them all (``c0 = lo`` where ``lo <= C - w``; else they end at ``C``, and ``hi <= C``), and ``0 <= c0 <= C -
w``, so the slice never needs the clamping ``dynamic_update_slice`` applies. Those cells are read, the window's
replaced by its tokens (``take`` at ``base + j``, inside ``[0, N)`` for every written cell), and the slice
written back, in place when the caller donates the pool: no scatter and no per-token request index. A row outside
``[0, R)``, or an empty window, writes row 0's cells back unchanged.

Where it runs (``xla.scatter``, ``xla_windowed.scatter``): on CPUs and TPUs for every one-request batch, and on
GPUs for the assignment's (``contiguous``), where it costs less than the repeat and scatter it replaces; on GPUs the
scatter's one-request batch keeps the per-request grid, which costs less there (docs/performance-notes.md, "The XLA
path": ``benchmarks/one_request.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from kv_canary_jax.windows import pool_window


def write(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> jax.Array:
    """The pool with the one request's tokens written (module docstring)."""
    (n_tokens,), (n_rows, width) = flat_in.shape, pool_out.shape
    w = min(n_tokens, width)
    start_col = None if start_cols is None else start_cols[0]
    base, lo, hi = pool_window(offsets[0], offsets[1], start_col, width, n_tokens)
    row = req_pool_indices[0]
    ok = (row >= 0) & (row < n_rows) & (lo < hi)
    first = jnp.minimum(lo, width - w)
    at = (jnp.where(ok, row, 0), first)
    old = lax.dynamic_slice(pool_out, at, (1, w))[0]
    columns = first + jnp.arange(w, dtype=jnp.int64)
    written = ok & (columns >= lo) & (columns < hi)
    tokens = jnp.take(flat_in, jnp.where(written, base + columns, 0), mode="clip").astype(jnp.int32)
    return lax.dynamic_update_slice(pool_out, jnp.where(written, tokens, old)[None, :], at)
