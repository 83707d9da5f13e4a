"""``kv-canary bench --first-call``: what a fresh process's first calls cost, ours against sglang's launcher.

Each launcher runs in a child process of its own (``python -m kv_canary.bench.first_call ours|sglang``) whose caches
are empty folders (``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``): nothing compiled before. The child makes
``CALLS`` calls of ``torch_parts.host_steps("new_n")`` (a new ``len(flat_in)`` every call, the inputs made
beforehand), each timed on the host with no sync between calls (an untimed one every 256, so that CUDA's launch queue
never fills), the first until the device's synchronize after it. It reports the import's seconds, the first call's,
the median of calls 3-50 (``early_us``) and of the second half of the calls (``settled_us``).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CALLS = 1000
LAUNCHERS = ("ours", "sglang")


def child(which: str, device: str = "cuda", calls: int = CALLS) -> dict:
    begin = time.perf_counter()
    import torch

    from kv_canary import baseline
    from kv_canary.bench import timing, torch_parts
    from kv_canary_torch import launch_scatter_req_token_ids_kernel

    import_s = time.perf_counter() - begin
    steps = [torch_parts.on_device(torch, *step[:3], device=device) for step in torch_parts.host_steps("new_n", calls)]
    pool = torch.full(torch_parts.HOST_POOL, torch_parts.SENTINEL, dtype=torch.int32, device=device)
    if which == "ours":
        def call(f, o, r):
            launch_scatter_req_token_ids_kernel(flat_in=f, offsets=o, req_pool_indices=r, pool_out=pool)
    else:
        def call(f, o, r):
            baseline.sglang_launcher(f, o, r, pool)
    sync, clock, times = timing.device_sync(torch, device), time.perf_counter_ns, []
    sync()
    for i, step in enumerate(steps):
        begin_ns = clock()
        call(*step)
        if i == 0:
            sync()
        times.append(clock() - begin_ns)
        if i % 256 == 255:
            sync()
    sync()
    return {"import_s": import_s, "first_call_s": times[0] / 1e9, "early_us": statistics.median(times[2:50]) / 1e3,
            "settled_us": statistics.median(times[calls // 2:]) / 1e3}


def first_call(say) -> dict:
    figures = {}
    for which in LAUNCHERS:
        with tempfile.TemporaryDirectory() as empty:
            env = dict(os.environ, **{name: os.path.join(empty, name.lower()) for name in
                                      ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")})
            done = subprocess.run([sys.executable, "-m", "kv_canary.bench.first_call", which], env=env,
                                  stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the first-call child of {which} failed (exit {done.returncode}; its stderr above)")
        figures[which] = json.loads(done.stdout)
        f = figures[which]
        say(f"first call {which}: {f['first_call_s']:.2f} s, calls 3-50 {f['early_us']:.1f} us, "
            f"settled {f['settled_us']:.1f} us")
    return figures


if __name__ == "__main__":
    with contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON alone
        found = child(sys.argv[1])
    print(json.dumps(found))
