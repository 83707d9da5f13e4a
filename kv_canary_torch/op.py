"""The operation behind the launcher: one implementation function and its torch.library op.

Contract: ``run(flat_in, offsets, req_pool_indices, pool_out, check_values,
implementation)`` runs the checked mode when asked (which raises before
anything is written) and then the named implementation (``"triton"``,
``"torch"`` or ``"pallas"``, already resolved by ``backends.resolve``), writing ``pool_out``
in place. The argument checks have passed.

``scatter_req_token_ids`` is the same function registered as the custom op
``kv_canary::scatter_req_token_ids`` (mutates ``pool_out``, returns nothing),
with a fake implementation that does nothing, so ``torch.compile`` keeps the
call in its graph as one opaque node (no graph break). The launcher calls
``run`` directly in eager mode -- custom-op dispatch costs host microseconds --
and the op only while compiling.
"""

from __future__ import annotations

import torch

from kv_canary_torch import pallas_backend, torch_backend, triton_launch
from kv_canary_torch.values import check_values as _check_values

OP_QUALNAME = "kv_canary::scatter_req_token_ids"

# implementation name -> function(flat_in, offsets, req_pool_indices, pool_out)
IMPLEMENTATIONS = {"triton": triton_launch.launch, "torch": torch_backend.scatter, "pallas": pallas_backend.scatter}


def run(flat_in, offsets, req_pool_indices, pool_out, check_values: bool, implementation: str) -> None:
    """Checked mode (optional), then the implementation; see the module docstring."""
    if check_values:
        _check_values(flat_in, offsets, req_pool_indices, pool_out)
    IMPLEMENTATIONS[implementation](flat_in, offsets, req_pool_indices, pool_out)


@torch.library.custom_op(OP_QUALNAME, mutates_args={"pool_out"})
def scatter_req_token_ids(
    flat_in: torch.Tensor,
    offsets: torch.Tensor,
    req_pool_indices: torch.Tensor,
    pool_out: torch.Tensor,
    check_values: bool,
    implementation: str,
) -> None:
    """``run`` as a torch.library op (what compiled graphs call)."""
    run(flat_in, offsets, req_pool_indices, pool_out, check_values, implementation)


@scatter_req_token_ids.register_fake
def _(flat_in, offsets, req_pool_indices, pool_out, check_values, implementation) -> None:
    # Writes pool_out in place and returns nothing: no output metadata to describe.
    return None
