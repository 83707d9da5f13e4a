"""A same-run baseline for the assignment's kernel: the design of sglang's ``assign_req_to_token_pool``, written here.

The design (sglang's ``mem_cache/common.py``): one program per request; the request's start in ``out_cache_loc`` is
a masked sum of the lengths of the requests before it over a ``next_power_of_2(bs)``-wide block (``bs_upper``, a
constexpr: O(bs) loads per program, O(bs^2) in all, one compiled kernel per power of two); the table's width a
constexpr too (one compiled kernel per table); the columns copied 32 a loop iteration. Our own kernel of that design,
for valid inputs only (no clipping: it has none of the spec's memory-safety rules), so that the benchmark compares
against it in the same run.
"""

from __future__ import annotations

import triton
import triton.language as tl

COLUMNS = 32


@triton.jit
def sglang_style_assign_kernel(rows_ptr, table_ptr, start_ptr, end_ptr, loc_ptr, table_width: tl.constexpr,
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


def sglang_style_assign(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size) -> None:
    """The baseline as sglang calls its kernel: grid ``(batch_size,)``, ``bs_upper`` and the width as constexprs."""
    sglang_style_assign_kernel[(batch_size,)](
        req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, req_to_token.shape[1],
        triton.next_power_of_2(batch_size), COLUMNS,
    )
