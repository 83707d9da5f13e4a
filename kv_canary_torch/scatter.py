"""The operation behind the launcher: argument checks, backend, checked mode, then the implementation.

``scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols, check_values, backend)`` raises, before
anything is written, in this order: the spec's argument errors (``checks``; numpy and JAX arrays adopted), the
backend's (``backends.resolve``), ``check_values`` not a bool, the checked mode's first violation (``values``);
then runs the implementation, writing ``pool_out`` in place.
"""

from __future__ import annotations

import torch

from kv_canary_torch import backends, launch, torch_backend
from kv_canary_torch.checks import scatter_arguments, scatter_ok
from kv_canary_torch.values import check_values as _check_values
from shared_spec.checks import require_bool

IMPLEMENTATIONS = {"triton": launch.scatter, "torch": torch_backend.scatter}
_active = torch._C._are_functorch_transforms_active
_resolve = backends.resolve


def scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols, check_values, backend) -> None:
    """Check, choose and run (module docstring)."""
    transformed = _active()
    if transformed or not scatter_ok(flat_in, offsets, req_pool_indices, pool_out, start_cols):
        flat_in, offsets, req_pool_indices, pool_out, start_cols = scatter_arguments(
            flat_in, offsets, req_pool_indices, pool_out, start_cols)
        transformed = transformed and backends.transformed(flat_in, offsets, req_pool_indices, pool_out, start_cols)
    implementation = _resolve(backend, pool_out, transformed)
    if check_values is not False and require_bool("check_values", check_values):
        _check_values(flat_in, offsets, req_pool_indices, pool_out, start_cols)
    IMPLEMENTATIONS[implementation](flat_in, offsets, req_pool_indices, pool_out, start_cols)
