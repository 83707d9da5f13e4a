"""``kv-canary bench``: device and host time of every backend over sglang's grid (needs a GPU).

Inputs are built as in sglang's benchmark: a pool of ``max(bs + 1, 4)`` rows by
``seq + 1`` columns, rows ``1..bs``, random token ids; ragged batches draw each
length uniformly from ``[1, seq]``. The scatter moves 12 bytes per token (8
read, 4 written), so the floor is ``12 * tokens / copy bandwidth``, with the
copy bandwidth measured in the same run.

Methods (one GPU, nothing else running):
- torch device time, flushed (``flushed_us``): one launcher call between CUDA
  events, the L2 flushed just before it as ``triton.testing.do_bench`` flushes
  it; the Triton kernel, the per-request-tile baseline, a copy of the same
  bytes and an empty Triton kernel take turns call by call, so that a drift of
  the machine hits all four alike, over ``ROUNDS`` rounds; the two kernels
  write the same pool in a round and a fresh one each round, so that where a
  pool lies in memory favours neither (``KernelRuns``); each figure is the
  median over all its calls. The torch-vectorized backend is one ``do_bench``
  run.
- torch host time: ``kv_canary.bench_host``, the launcher called as a
  serving runtime calls it (a new ``len(flat_in)`` every call, ``bs`` and
  ``N`` changing, a repeated shape), beside one eager torch op and sglang's
  way of launching: the first table.
- JAX chained time: one jitted function that applies the op ``CHAIN`` times
  in a row (unrolled, so no loop overhead), minus the same with one
  application, divided by ``CHAIN - 1``; median over repeats. Host wall time:
  it holds whatever the host does per application inside one call.
- JAX device time (the Pallas kernels): the same ``CHAIN``-application
  function under ``jax.profiler``, on the device clock: per call, the end of
  the last kernel minus the end of the first, over ``CHAIN - 1``; median over
  5 calls (``kv_canary.device_trace``). The two lowerings differ in host work
  per kernel (XLA runs the Mosaic GPU custom call's prepare and initialize
  stages on the host at every call, about 2 us per kernel on jax 0.11.2), so
  this figure, not the chained one, compares their device time like for like;
  'mosaic / pallas' is its ratio, 'mosaic / pallas chained' the wall one's;
  'pallas host us/app' and 'mosaic host us/app' are the chained figure minus
  this one: the host's work per application that the device clock does not see.
- JAX figures come from a child process that imports no torch
  (``jax_in_own_process``), run before the torch ones.
- JAX wall time: per call of a jitted, pool-donating function, median of 5
  rounds of back-to-back calls (``WALL_CALLS`` in all), next to the same for a
  jitted function that only returns the donated pool (the dispatch floor).
- torch chained time (``chained_us``), of the Triton kernel and of the
  per-request-tile baseline: ``CHAIN`` launches captured in one CUDA graph,
  replayed, minus one launch, over ``CHAIN - 1``, each replay timed by CUDA
  events, the two kernels' replays taking turns: the same method as the JAX
  figure (no flush between launches), so Pallas and Triton compare like for
  like, and the regime of a captured serving step (inputs warm in L2 where
  they fit), beside the flushed one.

On a TPU (JAX's default platform; ``run_tpu``) there is no torch or Triton to
time: the JAX device and wall times of ``mosaic_tpu`` and ``xla`` over the same
cases, with the same methods, against a floor of ``TPU_BYTES_PER_TOKEN`` bytes
per token at the chip's HBM bandwidth (``tpu_bandwidth``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import platform
import re
import statistics
import subprocess
import sys
import time

import numpy as np

from kv_canary import bench_markdown

# sglang's skewed workloads (its benchmark file for this kernel, ``benchmark_skewed``), by name: (bs, the
# requests' lengths other than 0-3 tokens drawn uniformly, by position, or None: every request MEDIUM tokens).
# In every one the pool is bs + 1 rows by the longest length plus 1.
SKEWED = {
    "one_long_among_short_bs256": (256, {128: 32768}),
    "one_long_among_short_bs64": (64, {32: 32768}),
    "few_long_among_short_bs256": (256, {i: 16384 for i in range(0, 256, 64)}),
    "many_medium_bs256": (256, None),
}
MEDIUM = 64
# (bs, seq, ragged, aligned): sglang's grid, then the larger and ragged cases, all
# with rows seq + 1 wide as in sglang's benchmark; then two pools whose rows are
# seq wide, a multiple of 128 (every row starts 16-byte aligned); then sglang's
# skewed workloads, ``ragged`` naming one of SKEWED and ``seq`` its longest length.
CASES = (
    [(bs, seq, False, False) for bs in (1, 8, 64, 256) for seq in (128, 512, 2048, 8192)]
    + [(256, 32768, False, False), (1024, 2048, False, False), (4096, 512, False, False)]
    + [(256, 8192, True, False), (64, 32768, True, False)]
    + [(256, 32768, False, True), (4096, 4096, False, True)]
    + [(bs, max(long.values()) if long else MEDIUM, name, False) for name, (bs, long) in SKEWED.items()]
)
# sglang's later kernel (per request x 1024-column tile), device us on one H200,
# from the perf anchors measured 2026-11-30 (torch 2.11, triton 3.6).
SGLANG_B_US = {
    (1, 128, False): 5.09, (1, 512, False): 5.22, (1, 2048, False): 4.77, (1, 8192, False): 5.06,
    (8, 128, False): 5.34, (8, 512, False): 10.82, (8, 2048, False): 7.68, (8, 8192, False): 5.89,
    (64, 128, False): 5.15, (64, 512, False): 4.80, (64, 2048, False): 4.93, (64, 8192, False): 6.85,
    (256, 128, False): 5.02, (256, 512, False): 5.86, (256, 2048, False): 7.62, (256, 8192, False): 13.18,
    (256, 32768, False): 33.44, (1024, 2048, False): 13.22, (4096, 512, False): 13.50,
    (256, 8192, True): 8.70, (64, 32768, True): 9.02,
}
BYTES_PER_TOKEN = 12
# On a TPU, per token: XLA's int64 -> int32 conversion reads 8 and writes 4,
# the kernel's DMAs read 4 and write 4 (kv_canary_jax/pallas_mosaic_tpu.py).
TPU_BYTES_PER_TOKEN = 20
TPU_IMPLEMENTATIONS = ("mosaic_tpu", "xla")
CHAIN = 16
CHAINED_REPLAYS = 100  # timed replays of each graph of the torch chained figures
# Interleaved rounds of the torch device figures (kernel, baseline, copy, empty kernel).
ROUNDS = 5
# The JAX implementations that run one kernel per application, all named kv_canary_...
# (the device-clock chained figure counts their kernels in a profiler trace).
DEVICE_CLOCK_IMPLEMENTATIONS = ("pallas", "mosaic")
KERNEL_MARKER = "kv_canary"
WALL_CALLS = 200


CASE_FORMS = ("BSxSEQ, optionally suffixed r (ragged lengths) and a (rows SEQ wide), such as 256x8192 or 64x32768r, "
              "or a skewed workload: " + ", ".join(SKEWED))


def parse_case(text: str) -> tuple:
    """``"256x8192"`` -> ``(bs, seq, ragged, aligned)``: suffix ``r`` ragged lengths, ``a`` rows ``seq`` wide instead of ``seq + 1``;
    a name of ``SKEWED`` -> that workload's case. Anything else (or a size of 0) raises ValueError naming ``CASE_FORMS``."""
    if text in SKEWED:
        return next(case for case in CASES if case[2] == text)
    match = re.fullmatch(r"([1-9][0-9]*)x([1-9][0-9]*)(r?)(a?)", text)
    if match is None:
        raise ValueError(f"{text!r} is not a case: {CASE_FORMS}")
    return int(match[1]), int(match[2]), bool(match[3]), bool(match[4])


