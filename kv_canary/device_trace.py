"""Device-clock figures from a ``jax.profiler`` trace (GPU).

Contract:

- ``trace(run) -> dict | None``: calls ``run()`` under ``jax.profiler.trace``
  and returns the trace as JSON (``{"traceEvents": [...]}``), or None when
  the profiler wrote no trace file (it prints what it found instead).
- ``trace_calls(fn, args, pool, calls)``: the trace of ``calls`` calls
  ``pool = fn(*args, pool)`` (a jitted function threading a donated pool).
- ``load_trace(trace_dir)``: the trace already written to a folder.
- ``device_pids(data)``: the trace's device processes (their names hold
  ``/device:``); every other process is the host.
- ``kernel_events(data, marker)``: ``(start us, duration us)`` of each device
  event whose name contains ``marker`` (the kernels' name: every Pallas kernel
  here is named ``kv_canary_...``), sorted by start.
- ``added_kernel_us(run, without_names, calls)``: the device time per call of
  ``run()`` (which makes ``calls`` calls) spent in kernels whose names are not
  among ``without_names`` (``kernel_names`` of a trace of the same step without
  the op): the op's own kernels' durations in a step, summed, per call. None
  when the profiler wrote no trace.
- ``kernel_names(data)``: the names of every device event of a trace.
- ``chained_device_us(events, chain)``: the device time per application of a
  jitted function that applies the op ``chain`` times in a row, from the
  kernel events of whole calls of it: per call, the end of its last kernel
  minus the end of its first, over ``chain - 1`` (the mean interval between
  consecutive kernels' ends: each kernel's own time plus the device's gap
  before it); the median over calls. None unless the events split into whole
  calls of ``chain`` kernels each.

Why a device clock: ``kv-canary bench``'s chained figure is host wall time
(a blocking call of ``chain`` applications minus one of one application), which
is device time only when the host's per-call work is the same for the two
lowerings compared. XLA runs a Mosaic GPU custom call's FFI prepare and
initialize stages on the host before every execution (about 2 us per kernel on
jax 0.11.2) and a Triton-lowered kernel has none, so the wall figure charges
that host work as if it were device time (docs/performance-notes.md). The
kernels' own timestamps do not.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import statistics
import tempfile


def load_trace(trace_dir: str):
    """The profiler's trace under ``trace_dir`` as JSON (``*.trace.json.gz`` first, else perfetto's), or None."""
    paths = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)
    paths += glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"), recursive=True)
    if not paths:
        print("  no trace file under", trace_dir, os.listdir(trace_dir))
        return None
    with gzip.open(paths[0], "rt") as f:
        return json.load(f)


def trace(run):
    """``run()`` under ``jax.profiler.trace``; the trace as JSON, or None."""
    import jax

    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            run()
        return load_trace(d)


def trace_calls(fn, args, pool, calls: int):
    """The trace (or None) of ``calls`` back-to-back calls ``pool = fn(*args, pool)``, then one wait for the pool."""
    pools = [pool]

    def run():
        for _ in range(calls):
            pools[0] = fn(*args, pools[0])
        pools[0].block_until_ready()

    return trace(run)


def device_pids(data) -> set:
    """The pids of the trace's device processes (named ``/device:...``)."""
    return {
        e["pid"] for e in data.get("traceEvents", [])
        if e.get("ph") == "M" and e.get("name") == "process_name" and "/device:" in str(e["args"].get("name", ""))
    }


def kernel_events(data, marker: str) -> list[tuple[float, float]]:
    """``(start us, duration us)`` of every device event whose name contains ``marker``, sorted by start.

    When none matches, the most frequent device event names are printed
    (kernel names differ between JAX versions and lowerings).
    """
    device_events = _device_events(data)
    events = sorted((float(e["ts"]), float(e["dur"])) for e in device_events if marker in e.get("name", ""))
    if not events:
        names: dict[str, int] = {}
        for e in device_events:
            names[e.get("name", "")] = names.get(e.get("name", ""), 0) + 1
        print("  no device event named", marker, "; frequent ones:", sorted(names.items(), key=lambda x: -x[1])[:12])
    return events


def _device_events(data) -> list[dict]:
    devices = device_pids(data)
    return [e for e in data.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e and e.get("pid") in devices]


def kernel_names(data) -> set:
    """The names of the trace's device events."""
    return {e.get("name", "") for e in _device_events(data)}


def added_kernel_us(run, without_names: set, calls: int) -> float | None:
    """Microseconds per call of the device events of ``run()``'s trace whose names are not in ``without_names``."""
    data = trace(run)
    if data is None:
        return None
    return sum(float(e["dur"]) for e in _device_events(data) if e.get("name", "") not in without_names) / calls


def chained_device_us(events: list[tuple[float, float]], chain: int) -> float | None:
    """Device microseconds per application from the kernel events of whole ``chain``-kernel calls (module docstring)."""
    if chain < 2 or not events or len(events) % chain:
        return None
    per_call = []
    for first in range(0, len(events), chain):
        calls = events[first:first + chain]
        (start0, dur0), (start1, dur1) = calls[0], calls[-1]
        per_call.append(((start1 + dur1) - (start0 + dur0)) / (chain - 1))
    return statistics.median(per_call)
