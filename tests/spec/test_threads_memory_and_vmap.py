"""Situations, not arguments, in which the spec still holds: threads, bounded memory, vmap of the checked mode.

Beside ``test_hostile_inputs.py``: every call returns the reference's pool or
raises the spec's exception, whoever calls it, however often, from however
many threads, with temporaries bounded by the arguments' sizes.
"""

from __future__ import annotations

import functools
import sys
import textwrap
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.experimental import checkify

from kv_canary_jax import error_from_checkify, scatter_req_token_ids
from kv_canary_torch import launch_scatter_req_token_ids_kernel, torch_backend
from shared_spec import errors, scatter_reference
from tests.children import Child
from tests.profiles import property_settings
from tests.strategies import batches, sentinel_pool
from tests.spec.test_hostile_inputs import ROOT

# -- 1. threads: Triton's interpreter keeps its launch state in module globals -------------------


def test_interpreted_triton_launches_from_eight_threads_each_write_their_pool():
    """Once, about half such calls raised InterpreterErrors and some returned with a row unwritten."""
    from kv_canary_torch.launch import dispatch

    if not dispatch.interpreted():
        pytest.skip("the Triton kernel is compiled here: launches run on the GPU, not in the interpreter")
    problems, calls = [], 6

    def work(thread: int) -> None:
        bs = 4 + thread
        expected = torch.arange(bs * 8, dtype=torch.int32).reshape(bs, 8)
        for _ in range(calls):
            pool = torch.full((bs, 8), -1, dtype=torch.int32)
            try:
                launch_scatter_req_token_ids_kernel(
                    flat_in=torch.arange(bs * 8), offsets=torch.arange(bs + 1) * 8, req_pool_indices=torch.arange(bs),
                    pool_out=pool, backend="triton",
                )
            except Exception as error:  # noqa: BLE001 - any exception is the failure being counted
                problems.append(f"{type(error).__name__}: {error}")
            else:
                if not torch.equal(pool, expected):
                    problems.append(f"thread {thread}: pool written wrongly")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert problems == [], f"{len(problems)} of {8 * calls} calls: {problems[:3]}"


# -- 3. memory: the torch backend's temporaries are bounded by the arguments, not the cells written --


@pytest.mark.parametrize("cap", [1, 3, 10])
def test_the_torch_backend_in_small_chunks_writes_the_reference_pool(monkeypatch, cap):
    """Chunks of at most ``cap`` cells (one request when it writes more): the pool is the reference's, repeated rows included."""
    from hypothesis import given, strategies as st

    monkeypatch.setattr(torch_backend, "chunk_cells", lambda *sizes: cap)
    seen = []
    write = torch_backend._write
    monkeypatch.setattr(torch_backend, "_write", lambda *a: seen.append(a[-1]) or write(*a))

    @property_settings(30)
    @given(batch=batches(max_rows=4, max_width=9, max_bs=9, max_tokens=24), repeat=st.booleans(), fall=st.booleans())
    def check(batch, repeat, fall):
        flat_in, offsets, rows, pool = batch
        if repeat and len(rows):  # every request on one row: later requests overwrite earlier ones
            rows = np.full_like(rows, rows[0])
        if fall and len(offsets) > 2:  # decreasing offsets: requests re-read flat_in
            offsets = offsets[::-1].copy()
        seen.clear()
        tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in (flat_in, offsets, rows, pool)]
        torch_backend.scatter(*tensors)
        np.testing.assert_array_equal(tensors[3].numpy(), scatter_reference(flat_in, offsets, rows, pool))
        width = pool.shape[1]
        assert all(cells <= max(cap, width) for cells in seen), seen  # a chunk holds more than cap only as one request

    check()