def make_inputs(bs: int, seq: int, ragged, seed: int = 0, aligned: bool = False):
    """numpy ``(flat_in, offsets, req_pool_indices, pool_out)`` as in sglang's benchmark.

    The pool is ``seq + 1`` columns wide as in sglang's benchmark, or ``seq``
    wide with ``aligned`` (rows whose width is a multiple of 128 for the
    benchmark's sizes: every row starts 16-byte aligned). ``ragged``: False,
    True (lengths uniform in ``[1, seq]``) or a name of ``SKEWED``."""
    rng = np.random.default_rng(seed)
    if isinstance(ragged, str):
        _, long = SKEWED[ragged]
        lengths = rng.integers(0, 3, size=bs, endpoint=True) if long else np.full(bs, MEDIUM)
        for position, length in (long or {}).items():
            lengths[position] = length
    else:
        lengths = rng.integers(1, seq, size=bs, endpoint=True) if ragged else np.full(bs, seq)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat_in = rng.integers(0, 2**31 - 1, size=int(offsets[-1]), dtype=np.int64)
    rows = np.arange(1, bs + 1, dtype=np.int64)
    pool = np.full((max(bs + 1, 4), seq if aligned else seq + 1), -7, dtype=np.int32)
    return flat_in, offsets, rows, pool


