"""Where the host time of one torch launch goes (GPU): the C call path, or checks, backend choice, the C launcher or Triton's.

    python benchmarks/host_overhead.py

Each line is microseconds per call over CALLS calls with no synchronization
(fewer than the launch queue holds), on a 64 x 512 batch.
"""

from __future__ import annotations

import time

import torch

from kv_canary.bench import make_inputs
from kv_canary_torch import backends, cuda_launch, launch_scatter_req_token_ids_kernel as launch, tensor_meta, triton_launch
from kv_canary_torch.checks import fast_check

CALLS = 500


def per_call(fn) -> float:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / CALLS * 1e6


def main():
    flat_in, offsets, rows, pool = (torch.from_numpy(x).cuda() for x in make_inputs(64, 512, False))
    kwargs = dict(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool)
    launch(**kwargs)  # compiles the kernel and binds the shape to the C launcher
    triton_launch.settle()  # the C++ tensor reader, loaded in the background (built the first time)
    print(f"tensor reader: {'loaded' if isinstance(triton_launch._signature('auto', *kwargs.values()), bytes) else 'not loaded'}"
          f" ({tensor_meta.unavailable_reason()})")
    print(f"fast path entries: {list(triton_launch._fast.compiled)}  disabled: {triton_launch._fast.disabled}")
    print(f"C launcher: {len(triton_launch._bound)} bound launches; unavailable: {cuda_launch.unavailable_reason()}")
    rows_out = {
        "launcher (auto)": lambda: launch(**kwargs),
        "launcher (triton)": lambda: launch(**kwargs, backend="triton"),
        "fast_check": lambda: fast_check(flat_in, offsets, rows, pool),
        "backends.resolve": lambda: backends.resolve("auto", pool),
        "triton_launch.launch": lambda: triton_launch.launch(flat_in, offsets, rows, pool),
        "torch.cuda.current_device": torch.cuda.current_device,
        "raw stream": lambda: triton_launch._raw_stream(0),
        "hooks idle": triton_launch._hooks_idle,
        "pool.add_(0) (one torch op)": lambda: pool.add_(0),
    }
    # The launch's own plan (whichever Triton kernel it chose), its compiled kernel called as the fast path calls it.
    plan = next(p for k, p in triton_launch._plans.items() if k[:2] == (rows.shape[0], flat_in.shape[0]))
    compiled = triton_launch._fast.compiled.get(plan.variant)
    if compiled is not None:
        pointers = (flat_in.data_ptr(), offsets.data_ptr(), rows.data_ptr(), pool.data_ptr())
        raw = triton_launch._raw_stream(0)
        rows_out[f"compiled.run alone ({plan.kernel})"] = lambda: compiled.run(
            *plan.grid, 1, raw, compiled.function, compiled.packed_metadata, None, None, None,
            *pointers, *plan.ints, *plan.constexprs,
        )
    if triton_launch._signature is not None:  # the C call path: what the launcher runs for a remembered signature
        rows_out["C call path alone (call_bound)"] = lambda: triton_launch.call_bound("auto", flat_in, offsets, rows, pool)
        rows_out["its signature alone"] = lambda: triton_launch._signature("auto", flat_in, offsets, rows, pool)
    key = next((k for k in triton_launch._bound if k[:2] == (rows.shape[0], flat_in.shape[0])), None)
    if key is not None:
        bound, c_launch = triton_launch._bound[key], triton_launch._fast.c_launch
        raw = triton_launch._raw_stream(0)
        pointers = (flat_in.data_ptr(), offsets.data_ptr(), rows.data_ptr(), pool.data_ptr())
        rows_out["C launch alone (cuda_launch)"] = lambda: c_launch(bound, raw, *pointers)
        rows_out["data_ptr x4"] = lambda: (flat_in.data_ptr(), offsets.data_ptr(), rows.data_ptr(), pool.data_ptr())
    for name, fn in rows_out.items():
        print(f"{name:32s} {per_call(fn):7.2f} us")
    # The launcher without the call path (every call checked in Python, then the C launch), then with the C
    # launcher declined for this kernel: Triton's compiled launcher instead.
    with triton_launch.without_call_path():
        print(f"{'launcher (auto), checked path':32s} {per_call(rows_out['launcher (auto)']):7.2f} us")
    triton_launch._memo.clear()
    triton_launch._bound.clear()
    triton_launch._fast.c_declined.add(plan.variant)
    print(f"{'launcher (auto), no C launcher':32s} {per_call(rows_out['launcher (auto)']):7.2f} us")
    print(f"{'pool.add_(0) (one torch op)':32s} {per_call(rows_out['pool.add_(0) (one torch op)']):7.2f} us")


if __name__ == "__main__":
    main()
