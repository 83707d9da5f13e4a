"""The semantics of both operations: the window rule every implementation computes, and the numpy reference.

``scatter_req_token_ids(flat_in, offsets, req_pool_indices, pool_out, start_cols=None)``, in exact integers::

    N = len(flat_in); R, C = pool_out.shape
    for r in range(len(req_pool_indices)):
        start, end, row = offsets[r], offsets[r + 1], req_pool_indices[r]
        s = start_cols[r] if start_cols is not None else 0        # the request's first pool column
        if not 0 <= row < R: continue
        for j in range(end - start):
            c, t = s + j, start + j
            if 0 <= c < C and 0 <= t < N: pool_out[row, c] = low 32 bits of flat_in[t]

Every other cell keeps its value. Where two requests write one cell, it holds one of their values (this reference
keeps the later request's).

``assign_req_to_token_pool(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size)``
is sglang's assignment: request ``r < batch_size`` writes ``out_cache_loc[pt_r : pt_r + len_r]`` into row
``req_pool_indices[r]`` from column ``start_offset[r]``, with ``len_r = clip(end_offset[r] - start_offset[r], 0,
N)`` and ``pt_r`` the running sum of the lengths before it: the scatter with ``flat_in = out_cache_loc``,
``offsets = [0, cumsum(len)]`` and ``start_cols = start_offset`` (``assign_windows``).
"""

from __future__ import annotations

import numpy as np


def window(start, end, first_col, width: int, n_tokens: int, xp=np):
    """``(base, lo, hi)``: the request writes exactly the pool columns ``lo <= c < hi``, reading ``flat_in[base + c]``.

    Exact in wrapping arithmetic of any signed width that holds the arguments and ``C, N`` (int32 or int64), for
    every value, on arrays or scalars of ``xp`` (numpy, jax.numpy, torch; ``first_col`` may be the int 0)::

        t0 = clip(start, 0, N);  t1 = clip(end, t0, N)     tokens [t0, t1) = [start, end) n [0, N)
        base = clip(start - s, -C, N)                       column c reads token c + base (c = t - base)
        lo, hi = col(t0), col(t1),  col(t) = clip(t - base, 0, C)

    ``start - s`` may wrap; it wraps exactly when ``start`` and ``s`` differ in sign and the result's sign differs
    from ``start``'s, and the true value then lies past the clip on ``start``'s side. Where the true ``start - s``
    lies outside ``[-C, N]`` no column of ``[0, C)`` meets a token of ``[0, N)`` and the clipped ``base`` gives
    ``lo == hi``. ``col`` tests ``t - C >= base`` rather than ``t - base >= C``: with ``t`` in ``[0, N]`` and
    ``base`` in ``[-C, N]``, ``t - C`` and ``t - base`` (taken only below ``C``) never wrap. Bounds every kernel's
    memory safety uses: ``0 <= lo``, ``hi <= C``, ``hi - lo <= min(C, N)``, and ``base + c`` in ``[0, N)`` for ``lo
    <= c < hi`` (empty where ``hi <= lo``).
    """
    t0 = xp.where(start < 0, 0, xp.where(start > n_tokens, n_tokens, start))
    t1 = xp.where(end < t0, t0, xp.where(end > n_tokens, n_tokens, end))
    d = start - first_col
    wrapped = ((start ^ first_col) & (start ^ d)) < 0
    clipped = xp.where(d < -width, -width, xp.where(d > n_tokens, n_tokens, d))
    base = xp.where(wrapped & (start < 0), -width, xp.where(wrapped, n_tokens, clipped))
    lo = xp.where(t0 - width >= base, width, xp.where(t0 < base, 0, t0 - base))
    hi = xp.where(t1 - width >= base, width, xp.where(t1 < base, 0, t1 - base))
    return base, lo, hi


def scatter_reference(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> np.ndarray:
    """A new pool: ``pool_out`` with the requests' tokens written (the inputs are not changed)."""
    flat_in = np.asarray(flat_in, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    rows = np.asarray(req_pool_indices, dtype=np.int64)
    out = np.array(pool_out, dtype=np.int32, copy=True)
    n_rows, width = out.shape
    first = np.zeros_like(rows) if start_cols is None else np.asarray(start_cols, dtype=np.int64)
    base, lo, hi = window(offsets[:-1], offsets[1:], first, width, flat_in.shape[0])
    counts = np.where((rows >= 0) & (rows < n_rows) & (hi > lo), hi - lo, 0)
    request = np.repeat(np.arange(rows.shape[0]), counts)
    column = lo[request] + np.arange(request.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
    out[rows[request], column] = flat_in[base[request] + column].astype(np.int32)  # astype keeps the low 32 bits
    return out


def assign_lengths(start, end, n_tokens: int, xp=np):
    """``clip(end - start, 0, N)``, exact in wrapping arithmetic of the inputs' width: where ``end > start`` but the
    difference wrapped negative, the true one is past any ``N``."""
    d = end - start
    return xp.where(end > start, xp.where((d < 0) | (d > n_tokens), n_tokens, d), 0)


def saturated_sum(a, b, n_tokens: int, xp=np):
    """``min(a + b, N)`` for ``a, b`` in ``[0, N]``, never wrapping in any width: the running sum's step."""
    return xp.where(a < n_tokens - b, a + b, n_tokens)


def assign_windows(start_offset, end_offset, batch_size: int, n_tokens: int):
    """``(offsets, start_cols)`` of the scatter that is the assignment of the first ``batch_size`` requests (numpy).

    ``offsets = [0, min(cumsum(len), N)]``: the running sum saturated at ``N`` (``saturated_sum``'s steps), which
    changes no write, since a segment from ``pt_r >= N`` reads nothing. Here in int64, exact under the slots check.
    """
    start, end = np.asarray(start_offset[:batch_size], np.int64), np.asarray(end_offset[:batch_size], np.int64)
    lengths = assign_lengths(start, end, n_tokens)
    return np.concatenate(([0], np.minimum(np.cumsum(lengths), n_tokens))).astype(np.int64), start


def assign_reference(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size=None):
    """A new table: ``req_to_token`` with the assignment written; the scatter's reference."""
    rows = np.asarray(req_pool_indices, dtype=np.int64)
    bs = rows.shape[0] if batch_size is None else int(batch_size)
    loc = np.asarray(out_cache_loc, dtype=np.int64)
    offsets, start_cols = assign_windows(np.asarray(start_offset), np.asarray(end_offset), bs, loc.shape[0])
    return scatter_reference(loc, offsets, rows[:bs], req_to_token, start_cols)
