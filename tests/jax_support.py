"""Shared checks of the JAX frontend's kernel tests (not a test module): donation, vmap, an unavailable kernel, lowering, fresh processes."""

from __future__ import annotations

import functools
import os
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np

import pytest

from kv_canary_jax import implementations
from kv_canary_jax.api import scatter_req_token_ids
from shared_spec import errors, scatter_reference
from tests.children import Child
from tests.contract import assert_same_pool
from tests.strategies import large_batch, sentinel_pool

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The modules the default must never import where Mosaic GPU runs: Pallas' deprecated Triton lowering, and ours on it.
TRITON_LOWERING_MODULES = ("jax.experimental.pallas.triton", "kv_canary_jax.pallas_triton")


def default_gpu_kernel(platform: str, interpret: bool) -> str:
    """The kernel ``implementation=None`` picks on a CUDA GPU (or, interpreted, anywhere but a TPU), stated plainly.

    Mosaic GPU where it runs (a Hopper or newer GPU, or the interpreter, with
    Mosaic GPU importable); else Pallas-Triton.
    """
    mosaic_runs = implementations.unavailable_reason(implementations.MOSAIC, platform, interpret) is None
    return "mosaic" if mosaic_runs else "pallas"


def check_donation_writes_in_place(implementation: str, interpret: bool) -> None:
    """Under ``jit`` with the pool donated, the result is the donated buffer, written."""
    b = large_batch(bs=12, width=9, seed=16)
    args = [jnp.asarray(a) for a in b]
    pointer = args[3].unsafe_buffer_pointer()
    f = jax.jit(lambda *a: scatter_req_token_ids(*a, implementation=implementation, interpret=interpret), donate_argnums=3)
    out = f(*args)
    assert out.unsafe_buffer_pointer() == pointer
    assert args[3].is_deleted()
    assert_same_pool(np.asarray(out), scatter_reference(*b))


def check_vmap_over_pools_and_over_batches(implementation: str, interpret: bool) -> None:
    """One batch into a stack of pools (jitted), and a stack of batches into a stack of pools."""
    f = functools.partial(scatter_req_token_ids, implementation=implementation, interpret=interpret)
    flat_in, offsets, rows, _ = large_batch(bs=6, width=9, seed=17)
    pools = np.stack([sentinel_pool(7, 9, seed) for seed in range(3)])
    out = jax.jit(jax.vmap(f, in_axes=(None, None, None, 0)))(flat_in, offsets, rows, pools)
    for i in range(3):
        assert_same_pool(np.asarray(out[i]), scatter_reference(flat_in, offsets, rows, pools[i]))
    batches = [large_batch(bs=4, width=9, seed=s) for s in (18, 19)]
    n = min(len(b[0]) for b in batches)
    stacked = [np.stack([b[0][:n] for b in batches])] + [np.stack([b[i] for b in batches]) for i in (1, 2, 3)]
    out = jax.vmap(f)(*stacked)
    for i in range(2):
        assert_same_pool(np.asarray(out[i]), scatter_reference(*[a[i] for a in stacked]))


def check_unavailable_falls_through(implementation: str, reason: str) -> None:
    """``implementation`` alone raises the spec's error with ``reason``; in a sequence before "xla", XLA runs."""
    b = [jnp.asarray(a) for a in large_batch(bs=5, width=7, seed=21)]
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(*b, implementation=implementation)
    assert str(info.value) == f"{errors.PREFIX} implementation {implementation!r} cannot run here: {reason}"
    out = scatter_req_token_ids(*b, implementation=(implementation, "xla"))
    assert_same_pool(np.asarray(out), scatter_reference(*[np.asarray(a) for a in b]))


def fresh_child(script: str, *flags: str) -> Child:
    """``python FLAGS -c script`` in a new process: this repository first on its path, x64 on (``JAX_ENABLE_X64``).

    For what one process cannot show twice: which modules a first call
    imports, which warnings it emits. x64 comes from the environment, so the
    script need not call ``jax.config`` (nor risk a warning doing so).
    """
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return Child([*flags, "-c", script], set_env={"JAX_ENABLE_X64": "1", "PYTHONPATH": path}, cwd=str(ROOT))


