"""Hostile batches through every kernel, each result compared with ``shared_spec``'s reference; run it under
compute-sanitizer, which fails the run on any access outside the arguments.

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 XLA_PYTHON_CLIENT_ALLOCATOR=platform \\
      /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 python3 benchmarks/memcheck.py
    python3 benchmarks/memcheck.py --cases 6     # anywhere: the kernels interpreted, a smoke run (about 10 s)

The two variables give every tensor and JAX buffer an allocation of its own, so that an access one element past an
argument is out of bounds for the sanitizer instead of landing in a neighbour's memory.

Batch ``i`` is ``shared_spec.arg_specs.hostile_batch`` (offsets, rows and first columns at the index dtype's extremes,
decreasing and overlapping segments, rows outside the pool) of geometry ``GEOMETRIES[(i // 2) % 4]``,
windowed (``start_cols``) when ``i`` is odd; the torch pool is a view of a larger buffer in one of ``LAYOUTS`` (every
geometry meets every layout within 32 batches), whose cells outside the view must come back as they were. Kernels:
``torch/triton`` and ``torch/assign`` (``backend="triton"``), ``jax/pallas``, ``jax/mosaic``, ``jax/assign-pallas``,
``jax/assign-mosaic`` (``interpret=True`` without a GPU). The assignments take the batch as sglang's arguments:
``start_offset = start_cols`` (0 where the batch has none), ``end_offset = start_offset + segment length`` wrapping in
the index dtype, ``batch_size`` drawn in ``[0, bs]``. JAX takes int32 indices (its default, x64 off); ``--x64``
enables x64 in this process and gives it int64. A kernel whose error says it cannot run here is skipped and named.
Exit 0: every result equals the reference; 1: a mismatch, or a kernel raising; 3: no kernel could run.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from kv_canary_arrays.frameworks import cuda_available, installed  # noqa: E402
from shared_spec import errors  # noqa: E402
from shared_spec.arg_specs import hostile_batch  # noqa: E402
from shared_spec.reference import assign_reference, scatter_reference  # noqa: E402

GEOMETRIES = ((8, 1, 6, 5), (24, 200, 16, 800), (4, 7, 3, 1), (6, 3000, 5, 20000))  # rows, width, bs, tokens
GUARD, MARGIN = -0x5A5A5A5A, 3
LAYOUTS = {  # name: (the parent buffer's shape for a pool of (rows, width), the pool's view of the parent)
    "contiguous": (lambda r, c: (r, c), lambda a: a),
    "column_slice": (lambda r, c: (r, c + 2 * MARGIN), lambda a: a[:, MARGIN:-MARGIN]),
    "every_other_row": (lambda r, c: (2 * r, c), lambda a: a[::2]),
    "transposed": (lambda r, c: (c, r), lambda a: a.T),
}


def batch(i: int, seed: int, dtype):
    """Batch ``i`` as numpy: the scatter's arguments, the assignment's, the layout's name."""
    rng = np.random.default_rng([seed, i])
    k = i // 2
    flat_in, offsets, rows, pool, start_cols = hostile_batch(rng, *GEOMETRIES[k % 4], dtype=dtype, windowed=i % 2 == 1)
    start = np.zeros_like(rows) if start_cols is None else start_cols
    with np.errstate(over="ignore"):
        end = (start + np.diff(offsets)).astype(dtype)  # wraps as the index dtype does
    batch_size = int(rng.integers(0, rows.shape[0] + 1))
    scatter = (flat_in, offsets, rows, pool, start_cols)
    assign = (rows, pool, start, end, flat_in, batch_size)
    return scatter, assign, list(LAYOUTS)[(k + k // 4) % 4]


def torch_kernels(dtype_note: list) -> dict:
    """``{name: fn(scatter, assign, layout) -> (got parent, expected parent)}`` of the torch kernels."""
    import torch

    if not cuda_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the first Triton kernel is defined
    from kv_canary_torch import assign_req_to_token_pool_func, launch_scatter_req_token_ids_kernel

    device = "cuda" if cuda_available() else "cpu"

    def placed(pool, expected, layout):
        shape, view = LAYOUTS[layout]
        parent, wanted = np.full(shape(*pool.shape), GUARD, np.int32), np.full(shape(*pool.shape), GUARD, np.int32)
        view(parent)[...], view(wanted)[...] = pool, expected
        tensor = torch.from_numpy(parent).to(device)
        return tensor, view(tensor), wanted

    def tensors(*arrays):
        return [None if a is None else torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in arrays]

    def scatter(s, a, layout):
        flat_in, offsets, rows, pool, start_cols = s
        parent, view, wanted = placed(pool, scatter_reference(*s), layout)
        f, o, r, c = tensors(flat_in, offsets, rows, start_cols)
        launch_scatter_req_token_ids_kernel(flat_in=f, offsets=o, req_pool_indices=r, pool_out=view, start_cols=c,
                                            backend="triton")
        return parent.cpu().numpy(), wanted

    def assign(s, a, layout):
        rows, table, start, end, loc, batch_size = a
        parent, view, wanted = placed(table, assign_reference(*a), layout)
        r, st, e, lo = tensors(rows, start, end, loc)
        assign_req_to_token_pool_func(r, view, st, e, lo, batch_size, backend="triton")
        return parent.cpu().numpy(), wanted

    dtype_note.append(f"torch on {device}, int64 indices")
    return {"torch/triton": (scatter, np.int64), "torch/assign": (assign, np.int64)}


def jax_kernels(x64: bool, dtype_note: list) -> dict:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU
    import jax

    if x64:
        jax.config.update("jax_enable_x64", True)  # this tool's process, not the library, turns it on
    from kv_canary_jax import assign_req_to_token_pool, scatter_req_token_ids

    interpret = jax.default_backend() != "gpu"
    dtype = np.int64 if x64 else np.int32
    dtype_note.append(f"JAX on {jax.default_backend()}{' (interpreted)' * interpret}, {np.dtype(dtype).name} indices")

    def scatter(implementation):
        def call(s, a, layout):
            flat_in, offsets, rows, pool, start_cols = s
            got = scatter_req_token_ids(flat_in, offsets, rows, pool, start_cols=start_cols,
                                        implementation=implementation, interpret=interpret)
            return np.asarray(got), scatter_reference(*s)
        return call, dtype

    def assign(implementation):
        def call(s, a, layout):
            rows, table, start, end, loc, batch_size = a
            got = assign_req_to_token_pool(rows, table, start, end, loc, batch_size, implementation=implementation,
                                           interpret=interpret)
            return np.asarray(got), assign_reference(*a)
        return call, dtype

    return {"jax/pallas": scatter("pallas"), "jax/mosaic": scatter("mosaic"),
            "jax/assign-pallas": assign("pallas"), "jax/assign-mosaic": assign("mosaic")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=32, help="batches (default 32: every geometry and layout, both ways)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--x64", action="store_true", help="JAX with x64 on and int64 indices")
    ap.add_argument("--kernel", action="append", help="only this kernel (torch/triton, jax/assign-mosaic, ...)")
    args = ap.parse_args(argv)
    notes, skipped, kernels = [], {}, {}
    for frontend, needs, load in (("torch", ("torch", "triton"), lambda: torch_kernels(notes)),
                                  ("jax", ("jax", "jaxlib"), lambda: jax_kernels(args.x64, notes))):
        missing = [m for m in needs if not installed(m)]
        if missing:
            skipped[f"{frontend}/*"] = errors.not_installed(missing)
        elif not args.kernel or any(k.startswith(frontend + "/") for k in args.kernel):
            kernels |= load()
    kernels = {k: v for k, v in kernels.items() if not args.kernel or k in args.kernel}
    counts, failures = dict.fromkeys(kernels, 0), []
    for i in range(args.cases):
        per_dtype = {}
        for name, (call, dtype) in list(kernels.items()):
            if name in skipped:
                continue
            s, a, layout = per_dtype.setdefault(np.dtype(dtype).name, batch(i, args.seed, dtype))
            where = f"{name} batch {i} (geometry {GEOMETRIES[(i // 2) % 4]}, {'windowed' if i % 2 else 'unwindowed'}, {layout})"
            try:
                got, wanted = call(s, a, layout)
            except Exception as error:
                if "cannot run here" in str(error) and not counts[name]:
                    skipped[name] = str(error)
                else:
                    failures.append(f"{where}: raised {type(error).__name__}: {error}")
                continue
            counts[name] += 1
            wrong = np.argwhere(got != wanted)
            if len(wrong):
                r, c = wrong[0]
                failures.append(f"{where}: {len(wrong)} cells differ, first at [{r}, {c}]: "
                                f"expected {wanted[r, c]}, got {got[r, c]}")
    print(f"memcheck: {args.cases} batches; " + ", ".join(f"{n} {c} ran" for n, c in counts.items() if n not in skipped))
    for line in notes:
        print(f"note: {line}")
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    for line in failures:
        print(f"FAIL {line}")
    ran = any(c for n, c in counts.items() if n not in skipped)
    print("OK" if ran and not failures else ("FAILED" if failures else "NOTHING RAN"))
    return 1 if failures else (0 if ran else 3)


if __name__ == "__main__":
    sys.exit(main())
