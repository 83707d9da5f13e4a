"""A JAX without Pallas' Triton lowering (deprecated in JAX 0.11, removed later): the default falls through.

The missing module is simulated by ``sys.modules[name] = None`` (an import of
it then raises ImportError), with the cached import probe cleared before and
after.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("jax")

from kv_canary_jax import implementations  # noqa: E402
from shared_spec import errors  # noqa: E402
from shared_spec.reference import scatter_reference  # noqa: E402
from tests.jax_support import DEFAULT_CALLS_RUN, default_calls_clear_of_the_triton_lowering  # noqa: E402

TRITON_LOWERING = "jax.experimental.pallas.triton"
P = "kv-canary: scatter_req_token_ids"


@pytest.fixture
def no_triton_lowering(monkeypatch):
    monkeypatch.setitem(sys.modules, TRITON_LOWERING, None)
    implementations.pallas_triton_import_error.cache_clear()
    yield
    implementations.pallas_triton_import_error.cache_clear()


@pytest.mark.parametrize("capability", [(9, 0), (10, 0), (8, 0), None])
def test_the_default_falls_through_to_mosaic_on_hopper_else_xla(no_triton_lowering, monkeypatch, capability):
    monkeypatch.setattr(implementations, "gpu_capability", lambda: capability)
    mosaic_imports = implementations.mosaic_import_error() is None
    hopper = capability is not None and capability >= (9, 0) and mosaic_imports
    expected = implementations.MOSAIC if hopper else implementations.XLA
    assert implementations.choice(None, "cuda", interpret=False) == ((None, expected),)
    # Interpreted (any platform), Mosaic GPU runs wherever it imports.
    interpreted = implementations.MOSAIC if mosaic_imports else implementations.XLA
    assert implementations.choice(None, "cpu", interpret=True) == ((None, interpreted),)
    assert implementations.choice(("pallas", "xla"), "cuda", interpret=False) == ((None, implementations.XLA),)


def test_pallas_says_why_it_cannot_run(no_triton_lowering):
    with pytest.raises(errors.KvCanaryValueError) as info:
        implementations.choice("pallas", "cpu", interpret=True)
    message = str(info.value)
    assert message.startswith(f"{P} implementation 'pallas' cannot run here: ")
    reason = errors.PALLAS_NOT_IMPORTABLE.format(error=implementations.pallas_triton_import_error())
    assert message.endswith(reason)
    assert ("ImportError" in message or "ModuleNotFoundError" in message) and TRITON_LOWERING in message
    assert "pallas" not in implementations.available_implementations(interpret=True)


def test_the_public_function_runs_the_fallback(no_triton_lowering):
    import jax

    from kv_canary_jax import scatter_req_token_ids

    assert jax.config.jax_enable_x64  # the test process's choice (conftest)
    flat_in = np.arange(10, 20, dtype=np.int64)
    offsets = np.array([0, 3, 10], np.int64)
    rows = np.array([2, 0], np.int64)
    pool = np.full((3, 5), -1, np.int32)
    got = scatter_req_token_ids(flat_in, offsets, rows, pool, implementation=("pallas", "xla"), interpret=True)
    np.testing.assert_array_equal(np.asarray(got), scatter_reference(flat_in, offsets, rows, pool))


@DEFAULT_CALLS_RUN.ahead
def test_nothing_imports_the_lowering_until_pallas_is_chosen():
    """A fresh process: importing the frontend and running the default on the CPU never imports the deprecated
    module (``tests.jax_support.DEFAULT_CALLS``' first part)."""
    assert default_calls_clear_of_the_triton_lowering()[0] == "[[0, 0, 0, 0], [0, 1, 2, 3]]"
