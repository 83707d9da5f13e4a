"""What one kernel call costs through each Pallas GPU lowering, apart from the kernel (GPU).

    python benchmarks/mosaic_launch_floor.py            # every XLA_FLAGS variant, one subprocess each
    python benchmarks/mosaic_launch_floor.py --one      # this process's XLA_FLAGS only

For the Triton-lowered and the Mosaic GPU lowering, an all but empty kernel (it
rewrites one cell) on a donated int32 pool, timed by ``kv-canary bench``'s chained
method (``jax_chained``: 16 applications in one jit minus one, over 15) and on
the device clock (``jax_device_chained_us``: the same chain's kernels in a
profiler trace): the floor each lowering's calls add per application, on the
host and on the device, whatever the kernel does.
Beside it, the host time of enqueueing one call of the 16-call jit, and for a
few rows the host-side profiler events of that call (what XLA does per
kernel). The same for ``scatter_req_token_ids`` at a few cases. Each
XLA_FLAGS variant runs in its own process (XLA reads the flags once).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "default": "",
    "no-command-buffer": "--xla_gpu_enable_command_buffer=",
}
CASES = ("1x128", "256x2048", "1024x2048")
# Rows whose host-side profiler events are printed (what the host does per call of the 16-call jit).
PROFILE = ("mosaic 256x2048", "pallas 256x2048")


def host_events(fn, args, pool, calls: int = 5, top: int = 25) -> list[str]:
    """The host-side events of ``calls`` calls of ``fn`` in a profiler trace: total and count per name, largest first."""
    from kv_canary import device_trace

    data = device_trace.trace_calls(fn, args, pool, calls)
    if data is None:
        return []
    gpu_pids = device_trace.device_pids(data)
    totals: dict[str, list[float]] = {}
    for e in data["traceEvents"]:
        if e.get("ph") == "X" and "dur" in e and e.get("pid") not in gpu_pids:
            t = totals.setdefault(e["name"][:70], [0.0, 0])
            t[0] += e["dur"]
            t[1] += 1
    # Names starting with "$" are the profiler's own Python frames (starting and stopping the trace).
    rows = sorted(((n, t) for n, t in totals.items() if not n.startswith("$")), key=lambda kv: -kv[1][0])[:top]
    return [f"    {name:70s} {total / calls:9.1f} us/call  x{count / calls:g}/call" for name, (total, count) in rows]


def empty_kernels():
    """``{lowering: apply(f, o, r, pool) -> pool}``: a kernel on the pool that rewrites one cell with its own value."""
    import jax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def triton(f, o, r, pool):
        def body(pool_in, pool_ref):  # one cell rewritten: a kernel XLA cannot drop
            del pool_in
            pool_ref[0, 0] = pool_ref[0, 0]

        return pl.pallas_call(
            body, out_shape=jax.ShapeDtypeStruct(pool.shape, pool.dtype), grid=(1,),
            input_output_aliases={0: 0}, name="kv_canary_empty_triton",
        )(pool)

    def mosaic(f, o, r, pool):
        def write(pool_ref):
            def body(ref):  # one cell rewritten: a kernel Pallas cannot drop
                ref[0, 0] = ref[0, 0]

            pl.kernel(body, out_type=(), mesh=plgpu.Mesh(grid=(1,), grid_names=("x",)), name="kv_canary_empty_mosaic")(pool_ref)

        return pl.run_state(write)(pool)

    return {"pallas-triton empty": triton, "mosaic empty": mosaic}


def one() -> None:
    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    from kv_canary.bench import CHAIN, jax_chained, jax_device_chained_us, make_inputs, parse_case
    from kv_canary_jax import scatter_req_token_ids
    from shared_spec.reference import scatter_reference

    print(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}", flush=True)
    pool0 = np.full((8, 128), -7, np.int32)  # a power-of-two block for the Triton lowering
    args = tuple(jax.device_put(np.zeros(1, np.int64)) for _ in range(3))
    rows = [(name, args, pool0, pool0, apply) for name, apply in empty_kernels().items()]
    for case in CASES:
        bs, seq, ragged, aligned = parse_case(case)
        inputs = make_inputs(bs, seq, ragged, aligned=aligned)
        expected = scatter_reference(*inputs)
        dev = tuple(jax.device_put(x) for x in inputs[:3])
        for impl in ("pallas", "mosaic"):
            def apply(f, o, r, p, impl=impl):
                return scatter_req_token_ids(f, o, r, p, implementation=impl)

            rows.append((f"{impl} {case}", dev, inputs[3], expected, apply))
    for name, a, pool, expected, apply in rows:
        per, fns = jax_chained(apply, a, pool, expected, name)
        p = jax.device_put(pool)
        enqueue = []
        for _ in range(20):
            t = time.perf_counter()
            p = fns[CHAIN](*a, p)
            enqueue.append(time.perf_counter() - t)
            p.block_until_ready()
        median = statistics.median(enqueue)
        device = jax_device_chained_us(fns[CHAIN], a, pool)  # the same chain on the device clock
        device_text = "?" if device is None else f"{device:5.2f}"
        print(f"{name:24s} chained {per * 1e6:7.2f} us/app, device clock {device_text} us/app"
              f" | host enqueue of the 16-call jit {median * 1e6:7.1f} us", flush=True)
        if PROFILE and name in PROFILE:
            print("\n".join(host_events(fns[CHAIN], a, p)), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", action="store_true")
    if ap.parse_args().one:
        sys.path.insert(0, os.path.dirname(__file__))
        one()
        return
    for name, flags in VARIANTS.items():
        print(f"=== {name}", flush=True)
        env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + flags).strip())
        subprocess.run([sys.executable, __file__, "--one"], env=env, check=False, timeout=150)


if __name__ == "__main__":
    main()
