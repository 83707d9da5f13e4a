"""Where the host time of one ``IncrementalWriter.step`` goes on a GPU: the flat decode step (``lengths=1``, numpy rows
and start_cols) whole and without its launch, and its parts alone (the H2D copy of the kept views, the launch on
them, ``torch.cuda.Event.record`` and ``synchronize``); us host per call, median, a sync before each call.

Run: ``python benchmarks/incremental_parts.py`` (on the CPU the launch is the torch backend and means nothing)."""

import time

import numpy as np
import torch


from kv_canary_torch import IncrementalWriter, incremental as inc
dev = "cuda" if torch.cuda.is_available() else "cpu"
def t(f, n=2000):
    for _ in range(100): f()
    s = []
    for _ in range(n):
        torch.cuda.synchronize() if dev == "cuda" else None
        b = time.perf_counter_ns(); f(); s.append(time.perf_counter_ns() - b)
    return np.median(s) / 1e3
for bs in (64, 256):
    pool = torch.zeros((bs + 1, 40000), dtype=torch.int32, device=dev)
    w = IncrementalWriter(pool, bs, bs, backend="triton" if dev == "cuda" else "torch")
    new, rows, cols = list(range(bs)), np.arange(1, bs + 1), np.arange(bs) + 100
    full = t(lambda: w.step(new, rows, cols, lengths=1))
    d, s, *v = w._views(bs, bs)
    copy = t(lambda: d.copy_(s, non_blocking=True))
    launch = t(lambda: inc.launch_scatter_req_token_ids_kernel(flat_in=v[0], offsets=v[1], req_pool_indices=v[2], pool_out=pool, start_cols=v[3], backend=w.backend))
    ev = torch.cuda.Event() if dev == "cuda" else None
    rec = t(ev.record) if ev else 0.0
    sync = t(ev.synchronize) if ev else 0.0
    real = inc.launch_scatter_req_token_ids_kernel; inc.launch_scatter_req_token_ids_kernel = lambda **k: None
    nolaunch = t(lambda: w.step(new, rows, cols, lengths=1)); inc.launch_scatter_req_token_ids_kernel = real
    print(f"bs={bs} step {full:.1f} | step without launch {nolaunch:.1f} | copy {copy:.1f} launch {launch:.1f} record {rec:.1f} sync {sync:.1f} us host")
