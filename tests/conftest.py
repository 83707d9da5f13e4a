"""Test-process setup: interpreters on machines without a GPU, x64 for JAX, CPU devices, GPU markers.

TRITON_INTERPRET must be set before any Triton kernel is defined, so it is set
here, before test modules import the frontends. Enabling JAX's x64 here is the
test process's choice; the library never changes that flag. JAX's CPU platform
gets four host devices (``XLA_FLAGS``, read once when JAX starts, so set before
anything imports JAX) for the sharded-pool tests; a device count already in
``XLA_FLAGS`` wins.
"""

from __future__ import annotations

import os
import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

HOST_DEVICES = "--xla_force_host_platform_device_count"
if HOST_DEVICES not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {HOST_DEVICES}=4".strip()

from kv_canary.platform import cuda_available  # noqa: E402

if not cuda_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import jax

    jax.config.update("jax_enable_x64", True)
except ImportError:  # the JAX tests skip themselves
    pass

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
