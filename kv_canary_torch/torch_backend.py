"""The vectorized torch backend: the same semantics in a handful of tensor ops.

Contract: ``scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols=None)`` writes
exactly the cells ``shared_spec.reference`` writes, for any int64 values, on
any device torch runs on, with no Python loop over requests or tokens. The
arguments have passed the argument checks.

Host sync: one, unavoidable with data-dependent output -- the number of cells
to write (the last of ``cumsum(counts)``) sizes the index tensors. On the CPU that is a
plain read; on CUDA it waits for the stream, so this path cannot be captured
in a CUDA graph (the Triton backend can).

Math, per request ``r``: the spec's window ``(base, lo, hi, shift)`` from
``shared_spec.reference.windowed_columns`` (the request writes exactly columns
``shift + j`` for ``lo <= j < hi``, reading ``flat_in[base + j]``; ``shift`` is 0
without ``start_cols``; every quantity is small, so nothing overflows), ``hi``
set to 0 where the row is outside ``[0, R)``, and ``cnt = max(hi - lo, 0)``.
Every written cell is then enumerated once: ``req`` repeats ``r`` ``cnt[r]``
times, ``j = lo[req] + (k - first[req])`` for the k-th cell, and
``pool_out[row[req], shift[req] + j] = int32(flat_in[base[req] + j])`` (the
conversion keeps the low 32 bits) in one ``index_put_``.

Memory: the enumeration costs about 55 bytes a cell, and the cells written
are not bounded by the arguments' sizes: decreasing offsets (legal unless
``check_values=True``) let every request re-read ``flat_in`` and repeated rows
let every one rewrite the same row, so ``bs`` requests of ``min(C, N)`` cells
each write ``bs * min(C, N)`` cells into a pool of ``R * C``. The requests are
therefore enumerated in consecutive chunks of at most ``chunk_cells(...)``
cells, ``max(R * C, N, bs, MIN_CHUNK_CELLS)`` (a chunk always holds at least
one request, which writes at most ``C <= R * C`` cells), so the temporaries
stay within a constant times the arguments' own sizes; a batch whose rows
are distinct writes at most ``R * C`` cells, one chunk, the single sync above.
Chunks go in request order, and each is one ``index_put_``, so a cell two
requests write ends as it would in one ``index_put_`` over them all (on the
CPU, the later request's value, as ``shared_spec.reference`` keeps; the spec
allows either). A batch of several chunks syncs once more, to read the
cumulative counts (``bs`` ints) that cut it.
"""

from __future__ import annotations

import torch

from shared_spec import errors
from shared_spec.reference import windowed_columns

# Cells a chunk may hold however small the arguments: 2**18 cells is about
# 14 MB of temporaries, enough that the per-chunk cost (a few small kernels and
# a host read) is negligible next to the chunk's own work.
MIN_CHUNK_CELLS = 1 << 18


def chunk_cells(n_tokens: int, n_rows: int, width: int, bs: int) -> int:
    """The most cells one chunk enumerates: a bound proportional to the arguments' sizes (see the module docstring)."""
    return max(n_rows * width, n_tokens, bs, MIN_CHUNK_CELLS)


def scatter(flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor, pool_out: torch.Tensor,
            start_cols: torch.Tensor | None = None) -> None:
    """Write the requests' token ids into ``pool_out`` in place; see the module docstring.

    Under ``torch.func.vmap`` a batched ``offsets``, ``req_pool_indices`` or ``start_cols`` is refused with the
    spec's backend-unavailable error (``errors.TORCH_VMAP_BATCHED_SEGMENTS``) before anything is written: the host
    sync above is a read vmap cannot do of a batched count.
    """
    if _batched(offsets) or _batched(req_pool_indices) or (start_cols is not None and _batched(start_cols)):
        raise errors.unavailable_error("backend", "torch", errors.TORCH_VMAP_BATCHED_SEGMENTS)
    bs = req_pool_indices.shape[0]
    n_rows, width = pool_out.shape
    n_tokens = flat_in.shape[0]
    if bs == 0 or n_tokens == 0 or n_rows == 0 or width == 0:
        return
    rows = req_pool_indices
    base, lo, hi, shift = windowed_columns(offsets[:-1], offsets[1:], start_cols, width, n_tokens, xp=torch)
    hi = torch.where((rows >= 0) & (rows < n_rows), hi, 0)
    counts = (hi - lo).clamp_min(0)
    ends = torch.cumsum(counts, 0)
    total = int(ends[-1])  # the one host sync: sizes the index tensors
    if total == 0:
        return
    cap = chunk_cells(n_tokens, n_rows, width, bs)
    if total <= cap:
        _write(flat_in, pool_out, rows, base, lo, shift, counts, ends, total)
        return
    host_ends = ends.cpu()  # the second sync: bs ints, to cut the batch
    bounds = _chunk_bounds(host_ends, cap)
    for start, stop in zip(bounds[:-1], bounds[1:]):
        done = int(host_ends[start - 1]) if start > 0 else 0
        part = slice(start, stop)
        _write(flat_in, pool_out, rows[part], base[part], lo[part], shift[part], counts[part], ends[part] - done,
               int(host_ends[stop - 1]) - done)


def _batched(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is batched by an enclosing ``torch.func.vmap`` (one C++ call when no transform is active)."""
    return torch._C._are_functorch_transforms_active() and torch._C._functorch.is_batchedtensor(tensor)


def _chunk_bounds(ends: torch.Tensor, cap: int) -> list[int]:
    """Request indices ``0 = b0 < b1 < ... = bs`` cutting the batch into chunks of at most ``cap`` cells each.

    ``ends`` is the cumulative count of cells, on the host. Each chunk takes
    as many whole requests as fit, and at least one (a request never writes
    more than ``cap`` cells), so two chunks in a row hold more than ``cap``
    cells: fewer than ``2 * total / cap + 1`` chunks.
    """
    bs = ends.shape[0]
    bounds, done = [0], 0
    while bounds[-1] < bs:
        stop = max(int(torch.searchsorted(ends, done + cap, right=True)), bounds[-1] + 1)
        bounds.append(stop)
        done = int(ends[stop - 1])
    return bounds


def _write(flat_in, pool_out, rows, base, lo, shift, counts, ends, total: int) -> None:
    """One ``index_put_`` of the ``total`` cells of these requests (``ends``: their cumulative counts from 0)."""
    request = torch.repeat_interleave(counts, output_size=total)
    first = ends - counts
    j = torch.arange(total, device=counts.device) - first[request] + lo[request]
    tokens = base[request] + j
    pool_out.index_put_((rows[request], shift[request] + j), flat_in[tokens].to(torch.int32))
