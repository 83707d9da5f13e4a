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

``kernel_window`` is the function the GPU kernels (``pallas_triton``, ``pallas_mosaic_gpu``) compute a windowed
request's window with, read when a kernel is traced: ``pool_window``. It is a module-level switch so that
``benchmarks/windowed_variants.py`` and its tests can set a candidate formulation of the same contract (on a
kernel's int64 scalars, exact for every value) and trace the kernels with it; unwindowed kernels never read it.
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


# The windowed kernels' formulation (see the module docstring); a retrace (jax.clear_caches()) picks up a new one.
kernel_window = pool_window