# A hostile batch for memory, scaled down: offsets [0, N, 0, N, ...] with every request on
# row 0 of a one-row pool. bs * N / 2 cells are written into N cells; unchunked, the torch
# backend's ~55 bytes a written cell came to 260 MB here (8.2 GB at bs = 50000, N = 20000).
_HOSTILE_MEMORY = textwrap.dedent(
    """
    import torch
    from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch

    def status(field):  # kB, from the kernel's own accounting of this process
        return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field + ":"))

    bs, n = 4000, 3000
    flat = torch.arange(n, dtype=torch.int64)
    offsets = torch.tensor([0, n] * (bs // 2) + [0], dtype=torch.int64)
    rows = torch.zeros(bs, dtype=torch.int64)
    pool = torch.full((1, n), -1, dtype=torch.int32)
    small = torch.full((1, 4), -1, dtype=torch.int32)
    launch(flat_in=flat[:4], offsets=torch.tensor([0, 4]), req_pool_indices=torch.tensor([0]), pool_out=small)  # warm up
    open("/proc/self/clear_refs", "w").write("5")  # resets the peak (VmHWM) to what is resident now (Linux 4.0 on)
    resident = status("VmRSS")
    launch(flat_in=flat, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend="torch")
    peak = status("VmHWM")
    assert torch.equal(pool[0], flat.to(torch.int32))
    print("grew", (peak - resident) * 1024)
    """
)
# What the chunks may take: MIN_CHUNK_CELLS cells at ~55 bytes (14 MB), with room for the allocator.
_BOUND = 64 * 2**20


HOSTILE_MEMORY_RUN = Child(["-c", _HOSTILE_MEMORY], set_env={"PYTHONPATH": str(ROOT)})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak resident size from /proc/self")
@HOSTILE_MEMORY_RUN.ahead
def test_the_torch_backend_memory_is_bounded_on_the_hostile_repeated_offsets():
    """In a child process of torch alone, so that the peak resident size is this call's."""
    done = HOSTILE_MEMORY_RUN.run()
    assert done.returncode == 0, done.stderr[-3000:]
    grew = int(done.stdout.split()[-1])
    assert grew < _BOUND, f"resident memory grew by {grew / 2**20:.0f} MB"


def test_the_chunk_bound_grows_with_the_arguments_not_the_cells_written():
    assert torch_backend.chunk_cells(n_tokens=10, n_rows=2, width=3, bs=4) == torch_backend.MIN_CHUNK_CELLS
    big = 10 * torch_backend.MIN_CHUNK_CELLS
    assert torch_backend.chunk_cells(n_tokens=big, n_rows=1, width=1, bs=1) == big
    assert torch_backend.chunk_cells(n_tokens=1, n_rows=big, width=2, bs=1) == 2 * big
    assert torch_backend.chunk_cells(n_tokens=1, n_rows=1, width=1, bs=big) == big


# -- 9. vmap of the checked mode, on every JAX implementation --------------------------------------


@pytest.mark.parametrize("batched", ["pools", "rows"])
def test_mosaic_tpu_checked_mode_under_vmap(batched):
    """Once: NotImplementedError (IO effect not supported in vmap-of-cond), whichever argument was batched."""
    flat_in, offsets = jnp.arange(100, 112), jnp.array([0, 3, 10, 12])
    rows = jnp.array([2, 0, 3])
    pool = jnp.asarray(sentinel_pool(4, 5, seed=21))
    f = functools.partial(scatter_req_token_ids, implementation="mosaic_tpu", interpret=True, check_values=True)
    if batched == "pools":
        pools = jnp.stack([pool, pool - 50])
        err, out = checkify.checkify(jax.jit(jax.vmap(f, in_axes=(None, None, None, 0))), errors=checkify.user_checks)(
            flat_in, offsets, rows, pools
        )
        assert error_from_checkify(err) is None
        for i in range(2):
            np.testing.assert_array_equal(np.asarray(out[i]), scatter_reference(flat_in, offsets, rows, pools[i]))
        return
    stacked = jnp.stack([rows, jnp.array([2, 2, 3])])  # the second example repeats a row
    err, out = checkify.checkify(jax.jit(jax.vmap(f, in_axes=(None, None, 0, None))), errors=checkify.user_checks)(
        flat_in, offsets, stacked, pool
    )
    assert str(error_from_checkify(err)) == errors.ROW_REPEATED.format(j=1, row=2, i=0)
    np.testing.assert_array_equal(np.asarray(out[0]), scatter_reference(flat_in, offsets, rows, pool))
    np.testing.assert_array_equal(np.asarray(out[1]), np.asarray(pool))  # the failing example writes nothing
