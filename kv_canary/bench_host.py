"""The torch launcher's host time as a serving runtime calls it (GPU): ``kv-canary bench --host``, and the first table of ``kv-canary bench``.

sglang calls the launcher once per step, outside its CUDA graphs, with every
live request's token ids: ``len(flat_in)`` changes on every call, ``bs``
whenever requests join or finish; the dtypes and the pool stay. Three
patterns, on a pool of ``POOL`` (int32):

- ``new_n``: every call a new ``len(flat_in)``: ``BS`` requests, each one
  token longer than at the step before, so ``N`` grows by ``BS`` per call;
- ``new_bs_n``: ``bs`` and ``N`` both change every call (``bs`` drawn from
  ``BS_RANGE``, lengths from ``LENGTHS``, never the same ``bs`` twice running);
- ``repeat``: the same shape (the same tensors) every call.

Each call's inputs are made before the timing (``flat_in`` a view of one
buffer, fresh ``offsets`` and ``req_pool_indices`` tensors per step, as a
server's step makes them), so the loop times the call alone. Each call is
timed by ``time.perf_counter_ns``, with no synchronization between calls:
``ROUNDS`` rounds of ``CALLS`` calls (fewer than the launch queue holds, so no
launch waits for the GPU), a sync between rounds; the figures are the median
and the 90th percentile over every call of every round, after a warm-up
round. Timed the same way, interleaved round by round with the launcher:

- ``torch_op``: one eager torch op, ``pool.add_(0)``: the bar;
- ``sglang``: sglang's way of launching (``baseline_kernels.launch_sglang_style``:
  its Python checks, then ``kernel[grid](...)`` of the per-request-tile
  baseline), over the same inputs;
- ``checked``: this launcher with its call path off (``dispatch.without_call_path``):
  every call checked in Python, then Triton's launch: what the call path buys.

One more column comes from a child process, since the switch is read once at
first use: the launcher with ``KV_CANARY_C_LAUNCHER=0`` (no native piece, as
on a machine without a C++ compiler: every call the checked path and
Triton's launch). ``first_call_us``: the median of ``new_n`` minus that of
``repeat``: what a call of a shape never seen before costs over a repeat.

Before timing, every pattern is run once with a check of each call's pool
against ``shared_spec.reference``; a mismatch raises. ``memory``: the
process's resident memory and the launcher's remembered kernels and
signatures before and after ``DISTINCT_SHAPES`` calls, each of a ``len(flat_in)``
not seen before.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

POOL = (300, 8193)
BS = 64
BS_RANGE = (32, 96)
LENGTHS = (16, 400)
CALLS = 400
ROUNDS = 7
DISTINCT_SHAPES = 100_000
PATTERNS = ("new_n", "new_bs_n", "repeat")
CHILD = "--host-child"
SWITCHES = {"no_c_launcher": "KV_CANARY_C_LAUNCHER"}


def steps(pattern: str, count: int, seed: int = 0):
    """``count`` numpy steps ``(flat_in, offsets, req_pool_indices)`` of ``pattern`` (module docstring)."""
    rng = np.random.default_rng(seed)
    out, length, bs = [], int(LENGTHS[0]), BS
    for step in range(count):
        if pattern == "new_n":
            lengths = np.full(BS, length + step)
        elif pattern == "new_bs_n":
            bs = int(rng.integers(*BS_RANGE)) if step == 0 else int(rng.choice([b for b in range(*BS_RANGE) if b != bs]))
            lengths = rng.integers(*LENGTHS, size=bs)
        else:
            lengths = np.full(BS, length)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        rows = rng.permutation(POOL[0])[: lengths.shape[0]].astype(np.int64)
        out.append((int(offsets[-1]), offsets, rows))
    return out


def device_steps(torch, pattern: str, count: int, seed: int = 0, device="cuda"):
    """The steps as tensors on ``device``, ``flat_in`` a view of one buffer of random ids (the views keep it alive)."""
    host = steps(pattern, count, seed)
    most = max(n for n, _, _ in host)
    buffer = torch.randint(0, 2**31 - 1, (most,), dtype=torch.int64, device=device)
    if pattern == "repeat":
        n, offsets, rows = host[0]
        one = (buffer[:n], torch.from_numpy(offsets).to(device), torch.from_numpy(rows).to(device))
        return [one] * count
    return [(buffer[:n], torch.from_numpy(o).to(device), torch.from_numpy(r).to(device)) for n, o, r in host]


def check_pattern(torch, launch, pattern: str, count: int = 24) -> None:
    """Run ``count`` steps of ``pattern`` through ``launch``, each pool against the reference; AssertionError on a mismatch."""
    from shared_spec.reference import scatter_reference

    device = device_steps(torch, pattern, count, seed=1)
    for flat_in, offsets, rows in device:
        pool = torch.full(POOL, -7, dtype=torch.int32, device="cuda")
        launch(flat_in, offsets, rows, pool)
        expected = scatter_reference(flat_in.cpu().numpy(), offsets.cpu().numpy(), rows.cpu().numpy(),
                                     np.full(POOL, -7, dtype=np.int32))
        assert np.array_equal(pool.cpu().numpy(), expected), f"{pattern}: the pool differs from the reference"


def device_sync(torch, device: str):
    """The wait between host rounds and of a step's wall timer: the current device's synchronize itself
    (``torch.cuda.synchronize`` less its Python device guard, which costs microseconds of a timer's own), a no-op
    off CUDA."""
    return getattr(torch._C, "_cuda_synchronize", torch.cuda.synchronize) if device == "cuda" else (lambda: None)


def time_calls(torch, runs: dict, rounds: int = ROUNDS, sync=None) -> dict:
    """``{name: per-call ns}`` of each ``runs[name] = (fn, steps, context)``: ``fn(*step)`` per call, inside
    ``context()`` (a context manager factory, or None) for the whole round; rounds interleaved, after a warm-up round;
    ``sync()`` (default ``torch.cuda.synchronize``) after each run's round."""
    samples = {name: [] for name in runs}
    clock = time.perf_counter_ns
    for r in range(rounds + 1):
        for name, (fn, calls, context) in runs.items():
            times = []
            with context() if context else contextlib.nullcontext():
                for step in calls:
                    start = clock()
                    fn(*step)
                    times.append(clock() - start)
            (sync or torch.cuda.synchronize)()
            if r:  # round 0 warms up
                samples[name] += times
    return samples


def summary(ns: list[int]) -> dict:
    values = sorted(ns)
    return {"median_us": statistics.median(values) / 1e3, "p90_us": values[int(0.9 * (len(values) - 1))] / 1e3}


def measure_launcher(torch, with_baselines: bool) -> dict:
    """Every pattern's figures for this process's launcher (and, with ``with_baselines``, the torch op, sglang's launch and the checked path)."""
    from kv_canary.baseline_kernels import launch_sglang_style
    from kv_canary_torch import launch_scatter_req_token_ids_kernel
    from kv_canary_torch.launch import dispatch

    pool = torch.full(POOL, -7, dtype=torch.int32, device="cuda")

    def ours(flat_in, offsets, rows, out=pool):
        launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=out)

    for pattern in PATTERNS:
        check_pattern(torch, ours, pattern)
        if with_baselines:
            check_pattern(torch, launch_sglang_style, pattern)
    results = {}
    for pattern in PATTERNS:
        calls = device_steps(torch, pattern, CALLS)
        runs = {"launcher": (ours, calls, None)}
        if with_baselines:
            runs |= {"torch_op": (lambda *_: pool.add_(0), calls, None),
                     "sglang": (lambda f, o, r: launch_sglang_style(f, o, r, pool), calls, None),
                     "checked": (ours, calls, dispatch.without_call_path)}
        for name, ns in time_calls(torch, runs).items():
            results[f"{pattern}/{name}"] = summary(ns)
    return results


