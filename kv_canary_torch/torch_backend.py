"""The vectorized torch backend: the same semantics in a handful of tensor ops.

Contract: ``scatter(flat_in, offsets, req_pool_indices, pool_out)`` writes
exactly the cells ``shared_spec.reference`` writes, for any int64 values, on
any device torch runs on, with no Python loop over requests or tokens. The
arguments have passed the argument checks.

Host sync: one, unavoidable with data-dependent output -- the number of cells
to write (``int(counts.sum())``) sizes the index tensors. On the CPU that is a
plain read; on CUDA it waits for the stream, so this path cannot be captured
in a CUDA graph (the Triton backend can).

Math, per request ``r`` (all int64, nothing overflows except where noted)::

    n   = segment_lengths(start, end, C)        # the spec's own function; its
                                                # end - start wraps on purpose
    n   = 0 where row is outside [0, R)
    s   = clamp(start, -C, N)                   # same cells as start: a start
                                                # <= -C reaches no t >= 0 within
                                                # C columns, one >= N no t < N;
                                                # |s + j| stays far from 2**63
    lo  = max(-s, 0);  hi = min(n, N - s)       # columns j with 0 <= s + j < N
    cnt = max(hi - lo, 0)

then every written cell is enumerated once: ``req`` repeats ``r`` ``cnt[r]``
times, ``j = lo[req] + (k - first[req])`` for the k-th cell, ``t = s[req] + j``,
and ``pool_out[row[req], j] = int32(flat_in[t])`` (the conversion keeps the low
32 bits) in one ``index_put_``.
"""

from __future__ import annotations

import torch

from shared_spec.reference import segment_lengths


def scatter(flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor, pool_out: torch.Tensor) -> None:
    """Write the requests' token ids into ``pool_out`` in place; see the module docstring."""
    bs = req_pool_indices.shape[0]
    n_rows, width = pool_out.shape
    n_tokens = flat_in.shape[0]
    if bs == 0 or n_tokens == 0 or n_rows == 0 or width == 0:
        return
    rows = req_pool_indices
    starts, ends = offsets[:-1], offsets[1:]
    lengths = segment_lengths(starts, ends, width, xp=torch)
    lengths = torch.where((rows >= 0) & (rows < n_rows), lengths, 0)
    s = starts.clamp(-width, n_tokens)
    lo = (-s).clamp_min(0)
    hi = torch.minimum(lengths, n_tokens - s)
    counts = (hi - lo).clamp_min(0)
    total = int(counts.sum())  # the one host sync: sizes the index tensors
    if total == 0:
        return
    request = torch.repeat_interleave(counts, output_size=total)
    first = torch.cumsum(counts, 0) - counts
    columns = torch.arange(total, device=counts.device) - first[request] + lo[request]
    tokens = s[request] + columns
    pool_out.index_put_((rows[request], columns), flat_in[tokens].to(torch.int32))
