"""The vectorized torch backend: the spec's cells in a handful of tensor ops, on any device torch runs on.

``scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols=None)`` writes exactly the cells
``shared_spec.reference`` writes, for any values, over checked tensors. Each request's window comes from the spec's
rule itself (``reference.window(..., xp=torch)``): it writes columns ``lo <= c < hi`` from ``flat_in[base + c]``
(none for a row outside ``[0, R)``). Every cell is then enumerated once, ``req`` repeating request ``r`` ``hi_r -
lo_r`` times, and written by one ``index_put_`` (int64 to int32 keeps the low 32 bits).

Host sync: one, to read the number of cells, which sizes the enumeration (so this path cannot be captured in a
CUDA graph; the Triton backend can). Memory: about 55 bytes a cell, and decreasing offsets or repeated rows let
``bs`` requests write ``bs * min(C, N)`` cells into a pool of ``R * C``; the requests are therefore enumerated in
consecutive chunks of at most ``max(R * C, N, bs, MIN_CHUNK_CELLS)`` cells (a request writes at most ``C``), a
constant times the arguments' own sizes, one more sync to cut them. A cell several requests write holds one of
their values, as the spec allows (``index_put_`` keeps one of several writes to a cell).

Under ``torch.func.vmap`` (``vmap_refusal``): a batched ``offsets``, ``req_pool_indices`` or ``start_cols`` gives
each example its own count of cells, which this path reads on the host (``errors.TORCH_VMAP_BATCHED_SEGMENTS``);
``flat_in`` batched deeper than ``pool_out`` would write every example into one pool
(``errors.TORCH_VMAP_UNBATCHED_OUTPUT``): both refused.
"""

from __future__ import annotations

import bisect

import torch

from shared_spec import errors
from shared_spec.reference import window

MIN_CHUNK_CELLS = 1 << 18  # about 14 MB of temporaries: the per-chunk cost is negligible past it


SCATTER_NAMES = ("offsets, req_pool_indices or start_cols", "flat_in", "pool_out")
_functorch = torch._C._functorch


def vmap_refusal(segments, values, output, names=SCATTER_NAMES) -> str | None:
    """Why ``vmap`` keeps this path from the call (module docstring), or None; ``names``: how the reason names the
    ``segments`` (the tensors that cut the cells; None: not given), the ``values`` written and the ``output``."""
    if not torch._C._are_functorch_transforms_active():
        return None
    fields = dict(zip(("segments", "values", "output"), names))
    if any(t is not None and _batch_levels(t) for t in segments):
        return errors.TORCH_VMAP_BATCHED_SEGMENTS.format(**fields)
    if _batch_levels(values) - _batch_levels(output):
        return errors.TORCH_VMAP_UNBATCHED_OUTPUT.format(**fields)
    return None


def _batch_levels(tensor) -> set:
    """The ``vmap`` levels that batch ``tensor``, through every ``torch.func`` wrapper around it."""
    levels = set()
    while _functorch.is_functorch_wrapped_tensor(tensor):
        if _functorch.is_batchedtensor(tensor):
            levels.add(_functorch.maybe_get_level(tensor))
        tensor = _functorch.get_unwrapped(tensor)
    return levels


def scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> None:
    """Write the requests' token ids into ``pool_out`` in place (module docstring)."""
    refusal = vmap_refusal((offsets, req_pool_indices, start_cols), flat_in, pool_out)
    if refusal is not None:
        raise errors.unavailable_error("backend", "torch", refusal)
    bs, n_tokens = req_pool_indices.shape[0], flat_in.shape[0]
    n_rows, width = pool_out.shape
    if bs == 0 or n_tokens == 0 or n_rows == 0 or width == 0:
        return
    rows = req_pool_indices
    first = 0 if start_cols is None else start_cols
    base, lo, hi = window(offsets[:-1], offsets[1:], first, width, n_tokens, xp=torch)
    counts = torch.where((rows >= 0) & (rows < n_rows), hi - lo, 0).clamp_min(0)
    ends = torch.cumsum(counts, 0)
    total = int(ends[-1])  # the host sync
    if total == 0:
        return
    cap = max(n_rows * width, n_tokens, bs, MIN_CHUNK_CELLS)
    if total <= cap:
        _write(flat_in, pool_out, rows, base, lo, counts, ends, total)
        return
    host_ends = ends.cpu().tolist()  # the second sync: cut the batch into chunks of whole requests
    start, done = 0, 0
    while start < bs:
        stop = max(bisect.bisect_right(host_ends, done + cap, start), start + 1)  # whole requests, at least one
        part = slice(start, stop)
        _write(flat_in, pool_out, rows[part], base[part], lo[part], counts[part], ends[part] - done,
               host_ends[stop - 1] - done)
        start, done = stop, host_ends[stop - 1]


def _write(flat_in, pool_out, rows, base, lo, counts, ends, total: int) -> None:
    """One ``index_put_`` of the ``total`` cells of these requests (``ends``: their cumulative counts from 0)."""
    request = torch.repeat_interleave(counts, output_size=total)
    column = torch.arange(total, device=counts.device) - (ends - counts)[request] + lo[request]
    pool_out.index_put_((rows[request], column), flat_in[base[request] + column].to(torch.int32))
