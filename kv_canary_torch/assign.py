"""``assign_req_to_token_pool_func``: a drop-in for sglang's function of that name.

sglang's positional signature; ``req_to_token`` written in place; returns None. Request ``r < batch_size`` writes
``out_cache_loc[pt_r : pt_r + len_r]`` into row ``req_pool_indices[r]`` from column ``start_offset[r]``, ``len_r =
clip(end_offset[r] - start_offset[r], 0, len(out_cache_loc))`` and ``pt_r`` the running sum of the lengths before
it, clipped to the table (``shared_spec.reference.assign_reference``): on every input sglang's callers pass, sglang's
table. Index arrays int32 or int64, the table int32; ``batch_size`` an int (None: ``len(req_pool_indices)``).

Errors, before anything is written: the spec's checks (``checks``: its messages for the assignment; numpy and JAX
arrays adopted), then ``backend``'s. ``backend`` (keyword only): ``"auto"`` (Triton for CUDA tensors, torch
otherwise), ``"triton"`` (one launch of ``assign_kernel``, no host sync) or ``"torch"`` (``reference.assign_windows``
in torch ops, then the windowed scatter, whose host syncs ``torch_backend`` states).
"""

from __future__ import annotations

import torch

from kv_canary_torch import backends, launch, torch_backend
from kv_canary_torch.checks import assign_arguments, assign_ok
from shared_spec import errors
from shared_spec.reference import assign_lengths

_active = torch._C._are_functorch_transforms_active
VMAP_NAMES = ("req_pool_indices, start_offset or end_offset", "out_cache_loc", "req_to_token")


def assign_req_to_token_pool_func(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                  batch_size, *, backend: str = "auto") -> None:
    """Write each request's new slots into its row of ``req_to_token`` (module docstring)."""
    arrays = (req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc)
    transformed = _active()
    if not transformed and assign_ok(*arrays, batch_size):
        bs = req_pool_indices.shape[0] if batch_size is None else batch_size
    else:
        *arrays, bs = assign_arguments(*arrays, batch_size)
        transformed = transformed and backends.transformed(*arrays)
    try:
        implementation = backends.resolve(backend, arrays[1], transformed)
    except errors.KvCanaryValueError as error:
        raise errors.retitled(error) from None
    if implementation == "triton":
        launch.assign(*arrays, bs)
    else:
        _windowed_scatter(*arrays, bs)


def _windowed_scatter(rows, table, start, end, loc, bs: int) -> None:
    """The assignment as the windowed scatter: offsets the running sum of the lengths, saturated at ``N``."""
    refusal = torch_backend.vmap_refusal((rows, start, end), loc, table, VMAP_NAMES)
    if refusal is not None:
        raise errors.retitled(errors.unavailable_error("backend", "torch", refusal))
    n_tokens = loc.shape[0]
    start = start[:bs].to(torch.int64)
    lengths = assign_lengths(start, end[:bs].to(torch.int64), n_tokens, xp=torch)
    offsets = torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0).clamp_max(n_tokens)])
    torch_backend.scatter(loc.to(torch.int64), offsets, rows[:bs].to(torch.int64), table, start)
