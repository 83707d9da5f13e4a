"""The torch frontend of kv-canary: sglang's launchers as drop-ins, on one spec.

- ``launch_scatter_req_token_ids_kernel`` (``launcher``): each request's token ids into its row of the pool.
- ``assign_req_to_token_pool_func`` (``assign``): sglang's assignment of new KV slots to requests' rows.
- ``IncrementalWriter`` (``incremental``): a serving step's new tokens, one copy and one launch a step.
- ``pack_token_ids`` (``packing``): per-request token lists as ``(flat_in, offsets)``.
- ``BACKENDS``: the ``backend=`` choices (``backends``).

Inside: ``checks`` (the spec's checks in torch), ``scatter`` (checks, backend, checked mode, implementation),
``op`` (the same under ``torch.compile``), ``launch`` (the Triton backend's one launch path), ``scatter_kernel`` and
``assign_kernel`` (the Triton kernels), ``torch_backend`` (vectorized torch), ``values`` (the checked mode),
``conformance`` (runners for ``shared_spec.conformance``).
"""

try:
    import torch  # noqa: F401
except ModuleNotFoundError as missing:
    if missing.name != "torch":
        raise
    from shared_spec import errors

    raise ModuleNotFoundError(
        errors.FRONTEND_NEEDS.format(frontend="kv_canary_torch", module="torch", hint=errors.install_hint(["torch"])),
        name="torch",
    ) from None

from kv_canary_torch.assign import assign_req_to_token_pool_func
from kv_canary_torch.backends import BACKENDS
from kv_canary_torch.incremental import IncrementalWriter
from kv_canary_torch.launcher import launch_scatter_req_token_ids_kernel
from kv_canary_torch.packing import pack_token_ids

__all__ = ["BACKENDS", "IncrementalWriter", "assign_req_to_token_pool_func", "launch_scatter_req_token_ids_kernel",
           "pack_token_ids"]
