"""``assign_req_to_token_pool_func``: a drop-in for sglang's function of that name (``shared_spec.assignment``).

Contract: sglang's positional signature ``(req_pool_indices, req_to_token, start_offset, end_offset,
out_cache_loc, batch_size)``, ``req_to_token`` written in place, returns None; on every input sglang's callers
pass (distinct rows in the table, ``0 <= start <= end <= C``, ``out_cache_loc`` holding the slots the lengths
sum to) the table is sglang's, and on every other input it is the spec's (clipped, never out of bounds).
``batch_size`` None is ``len(req_pool_indices)``. Errors, all before anything is written: the spec's checks
(``assignment.first_failure``, messages ``errors.for_assignment`` / ``errors.ASSIGN_*``), then ``backend``
(``backends.resolve``, its message retitled). The passing path is ``fast_check``, generated from the spec's checks
and the torch dialect (``assignment.compile_fast_check``); only where it is False are the arguments described. numpy and JAX arrays are adopted as the scatter's launcher adopts
them (a JAX table fails the writable check: immutable).

``backend`` (keyword only, after sglang's arguments): ``"auto"`` (Triton for CUDA tensors, torch otherwise),
``"triton"`` (``assign_kernel``: the prefix sum and the copy in one launch, no host sync, nothing compiled per
call), ``"torch"`` and ``"pallas"``: the composition of ``assignment.windows`` (torch ops on the tensors' device)
and the scatter's launcher with ``start_cols`` on that backend (the torch backend syncs once: see
``torch_backend``).

The call path (``launch.dispatch``): the first call of an argument signature (``native.cpp``'s: the tensors'
metadata with the per-request and token lengths zeroed, the backend named) runs the checks and Triton's launch
(``_launch_triton``), then is remembered (``dispatch.remember_assign``); a later call with that signature, whose
``batch_size`` is an int (or None) within each per-request length and ``MAX_REQUESTS`` and whose product with
``len(out_cache_loc)`` is below ``assignment.SLOTS_LIMIT``, is checked and launched in one C++ call
(``dispatch.assign_bound``), the scatter's native call path with the assignment's op: every check is a function of
the signature and those relations. The Triton launch's parameters are all the kernel takes:
``batch_size`` as an int, so entries past it are never read.
"""

from __future__ import annotations

import torch

from kv_canary_arrays import adopt
from kv_canary_arrays.describe import TORCH, describe
from kv_canary_torch import backends
from kv_canary_torch.checks import TORCH_DIALECT
from kv_canary_torch.launch import dispatch
from kv_canary_torch.launcher import launch_scatter_req_token_ids_kernel
from shared_spec import assignment, errors

_NAMES = assignment.ARGUMENT_NAMES
# True exactly when assignment.first_error finds nothing for torch tensors and an int (or None) batch_size.
fast_check = assignment.compile_fast_check(TORCH_DIALECT)


def assign_req_to_token_pool_func(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size, *, backend: str = "auto",
) -> None:
    """``req_to_token[req_pool_indices[r], start_offset[r]:end_offset[r]] = out_cache_loc[pt_r : pt_r + len_r]`` for
    ``r < batch_size``, ``pt_r`` the running sum of the lengths (a negative one counts 0); clipped to the table
    (``shared_spec.assignment``)."""
    signature = dispatch.assign_bound(
        backend, req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size
    )
    if signature is True:  # a remembered signature, its lengths related: checked and launched in C++
        return
    values = (req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc)
    if fast_check(*values, batch_size):
        bs = req_pool_indices.shape[0] if batch_size is None else batch_size
    else:
        values, bs = _slow_path(values, batch_size)
    rows, table, start, end, loc = values
    try:
        implementation = backends.resolve(backend, table, rows, start, end, loc)
    except (errors.KvCanaryTypeError, errors.KvCanaryValueError) as error:
        raise errors.retitled(error) from None
    if implementation == backends.TRITON:
        _launch_triton(rows, table, start, end, loc, bs)
        dispatch.remember_assign(signature, backend, rows, table, start, end, loc, batch_size)
    else:
        _compose(rows, table, start, end, loc, bs, implementation)


def _slow_path(values, batch_size) -> tuple:
    """Where ``fast_check`` is False: raise the spec's first error, or return the arrays as tensors (numpy and JAX
    arrays adopted) and ``batch_size`` as an int."""
    views = {name: describe(value, frontend=TORCH, written=name == assignment.TABLE) for name, value in zip(_NAMES, values)}
    error = assignment.first_error(views, batch_size)
    if error is not None:
        raise error
    bs = views["req_pool_indices"].shape[0] if batch_size is None else assignment.batch_size_value(batch_size)
    if not all(isinstance(value, torch.Tensor) for value in values):
        table = adopt.torch_output(values[1])
        values = tuple(table if name == assignment.TABLE else adopt.torch_input(v, table.device) for name, v in zip(_NAMES, values))
    return values, bs


def _launch_triton(rows, table, start, end, loc, batch_size: int) -> None:
    """The Triton kernel's launch on checked tensors through Triton's launch (``dispatch.launch_assign``)."""
    dispatch.launch_assign(rows, table, start, end, loc, batch_size)



def _compose(rows, table, start, end, loc, batch_size: int, implementation: str) -> None:
    """The assignment as the spec writes it: ``windows`` in torch ops, then the windowed scatter on ``implementation``."""
    offsets, start_cols = assignment.windows(start, end, batch_size, loc.shape[0], torch)
    launch_scatter_req_token_ids_kernel(
        flat_in=loc.to(torch.int64), offsets=offsets, req_pool_indices=rows[:batch_size].to(torch.int64),
        pool_out=table, start_cols=start_cols, backend=implementation,
    )
