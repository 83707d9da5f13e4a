"""Where the host time of one ``IncrementalWriter.step`` goes: the flat decode step (``lengths=1``, the sampler's list of
ints, numpy rows and start_cols) whole, without its launch, and its parts alone; us per call, the median of
``--calls`` calls timed one by one with ``time.perf_counter_ns``.

    python benchmarks/incremental_parts.py [--calls 10000] [--bs 64 --bs 256]

On a GPU (the pool on CUDA, the launch the Triton backend): a sync before each call, so every step starts with the
stream idle, as a decode loop's does; besides the host figures, *step wall* times the step until the device's
synchronize returns after it (``bench_host.device_sync``, as ``kv-canary bench --incremental`` times its steps); both
again with the writer copying through torch's ``copy_`` rather than the driver's copy. The parts: the H2D copy of a
step's kept views (torch's, and the driver's through the native piece), the launch on them (through the launcher, and
its call path's one C call as the step takes it), ``torch.cuda.Event.record`` on a kept stream, ``Event.synchronize``
of a completed event, ``torch.cuda.current_stream`` and the raw stream id the step reads each call. On the CPU (no
CUDA) the writer runs its ring with fake events (no-op ``record`` and ``synchronize``) and only the step without its
launch is timed: the step's Python and numpy packing and the CPU copy; the GPU-only figures are not printed.
The step's own parts are shown as they run inside it: the tokens list, rows and start_cols into the slot by the
native piece's ``stage_ints`` (GPU), and the way without the piece (*step, Python packing* is the whole step that
way): the list into an ``array("q")`` (``_flat``), one ``_int_array`` (each of rows and start_cols), the three host
copies into the slot; a slot's acquire and release (``_acquire``, ``_release``; an event every ``_FENCE_EVERY``
releases), the kept views' lookup.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from kv_canary import bench_host
from kv_canary_torch import IncrementalWriter
from kv_canary_torch import incremental as inc


class _NoEvent:
    """A fake event for the CPU: the ring runs, nothing waits."""

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass


def median_us(call, calls: int, sync=None) -> float:
    """The median host time of ``call()`` in us over ``calls`` calls (after a tenth as many untimed), ``sync()``
    untimed before each."""
    for _ in range(max(calls // 10, 10)):
        call()
    samples = []
    for _ in range(calls):
        if sync is not None:
            sync()
        begin = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - begin)
    return float(np.median(samples)) / 1e3


def wall_us(call, calls: int) -> float:
    """The median time of ``call()`` until the device is idle after it (a sync before each), in us."""
    sync = bench_host.device_sync(torch, "cuda")

    def timed():
        call()
        sync()

    return median_us(timed, calls, sync)


def parts(bs: int, calls: int, cuda: bool) -> dict:
    """The figures of one ``bs`` (module docstring), by name."""
    device = "cuda" if cuda else "cpu"
    pool = torch.zeros((bs + 1, 2 * bs), dtype=torch.int32, device=device)
    writer = IncrementalWriter(pool, bs, bs, backend="triton" if cuda else "torch",
                               new_event=None if cuda else _NoEvent)
    new, rows = list(range(bs)), np.arange(1, bs + 1, dtype=np.int64)
    cols = np.arange(bs, dtype=np.int64)
    sync = bench_host.device_sync(torch, device) if cuda else None

    def step():
        writer.step(new, rows, cols, lengths=1)

    out = {"step": median_us(step, calls, sync), "step wall": wall_us(step, calls)} if cuda else {}
    if cuda:  # the same step copying through torch's copy_ instead of the driver's (IncrementalWriter's docstring)
        writer._one_device, writer._copy = False, None
        out["step, torch's copy"] = median_us(step, calls, sync)
        out["step wall, torch's copy"] = wall_us(step, calls)
        writer._one_device = True
        # ... and packed in Python (array("q"), numpy copies) instead of by the native piece's stage_ints
        int_stage, inc.launch_dispatch.int_stage = inc.launch_dispatch.int_stage, lambda: None
        writer._stage = None
        try:
            out["step, Python packing"] = median_us(step, calls, sync)
        finally:
            inc.launch_dispatch.int_stage = int_stage
            writer._stage = None
    real = inc.launch_scatter_req_token_ids_kernel
    inc.launch_scatter_req_token_ids_kernel = lambda **kw: None
    try:
        out["step without launch"] = median_us(step, calls, sync)
    finally:
        inc.launch_scatter_req_token_ids_kernel = real
    views = writer._views(0, bs, bs)
    dst, src, flat_in, offsets, rows_in, cols_in = views[:6]
    flat, _ = writer._flat(new)
    out["tokens list -> array('q')"] = median_us(lambda: writer._flat(new), calls)
    out["one _int_array"] = median_us(lambda: inc._int_array(rows), calls)
    raw = writer._stream_id()
    out["acquire + release"] = median_us(lambda: writer._release(writer._acquire(raw), raw), calls, sync)
    out["kept views"] = median_us(lambda: writer._views(0, bs, bs), calls)
    out["three host copies"] = median_us(lambda: (views[7].__setitem__(slice(None), flat),
                                                 np.copyto(views[8], rows), np.copyto(views[9], cols)), calls)
    out["torch's copy"] = median_us(lambda: dst.copy_(src, non_blocking=cuda), calls, sync)
    if cuda:
        from kv_canary_torch.launch import dispatch

        copy, stage = dispatch.device_copy(), dispatch.int_stage()
        if copy is not None:
            out["driver's copy"] = median_us(lambda: copy(*views[10], writer._stream_id()), calls, sync)
        if stage is not None:
            out["stage_ints"] = median_us(lambda: stage(new, rows, cols, *views[11]), calls)
        out["launch"] = median_us(lambda: inc.launch_scatter_req_token_ids_kernel(
            flat_in=flat_in, offsets=offsets, req_pool_indices=rows_in, pool_out=pool, start_cols=cols_in,
            backend=writer.backend), calls, sync)
        out["launch, call path"] = median_us(lambda: dispatch.call_bound(
            writer.backend, flat_in, offsets, rows_in, pool, cols_in), calls, sync)
        event, stream = torch.cuda.Event(), torch.cuda.current_stream()
        out["Event.record(stream)"] = median_us(lambda: event.record(stream), calls, sync)
        out["Event.synchronize (done)"] = median_us(event.synchronize, calls, sync)
        out["current_stream()"] = median_us(torch.cuda.current_stream, calls)
        out["raw stream id"] = median_us(writer._stream_id, calls)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--bs", type=int, action="append")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    print(f"torch {torch.__version__} {torch.cuda.get_device_name() if cuda else 'CPU (fake events, no launch)'}; "
          f"us per call, median of {args.calls}")
    for bs in args.bs or (64, 256):
        figures = parts(bs, args.calls, cuda)
        print(f"bs={bs}: " + " | ".join(f"{name} {value:.2f}" for name, value in figures.items()), flush=True)


if __name__ == "__main__":
    main()
