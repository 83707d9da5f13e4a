"""Where a request writes: its segment length and its first readable column.

Both implementations (the Pallas kernel on scalars, the XLA fallback on
vectors) cut work to a window of columns with these, so they are defined once.

For request ``r`` with ``start = offsets[r]``, ``end = offsets[r+1]`` and a pool
``width`` columns wide, the cells written are the columns ``j`` with

    j < n = segment_lengths(start, end, width)     (the spec's exact rule)
    0 <= start + j < n_tokens                      (the token exists)

``first_column(start, n)`` is the smallest ``j >= 0`` with ``start + j >= 0``,
capped at ``n`` (nothing to write): ``0`` for ``start >= 0``, ``-start`` for
``-n <= start < 0``, ``n`` below that. Its branches never overflow: ``-start``
is only selected when ``-start <= n <= width``.

The written columns are therefore ``first_column <= j < min(n, n_tokens - start)``:
at most ``window(width, n_tokens) = min(width, n_tokens)`` consecutive columns
(no more than ``width`` because ``n <= width``; no more than ``n_tokens`` because
each written column reads a distinct token of ``[0, n_tokens)``). A window of
that many columns starting at ``first_column`` covers every write.
"""

from __future__ import annotations

from shared_spec.reference import segment_lengths

__all__ = ["first_column", "segment_lengths", "window"]


def first_column(start, n, xp):
    """The first column whose token index ``start + j`` is >= 0, capped at ``n`` (int64 in, int64 out)."""
    return xp.where(start >= 0, 0, xp.where(start < -n, n, -start))


def window(width: int, n_tokens: int) -> int:
    """How many consecutive columns, from ``first_column``, can hold writes of one request."""
    return min(width, n_tokens)
