"""Shared helpers of the torch frontend's tests (not a test module)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from kv_canary_arrays.frameworks import cuda_available
from shared_spec import errors

ROOT = str(pathlib.Path(__file__).resolve().parents[1])
P = errors.PREFIX
BACKENDS = ("torch", "triton")


def device_for(backend: str) -> str:
    """Where a test runs ``backend``: Triton needs CUDA tensors unless it is interpreted (no GPU here)."""
    return "cuda" if backend == "triton" and cuda_available() else "cpu"


def sentinel(n_rows: int, width: int, seed: int = 0, device="cpu") -> torch.Tensor:
    """A pool of distinct negative sentinels."""
    rng = np.random.default_rng(seed)
    values = (-1_000_000 - rng.permutation(n_rows * width)).astype(np.int32).reshape(n_rows, width)
    return torch.from_numpy(values).to(device)


def nested(*tensors) -> torch.Tensor:
    """A nested tensor of ``tensors``, made without torch's prototype warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor(list(tensors))


def freed(values: list) -> torch.Tensor:
    """An int64 tensor of ``values`` whose storage was freed under it."""
    tensor = torch.tensor(values, dtype=torch.int64)
    tensor.untyped_storage().resize_(0)
    return tensor


def as_numpy(tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy() if isinstance(tensor, torch.Tensor) else np.asarray(tensor)


def tensors(*arrays, device="cpu"):
    return [torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in arrays]


def raises(error_class, message: str, call, *watched) -> None:
    """``call()`` raises exactly ``error_class(message)`` and leaves every tensor of ``watched`` as it was."""
    before = [as_numpy(w).copy() for w in watched]
    with pytest.raises(error_class) as raised:
        call()
    assert type(raised.value) is error_class and str(raised.value) == message
    for w, b in zip(watched, before):
        np.testing.assert_array_equal(as_numpy(w), b)


def run_python(script: str, *, interpret: bool | None = None, timeout: int = 600) -> str:
    """``script``'s stdout in a fresh interpreter with this checkout on the path (``interpret``: set or unset
    ``TRITON_INTERPRET``; None: as this process has it); fails with its stderr."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if interpret is False:
        env.pop("TRITON_INTERPRET", None)
    elif interpret:
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout
