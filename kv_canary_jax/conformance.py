"""Conformance runners for the JAX frontend: one ``shared_spec.conformance.Runner`` per implementation.

Contract: ``runners() -> list[Runner]`` gives ``jax/xla``, ``jax/pallas``, ``jax/mosaic``
and ``jax/mosaic_tpu``. Arrays are built from ``ArrayData.numpy()`` and
``jax.device_put`` on the named device (``"cpu"`` or the accelerator).
``accelerator`` is ``"cuda:0"`` when JAX sees a CUDA GPU, else ``"tpu:0"``
when it sees a TPU, else None. JAX is functional (``in_place=False``):
cases that need an in-place frontend are skipped by the harness. The Pallas
runner runs the real kernel on a GPU and the Pallas interpreter otherwise; the
Mosaic GPU runner runs the real kernel on a GPU Mosaic GPU compiles for
(compute capability 9.0 or newer) and the Pallas interpreter otherwise; the
Mosaic TPU runner runs the real kernel on a TPU and Pallas's TPU interpreter
on the host CPU otherwise. Each kernel's runner is ``unavailable`` (with the reason) where its
module does not import (``jax.experimental.pallas.triton``, ``.mosaic_gpu``,
``.tpu``).
The runners never change ``jax_enable_x64``; without it they are marked
``unavailable`` (int64 arguments cannot exist).
"""

from __future__ import annotations

import jax
import numpy as np

from kv_canary_arrays.describe import jax_x64_enabled
from kv_canary_jax import implementations, platforms
from kv_canary_jax.api import scatter_req_token_ids
from kv_canary_jax.assign import assign_req_to_token_pool
from shared_spec.assignment import ARGUMENT_NAMES as ASSIGN_NAMES, BATCH_SIZE
from shared_spec.cases import ArrayData
from shared_spec.conformance import Runner

X64_DISABLED = "jax_enable_x64 is off, so JAX has no int64 arrays; the process must enable it"


class JaxRunner(Runner):
    frontend = "jax"
    in_place = False
    assigns = True
    interpret = False

    def __init__(self) -> None:
        accelerator = platforms.accelerator_device()
        self._devices = {"cpu": jax.devices("cpu")[0]}
        # Where the runner computes: the accelerator's platform, else the host.
        self.platform = platforms.CPU
        if accelerator is not None:
            self.accelerator = platforms.device_name(accelerator)
            self._devices[self.accelerator] = accelerator
            self.platform = platforms.platform(accelerator)
        if not jax_x64_enabled():
            self.unavailable = X64_DISABLED

    def run_where_possible(self) -> None:
        """The real kernel where this platform runs it, its interpreter elsewhere; ``unavailable`` (with the reason) where neither runs."""
        self.interpret = implementations.unavailable_reason(self.backend, self.platform, False) is not None
        if self.unavailable is None:
            self.unavailable = implementations.unavailable_reason(self.backend, self.platform, self.interpret)

    def array(self, data: ArrayData, device: str):
        return jax.device_put(data.numpy(), self._devices[device])

    def call(self, args: dict, check_values: bool):
        return scatter_req_token_ids(
            **args, implementation=self.backend, interpret=self.interpret, check_values=check_values
        )

    def assign(self, args: dict):
        return assign_req_to_token_pool(
            *(args[name] for name in ASSIGN_NAMES), batch_size=args[BATCH_SIZE],
            implementation=self.backend, interpret=self.interpret,
        )

    def numpy(self, native) -> np.ndarray:
        return np.asarray(native)


class XlaRunner(JaxRunner):
    backend = implementations.XLA


class PallasRunner(JaxRunner):
    backend = implementations.PALLAS

    def __init__(self) -> None:
        super().__init__()
        # The real kernel where there is a GPU; its interpreter everywhere else.
        self.run_where_possible()


class MosaicRunner(JaxRunner):
    backend = implementations.MOSAIC

    def __init__(self) -> None:
        super().__init__()
        # The real kernel where a GPU can run it (Hopper on); its interpreter everywhere else.
        self.run_where_possible()


class MosaicTpuRunner(JaxRunner):
    backend = implementations.MOSAIC_TPU

    def __init__(self) -> None:
        super().__init__()
        # The real kernel on a TPU; Pallas's TPU interpreter everywhere else,
        # which simulates the TPU on the host: its arrays live there (also on a
        # GPU machine, whose accelerator cases this runner then skips).
        if self.platform != platforms.TPU:
            self.accelerator, self.platform = None, platforms.CPU
        self.run_where_possible()


def runners() -> list[Runner]:
    return [XlaRunner(), PallasRunner(), MosaicRunner(), MosaicTpuRunner()]
