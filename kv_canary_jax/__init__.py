"""kv-canary for JAX: ``scatter_req_token_ids`` and ``assign_req_to_token_pool`` on Pallas kernels and XLA.

- ``api``: the two entry points; ``sharded``: a pool split by rows over a mesh axis.
- ``arguments``: the spec's checks, int32 narrowing, placement; ``implementations``: ``implementation=``.
- ``compute``: the jitted computation; ``values``: ``check_values`` (eager, or through checkify).
- ``xla``, ``pallas_triton``, ``pallas_mosaic_gpu``, ``pallas_mosaic_tpu``: one implementation each.
- ``conformance``: the runners of ``shared_spec.conformance``.

Importing this package without jax raises ``ModuleNotFoundError`` with the install hint.
"""

from shared_spec import errors

try:
    import jax  # noqa: F401
except ModuleNotFoundError as error:
    if error.name not in ("jax", "jaxlib"):
        raise
    hint = errors.install_hint([error.name])
    raise ModuleNotFoundError(errors.FRONTEND_NEEDS.format(frontend="kv_canary_jax", module=error.name, hint=hint),
                              name=error.name) from error

from kv_canary_jax.api import assign_req_to_token_pool, scatter_req_token_ids  # noqa: E402
from kv_canary_jax.implementations import IMPLEMENTATIONS, available_implementations  # noqa: E402
from kv_canary_jax.sharded import scatter_req_token_ids_sharded  # noqa: E402
from kv_canary_jax.values import error_from_checkify  # noqa: E402

__all__ = ["IMPLEMENTATIONS", "assign_req_to_token_pool", "available_implementations", "error_from_checkify",
           "scatter_req_token_ids", "scatter_req_token_ids_sharded"]
