"""Tuning sweep for the Triton kernel's launch shape (GPU): block, warps and program budget.

    python benchmarks/tune_triton.py

Times the kernel of kv_canary_torch.triton_kernel directly (do_bench median,
L2 flushed) for each (BLOCK, num_warps, TARGET_PROGRAMS) over a subset of the
benchmark grid, checks every variant against the reference once, and prints
one table. The defaults in triton_kernel.py / triton_launch.py come from here.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
import triton

from kv_canary.baseline_kernels import launch_per_request_tile
from kv_canary.bench import BYTES_PER_TOKEN, copy_bandwidth, make_inputs
from kv_canary_torch import triton_kernel as k
from shared_spec.reference import scatter_reference

CASES = [(1, 128, False), (8, 8192, False), (64, 2048, False), (64, 8192, False), (256, 2048, False),
         (256, 8192, False), (256, 32768, False), (1024, 2048, False), (4096, 512, False), (256, 8192, True),
         (64, 32768, True)]
CONFIGS = list(itertools.product((512, 1024, 2048, 4096), (4, 8), (2048, 8192, 65536), (False,)))


def launch(inputs, pool, block, warps, target, stream):
    flat_in, offsets, rows, _ = inputs
    bs = rows.shape[0]
    n_rows, width = pool.shape
    n_tokens = flat_in.shape[0]
    lanes = min(-(-min(width, n_tokens) // block), -(-target // bs))
    k.scatter_req_token_ids_kernel[(bs, lanes)](
        flat_in, offsets, rows, pool, n_tokens, n_rows, width, 1, 1, 1, pool.stride(0), pool.stride(1),
        BLOCK=block, WIDE=False, STREAM=stream, num_warps=warps,
    )


@triton.jit
def empty_kernel(x_ptr):
    pass


def main():
    bw = copy_bandwidth(torch, triton)
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s")
    x = torch.empty(1, device="cuda")
    empty_us = triton.testing.do_bench(lambda: empty_kernel[(1,)](x), return_mode="median") * 1e3
    print(f"empty kernel: {empty_us:.2f} us (do_bench floor)")
    from kv_canary_torch.triton_launch import launch_shape
    results = {}
    for case in CASES:
        host = make_inputs(*case)
        expected = scatter_reference(*host)
        inputs = tuple(torch.from_numpy(x).cuda() for x in host)
        tokens = host[0].shape[0]
        for config in CONFIGS:
            pool = inputs[3].clone()
            launch(inputs, pool, *config)
            assert np.array_equal(pool.cpu().numpy(), expected), (case, config)
            ms = triton.testing.do_bench(lambda: launch(inputs, pool, *config), return_mode="median")
            results[(case, *config)] = ms * 1e3
        pool = inputs[3].clone()
        baseline = triton.testing.do_bench(lambda: launch_per_request_tile(*inputs[:3], pool), return_mode="median") * 1e3
        results[(case, "baseline")] = baseline
        best = min(CONFIGS, key=lambda c: results[(case, *c)])
        chosen = launch_shape(case[0], case[1] + 1, tokens)
        base = results[(case, *chosen)]
        print(
            f"{case}: tokens {tokens}, chosen {chosen} {base:.2f} us ({100 * BYTES_PER_TOKEN * tokens / base / 1e-6 / bw:.0f}% BW), "
            f"best {best} {results[(case, *best)]:.2f} us; per-request-tile baseline {baseline:.2f} us", flush=True,
        )
    # The config with the best worst-case ratio to the per-case optimum.
    def worst(config):
        return max(results[(c, *config)] / min(results[(c, *o)] for o in CONFIGS) for c in CASES)

    ranked = sorted(CONFIGS, key=worst)
    print("baseline: " + " ".join(f"{results[(c, 'baseline')]:.1f}" for c in CASES))
    for config in ranked[:8]:
        print(f"config {config}: worst ratio to per-case best {worst(config):.3f}; "
              + " ".join(f"{results[(c, *config)]:.1f}" for c in CASES))


if __name__ == "__main__":
    main()
