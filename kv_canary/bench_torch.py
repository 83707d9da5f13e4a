"""``kv-canary bench``'s torch figures of one case: the Triton kernel beside the per-request-tile baseline,
a same-bytes copy and an empty kernel (flushed and chained), and the vectorized torch backend."""

from __future__ import annotations

import numpy as np

from kv_canary.bench_method import ROUNDS, chained_us, empty_kernel, flushed_us, same_bytes_copy


class KernelRuns:
    """The launcher's Triton kernel and the per-request-tile baseline on one case's tensors, writing one pool.

    ``next_pool(k)`` moves both to round ``k``'s pool (``rounds`` pools, all held, so each lies elsewhere in
    memory): with the L2 flushed, where one output buffer lay moved one kernel's time by up to 8% on the H200
    (2026-12-01), so that one placement would favour whichever kernel it happens to suit.
    """

    def __init__(self, torch, inputs, rounds: int = ROUNDS):
        from kv_canary.baseline_kernels import launch_per_request_tile
        from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch

        self.flat_in, self.offsets, self.rows, pool = (torch.from_numpy(x).cuda() for x in inputs)
        self._launch, self._baseline = launch, launch_per_request_tile
        self._pools = [pool.clone() for _ in range(rounds)]
        self.pool = self._pools[0]

    def next_pool(self, k: int) -> None:
        self.pool = self._pools[k]

    def ours(self) -> None:
        self._launch(flat_in=self.flat_in, offsets=self.offsets, req_pool_indices=self.rows, pool_out=self.pool,
                     backend="triton")

    def baseline(self) -> None:
        self._baseline(self.flat_in, self.offsets, self.rows, self.pool)


def bench_torch(inputs, expected, measures: dict):
    import torch
    import triton

    from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch

    kernels = KernelRuns(torch, inputs)  # the case's tensors on the GPU, and a pool of each round's
    flat_in, offsets, rows = kernels.flat_in, kernels.offsets, kernels.rows
    outs = {}
    for backend in ("triton", "torch"):
        outs[backend] = out = kernels.pool.clone()  # no kernel has written it yet
        launch(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=out, backend=backend)
        assert np.array_equal(out.cpu().numpy(), expected), f"torch/{backend} disagrees with the reference"
    # The figures the targets compare, taking turns (a drift of the GPU or the host hits
    # them alike): the kernel, the per-request-tile baseline, the same-bytes copy and the
    # empty kernel; the two kernels on a pool of each round's.
    measures |= flushed_us(torch, {
        "torch_triton_us": kernels.ours,
        "per_request_tile_us": kernels.baseline,
        "same_bytes_copy_us": same_bytes_copy(torch, inputs[0].shape[0]),
        "empty_kernel_us": empty_kernel(torch, triton),
    }, before_round=kernels.next_pool)
    torch_out = outs["torch"]
    measures["torch_torch_us"] = triton.testing.do_bench(
        lambda: launch(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=torch_out, backend="torch"),
        return_mode="median",
    ) * 1e3
    # Chained like the JAX figure (CHAIN launches back to back in one CUDA graph,
    # no flush between them, minus one launch): the like-for-like comparison, and
    # the baseline the same way (a captured serving step's regime, beside the flushed one).
    kernels.next_pool(0)  # one pool for both
    measures |= chained_us(torch, {"torch_triton_chained_us": kernels.ours, "per_request_tile_chained_us": kernels.baseline})
