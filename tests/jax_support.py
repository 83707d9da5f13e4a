"""Shared helpers of the JAX tests (not a test module): the ways to run here, batches, fresh buffers, wide types."""

from __future__ import annotations

import functools
import os
import pathlib
import re
import subprocess
import sys

import jax
import numpy as np

from kv_canary_jax import scatter_req_token_ids

ROOT = pathlib.Path(__file__).resolve().parents[1]
# (implementation, interpret): every way each implementation runs on this CPU (the kernels interpreted).
WAYS = [("xla", False), ("pallas", True), ("mosaic", True), ("mosaic_tpu", True)]
WAY_IDS = [name for name, _ in WAYS]
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# A 64-bit integer type in a jaxpr (i64[...]) or in HLO text (s64[...]).
WIDE = re.compile(r"\b[isu]64\[")


def scatter_fn(implementation=None, interpret=False, **options):
    """``scatter_req_token_ids`` with these options, taking ``start_cols`` as a fifth positional argument."""

    def f(flat_in, offsets, rows, pool, start_cols=None):
        return scatter_req_token_ids(flat_in, offsets, rows, pool, start_cols=start_cols,
                                     implementation=implementation, interpret=interpret, **options)

    return f


@functools.cache
def jitted(implementation, interpret, donate=False, **options):
    """One jitted ``scatter_fn`` per way for the whole run: a shape seen before is not compiled again."""
    return jax.jit(scatter_fn(implementation, interpret, **options), donate_argnums=3 if donate else ())


def fresh(x, sharding=None):
    """``x`` as a JAX array in a buffer of its own (``jax.device_put`` of host data may share the numpy memory
    on the CPU, which JAX then cannot donate)."""
    return jax.jit(lambda a: a + 0, out_shardings=sharding)(np.asarray(x))


def batch(bs=6, width=9, seed=0, dtype=np.int32, ragged=True):
    """A well-formed numpy batch ``(flat_in, offsets, rows, pool)``: distinct rows of a sentinel pool."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0 if ragged else width, width + 1, size=bs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(dtype)
    flat_in = rng.integers(INT32_MIN, INT32_MAX, size=int(offsets[-1]), endpoint=True).astype(dtype)
    rows = rng.permutation(bs + 1)[:bs].astype(dtype)
    pool = (-1_000_000 - rng.permutation((bs + 1) * width)).astype(np.int32).reshape(bs + 1, width)
    return flat_in, offsets, rows, pool


def wide_types(text: str) -> list[str]:
    """The lines of a jaxpr or HLO text that hold a 64-bit integer type."""
    return [line.strip() for line in text.splitlines() if WIDE.search(line)]


def fresh_python(script: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -c script`` in a new process at the repository root (JAX's defaults, warnings as errors)."""
    return subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", script], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=300)
