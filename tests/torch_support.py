"""Shared bits of the torch frontend's tests (not a test module)."""

from __future__ import annotations

import json
import os

import numpy as np
import torch

from tests.children import ROOT, Child


def device_for(backend: str) -> str:
    """Where a test runs ``backend``: Triton needs CUDA tensors unless it is interpreted (no GPU here)."""
    from kv_canary.platform import cuda_available

    return "cuda" if backend == "triton" and cuda_available() else "cpu"


def sentinel(n_rows: int, width: int, seed: int = 0, device="cpu") -> torch.Tensor:
    """A pool of distinct non-zero sentinels, as a tensor."""
    from tests.strategies import sentinel_pool

    return torch.from_numpy(sentinel_pool(n_rows, width, seed)).to(device)


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def tiled_everywhere(monkeypatch, block: int):
    """Make every contiguous batch launch the tiled kernel with ``block``-column tiles (small enough to reach every
    edge case on the interpreter), through ``dispatch.use_rule``; the default rule again after. A generator: yield
    from it in a fixture."""
    from kv_canary_torch.launch import plan as launch_plan

    yield from using_rule(launch_plan.RULE._replace(large_block=block, small_cells=-1, tiled_fill=0, tiled_min_tiles=0,
                                                    tiled_min_tokens=0))


def using_rule(rule):
    """Every launch planned under ``rule`` inside (``dispatch.use_rule``), the default rule after. A generator."""
    from kv_canary_torch.launch import dispatch, plan as launch_plan

    dispatch.use_rule(rule)
    try:
        yield
    finally:
        dispatch.use_rule(launch_plan.RULE)


def native_module(tmp_path_factory):
    """The launcher's native piece built into a cache folder the test run's workers share (not the default cache:
    its static state is this path's own)."""
    from kv_canary_torch.launch import native

    return native.load_module(native.build(shared_native_cache(tmp_path_factory)))


def shared_native_cache(tmp_path_factory):
    """The cache folder the test run's workers share for the native piece."""
    return tmp_path_factory.getbasetemp().parent / "kv-canary-native"


# A serving worker's first calls, in a fresh interpreter (no conftest: JAX's x64 off, nothing imported): what
# importing the frontend, then running backend="torch" and "auto", then backend="pallas" leave behind, each step
# on what the ones before it left, as a worker's calls do. One process for the tests of each step, since a fresh
# interpreter with torch and JAX costs seconds here.
FIRST_CALLS = """
import json, sys
facts = {}
import kv_canary_torch
facts["dynamo_after_import"] = "torch._dynamo" in sys.modules
import torch
from kv_canary_torch import backends, launch_scatter_req_token_ids_kernel, pack_token_ids
pool = torch.zeros((2, 3), dtype=torch.int32)
facts["resolved"] = []
for backend in ("torch", "auto"):
    facts["resolved"].append(backends.resolve(backend, pool))
    launch_scatter_req_token_ids_kernel(flat_in=torch.arange(3), offsets=torch.tensor([0, 3]),
                                        req_pool_indices=torch.tensor([1]), pool_out=pool, backend=backend)
facts["pool_after_torch"] = pool.tolist()
facts["jax_after_torch"] = [m for m in ("jax", "kv_canary_jax") if m in sys.modules]
import jax
facts["x64_before_pallas"] = jax.config.jax_enable_x64
flat_in, offsets = pack_token_ids([[11, 12, 13], [21, 22]])
pool = torch.full((4, 3), -1, dtype=torch.int32)
launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=torch.tensor([3, 0]),
                                    pool_out=pool, backend="pallas")
facts["pool_after_pallas"] = pool.tolist()
facts["x64_after_pallas"] = jax.config.jax_enable_x64
facts["int_dtype_after_pallas"] = str(jax.numpy.asarray([1]).dtype)
print(json.dumps(facts))
"""


FIRST_CALLS_RUN = Child(["-c", FIRST_CALLS], unset=["JAX_ENABLE_X64"])  # the tests that read it carry its .ahead


def first_calls_in_a_fresh_process() -> dict:
    """``FIRST_CALLS``' facts (its one run in this process); an ``AssertionError`` with its stderr if it failed."""
    done = FIRST_CALLS_RUN.run()
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


# The scripts that compile kernels for sm_90 without a GPU (Triton's compiler, not its interpreter), by name:
# each test module that has one registers it at import, and the first test to ask runs every registered script in
# one fresh process (this one may have defined the kernels in interpreter mode), each in its own namespace, since
# the process's torch and Triton imports cost seconds here.
SM90_SCRIPTS: dict[str, str] = {}
_RUN_SM90 = """
import contextlib, io, json, sys
printed = {}
for name, script in zip(sys.argv[1::2], sys.argv[2::2]):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(script, f"<{name}>", "exec"), {"__name__": "__main__"})
    printed[name] = out.getvalue().strip()
print(json.dumps(printed))
"""


def _sm90_arguments() -> list[str]:
    return ["-c", _RUN_SM90, *[part for name, script in SM90_SCRIPTS.items() for part in (name, script)]]


# Every registered script in one run (the tests that read it carry its .ahead); Triton compiles, not interprets.
SM90_RUN = Child(_sm90_arguments, unset=["TRITON_INTERPRET"],
                 set_env={"PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}, timeout=600)


def compiled_for_sm90(name: str) -> str:
    """What ``SM90_SCRIPTS[name]`` printed, from the one run of every registered script; fails with the run's stderr."""
    done = SM90_RUN.run()
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)[name]
