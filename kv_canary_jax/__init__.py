"""kv-canary for JAX: ``scatter_req_token_ids`` on Pallas kernels (Triton lowering, Mosaic GPU, Mosaic TPU) and an XLA path.

Modules, one purpose each:

- ``api``: the entry point, ``scatter_req_token_ids``.
- ``assign``: ``assign_req_to_token_pool``, sglang's assignment as a cumsum and the windowed scatter.
- ``sharded``: ``scatter_req_token_ids_sharded``, for a pool split by rows over a mesh axis (``shard_map``).
- ``checks``: the spec's argument checks, at trace time (arrays of any framework described by ``kv_canary_arrays``).
- ``compute``: the single-device computation both entry points share (the implementation's choice, checked mode, the jitted call).
- ``implementations``: ``implementation=`` resolution per platform.
- ``pallas_triton``: the Pallas kernel, Triton lowering (CUDA GPUs; anywhere when interpreted).
- ``pallas_mosaic_gpu``: the Pallas kernel, Mosaic GPU (Hopper and newer; anywhere when interpreted).
- ``pallas_mosaic_tpu``: the Pallas kernel, Mosaic TPU (TPUs; anywhere when interpreted).
- ``batching``: ``jax.vmap`` for the Mosaic kernels, one call per example.
- ``xla``: the pure-XLA implementation (any platform).
- ``values``: ``check_values=True``, eagerly or through ``checkify``.
- ``platforms``: device and platform names (``kv_canary_arrays.devices``), default platform, the GPU.
- ``conformance``: ``shared_spec.conformance.Runner`` subclasses for each implementation.

The library never changes ``jax_enable_x64``; int64 arguments need it enabled.
"""

from kv_canary_jax.api import scatter_req_token_ids
from kv_canary_jax.assign import assign_req_to_token_pool
from kv_canary_jax.values import error_from_checkify
from kv_canary_jax.implementations import IMPLEMENTATIONS, available_implementations
from kv_canary_jax.sharded import scatter_req_token_ids_sharded

__all__ = [
    "IMPLEMENTATIONS",
    "assign_req_to_token_pool",
    "available_implementations",
    "error_from_checkify",
    "scatter_req_token_ids",
    "scatter_req_token_ids_sharded",
]
