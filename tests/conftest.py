"""Test-process setup: Triton's interpreter without a GPU, four JAX host devices, GPU tests skipped without CUDA.

JAX runs with its defaults (x64 off); a test that needs int64 JAX arrays takes the ``x64`` fixture. Without a GPU,
XLA:CPU compiles with LLVM's optimizations off, as ``kv-canary check`` does (``kv_canary.check``): the CPU tests
compile a program for almost every shape and run it once. Hypothesis: 25 examples a property by default, ten times
that with ``KV_CANARY_THOROUGH=1``; a property states its own count with ``tests.contract.examples(n)``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from kv_canary.check import compile_fast_without_gpu, interpret_triton_without_gpu
from kv_canary_arrays.frameworks import cuda_available

flags = os.environ.get("XLA_FLAGS", "")
if "--xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=4".strip()
if interpret_triton_without_gpu([]):  # without a GPU it set TRITON_INTERPRET, read when a Triton kernel is defined
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # pytest-xdist workers share the GPU
else:
    compile_fast_without_gpu([])

THOROUGH = os.environ.get("KV_CANARY_THOROUGH", "") not in ("", "0")
settings.register_profile("kv-canary", max_examples=250 if THOROUGH else 25, deadline=None, print_blob=True,
                          suppress_health_check=list(HealthCheck))
settings.load_profile("kv-canary")

import pytest  # noqa: E402


@pytest.fixture
def x64():
    """JAX with x64 on for this test alone (the library never changes the flag)."""
    import jax

    with jax.enable_x64(True):
        yield


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_generate_tests(metafunc):
    """``test_conformance_case`` of a ``tests.contract.Contract`` class: its sample of the cases."""
    if metafunc.function.__name__ == "test_conformance_case" and metafunc.cls is not None:
        from tests.contract import CASES, sampled

        metafunc.parametrize("case", sampled(metafunc.cls.case_every), ids=[c.name for c in CASES])
