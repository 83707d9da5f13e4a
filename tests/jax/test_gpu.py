"""The compiled kernels on a CUDA GPU (``pytest -m gpu tests/jax``): results in int32 and int64, donation, the
default on Hopper, checkify, placement. Skipped without a GPU JAX sees. Rows are distinct here: GPU programs run
concurrently, and where two requests write one cell the spec allows either value."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.experimental import checkify

from kv_canary_jax import (assign_req_to_token_pool, available_implementations, error_from_checkify,
                           implementations, pallas_mosaic_gpu)
from shared_spec import arg_specs
from shared_spec.reference import assign_reference, scatter_reference
from tests.contract import assert_same_pool
from tests.jax_support import batch, fresh, fresh_python, jitted

GPU = implementations.first_device("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPU is None, reason="JAX sees no CUDA GPU")]
KERNELS = [name for name in ("mosaic", "pallas", "xla") if GPU is not None and name in available_implementations()]
HOPPER = "mosaic" in KERNELS


def on_gpu(*arrays):
    return [None if a is None else jax.device_put(a, GPU) for a in arrays]


def distinct_rows(rng, n_rows, width, bs, n_tokens, dtype, windowed):
    """A hostile batch (extreme offsets and first columns, overlapping segments) whose in-range rows are distinct."""
    batch_ = list(arg_specs.hostile_batch(rng, n_rows, width, bs, n_tokens, dtype, windowed))
    rows = rng.permutation(max(n_rows, bs))[:bs]
    batch_[2] = np.where(rows < n_rows, rows, np.iinfo(dtype).min + rows).astype(dtype)
    return batch_


@pytest.mark.parametrize("implementation", KERNELS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_compiled_kernels_match_the_reference(request, implementation, dtype):
    if dtype == np.int64:
        request.getfixturevalue("x64")
    f = jitted(implementation, False)
    rng = np.random.default_rng(0)
    for n_rows, width, bs, n_tokens in [(9, 24, 8, 64), (40, 3000, 30, 9000), (300, 1030, 257, 70_000), (5, 5, 4, 3)]:
        for windowed in (False, True):
            b = distinct_rows(rng, n_rows, width, bs, n_tokens, dtype, windowed)
            assert_same_pool(np.asarray(f(*on_gpu(*b))), scatter_reference(*b))
    big = batch(bs=4096, width=513, seed=1, dtype=dtype)  # many requests, several lanes and tiles
    assert_same_pool(np.asarray(f(*on_gpu(*big))), scatter_reference(*big))


@pytest.mark.parametrize("implementation", KERNELS)
def test_a_donated_serving_loop_writes_one_buffer(implementation):
    f = jitted(implementation, False, donate=True)
    expected = batch(bs=200, width=4796, seed=2)[3]
    pool = fresh(expected)
    pointer = pool.unsafe_buffer_pointer()
    rng = np.random.default_rng(3)
    lengths = np.zeros(64, np.int32)
    rows = rng.permutation(201)[:64].astype(np.int32)
    for new in [rng.integers(1, 3000, size=64)] + [np.ones(64, np.int64)] * 4:  # a prefill, then decode steps
        offsets = np.concatenate([[0], np.cumsum(new)]).astype(np.int32)
        flat_in = rng.integers(0, 2**31 - 1, size=int(offsets[-1])).astype(np.int32)
        pool = f(*on_gpu(flat_in, offsets, rows), pool, jax.device_put(lengths, GPU))
        expected = scatter_reference(flat_in, offsets, rows, expected, lengths)
        lengths = (lengths + new).astype(np.int32)
        assert pool.unsafe_buffer_pointer() == pointer
    assert_same_pool(np.asarray(pool), expected)


@pytest.mark.parametrize("implementation", KERNELS)
def test_checkify_and_vmap_with_the_compiled_kernels(implementation):
    flat_in, offsets, rows, pool = batch(bs=300, width=1027, seed=4)
    checked = checkify.checkify(jitted(implementation, False, check_values=True), errors=checkify.user_checks)
    err, out = checked(*on_gpu(flat_in, offsets, rows, pool))
    assert err.get() is None
    assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool))
    bad = rows.copy()
    bad[7] = bad[3]
    err, out = checked(*on_gpu(flat_in, offsets, bad, pool))
    assert str(error_from_checkify(err)).endswith(f"req_pool_indices[7]={bad[3]} repeats req_pool_indices[3]")
    assert_same_pool(np.asarray(out), pool)
    pools = np.stack([pool, pool - 1])
    out = jax.jit(jax.vmap(jitted(implementation, False), in_axes=(None, None, None, 0)))(*on_gpu(flat_in, offsets, rows, pools))
    for i in range(2):
        assert_same_pool(np.asarray(out[i]), scatter_reference(flat_in, offsets, rows, pools[i]))


def test_the_assignment_on_the_gpu_and_an_empty_one_on_the_cpu():
    rng = np.random.default_rng(5)
    rows = rng.permutation(65)[:64].astype(np.int32)
    start = rng.integers(0, 100, size=64).astype(np.int32)
    end = (start + rng.integers(0, 50, size=64)).astype(np.int32)
    loc, table = rng.integers(0, 10**6, size=3200).astype(np.int32), np.full((65, 200), -1, np.int32)
    out = jax.jit(assign_req_to_token_pool, static_argnums=5)(*on_gpu(rows, table, start, end, loc), 60)
    assert_same_pool(np.asarray(out), assign_reference(rows, table, start, end, loc, 60))
    cpu = jax.devices("cpu")[0]  # JAX's default device is the GPU
    empty = [jax.device_put(a, cpu) for a in (rows[:0], table, start[:0], end[:0], loc)]
    out = assign_req_to_token_pool(*empty, 0)
    assert out.devices() == {cpu}


@pytest.mark.skipif(not HOPPER, reason="Mosaic GPU needs compute capability 9.0 or newer")
def test_the_default_on_hopper_is_mosaic_and_never_touches_the_triton_lowering():
    script = f"""
import sys
import jax, numpy as np
from kv_canary_jax import scatter_req_token_ids
host = (np.arange(10, 16, dtype=np.int32), np.array([0, 4, 6], np.int32), np.array([1, 0], np.int32),
        np.full((3, 5), -1, np.int32))
args = [jax.device_put(a, jax.devices("gpu")[0]) for a in host]
outs = [scatter_req_token_ids(*args), jax.jit(scatter_req_token_ids)(*args),
        jax.jit(scatter_req_token_ids, donate_argnums=3)(*args[:3], args[3] + 0)]
assert "{pallas_mosaic_gpu.NAME}" in str(jax.make_jaxpr(scatter_req_token_ids)(*args))
hlo = jax.jit(scatter_req_token_ids).lower(*args).as_text()
assert "@mosaic_gpu" in hlo and "triton" not in hlo
assert not [m for m in ("jax.experimental.pallas.triton", "kv_canary_jax.pallas_triton") if m in sys.modules]
print([np.asarray(o).tolist() for o in outs])
"""
    done = fresh_python(script)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str([[[14, 15, -1, -1, -1], [10, 11, 12, 13, -1], [-1, -1, -1, -1, -1]]] * 3)
