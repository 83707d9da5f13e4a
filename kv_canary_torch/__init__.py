"""The torch frontend of kv-canary's ``scatter_req_token_ids``.

- ``launch_scatter_req_token_ids_kernel``: the drop-in launcher (``launcher``).
- ``pack_token_ids``: per-request token lists -> ``(flat_in, offsets)`` (``packing``).
- ``IncrementalWriter``: the incremental serving step, each request's new tokens at its
  current length, one reused staging buffer, one copy, one launch (``incremental``).
- ``assign_req_to_token_pool_func``: a drop-in for sglang's, the windowed scatter with offsets from the
  requests' lengths (``assign``; its Triton kernel ``assign_kernel``).
- ``BACKENDS``: the ``backend=`` choices (``backends``).

Modules: ``checks`` (argument checks), ``backends`` (choosing one),
``triton_kernel`` (the Triton kernels, imported lazily), ``torch_backend``
(vectorized torch), ``values`` (checked mode), ``op`` (the implementation and
its torch.library op), ``conformance`` (runners for ``shared_spec.conformance``);
``launch/``, the Triton kernels' host side: the launch rule (``plan``), each
launch and the remembered-call path (``dispatch``) and its native piece
(``native``: ``native.cpp``).
"""

from kv_canary_torch.assign import assign_req_to_token_pool_func
from kv_canary_torch.backends import BACKENDS
from kv_canary_torch.incremental import IncrementalWriter
from kv_canary_torch.launcher import launch_scatter_req_token_ids_kernel
from kv_canary_torch.packing import pack_token_ids

__all__ = ["BACKENDS", "assign_req_to_token_pool_func", "IncrementalWriter", "launch_scatter_req_token_ids_kernel", "pack_token_ids"]