@dataclasses.dataclass
class Row:
    bs: int
    seq: int
    ragged: bool | str  # a name of SKEWED for sglang's skewed workloads
    width: int  # the pool's columns: seq + 1, or seq for an aligned case
    tokens: int
    floor_us: float
    results: dict  # measure name -> microseconds (or percent for *_pct)


def copy_bandwidth(torch, triton) -> float:
    """Bytes per second of a 1 GiB device-to-device copy, counting read + write."""
    src = torch.empty(2**28, dtype=torch.int32, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
    return 2 * src.numel() * 4 / (ms * 1e-3)


class KernelRuns:
    """The launcher's Triton kernel and the per-request-tile baseline on one case's tensors, writing one pool.

    ``next_pool(k)`` moves both to round ``k``'s pool (``rounds`` pools, all held, so each lies elsewhere in
    memory): with the L2 flushed, where one output buffer lay moved one kernel's time by up to 8% on the H200
    (2026-12-01), so that one placement would favour whichever kernel it happens to suit.
    """

    def __init__(self, torch, inputs, rounds: int = ROUNDS):
        from kv_canary.baseline_kernels import launch_per_request_tile
        from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch

        self.flat_in, self.offsets, self.rows, pool = (torch.from_numpy(x).cuda() for x in inputs)
        self._launch, self._baseline = launch, launch_per_request_tile
        self._pools = [pool.clone() for _ in range(rounds)]
        self.pool = self._pools[0]

    def next_pool(self, k: int) -> None:
        self.pool = self._pools[k]

    def ours(self) -> None:
        self._launch(flat_in=self.flat_in, offsets=self.offsets, req_pool_indices=self.rows, pool_out=self.pool,
                     backend="triton")

    def baseline(self) -> None:
        self._baseline(self.flat_in, self.offsets, self.rows, self.pool)


def bench_torch(inputs, expected, measures: dict):
    import torch
    import triton

    from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch

    kernels = KernelRuns(torch, inputs)  # the case's tensors on the GPU, and a pool of each round's
    flat_in, offsets, rows = kernels.flat_in, kernels.offsets, kernels.rows
    outs = {}
    for backend in ("triton", "torch"):
        outs[backend] = out = kernels.pool.clone()  # no kernel has written it yet
        launch(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=out, backend=backend)
        assert np.array_equal(out.cpu().numpy(), expected), f"torch/{backend} disagrees with the reference"
    # The figures the targets compare, taking turns (a drift of the GPU or the host hits
    # them alike): the kernel, the per-request-tile baseline, the same-bytes copy and the
    # empty kernel; the two kernels on a pool of each round's.
    measures |= flushed_us(torch, {
        "torch_triton_us": kernels.ours,
        "per_request_tile_us": kernels.baseline,
        "same_bytes_copy_us": same_bytes_copy(torch, inputs[0].shape[0]),
        "empty_kernel_us": _empty_kernel(torch, triton),
    }, before_round=kernels.next_pool)
    torch_out = outs["torch"]
    measures["torch_torch_us"] = triton.testing.do_bench(
        lambda: launch(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=torch_out, backend="torch"),
        return_mode="median",
    ) * 1e3
    # Chained like the JAX figure (CHAIN launches back to back in one CUDA graph,
    # no flush between them, minus one launch): the like-for-like comparison, and
    # the baseline the same way (a captured serving step's regime, beside the flushed one).
    kernels.next_pool(0)  # one pool for both
    measures |= chained_us(torch, {"torch_triton_chained_us": kernels.ours, "per_request_tile_chained_us": kernels.baseline})


def chained_us(torch, runs: dict, replays: int = CHAINED_REPLAYS) -> dict:
    """``{name: us}``: microseconds per call of each of ``runs`` chained: a CUDA graph of ``CHAIN`` calls minus one of
    1, over ``CHAIN - 1``.

    Each run is called once first (nothing compiles during capture), then both of its graphs are captured. Each
    turn replays every run's two graphs, each replay timed by CUDA events on the stream, the runs starting one
    later each turn (a round of ``interleaved_samples`` per turn); one untimed turn first, then ``replays``; a graph's figure is the median of its replays. No
    flush and no host work between the calls: what a captured serving step sees, the inputs warm in L2 where they
    fit. In turns, so that the state of the machine hits the runs alike: timed one run after the other, at
    kernels of 1-2 us the same run's figure read 0.7 in one run and 1.4 in the next (H200, 2026-12-01).
    """
    for fn in runs.values():
        fn()
    torch.cuda.synchronize()
    graphs = {}
    for name, fn in runs.items():
        for k in (1, CHAIN):
            graphs[name, k] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graphs[name, k]):
                for _ in range(k):
                    fn()
    samples = interleaved_samples({name: name for name in runs},
                                  lambda name: [event_timed(torch, graphs[name, k].replay) for k in (1, CHAIN)],
                                  1 + replays)
    torch.cuda.synchronize()

    def median_ms(turns, i):
        return statistics.median(turn[i][0].elapsed_time(turn[i][1]) for turn in turns[1:])

    return {name: (median_ms(turns, 1) - median_ms(turns, 0)) / (CHAIN - 1) * 1e3 for name, turns in samples.items()}


