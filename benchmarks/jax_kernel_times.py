"""Per-kernel device time of the JAX implementations, from the profiler's GPU kernel records (GPU).

    python benchmarks/jax_kernel_times.py [--impl mosaic --impl pallas] [--case 256x8192 ...] [--block 1024 ...]

For each case and implementation: the chained figure of ``kv-canary bench``
(``CHAIN`` applications in one jit, minus one, over ``CHAIN - 1``) and, from a
``jax.profiler`` trace of the chained function, the device-clock figure of
the bench (``kv_canary.device_trace.chained_device_us``), the median duration
of the kernel itself and the median gap between consecutive kernels of the
chain (what XLA's launch path adds on the device). The kernel duration tells
whether a gap is the kernel's or the launch path's.
``--block`` adds Mosaic GPU variants with that tile cap (``scatter(...,
block=)``), ``--stage-batch``, ``--target-programs`` and ``--set`` variants with
those module constants, each also with every ``--block``.
"""

from __future__ import annotations

import argparse
import statistics

from kv_canary import device_trace
from kv_canary.bench import parse_case


DEFAULT_CASES = (
    "1x128", "64x8192", "256x2048", "256x8192", "1024x2048", "4096x512", "256x8192r", "64x32768r", "256x32768",
    "256x32768a", "4096x4096a",
)


def print_sequence(data, marker: str, limit: int = 40) -> None:
    """Print the trace's events (process, thread, name, start, duration) around the first chain: what else runs beside the kernel."""
    names = {}
    for e in data["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            names[(e.get("name"), e.get("pid"), e.get("tid") if e.get("name") == "thread_name" else None)] = e["args"]["name"]
    events = sorted((e for e in data["traceEvents"] if e.get("ph") == "X" and "dur" in e), key=lambda e: e["ts"])
    marked = [e for e in events if marker in e.get("name", "")]
    if not marked:
        return
    t0 = marked[0]["ts"] - 20
    for e in [e for e in events if e["ts"] >= t0][:limit]:
        where = names.get(("process_name", e["pid"], None), e["pid"]), names.get(("thread_name", e["pid"], e.get("tid")), e.get("tid"))
        print(f"    {str(where)[:60]:60s} {e['name'][:70]:70s} t={e['ts'] - t0:9.2f} dur={e['dur']:8.2f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", action="append")
    ap.add_argument("--case", action="append")
    ap.add_argument("--block", action="append", type=int, default=[])
    ap.add_argument("--stage-batch", action="append", type=int, default=[],
                    help="Mosaic GPU variants with this many stores per step of the short-window path (STAGE_BATCH)")
    ap.add_argument("--target-programs", action="append", type=int, default=[],
                    help="Mosaic GPU variants with this TARGET_PROGRAMS (the lanes per request follow from it)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE[,NAME=VALUE...]",
                    help="a Mosaic GPU variant with these module constants (integers) set together, e.g. "
                         "TILE=1024,TARGET_PROGRAMS=8192")
    ap.add_argument("--torch", choices=("none", "init", "work"), default="none",
                    help="torch beside JAX, as in kv-canary bench: 'init' imports torch and starts CUDA in this process; "
                         "'work' also runs the bench's torch measurements of each case just before its JAX ones")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--events", action="store_true", help="print the event sequence around the first chain")
    ap.add_argument("--mark", action="store_true", help="print a line before each variant compiles (to attribute compiler dumps)")
    args = ap.parse_args(argv)
    if args.torch != "none":
        import torch

        torch.empty(1, device="cuda")
    import jax

    jax.config.update("jax_enable_x64", True)
    from kv_canary.bench import CHAIN, KERNEL_MARKER, jax_chained, make_inputs
    from kv_canary_jax import pallas_mosaic_gpu, scatter_req_token_ids
    from shared_spec.reference import scatter_reference

    impls = args.impl or ["pallas", "mosaic"]
    # (implementation, tile cap, {module constant: value}): constants of pallas_mosaic_gpu read when the kernel is traced.
    overrides = [{"STAGE_BATCH": v} for v in args.stage_batch] + [{"TARGET_PROGRAMS": v} for v in args.target_programs]
    overrides += [{name: int(value) for name, value in (item.split("=") for item in text.split(","))} for text in args.set]
    variants = [(i, None, {}) for i in impls]
    variants += [("mosaic", b, o) for o in [{}] + overrides for b in args.block]
    variants += [("mosaic", None, o) for o in overrides]
    defaults = {name: getattr(pallas_mosaic_gpu, name) for o in overrides for name in o}
    print(f"jax {jax.__version__} {jax.devices()[0].device_kind}", flush=True)
    for case in args.case or DEFAULT_CASES:
        bs, seq, ragged, aligned = parse_case(case)
        inputs = make_inputs(bs, seq, ragged, aligned=aligned)
        expected = scatter_reference(*inputs)
        if args.torch == "work":
            from kv_canary.bench import bench_torch

            bench_torch(inputs, expected, {})
        flat_in, offsets, rows = (jax.device_put(x) for x in inputs[:3])
        line = [f"{case:>10s} tok={inputs[0].shape[0]:>8d}"]
        for impl, block, override in variants:
            for name, value in {**defaults, **override}.items():
                setattr(pallas_mosaic_gpu, name, value)

            def apply(f, o, r, p, impl=impl, block=block, direct=block is not None or bool(override)):
                if not direct:  # the library's entry (its jitted inner function is traced once per shape)
                    return scatter_req_token_ids(f, o, r, p, implementation=impl)
                return pallas_mosaic_gpu.scatter(f, o, r, p, block=block)

            if args.mark:
                print(f"# compiling {case} {impl} block={block}", flush=True)
            per, fns = jax_chained(apply, (flat_in, offsets, rows), inputs[3], expected, f"{case} {impl} block={block}")
            chained_us = per * 1e6
            name = impl + ("" if block is None else f"/{block}") + "".join(f"/{k.lower()}={v}" for k, v in override.items())
            cell = f"{name}: chain {chained_us:6.2f}"
            if not args.no_profile:
                data = device_trace.trace_calls(fns[CHAIN], (flat_in, offsets, rows), jax.device_put(inputs[3]), 5)
                events = device_trace.kernel_events(data, KERNEL_MARKER) if data is not None else []
                if args.events and data is not None:
                    print(f"  {case} {impl} block={block}:")
                    print_sequence(data, KERNEL_MARKER)
                if events:
                    durs = [d for _, d in events]
                    gaps = [b[0] - (a[0] + a[1]) for a, b in zip(events, events[1:])]
                    gaps = [g for g in gaps if g < 50]  # within one chain
                    device = device_trace.chained_device_us(events, CHAIN)
                    cell += (f" device {device if device is not None else float('nan'):6.2f}"
                             f" kernel {statistics.median(durs):6.2f} gap {statistics.median(gaps) if gaps else float('nan'):5.2f} (n={len(events)})")
                else:
                    cell += " kernel ? (no events)"
            line.append(cell)
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
