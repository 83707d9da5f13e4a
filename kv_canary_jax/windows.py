"""The window each request writes, in pool columns: what every JAX kernel computes per request.

Contract: ``pool_window(start, end, start_col, width, n_tokens, xp=jnp) -> (base, lo, hi)``: the request writes
exactly the pool columns ``lo <= c < hi`` of its row, reading ``flat_in[base + c]``. ``start_col`` None (an
unwindowed call) is ``shared_spec.reference.written_columns`` itself, the very expression the kernels computed
before windowed writes existed, so an unwindowed kernel traces as it did. With a first column, it is the spec's
``shared_spec.reference.windowed_columns`` ``(base, lo, hi, shift)`` moved to pool columns:
``(base - shift, lo + shift, hi + shift)``: a request's windowed work is these few scalar ops, and the per-element
code of every kernel is the unwindowed one.

Bounds, which every kernel's memory-safety argument uses: ``0 <= lo`` and ``hi <= C``; where ``lo < hi``,
``base + c`` lies in ``[0, N)`` for ``lo <= c < hi``; ``hi - lo <= longest_window(C, N) = min(C, N)``. Proof:
``windowed_columns`` gives ``shift`` in ``[0, C]``, ``lo`` and ``hi`` in ``[0, C - shift]`` (the window of a pool
``C - shift`` wide) and ``base + j`` in ``[0, N)`` for ``lo <= j < hi``; so ``lo + shift >= 0``, ``hi + shift <= C``,
and column ``c = shift + j`` reads ``(base - shift) + c = base + j``. Nothing wraps: ``base`` lies in ``[-(C -
shift), N]``, so ``base - shift`` in ``[-C, N]``, and ``lo + shift``, ``hi + shift`` in ``[0, C]``. ``xp`` is
``jax.numpy`` in the kernels (scalars) and in XLA (vectors), numpy in tests.

``kernel_window(start, end, start_col, width, n_tokens)``: ``pool_window``'s windowed answer on a kernel's int64
scalars, as the GPU kernels (``pallas_triton``, ``pallas_mosaic_gpu``) compute it: a ``lax.cond`` on ``in_row``
(``0 <= start <= end <= N`` and ``0 <= s <= C``: every request of a well-formed serving step), whose branch is
``in_row_window``'s four int64 ops after the loads, fewer than the unwindowed ``written_columns``; any other request
takes ``pool_window`` itself. Measured on the H200 (2026-12-02, jax 0.11.2, kernel durations on the profiler's
clock, 4096 x 512, windowed over unwindowed): the Triton lowering 1.12-1.15x with ``pool_window`` in every
request, 0.96x with ``kernel_window``; Mosaic GPU 1.07-1.10x and 1.02-1.03x. A select of both formulas instead of
the branch, and the test as unsigned compares, were the other candidates (the latter does not lower on Mosaic GPU,
which keeps the bitcast as a vector).
"""

from __future__ import annotations

import jax.numpy as jnp

from shared_spec.reference import windowed_columns, written_columns


def pool_window(start, end, start_col, width: int, n_tokens: int, xp=jnp):
    """``(base, lo, hi)`` in pool columns (see the module docstring)."""
    if start_col is None:
        return written_columns(start, end, width, n_tokens, xp)
    base, lo, hi, shift = windowed_columns(start, end, start_col, width, n_tokens, xp)
    return base - shift, lo + shift, hi + shift


def in_row(start, end, start_col, width: int, n_tokens: int):
    """Whether ``0 <= start <= end <= N`` and ``0 <= s <= C``: every request of a well-formed serving step."""
    return (start >= 0) & (start <= end) & (end <= n_tokens) & (start_col >= 0) & (start_col <= width)


def in_row_window(start, end, start_col, width: int, xp=jnp):
    """``(base, lo, hi)`` in pool columns of a request ``in_row``: ``(start - s, s, s + min(end - start, C - s))``.

    Exact, and equal to ``pool_window``'s there: with ``s`` in ``[0, C]``, ``windowed_columns`` has ``shift = s``
    and no ``past`` (``s`` is not negative), so it is ``written_columns(start, end, C - s, N)`` moved by ``s``. With
    ``0 <= start <= end <= N`` that is ``n = min(end - start, C - s)`` (``end - start`` in ``[0, N]``, no wrap),
    ``base = start`` (inside the clip ``[-(C - s), N]``), ``lo = 0`` and ``hi = n`` (``base <= N - n`` since ``start
    + n <= end <= N``); moved: ``(start - s, s, s + n)``. No step wraps: ``start - s`` lies in ``[-C, N]``, ``C - s``
    in ``[0, C]``, ``s + n`` in ``[s, C]``.
    """
    return start - start_col, start_col, start_col + xp.minimum(end - start, width - start_col)


def kernel_window(start, end, start_col, width: int, n_tokens: int):
    """``pool_window(start, end, start_col, ...)`` on int64 scalars: ``in_row_window`` where ``in_row`` (a
    ``lax.cond``, so a program computes one of the two), else ``pool_window`` (the module docstring)."""
    from jax import lax

    def as_int64(window):
        return tuple(jnp.asarray(v, jnp.int64) for v in window)

    return lax.cond(in_row(start, end, start_col, width, n_tokens),
                    lambda: as_int64(in_row_window(start, end, start_col, width)),
                    lambda: as_int64(pool_window(start, end, start_col, width, n_tokens)))
