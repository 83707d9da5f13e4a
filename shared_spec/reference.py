"""The numpy reference of ``scatter_req_token_ids``: the semantics, vectorized.

    N = len(flat_in); bs = len(req_pool_indices); R, C = pool_out.shape
    for r in 0 .. bs-1:
        start, end = offsets[r], offsets[r+1]
        row = req_pool_indices[r]
        s = start_cols[r] if start_cols is given else 0      -- the request's first pool column
        if row < 0 or row >= R: skip request r
        for j in 0 .. end-start-1:
            c, t = s + j, start + j
            if 0 <= c < C and 0 <= t < N: pool_out[row, c] = low 32 bits of flat_in[t] (two's complement)

(all in exact integers). Without ``start_cols`` this is the unwindowed op: ``c
= j`` and ``j < min(max(end - start, 0), C)``. ``start_cols`` is the windowed
write of a serving step: each request's new tokens at its current length.

Every other cell keeps its value. Where two requests name one row, a cell both
write holds one of the written values (which one is unspecified; this reference
keeps the later request's). Arithmetic is exact for every int64 input: the
kernels compute in wrapping int64, and ``segment_lengths`` shows why that is
exact too.
"""

from __future__ import annotations

import numpy as np


def segment_lengths(starts, ends, width: int, xp=np):
    """``min(max(end - start, 0), width)`` exactly, in wrapping int64 arithmetic.

    When ``end > start`` the true difference lies in (0, 2**64); its wrapped
    int64 value is negative exactly when it is >= 2**63, far above any width,
    so a negative wrapped difference means ``width``.
    """
    diff = ends - starts  # may wrap; see above
    return xp.where(ends <= starts, 0, xp.where((diff < 0) | (diff > width), width, diff))


def written_columns(starts, ends, width: int, n_tokens: int, xp=np):
    """``(base, lo, hi)``: a request writes exactly columns ``lo <= j < hi``, reading ``flat_in[base + j]``.

    The cells the spec writes for a request (row in range) are the ``j < n`` (``n``
    from ``segment_lengths``) with ``0 <= start + j < n_tokens``. With ``base =
    clip(start, -width, n_tokens)`` that is ``max(-base, 0) <= j < min(n, n_tokens
    - base)``: where ``start`` is inside the clip, ``base == start``; below it
    (``start < -width``) no ``start + j`` with ``j < width`` reaches 0 and ``lo =
    width >= n``; above it (``start > n_tokens``) ``hi <= 0``. ``base`` lies in
    ``[-width, n_tokens]`` and ``n`` in ``[0, width]``; ``lo`` and ``hi`` lie in
    ``[0, width]`` (empty when ``hi <= lo``).

    Exact for every ``n_tokens`` up to ``2**63 - 1`` (an expanded tensor's
    length): ``n_tokens - base`` itself could pass ``2**63 - 1`` when ``base <
    0``, so ``hi`` is ``n`` where ``base <= n_tokens - n`` (both sides in range:
    ``n_tokens >= 0``, ``n <= width``) and ``n_tokens - base`` only where ``base >
    n_tokens - n``, that is where ``n_tokens - base < n <= width``: a small
    non-negative difference. ``base + j`` for ``lo <= j < hi`` lies in ``[0,
    n_tokens)``. Every kernel computes its per-request window this way.
    """
    n = segment_lengths(starts, ends, width, xp)
    # clip(starts, -width, n_tokens), spelled so that torch takes a per-request width (windowed_columns') too
    base = xp.where(starts > n_tokens, n_tokens, xp.where(starts < -width, -width, starts))
    lo = xp.where(base < 0, -base, 0)
    hi = xp.where(base <= n_tokens - n, n, n_tokens - base)
    return base, lo, hi


INT64_MAX = 2**63 - 1


def windowed_columns(starts, ends, start_cols, width: int, n_tokens: int, xp=np):
    """``(base, lo, hi, shift)``: a request writes exactly pool columns ``shift + j`` for ``lo <= j < hi``, reading
    ``flat_in[base + j]``; ``start_cols`` None is ``written_columns`` with ``shift = 0``.

    The window is the unwindowed one of an equivalent request (the module docstring's math): a first column ``s
    >= 0`` leaves ``C - s`` columns from ``shift = min(s, C)``; a first column ``s < 0`` drops the segment's first
    ``-s`` tokens, writing from column 0, so the request starts at ``start - s``. Then ``written_columns(start', end,
    C - shift, N)`` gives ``base, lo, hi`` over ``j``, with ``shift + hi <= C``. Exact in wrapping int64 for every
    value: ``start - s`` passes ``2**63 - 1`` exactly where ``s < 0`` and ``start > 2**63 - 1 + s`` (that sum
    cannot wrap), and there the true start lies past every ``N``, so the request writes nothing (``hi = lo = 0``);
    elsewhere the wrapped difference is the true one. ``shift`` and ``C - shift`` lie in ``[0, C]``.
    """
    if start_cols is None:
        base, lo, hi = written_columns(starts, ends, width, n_tokens, xp)
        return base, lo, hi, xp.zeros_like(lo)
    behind = start_cols < 0
    shift = xp.clip(start_cols, 0, width)
    past = behind & (starts > INT64_MAX + xp.where(behind, start_cols, 0))  # start - s > 2**63 - 1
    moved = xp.where(behind & ~past, starts - xp.where(behind, start_cols, 0), starts)
    base, lo, hi = written_columns(moved, ends, width - shift, n_tokens, xp)
    return base, xp.where(past, 0, lo), xp.where(past, 0, hi), shift


def longest_window(width: int, n_tokens: int) -> int:
    """The most columns one request can write: ``hi - lo <= min(width, n_tokens)``.

    At most ``width`` since ``hi <= n <= width``; at most ``n_tokens`` since each
    written column reads a distinct token of ``[0, n_tokens)``. Launchers size
    per-request work from it.
    """
    return min(width, n_tokens)


def scatter_reference(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> np.ndarray:
    """A new pool: ``pool_out`` with the requests' token ids written (inputs untouched).

    Without ``start_cols``, the literal enumeration of the module docstring's
    loop (``segment_lengths`` cells from column 0, each token index tested);
    with it, the cells of ``windowed_columns``.
    """
    flat_in = np.asarray(flat_in, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    rows = np.asarray(req_pool_indices, dtype=np.int64)
    out = np.array(pool_out, dtype=np.int32, copy=True)
    n_rows, width = out.shape
    starts, ends = offsets[:-1], offsets[1:]
    row_ok = (rows >= 0) & (rows < n_rows)
    if start_cols is not None:
        with np.errstate(over="ignore"):
            base, lo, hi, shift = windowed_columns(starts, ends, np.asarray(start_cols, dtype=np.int64), width, flat_in.shape[0])
        counts = np.where(row_ok, np.maximum(hi - lo, 0), 0)
        request = np.repeat(np.arange(rows.shape[0]), counts)
        j = lo[request] + np.arange(request.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
        out[rows[request], shift[request] + j] = flat_in[base[request] + j].astype(np.int32)
        return out
    with np.errstate(over="ignore"):
        lengths = segment_lengths(starts, ends, width)
    lengths = np.where(row_ok, lengths, 0)
    request = np.repeat(np.arange(rows.shape[0]), lengths)
    column = np.arange(request.shape[0]) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    with np.errstate(over="ignore"):
        token = starts[request] + column  # may wrap past 2**63 - 1 into negatives: skipped either way
    inside = (token >= 0) & (token < flat_in.shape[0])
    out[rows[request[inside]], column[inside]] = flat_in[token[inside]].astype(np.int32)
    return out
