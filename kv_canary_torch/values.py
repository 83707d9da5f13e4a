"""The checked mode (``check_values=True``) for torch tensors.

Contract: ``check_values(flat_in, offsets, req_pool_indices, pool_out)`` raises
the spec's first value violation (``shared_spec.values``, same rules, same
messages) or returns None; it writes nothing. It copies ``offsets`` and
``req_pool_indices`` to the host, so on CUDA it waits for the stream (a
documented sync: the checked mode is for debugging and tests, not the hot path,
and cannot be captured in a CUDA graph).
"""

from __future__ import annotations

import torch

from shared_spec.values import raise_first_value_error


def check_values(flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor, pool_out: torch.Tensor) -> None:
    """Raise the first violated value rule of the checked mode (host copy; a sync on CUDA)."""
    raise_first_value_error(
        offsets.detach().cpu().numpy(),
        req_pool_indices.detach().cpu().numpy(),
        flat_in.shape[0],
        pool_out.shape[0],
    )
