"""``backend="pallas"``: the JAX frontend's Pallas kernel, run on torch tensors through DLPack.

Contract: ``scatter(flat_in, offsets, req_pool_indices, pool_out)`` writes the
same cells as every other backend into ``pool_out`` (the argument checks have
passed; ``backends.resolve`` has made sure jax is installed). The inputs
cross to JAX without a copy where DLPack can share them
(``kv_canary_arrays.adopt.jax_input``: a strided or unaligned tensor is cloned
first); CUDA tensors run the compiled kernel, CPU tensors Pallas' interpreter. JAX arrays are immutable and
XLA cannot donate a buffer it does not own, so the kernel writes a new pool and
it is copied back into ``pool_out``: two pool-sized copies on top of the
kernel, plus JAX's dispatch. This backend exists to run the two frontends'
kernels on the same memory (conformance), not for speed.

x64: JAX holds int64 arrays only with x64 enabled. A torch caller should not
have to touch JAX's configuration, so the call runs inside JAX's thread-local
x64 context (``x64_scope``) whatever the global flag says, and the global
flag is never changed.
"""

from __future__ import annotations

import contextlib

import torch

from kv_canary_arrays import adopt, bridge


def x64_scope() -> contextlib.AbstractContextManager:
    """A context in which JAX has x64 on for this thread only (the global flag untouched).

    ``jax.enable_x64(True)`` (JAX 0.10 and 0.11: a configuration state, called
    as a context manager it sets the thread-local value); older JAX spelled it
    ``jax.experimental.enable_x64()``.
    """
    import jax

    state = getattr(jax, "enable_x64", None)
    if callable(state):
        return state(True)
    from jax.experimental import enable_x64  # pragma: no cover - JAX before 0.10

    return enable_x64()


def scatter(flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor, pool_out: torch.Tensor) -> None:
    """Run the Pallas kernel on these tensors and leave the result in ``pool_out``."""
    from kv_canary_jax import scatter_req_token_ids

    with x64_scope():
        # A strided view (a column slice of a wider pool) or an unaligned slice is
        # copied to cross; this backend copies the pool anyway.
        arrays = [adopt.jax_input(t) for t in (flat_in, offsets, req_pool_indices, pool_out)]
        result = scatter_req_token_ids(*arrays, implementation="pallas", interpret=not pool_out.is_cuda)
        pool_out.copy_(bridge.to_torch(result))
