"""``launch_scatter_req_token_ids_kernel``: a drop-in for sglang's launcher of that name."""

from __future__ import annotations

import torch

from kv_canary_torch import op
from kv_canary_torch.scatter import scatter

_is_compiling = torch.compiler.is_compiling
_GRAPH_TYPES = (torch.Tensor, torch.nn.Parameter)  # what a compiled graph hands the op as a plain tensor


def launch_scatter_req_token_ids_kernel(*, flat_in, offsets, req_pool_indices, pool_out, start_cols=None,
                                        check_values=False, backend="auto") -> None:
    """Write each request's token ids into its row of ``pool_out``, in place; returns None.

    Request ``r`` writes ``pool_out[req_pool_indices[r], s + j] = int32(flat_in[offsets[r] + j])`` for ``j <
    offsets[r + 1] - offsets[r]``, ``s = start_cols[r]`` (0 where ``start_cols`` is None), skipping cells outside
    the pool and tokens outside ``flat_in`` (``shared_spec.reference``). Index arrays are int64, the pool int32,
    all on one device (numpy and JAX arrays are adopted: zero-copy through DLPack where it shares them).
    ``backend``: ``"auto"`` (Triton for CUDA tensors, torch otherwise), ``"triton"`` or ``"torch"``.
    ``check_values=True`` (a bool) also enforces the value rules of ``shared_spec.values`` (a host sync). Errors
    are the spec's, raised before anything is written: arguments, backend, ``check_values``, values. Under
    ``torch.compile`` the call is one graph node (``op``).
    """
    if _is_compiling():
        if any(type(a) not in _GRAPH_TYPES and hasattr(a, "__dlpack__")
               for a in (flat_in, offsets, req_pool_indices, pool_out, start_cols)):
            # Another framework's arrays, which TorchDynamo would trace as tensors, and tensor subclasses, which a
            # graph's custom op does not take: the call runs eagerly.
            torch._dynamo.disable(scatter)(flat_in, offsets, req_pool_indices, pool_out, start_cols, check_values,
                                           backend)
            return
        op.traced(flat_in, offsets, req_pool_indices, pool_out, start_cols, check_values, backend)
    else:
        scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols, check_values, backend)