def lower_for_cuda(f, *shapes, donate=True) -> str:
    """StableHLO of ``jax.jit(f)`` lowered for CUDA (no GPU needed) on ``(shape, dtype)`` arguments, the fourth donated."""
    args = [jax.ShapeDtypeStruct(s, t) for s, t in shapes]
    return jax.jit(f, donate_argnums=3 if donate else ()).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def assert_one_bare_mosaic_call(text: str, windowed: bool = False) -> None:
    """One Mosaic GPU call and nothing around it, on the op's own four operands (windowed: the three vectors,
    start_cols, the fifth argument, and the pool), written into the donated pool.

    Nothing around it: no convert, copy, pad or zero-filled GMEM scratch,
    each of which XLA would run as a kernel of its own at every application;
    no collective metadata, which XLA's initialize stage of the custom call
    would build on the host at every execution.
    """
    assert re.findall(r"= \"?(\w+\.\w+)", text) == ["stablehlo.custom_call"]
    operands = "%arg0, %arg1, %arg2, %arg4, %arg3" if windowed else "%arg0, %arg1, %arg2, %arg3"
    assert f"stablehlo.custom_call @mosaic_gpu_v2({operands})" in text
    assert "uses_xla_collective_metadata = true" not in text and "xla_replica_ids" not in text
    assert "tf.aliasing_output = 0" in text


# Appended to a script by clear_of_the_triton_lowering: the import probe never ran, neither module is loaded.
_TRITON_LOWERING_UNTOUCHED = f"""
import sys
from kv_canary_jax import implementations as _implementations
_probe = _implementations.pallas_triton_import_error.cache_info()
assert _probe.hits + _probe.misses == 0, "the Triton lowering was probed"
_imported = [name for name in {TRITON_LOWERING_MODULES!r} if name in sys.modules]
assert not _imported, _imported
"""


def clear_of_the_triton_lowering(script: str) -> Child:
    """A fresh process running ``script`` with DeprecationWarnings as errors, then checking that it neither probed
    nor imported the Triton lowering (``printed_clear_of_the_triton_lowering`` reads it).

    The probe is checked as well as the modules: under ``-W error`` a warning
    raised by the import would make the probe report the lowering missing,
    and the module would not stay in ``sys.modules``.
    """
    return fresh_child(script + _TRITON_LOWERING_UNTOUCHED, "-W", "error::DeprecationWarning")


def printed_clear_of_the_triton_lowering(child: Child) -> str:
    """``child``'s stdout (a ``clear_of_the_triton_lowering`` child); fails with its stderr if it failed."""
    done = child.run()
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip()


# The frontend's default in a fresh process: first on this machine as it is (the CPU's XLA path), the lowering
# modules checked right after, then with a Hopper GPU simulated (capability 9.0: planning, lowering for CUDA and
# running the default); clear_of_the_triton_lowering checks the probe and the modules at the end. A line of
# output per part: the pool each part's call leaves.
DEFAULT_CALLS = f"""
import sys
import numpy as np
import jax
import jax.numpy as jnp
from kv_canary_jax import implementations, scatter_req_token_ids
pool = scatter_req_token_ids(np.arange(4), np.array([0, 4]), np.array([1]), np.zeros((2, 4), np.int32))
assert not [name for name in {TRITON_LOWERING_MODULES!r} if name in sys.modules], "imported"
print(np.asarray(pool).tolist())
implementations.gpu_capability = lambda: (9, 0)  # a Hopper GPU, as far as the choice goes
assert implementations.choice(None, "cuda", False) == ((None, "mosaic"),), implementations.mosaic_import_error()
assert dict(implementations.choice(None, None, False))["cuda"] == "mosaic"
shapes = [jax.ShapeDtypeStruct(s, t) for s, t in (((50,), jnp.int64), ((4,), jnp.int64), ((3,), jnp.int64), ((4, 20), jnp.int32))]
hlo = jax.jit(scatter_req_token_ids, donate_argnums=3).trace(*shapes).lower(lowering_platforms=("cuda",)).as_text()
assert "@mosaic_gpu" in hlo and "triton" not in hlo
pool = scatter_req_token_ids(np.arange(4), np.array([0, 4]), np.array([1]), np.zeros((2, 4), np.int32))  # XLA, on the CPU
print(np.asarray(pool).tolist())
"""


DEFAULT_CALLS_RUN = clear_of_the_triton_lowering(DEFAULT_CALLS)  # the tests that read it carry its .ahead


def default_calls_clear_of_the_triton_lowering() -> list[str]:
    """``DEFAULT_CALLS``' lines, from its one run in this process."""
    return printed_clear_of_the_triton_lowering(DEFAULT_CALLS_RUN).splitlines()
