"""The vectorized torch backend: the same semantics in a handful of tensor ops.

Contract: ``scatter(flat_in, offsets, req_pool_indices, pool_out)`` writes
exactly the cells ``shared_spec.reference`` writes, for any int64 values, on
any device torch runs on, with no Python loop over requests or tokens. The
arguments have passed the argument checks.

Host sync: one, unavoidable with data-dependent output -- the number of cells
to write (``int(counts.sum())``) sizes the index tensors. On the CPU that is a
plain read; on CUDA it waits for the stream, so this path cannot be captured
in a CUDA graph (the Triton backend can).

Math, per request ``r``: the spec's window ``(base, lo, hi)`` from
``shared_spec.reference.written_columns`` (the request writes exactly columns
``lo <= j < hi``, reading ``flat_in[base + j]``; every quantity is small, so
nothing overflows), ``hi`` set to 0 where the row is outside ``[0, R)``, and
``cnt = max(hi - lo, 0)``. Every written cell is then enumerated once: ``req``
repeats ``r`` ``cnt[r]`` times, ``j = lo[req] + (k - first[req])`` for the k-th
cell, and ``pool_out[row[req], j] = int32(flat_in[base[req] + j])`` (the
conversion keeps the low 32 bits) in one ``index_put_``.
"""

from __future__ import annotations

import torch

from shared_spec.reference import written_columns


def scatter(flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor, pool_out: torch.Tensor) -> None:
    """Write the requests' token ids into ``pool_out`` in place; see the module docstring."""
    bs = req_pool_indices.shape[0]
    n_rows, width = pool_out.shape
    n_tokens = flat_in.shape[0]
    if bs == 0 or n_tokens == 0 or n_rows == 0 or width == 0:
        return
    rows = req_pool_indices
    base, lo, hi = written_columns(offsets[:-1], offsets[1:], width, n_tokens, xp=torch)
    hi = torch.where((rows >= 0) & (rows < n_rows), hi, 0)
    counts = (hi - lo).clamp_min(0)
    total = int(counts.sum())  # the one host sync: sizes the index tensors
    if total == 0:
        return
    request = torch.repeat_interleave(counts, output_size=total)
    first = torch.cumsum(counts, 0) - counts
    columns = torch.arange(total, device=counts.device) - first[request] + lo[request]
    tokens = base[request] + columns
    pool_out.index_put_((rows[request], columns), flat_in[tokens].to(torch.int32))