def memory_over_shapes(torch) -> dict:
    """Resident memory and the launcher's caches before and after ``DISTINCT_SHAPES`` calls of new ``len(flat_in)``."""
    from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch
    from kv_canary_torch.launch import dispatch

    pool = torch.full(POOL, -7, dtype=torch.int32, device="cuda")
    buffer = torch.randint(0, 2**31 - 1, (DISTINCT_SHAPES + 2000,), dtype=torch.int64, device="cuda")
    offsets = torch.arange(BS + 1, device="cuda") * 16
    rows = torch.arange(BS, device="cuda")

    def state():
        torch.cuda.synchronize()
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return {"rss_mb": rss / 2**20, "cuda_mb": torch.cuda.memory_allocated() / 2**20,
                "signatures": len(dispatch._memo), "kernels": len(dispatch._kernels)}

    for n in range(1000, 2000):  # warm-up: every allocation of a steady state made
        launch(flat_in=buffer[:n], offsets=offsets, req_pool_indices=rows, pool_out=pool)
    before = state()
    for n in range(2000, 2000 + DISTINCT_SHAPES):
        launch(flat_in=buffer[:n], offsets=offsets, req_pool_indices=rows, pool_out=pool)
    after = state()
    return {"before": before, "after": after}


def run_child(switch: str) -> dict:
    """``measure_launcher`` in a child process with ``switch`` set to 0 (its results, launcher only)."""
    env = dict(os.environ, **{switch: "0"})
    done = subprocess.run([sys.executable, "-m", "kv_canary.bench_host", CHILD], env=env, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the host child with {switch}=0 failed (exit {done.returncode}); its output is above")
    return json.loads(done.stdout)


def measure() -> dict:
    """Every figure of the module docstring: ``{"patterns": {pattern/what: {median_us, p90_us}}, "memory": ...}``."""
    import torch

    results = measure_launcher(torch, with_baselines=True)
    for label, switch in SWITCHES.items():
        for key, value in run_child(switch).items():
            results[key.replace("/launcher", f"/{label}")] = value
    first = results["new_n/launcher"]["median_us"] - results["repeat/launcher"]["median_us"]
    return {"patterns": results, "first_call_us": first, "memory": memory_over_shapes(torch)}


COLUMNS = (
    ("launcher", "this launcher"),
    ("torch_op", "one torch op (pool.add_(0))"),
    ("sglang", "sglang's launch (kernel[grid])"),
    ("checked", "call path off (checked path, Triton's launch)"),
    ("no_c_launcher", "KV_CANARY_C_LAUNCHER=0"),
)
PATTERN_TITLES = {"new_n": "(a) a new len(flat_in) every call", "new_bs_n": "(b) bs and N change every call",
                  "repeat": "(c) the same shape repeated"}


def render(figures: dict) -> str:
    """The host table (median / p90 us per call) and the first-call and memory lines, as markdown."""
    results = figures["patterns"]
    head = "| pattern | " + " | ".join(title for _, title in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (1 + len(COLUMNS))]
    for pattern in PATTERNS:
        cells = []
        for key, _ in COLUMNS:
            found = results.get(f"{pattern}/{key}")
            cells.append(f"{found['median_us']:.2f} / {found['p90_us']:.2f}" if found else "")
        lines.append(f"| {PATTERN_TITLES[pattern]} | " + " | ".join(cells) + " |")
    before, after = figures["memory"]["before"], figures["memory"]["after"]
    lines += [
        "",
        f"First call of a new shape over a repeat (median of (a) minus median of (c)): {figures['first_call_us']:+.2f} us.",
        f"Over {DISTINCT_SHAPES} calls of distinct len(flat_in): resident memory {before['rss_mb']:.1f} -> "
        f"{after['rss_mb']:.1f} MB, CUDA memory {before['cuda_mb']:.1f} -> {after['cuda_mb']:.1f} MB, remembered "
        f"signatures {before['signatures']} -> {after['signatures']}, compiled kernels {before['kernels']} -> {after['kernels']}.",
    ]
    return "\n".join(lines)


HEADER = f"""Host microseconds per call, median / 90th percentile (`kv_canary/bench_host.py`): pool {POOL[0]} x {POOL[1]},
bs {BS} (pattern (b): {BS_RANGE[0]}-{BS_RANGE[1] - 1}), {ROUNDS} rounds of {CALLS} calls with no sync between calls, rounds interleaved.
"""


if __name__ == "__main__" and sys.argv[1:] == [CHILD]:
    import torch

    print(json.dumps(measure_launcher(torch, with_baselines=False)))
