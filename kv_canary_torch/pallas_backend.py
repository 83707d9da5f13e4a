"""``backend="pallas"``: the JAX frontend's Pallas kernel, run on torch tensors through DLPack.

Contract:

- ``kernels(device_type) -> tuple[str, ...]``: the Pallas kernels JAX's
  ``implementation=None`` tries on tensors of that device type, in its order,
  XLA left out (the backend exists to run the JAX kernels on torch memory, for
  conformance): ``("mosaic", "pallas")`` on CUDA and CPU tensors alike.
- ``unavailable_reason(device_type) -> str | None``: why none of them can run
  on such tensors here, written for a torch caller (``errors.PALLAS_BACKEND_*``;
  never JAX's ``implementation=``/``interpret=``, which the launcher does not
  have); None when one can. It imports the JAX frontend (and JAX), reads no
  data, and is what ``backends.resolve`` caches per device type.
- ``scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols=None)``: writes the same
  cells as every other backend into ``pool_out`` (``start_cols`` passed on as the JAX frontend's ``start_cols=``) (the argument checks have
  passed; ``backends.resolve`` has found a kernel that runs), with the first of
  ``kernels`` that runs, as JAX's default picks it.

Which kernel: CUDA tensors run the compiled kernel JAX's default picks for the
GPU (Mosaic GPU on Hopper and newer; on older GPUs the Triton-lowered kernel,
while JAX ships that lowering). CPU tensors run JAX's default under
``interpret=True``: Mosaic GPU's kernel in the Pallas interpreter where
``jax.experimental.pallas.mosaic_gpu`` imports, else the Triton-lowered one.
Mosaic GPU first because it is the kernel the default compiles on Hopper, so a
CPU run checks on torch memory the body the GPU runs, and because the Triton
lowering is deprecated in JAX 0.11 (a DeprecationWarning on import) and gone in
a later JAX; one rule (JAX's order) for both devices, not a second list.
Other device types (``mps``, ``xpu``, ...) are refused: JAX has no platform
that takes their memory through DLPack.

The inputs cross to JAX without a copy where DLPack can share them
(``kv_canary_arrays.adopt.jax_input``: a strided or unaligned tensor is cloned
first). JAX arrays are immutable and XLA cannot donate a buffer it does not
own, so the kernel writes a new pool and it is copied back into ``pool_out``:
two pool-sized copies on top of the kernel, plus JAX's dispatch. This backend
is there for conformance, not for speed.

x64: JAX holds int64 arrays only with x64 enabled. A torch caller should not
have to touch JAX's configuration, so the call runs inside JAX's thread-local
x64 context (``x64_scope``) whatever the global flag says, and the global
flag is never changed.
"""

from __future__ import annotations

import contextlib

import torch

from kv_canary_arrays import adopt, bridge
from kv_canary_arrays.devices import CPU, CUDA
from shared_spec import errors

# torch device type -> (JAX platform, interpret): CUDA tensors compile, CPU tensors interpret.
RUNS_ON: dict[str, tuple[str, bool]] = {"cuda": (CUDA, False), "cpu": (CPU, True)}


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


def kernels(device_type: str) -> tuple[str, ...]:
    """The Pallas kernels JAX's default tries on tensors of ``device_type`` (in ``RUNS_ON``), in its order."""
    from kv_canary_jax import implementations

    names, _ = implementations.requested(None, RUNS_ON[device_type][0])
    return tuple(name for name in names if name != implementations.XLA)


def unavailable_reason(device_type: str) -> str | None:
    """Why JAX can run none of ``kernels(device_type)`` here, for a torch caller (None: one runs)."""
    if device_type not in RUNS_ON:
        return errors.PALLAS_BACKEND_DEVICE.format(device=device_type)
    from kv_canary_jax import implementations, platforms

    platform, interpret = RUNS_ON[device_type]
    if platform == CUDA and platforms.gpu_device() is None:
        return errors.PALLAS_BACKEND_NO_JAX_GPU
    names = kernels(device_type)
    if any(implementations.unavailable_reason(name, platform, interpret) is None for name in names):
        return None
    causes = "; ".join(_cause(name) for name in names)
    return errors.PALLAS_BACKEND_NO_KERNEL.format(device=device_type, causes=causes)


def _cause(name: str) -> str:
    """Why kernel ``name`` (one that JAX says cannot run) cannot, from the probes JAX's choice asks."""
    from kv_canary_jax import implementations

    probes = {implementations.MOSAIC: implementations.mosaic_import_error, implementations.PALLAS: implementations.pallas_triton_import_error}
    error = probes[name]()  # the kernels of RUNS_ON's platforms: Mosaic GPU and the Triton-lowered one
    if error is not None:
        return errors.PALLAS_BACKEND_NOT_IMPORTABLE[name].format(error=error)
    # It imports, so it is the GPU (Mosaic GPU on a CUDA GPU older than Hopper, or one JAX cannot tell).
    capability = implementations.gpu_capability()
    return errors.PALLAS_BACKEND_NEEDS_HOPPER.format(capability="unknown" if capability is None else "{}.{}".format(*capability))


def scatter(flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor, pool_out: torch.Tensor,
            start_cols: torch.Tensor | None = None) -> None:
    """Run JAX's default Pallas kernel for these tensors' device on them and leave the result in ``pool_out``."""
    from kv_canary_jax import scatter_req_token_ids

    device_type = "cuda" if pool_out.is_cuda else pool_out.device.type
    with x64_scope():
        # A strided view (a column slice of a wider pool) or an unaligned slice is
        # copied to cross; this backend copies the pool anyway.
        arrays = [adopt.jax_input(t) for t in (flat_in, offsets, req_pool_indices, pool_out)]
        # start_cols only when given: a JAX frontend without the keyword keeps its unwindowed calls
        window = {} if start_cols is None else {"start_cols": adopt.jax_input(start_cols)}
        result = scatter_req_token_ids(*arrays, **window, implementation=kernels(device_type),
                                       interpret=RUNS_ON[device_type][1])
        pool_out.copy_(bridge.to_torch(result))
