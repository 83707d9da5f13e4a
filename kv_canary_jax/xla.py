"""The XLA implementation: any platform, exact for every value, work in proportion to the cells written.

``scatter(flat_in, offsets, rows, pool, start_cols=None, *, contiguous=False)`` takes checked arrays (``offsets``,
``rows``, ``start_cols`` of one index dtype, int32 or int64, that holds ``N, R, C``; ``flat_in`` of either width)
and returns the pool with the requests' tokens written as ``shared_spec.reference`` says, for any values
(decreasing or overlapping segments, rows anywhere, dtype extremes).

Request ``r`` writes ``counts[r] = hi - lo`` cells (``reference.window``), none where its row is outside ``[0, R)``.
The cells, laid end to end in request order, are written ``N`` at a time: a chunk gives each request the next
``in_chunk[r]`` of its cells not yet written (``done[r]``), a saturated running sum of what is left (``running_sum``:
every quantity stays in ``[0, N]``, so nothing wraps in int32), each position of the chunk finds its request as
``jnp.repeat`` would (a cumulative sum of marks at the requests' starts), and one scatter with ``mode="drop"``
writes the chunk; a position past the chunk's cells sends its write to row ``R`` (dropped) and reads token 0.
Written cells have ``lo <= c < hi <= C`` and read ``base + c`` in ``[0, N)``: no index is negative or wraps.

The first chunk runs unconditionally; further chunks run in a ``lax.while_loop`` while a request has cells left.
A batch whose segments do not overlap (every well-formed one) has at most ``N`` cells: one chunk, and the loop
evaluates its predicate once and runs no body. ``contiguous=True`` (segments that tile ``[0, offsets[bs])``: the
assignment's running sum) takes the first chunk alone, no loop. On a GPU XLA reads a while loop's predicate on the
host, one device-to-host copy per call (the GPUs' default is a Pallas kernel, which has none). Under ``jax.vmap``
one loop runs while any example has cells left (``custom_vmap``: ``checkify`` refuses JAX's own batching of a loop on
a batched predicate).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from shared_spec.reference import saturated_sum, window


def scatter(flat_in, offsets, rows, pool, start_cols=None, *, contiguous: bool = False) -> jax.Array:
    """The pool with the requests' tokens written (module docstring)."""
    (n_tokens,), (bs,), (n_rows, width) = flat_in.shape, rows.shape, pool.shape
    if min(bs, n_tokens, n_rows, width) == 0:
        return pool
    base, lo, hi = windows(offsets[:-1], offsets[1:], start_cols, width, n_tokens)
    counts = Typed(rows.dtype).where((rows >= 0) & (rows < n_rows) & (hi > lo), hi - lo, 0)
    requests = (rows, base, lo, counts)
    pool, done = _chunk(flat_in, requests, pool, jnp.zeros_like(counts))
    return pool if contiguous else _rest(flat_in, requests, pool, done)


class Typed:
    """``jax.numpy`` for ``reference.window``: ``where`` gives a Python int the index dtype, so an int32 computation
    holds no 64-bit constant under x64 (``jnp.where`` would pass it as a weak int64 scalar)."""

    def __init__(self, dtype):
        self.dtype = dtype

    def where(self, condition, a, b):
        return jnp.where(condition, jnp.asarray(a, self.dtype), jnp.asarray(b, self.dtype))


def windows(start, end, start_cols, width: int, n_tokens: int):
    """``reference.window`` in the index dtype: of every request (vectors), or of one (scalars, in a kernel)."""
    return window(start, end, 0 if start_cols is None else start_cols, width, n_tokens, Typed(start.dtype))


def running_sum(lengths, bound: int, n_tokens: int):
    """``min(cumsum(lengths), N)`` for lengths in ``[0, bound]``, ``bound <= N``, never wrapping: a plain cumulative
    sum where ``bs * bound`` fits the dtype (shapes decide), else a scan of ``saturated_sum``."""
    if lengths.shape[0] * bound <= jnp.iinfo(lengths.dtype).max:
        return jnp.minimum(lax.cumsum(lengths), n_tokens)
    xp = Typed(lengths.dtype)
    return lax.associative_scan(lambda a, b: saturated_sum(a, b, n_tokens, xp), lengths)


def _chunk(flat_in, requests, pool, done):
    """Writes the next ``N`` cells not yet written; returns the pool and the new ``done``."""
    rows, base, lo, counts = requests
    (n_tokens,), (n_rows, width), index = flat_in.shape, pool.shape, counts.dtype
    ends = running_sum(counts - done, min(width, n_tokens), n_tokens)  # this chunk's cells: [starts[r], ends[r])
    starts = jnp.concatenate([jnp.zeros((1,), index), ends[:-1]])
    p = lax.iota(index, n_tokens)
    r = lax.cumsum(jnp.zeros((n_tokens,), index).at[starts].add(1, mode="drop")) - 1  # starts[0] = 0: r >= 0
    ok, xp = p < ends[r], Typed(index)
    column = lo[r] + done[r] + xp.where(ok, p - starts[r], 0)  # in [lo, hi]; below hi where ok
    token = xp.where(ok, base[r] + column, 0)
    values = jnp.take(flat_in, token, mode="clip").astype(jnp.int32)  # the low 32 bits
    pool = pool.at[xp.where(ok, rows[r], n_rows), column].set(values, mode="drop")
    return pool, done + (ends - starts)


def _loop(chunk, flat_in, requests, pool, done):
    """``chunk`` while a request (of any example) has cells left."""
    counts = requests[3]
    state = lax.while_loop(lambda s: jnp.any(s[1] < counts), lambda s: chunk(flat_in, requests, *s), (pool, done))
    return state[0]


@jax.custom_batching.custom_vmap
def _rest(flat_in, requests, pool, done):
    return _loop(_chunk, flat_in, requests, pool, done)


@_rest.def_vmap
def _rest_batched(axis_size, in_batched, flat_in, requests, pool, done):
    args = jax.tree.map(lambda a, b: a if b else jnp.broadcast_to(a, (axis_size, *a.shape)),
                        (flat_in, requests, pool, done), tuple(in_batched))
    return _loop(jax.vmap(_chunk), *args), True
