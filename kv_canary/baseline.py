"""Same-run baselines of sglang's design, written here, for well-formed inputs only (none of the spec's clipping).

- ``per_request_tile``: the scatter as sglang's later kernel does it: one program per (request, 1024-column tile),
  exiting early past the request's length. ``sglang_launcher``: that kernel behind sglang's Python checks (4 ranks,
  4 dtypes, the offsets' length): what sglang's launcher costs the host per call.
- ``sglang_assign``: sglang's ``assign_req_to_token_pool``: one program per request, its start in ``out_cache_loc``
  a masked sum over a ``next_power_of_2(bs)``-wide block, the table's width and that block constexprs, 32 columns a
  loop iteration.
"""

from __future__ import annotations

import triton
import triton.language as tl

TILE = 1024  # sglang's columns per program
ASSIGN_COLUMNS = 32  # sglang's columns per loop iteration


@triton.jit
def per_request_tile_kernel(flat_ptr, offsets_ptr, rows_ptr, pool_ptr, width, stride_row, BLOCK: tl.constexpr):
    request, tile = tl.program_id(0), tl.program_id(1)
    start = tl.load(offsets_ptr + request)
    n = tl.minimum(tl.load(offsets_ptr + request + 1) - start, width)
    row = tl.load(rows_ptr + request)
    if tile * BLOCK < n:
        cols = tile * BLOCK + tl.arange(0, BLOCK)
        ids = tl.load(flat_ptr + start + cols, mask=cols < n)
        tl.store(pool_ptr + row * stride_row + cols, ids.to(tl.int32), mask=cols < n)


def per_request_tile(flat_in, offsets, rows, pool) -> None:
    grid = (rows.shape[0], triton.cdiv(pool.shape[1], TILE))
    per_request_tile_kernel[grid](flat_in, offsets, rows, pool, pool.shape[1], pool.stride(0), BLOCK=TILE)


def sglang_launcher(flat_in, offsets, rows, pool) -> None:
    """``per_request_tile`` behind sglang's launcher's checks."""
    import torch

    for name, tensor, rank, dtype in (("flat_in", flat_in, 1, torch.int64), ("offsets", offsets, 1, torch.int64),
                                      ("req_pool_indices", rows, 1, torch.int64), ("pool_out", pool, 2, torch.int32)):
        if tensor.dim() != rank:
            raise ValueError(f"{name} must be {rank}-D, got shape {tuple(tensor.shape)}")
        if tensor.dtype != dtype:
            raise TypeError(f"{name} must be {dtype}, got {tensor.dtype}")
    if int(offsets.shape[0]) != int(rows.shape[0]) + 1:
        raise ValueError(f"offsets length {offsets.shape[0]} != bs+1 ({rows.shape[0] + 1})")
    per_request_tile(flat_in, offsets, rows, pool)


@triton.jit
def sglang_assign_kernel(rows_ptr, table_ptr, start_ptr, end_ptr, loc_ptr, table_width: tl.constexpr,
                         bs_upper: tl.constexpr, BLOCK: tl.constexpr):
    request = tl.program_id(0)
    row = tl.load(rows_ptr + request)
    start = tl.load(start_ptr + request)
    end = tl.load(end_ptr + request)
    before = tl.arange(0, bs_upper)
    mask = before < request
    pt = tl.sum(tl.load(end_ptr + before, mask=mask, other=0) - tl.load(start_ptr + before, mask=mask, other=0))
    for i in range(tl.cdiv(end - start, BLOCK)):
        cols = i * BLOCK + tl.arange(0, BLOCK)
        inside = cols < end - start
        slots = tl.load(loc_ptr + pt + cols, mask=inside)
        tl.store(table_ptr + row * table_width + start + cols, slots, mask=inside)


def sglang_assign(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size) -> None:
    """As sglang calls its kernel: grid ``(batch_size,)``, ``next_power_of_2(batch_size)`` and the width constexprs."""
    sglang_assign_kernel[(batch_size,)](req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                        req_to_token.shape[1], triton.next_power_of_2(batch_size), ASSIGN_COLUMNS)
