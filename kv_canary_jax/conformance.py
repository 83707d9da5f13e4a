"""Conformance runners for the JAX frontend: ``jax/xla``, ``jax/pallas``, ``jax/mosaic``, ``jax/mosaic_tpu``.

``runners()`` makes one per implementation. A runner's ``mode`` is ``"jax"`` where x64 is on when it is made, else
``"jax_x64_off"``. Arrays go to ``"cpu"`` or the accelerator (``"cuda:0"`` where JAX sees a CUDA GPU, else
``"tpu:0"`` for a TPU, else none); with x64 off a 1-D int64 array (an index argument) whose values fit int32 is made
int32, and any other int64 array is passed as numpy host data, which the frontend refuses (``NOT_INT32``, or the
pool's dtype check). A kernel runs compiled where its
platform runs it and interpreted elsewhere (Mosaic TPU's interpreter on the host CPU unless on a TPU); a runner is
``unavailable``, with the reason, where its kernel's module does not import. JAX does not write in place: the cases
that need it are skipped.
"""

from __future__ import annotations

import jax
import numpy as np

from kv_canary_arrays.describe import jax_device_name, jax_platform
from kv_canary_jax import implementations
from kv_canary_jax.api import assign_req_to_token_pool, scatter_req_token_ids
from kv_canary_jax.arguments import x64_enabled
from shared_spec.cases import ArrayData
from shared_spec.conformance import Runner


class JaxRunner(Runner):
    frontend = "jax"

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.mode = "jax" if x64_enabled() else "jax_x64_off"
        accelerator = implementations.first_device("cuda") or implementations.first_device("tpu")
        if backend == implementations.MOSAIC_TPU and accelerator is not None and accelerator.platform != "tpu":
            accelerator = None  # the TPU interpreter simulates the TPU on the host
        self._devices = {"cpu": jax.devices("cpu")[0]}
        platform = "cpu"
        if accelerator is not None:
            self.accelerator = jax_device_name(accelerator)
            self._devices[self.accelerator] = accelerator
            platform = jax_platform(accelerator)
        self.interpret = implementations.unavailable_reason(backend, platform, False) is not None
        self.unavailable = implementations.unavailable_reason(backend, platform, self.interpret)

    def array(self, data: ArrayData, device: str):
        values = data.numpy()
        if self.mode == "jax_x64_off" and values.dtype == np.int64:
            info = np.iinfo(np.int32)
            if values.ndim != 1 or (values.size and (values.min() < info.min or values.max() > info.max)):
                return values
            values = values.astype(np.int32)
        return jax.device_put(values, self._devices[device])

    def scatter(self, args: dict, check_values: bool):
        return scatter_req_token_ids(**args, implementation=self.backend, interpret=self.interpret,
                                     check_values=check_values)

    def assign(self, args: dict):
        names = ("req_pool_indices", "req_to_token", "start_offset", "end_offset", "out_cache_loc", "batch_size")
        return assign_req_to_token_pool(*(args[n] for n in names), implementation=self.backend,
                                        interpret=self.interpret)

    def numpy(self, native) -> np.ndarray:
        return np.asarray(native)


def runners() -> list[JaxRunner]:
    return [JaxRunner(name) for name in (implementations.XLA, implementations.PALLAS, implementations.MOSAIC,
                                         implementations.MOSAIC_TPU)]