def _wall(fn, args, calls: int, rounds: int = 5) -> float:
    """Seconds per call of ``fn(*args[:3], pool)`` back to back, the pool threaded through.

    The median over ``rounds`` rounds of ``calls // rounds`` calls each, so one
    stall of the host does not move the figure.
    """
    pool = fn(*args)
    pool.block_until_ready()
    per_round = max(1, calls // rounds)
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(per_round):
            pool = fn(*args[:3], pool)
        pool.block_until_ready()
        samples.append((time.perf_counter() - start) / per_round)
    return statistics.median(samples)


def jax_chained(apply, args, pool, expected, what: str):
    """``(seconds per application, fns)`` of ``apply(flat_in, offsets, rows, pool) -> pool`` by the chained method:
    ``jax_chain``, then ``chained_wall_s``."""
    fns, pools = jax_chain(apply, args, pool, expected, what)
    return chained_wall_s(fns, args, pools), fns


def jax_chain(apply, args, pool, expected, what: str) -> tuple[dict, dict]:
    """``(fns, pools)``: jitted functions applying ``apply`` once and ``CHAIN`` times (unrolled), ``{1: ..., CHAIN:
    ...}``, both donating the pool and compiled, with the pools they returned.

    One application is checked against ``expected`` (``what`` names it in the failure).
    """
    import jax

    def chain(k):
        def run(f, o, r, p):
            for _ in range(k):
                p = apply(f, o, r, p)
            return p

        return jax.jit(run, donate_argnums=3)

    fns = {k: chain(k) for k in (1, CHAIN)}
    pools = {k: fn(*args, jax.device_put(pool)) for k, fn in fns.items()}  # compiles both
    assert np.array_equal(np.asarray(pools[1]), expected), f"{what} disagrees with the reference"
    jax.block_until_ready(pools)
    return fns, pools


def chained_wall_s(fns: dict, args, pools: dict, repeats: int = 30) -> float:
    """Seconds per application: the median over ``repeats`` interleaved rounds of the ``CHAIN`` function's synced
    call minus that of the single one's, over ``CHAIN - 1``; ``pools`` (``jax_chain``'s) threaded through."""
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            start = time.perf_counter()
            pools[k] = fn(*args, pools[k])
            pools[k].block_until_ready()
            times[k].append(time.perf_counter() - start)
    return (statistics.median(times[CHAIN]) - statistics.median(times[1])) / (CHAIN - 1)


def bench_jax(inputs, expected, measures: dict, implementations):
    import jax

    from kv_canary_jax import scatter_req_token_ids

    flat_in, offsets, rows, pool = (jax.device_put(x) for x in inputs)
    floor = jax.jit(lambda f, o, r, p: p, donate_argnums=3)
    measures["jax_dispatch_floor_wall_us"] = _wall(floor, (flat_in, offsets, rows, jax.device_put(inputs[3])), WALL_CALLS) * 1e6
    for impl in implementations:
        per, fns = jax_chained(
            lambda f, o, r, p, impl=impl: scatter_req_token_ids(f, o, r, p, implementation=impl),
            (flat_in, offsets, rows), inputs[3], expected, f"jax/{impl}",
        )
        measures[f"jax_{impl}_us"] = per * 1e6
        measures[f"jax_{impl}_wall_us"] = _wall(fns[1], (flat_in, offsets, rows, jax.device_put(inputs[3])), WALL_CALLS) * 1e6
        if impl in DEVICE_CLOCK_IMPLEMENTATIONS:
            device_us = jax_device_chained_us(fns[CHAIN], (flat_in, offsets, rows), inputs[3])
            if device_us is not None:
                measures[f"jax_{impl}_device_us"] = device_us


def jax_device_chained_us(fn, args, pool, calls: int = 5) -> float | None:
    """Device microseconds per application of the ``CHAIN``-application jit ``fn``, on the device clock.

    ``calls`` calls of ``fn`` under the profiler; from its kernel records, per
    call the end of the last kernel minus the end of the first, over
    ``CHAIN - 1`` (``device_trace.chained_device_us``); None when the trace
    has no whole calls of ``CHAIN`` kernels.
    """
    import jax

    from kv_canary import device_trace

    data = device_trace.trace_calls(fn, args, jax.device_put(pool), calls)
    if data is None:
        return None
    return device_trace.chained_device_us(device_trace.kernel_events(data, KERNEL_MARKER), CHAIN)


def same_bytes_copy(torch, tokens: int, device="cuda"):
    """A call copying the scatter's 12 bytes per token (read 8, write 4) as one copy of 6 bytes per token.

    Timed like the kernel, it is what the L2 flush and the launch floor leave
    for any kernel of this size.
    """
    src = torch.empty(max(1, tokens * 6 // 4), dtype=torch.int32, device=device).random_()
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def interleaved_samples(runs: dict, timer, rounds: int, before_round=None) -> dict:
    """``{name: [timer(run) per round]}``: every round times every run once, each round starting one run later.

    Interleaved so that a drift of the machine hits every run alike, and rotated so that no run always comes
    first or after the same one. ``before_round(k)``, where given, runs before round ``k``.
    """
    names = list(runs)
    samples: dict = {name: [] for name in names}
    for k in range(rounds):
        if before_round is not None:
            before_round(k)
        for name in names[k % len(names):] + names[:k % len(names)]:
            samples[name].append(timer(runs[name]))
    return samples


def interleaved(runs: dict, timer, rounds: int, before_round=None) -> dict:
    """Each run's median of ``timer(run)`` over the rounds of ``interleaved_samples``."""
    samples = interleaved_samples(runs, timer, rounds, before_round)
    return {name: statistics.median(t) for name, t in samples.items()}


FLUSH_BYTES = 256 * 2**20  # what do_bench writes to flush the L2 before each call
FLUSHED_CALLS = 60  # timed calls of each run per round of the flushed figures
FLUSHED_WARMUP = 10  # untimed turns before each round's timed ones


def flushed_us(torch, runs: dict, rounds: int = ROUNDS, before_round=None, calls: int = FLUSHED_CALLS,
               warmup: int = FLUSHED_WARMUP) -> dict:
    """``{name: us}``: each of ``runs``' median over ``rounds * calls`` calls, each timed by CUDA events around it
    with the L2 flushed just before (``FLUSH_BYTES`` written, as ``do_bench`` flushes it), the runs taking turns.

    Each turn calls every run once, starting one run later than the turn before (a round of ``interleaved_samples``
    per turn); each round opens with ``warmup`` untimed turns, and ``before_round(k)``, where given, runs before
    round ``k``. Turns, not a ``do_bench`` run of each: on the H200 (2026-12-01, three runs of ROUNDS interleaved ``do_bench`` rounds at each of 9 cases) the
    difference between the Triton kernel's figure and the baseline's at one case moved by up to 1.1 us from run to
    run, more than the bars it is held to, while over calls taken in turns it moved by 0.1 us or less at 7 of the 9.
    """
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def flushed(fn):
        flush.zero_()
        return event_timed(torch, fn)

    timed: dict = {name: [] for name in runs}
    for k in range(rounds):
        if before_round is not None:
            before_round(k)
        for name, pairs in interleaved_samples(runs, flushed, warmup + calls).items():
            timed[name] += pairs[warmup:]
    torch.cuda.synchronize()
    return {name: statistics.median(start.elapsed_time(end) for start, end in pairs) * 1e3
            for name, pairs in timed.items()}


def event_timed(torch, fn) -> tuple:
    """``(start, end)``: CUDA events recorded on the stream around ``fn()`` (read them after a synchronize)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    return start, end


@functools.cache
def _empty_kernel(torch, triton):
    """A call that launches a Triton kernel doing nothing: the floor of the flushed figures on this machine."""
    @triton.jit
    def empty(x_ptr):
        pass

    x = torch.empty(1, device="cuda")
    return lambda: empty[(1,)](x)


def empty_kernel_us(torch, triton) -> float:
    """The flushed figures' floor on this machine: the median time of a kernel that does nothing (``flushed_us``)."""
    return flushed_us(torch, {"empty": _empty_kernel(torch, triton)})["empty"]


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("torch", "triton", "jax", "jaxlib"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            pass
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        out["gpu"], out["driver"] = (s.strip() for s in smi.splitlines()[0].split(","))
    except (OSError, subprocess.CalledProcessError, ValueError):
        pass
    return out


# Every figure the page shows, (key in a row's results, column title): the tables' columns (kv_canary.bench_markdown).
COLUMNS = tuple(column for _, _, columns in bench_markdown.TABLES for column in columns)


def derived(measures: dict, empty_us: float) -> dict:
    """The ratios the targets are stated in, from one case's measures (same run).

    The empty kernel is the case's own (``measures["empty_kernel_us"]``,
    interleaved with the kernel) where there is one, else ``empty_us``.
    """
    out = {}
    triton = measures.get("torch_triton_us")
    for key, (kernel, base) in {
        "triton_over_copy": ("torch_triton_us", "same_bytes_copy_us"),
        "triton_over_baseline": ("torch_triton_us", "per_request_tile_us"),
        "triton_over_baseline_chained": ("torch_triton_chained_us", "per_request_tile_chained_us"),
    }.items():
        if measures.get(kernel) and measures.get(base):
            out[key] = measures[kernel] / measures[base]
    if triton:
        out["triton_over_empty_us"] = triton - measures.get("empty_kernel_us", empty_us)
    for suffix in ("", "_device"):
        pallas, mosaic = measures.get(f"jax_pallas{suffix}_us"), measures.get(f"jax_mosaic{suffix}_us")
        if pallas and mosaic:
            out[f"mosaic_over_pallas{suffix}"] = mosaic / pallas
            out[f"mosaic_minus_pallas{suffix}_us"] = mosaic - pallas
    for impl in DEVICE_CLOCK_IMPLEMENTATIONS:  # chained wall clock minus device clock: host work per application
        chained, device = measures.get(f"jax_{impl}_us"), measures.get(f"jax_{impl}_device_us")
        if chained is not None and device is not None:
            out[f"{impl}_host_us"] = chained - device
    return out


def table_lines(rows: list[Row], columns) -> list[str]:
    """A markdown table of the rows: the case, its floor, then each of ``columns`` some row has."""
    present = [(k, title) for k, title in columns if any(k in r.results for r in rows)]
    head = "| bs | seq | ragged | width | tokens | floor us | " + " | ".join(t for _, t in present) + " |"
    lines = [head, "|" + "---|" * (6 + len(present))]
    for r in rows:
        cells = [f"{r.results[k]:.2f}" if k in r.results else "" for k, _ in present]
        lines.append(
            f"| {r.bs} | {r.seq} | {ragged_label(r.ragged)} | {r.width} | {r.tokens} | {r.floor_us:.2f} | "
            + " | ".join(cells) + " |"
        )
    return lines


def ragged_label(ragged) -> str:
    """A case's ``ragged`` as the tables print it: yes, no, or the skewed workload's name."""
    return ragged if isinstance(ragged, str) else ("yes" if ragged else "no")


def render(rows: list[Row], meta: dict) -> str:
    """docs/performance.md for this run: a table per question (``kv_canary.bench_markdown.document``)."""
    return bench_markdown.document(meta, [dataclasses.asdict(r) for r in rows])


def run(args) -> int:
    import torch
    import triton

    if not torch.cuda.is_available():
        print("kv-canary bench needs a CUDA GPU")
        return 2
    from shared_spec.reference import scatter_reference

    from kv_canary import bench_host

    if args.host:
        return run_host(args)
    selected = selected_cases(args)
    host = None if args.case else bench_host.measure()  # --case: the device-time rows of those cases alone
    jax_rows = {} if args.no_jax else jax_in_own_process(selected)
    bw = copy_bandwidth(torch, triton)
    meta = versions() | {"copy_bw_tbs": bw / 1e12, "empty_kernel_us": empty_kernel_us(torch, triton)}
    if host is not None:
        meta["host"] = host
    rows = []
    for case in selected:
        bs, seq, ragged, aligned = case
        inputs = make_inputs(bs, seq, ragged, aligned=aligned)
        expected = scatter_reference(*inputs)
        tokens = int(inputs[0].shape[0])
        measures: dict = {}
        bench_torch(inputs, expected, measures)
        measures |= jax_rows.get(case, {})
        measures["triton_bw_pct"] = 100 * BYTES_PER_TOKEN * tokens / (measures["torch_triton_us"] * 1e-6) / bw
        if not aligned and (bs, seq, ragged) in SGLANG_B_US:
            measures["sglang_b_us"] = SGLANG_B_US[(bs, seq, ragged)]
        width = inputs[3].shape[1]
        measures |= derived(measures, meta["empty_kernel_us"])
        rows.append(Row(bs, seq, ragged, width, tokens, BYTES_PER_TOKEN * tokens / bw * 1e6, measures))
        progress(f"bs={bs} seq={seq} ragged={ragged} width={width} tokens={tokens}", measures)
    return _output(args, rows, meta, render(rows, meta), "")


def run_host(args) -> int:
    """``kv-canary bench --host``: the serving-pattern host figures alone (``kv_canary.bench_host``)."""
    from kv_canary import bench_host

    host = bench_host.measure()
    meta = versions() | {"host": host}
    return _output(args, [], meta, f"{bench_host.HEADER}\n{bench_host.render(host)}", "# Host time in the serving pattern\n\n")


def jax_in_own_process(cases) -> dict[tuple, dict]:
    """Every case's JAX figures (``bench_jax``), measured in a child process that never imports torch.

    Why a process of its own: on the H200 (jax 0.11.2, torch 2.11), running
    torch's measurements of a case just before its JAX ones in one process
    added 0.16-0.20 us to the device-clock gap before every Mosaic GPU kernel
    of the chain, at every case timed (kernel durations, and the
    Triton-lowered kernel's gaps, unchanged; ``benchmarks/jax_kernel_times.py
    --torch work``). A JAX serving process runs no torch. The child's progress
    and any traceback go to this process's stderr; a failure raises
    RuntimeError.
    """
    command = [sys.executable, "-m", "kv_canary.bench", JAX_CHILD, json.dumps([list(c) for c in cases])]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the JAX measurements failed (exit {done.returncode}); their output is above")
    return {tuple(case): measures for case, measures in json.loads(done.stdout)}


JAX_CHILD = "--jax-cases"


def jax_child(cases) -> None:
    """The child of ``jax_in_own_process``: ``[[case, measures], ...]`` as JSON on stdout."""
    out = []
    for case, _, measures in jax_cases(cases, ("pallas", "mosaic", "xla")):
        out.append([list(case), measures])
        progress("jax bs={} seq={} ragged={} aligned={}".format(*case), measures)
    print(json.dumps(out))


def jax_cases(cases, candidates):
    """``(case, inputs, measures)`` per case, lazily: ``bench_jax`` of the ``candidates`` that run here, in this process.

    Enables x64 for this process first, at once (the command's choice; the
    library never sets it).
    """
    import jax

    jax.config.update("jax_enable_x64", True)
    from kv_canary_jax import available_implementations

    impls = [i for i in candidates if i in available_implementations()]
    return (_jax_case(case, impls) for case in cases)


def _jax_case(case, impls):
    from shared_spec.reference import scatter_reference

    bs, seq, ragged, aligned = case
    inputs = make_inputs(bs, seq, ragged, aligned=aligned)
    measures: dict = {}
    bench_jax(inputs, scatter_reference(*inputs), measures, impls)
    return (bs, seq, ragged, aligned), inputs, measures


def selected_cases(args) -> list[tuple]:
    """``CASES`` (or with ``--case`` those cases, in that order), with ``--quick`` only those of at most 2M tokens."""
    cases = [parse_case(text) for text in args.case] if args.case else CASES
    return [c for c in cases if not args.quick or c[0] * c[1] <= 2**21]


def progress(label: str, measures: dict) -> None:
    """One status line per case on stderr: stdout carries only the table, the JSON or the child's result."""
    print(f"{label}: " + ", ".join(f"{k}={v:.2f}" for k, v in measures.items()), file=sys.stderr, flush=True)


def _output(args, rows: list[Row], meta: dict, table: str, header: str) -> int:
    """The table (or with ``--json`` the rows) on stdout; with ``--write`` the table under ``header`` to a file."""
    if args.json:
        print(json.dumps({"meta": meta, "rows": [dataclasses.asdict(r) for r in rows]}, indent=1))
    else:
        print(table)
    if args.write:  # the step section of the page there is kept: kv-canary bench --step measures it
        bench_markdown.write(args.write, header + table.rstrip("\n") + "\n")
    return 0


# -- TPU ---------------------------------------------------------------------------


def tpu_available() -> bool:
    """Whether JAX computes on a TPU here; JAX is imported only where libtpu is installed.

    (Importing JAX starts its backends, which on a GPU machine would claim GPU
    memory before the torch benchmarks run.)
    """
    import importlib.util

    if importlib.util.find_spec("libtpu") is None:
        return False
    from kv_canary_jax import platforms

    return platforms.default_platform() == platforms.TPU


def tpu_bandwidth() -> float | None:
    """Bytes per second of HBM for one JAX device (all its TensorCores), from Pallas's table of TPU chips; None if unknown."""
    try:
        from jax.experimental.pallas import tpu as pltpu

        info = pltpu.get_tpu_info()  # per TensorCore
        return float(info.mem_bw_bytes_per_second) * info.num_cores
    except Exception:  # a chip the table does not know, or a JAX without it
        return None


TPU_COLUMNS = (
    ("jax_mosaic_tpu_us", "mosaic_tpu us"),
    ("jax_xla_us", "XLA us"),
    ("xla_over_mosaic_tpu", "XLA / mosaic_tpu"),
    ("mosaic_tpu_over_floor", "mosaic_tpu / floor"),
    ("jax_mosaic_tpu_wall_us", "mosaic_tpu wall us"),
    ("jax_xla_wall_us", "XLA wall us"),
    ("jax_dispatch_floor_wall_us", "jit floor wall us"),
)


def run_tpu(args) -> int:
    """``kv-canary bench`` on a TPU: ``mosaic_tpu`` against ``xla`` over ``CASES`` (see the module docstring)."""
    import jax

    cases = jax_cases(selected_cases(args), TPU_IMPLEMENTATIONS)
    bw = tpu_bandwidth()
    meta = versions() | {"device": jax.devices()[0].device_kind, "hbm_bandwidth_tbs": bw and bw / 1e12}
    rows = []
    for (bs, seq, ragged, _), inputs, measures in cases:
        tokens = int(inputs[0].shape[0])
        # The floor: the bytes the kernel and its conversion move, at the chip's HBM bandwidth.
        floor_us = TPU_BYTES_PER_TOKEN * tokens / bw * 1e6 if bw else 0.0
        mosaic_us = measures.get("jax_mosaic_tpu_us")
        if mosaic_us and measures.get("jax_xla_us"):
            measures["xla_over_mosaic_tpu"] = measures["jax_xla_us"] / mosaic_us
        if mosaic_us and floor_us:
            measures["mosaic_tpu_over_floor"] = mosaic_us / floor_us
        rows.append(Row(bs, seq, ragged, int(inputs[3].shape[1]), tokens, floor_us, measures))
        progress(f"bs={bs} seq={seq} ragged={ragged} tokens={tokens}", measures)
    lines = table_lines(rows, TPU_COLUMNS)
    table = f"Machine and versions: {', '.join(f'{k} {v}' for k, v in meta.items())}.\n\n" + "\n".join(lines)
    return _output(args, rows, meta, table, TPU_PERFORMANCE_HEADER)


TPU_PERFORMANCE_HEADER = """# Performance on a TPU

Regenerated by `kv-canary bench --write PATH` on a TPU machine; the method is in
`kv_canary/bench.py`'s docstring. Device times are medians in microseconds (chained
applications in one jit); 'floor' is the 20 bytes per token the TPU kernel and its
int64 -> int32 conversion move, at the chip's HBM bandwidth (Pallas's table of TPU chips).

"""


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == JAX_CHILD:
    jax_child([tuple(c) for c in json.loads(sys.argv[2])])
