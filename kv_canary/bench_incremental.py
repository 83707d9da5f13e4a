"""``kv-canary bench --incremental``: the windowed write's figures: the serving step, the windowed kernel, its host time.

Contract: ``measure(torch, config) -> dict`` measures the three parts below on ``config.device`` (``FULL``: the GPU
run; ``TINY``: the CPU test's, in Triton's interpreter, where the times mean nothing but every pool is checked);
``render(figures) -> str`` is their markdown, three tables to paste into docs/performance.md; ``run(args) -> int`` is
the command (markdown, or with ``--json`` one JSON object, on stdout; progress on stderr). Every pool a part writes is
compared with ``shared_spec.reference.scatter_reference`` after its timing; a mismatch raises AssertionError.

1. The serving step (``steps``). Per size (``bs`` requests x ``context`` tokens each), three steps of a decode loop
   take turns (``bench.interleaved_samples``: ``rounds`` rounds, each running every step ``warmup + calls`` times,
   the order rotated by one each round); each has a pool ``bs + 1`` rows by ``context + `` the steps' count wide, rows
   ``1..bs`` holding the requests' tokens so far, and a request state of its own: every request's token ids (numpy
   int64, the cheap form of a runtime's per-request lists) and lengths, starting at ``context``. Before each step the
   sampler's output, one new token per request as a Python list of ints, is appended to the state (untimed: the
   runtime's own work); then the step is timed: *host* until it returns, *wall* until the device's synchronize
   (``torch._C._cuda_synchronize``: ``torch.cuda.synchronize`` without its Python device guard) returns after it (a
   sync after every step, so no step overlaps the next); each figure the median over every timed step of every
   round. An empty step (``empty``) takes its turns too: its wall is the timer's own cost, in every step's wall.
   - ``full_pageable``, ``full_pinned``: sglang's full-snapshot step (``_populate_expected_token_pool``): a host
     snapshot of every request's whole token ids (one ``np.concatenate``; pageable: a new array, pinned: into one
     reused page-locked ``flat_in``), the lengths' cumulative sum into a new pinned offsets tensor (``.item()`` for the
     total), ``non_blocking`` H2D copies of both, ``req_pool_indices`` (on the device) as int64, one launch. The
     snapshot's own host time is reported too (``snapshot_us``; ``pinned_unbuilt_over_incremental``: the pinned step
     less it, over the incremental step: the comparison where the runtime holds the snapshot already built).
   - ``incremental``: ``kv_canary_torch.IncrementalWriter.step`` of the new tokens in the flat form (the sampler's
     list, ``lengths=1``; rows a numpy array) at ``start_cols`` = each request's length before the token (its host
     lengths array): one packed slot of a pinned ring, one H2D copy, one launch (an event every 4 steps).
2. The windowed Triton kernel (``windowed``), on ``kv_canary.bench.make_inputs``' tensors of each case: the unwindowed
   launch, the windowed one with ``start_cols`` all 0 (the same cells) and with an append position per request
   (``append_columns``: a column in ``[0, C - length]``, so every token is still written: the same bytes), all through
   the launcher with ``backend="triton"``, each on a pool of its own per round; timed flushed and chained by
   ``kv_canary.bench``'s ``flushed_us`` and ``chained_us`` (the runs taking turns), with the ratios and differences
   over the unwindowed figure.
3. Host time with ``start_cols`` in the serving pattern (``host``): ``kv_canary.bench_host``'s three patterns (a new
   ``len(flat_in)`` every call; ``bs`` and ``N`` changing; a repeat), its per-call timer and rounds
   (``bench_host.time_calls``), the launcher without ``start_cols``, with it (a fresh int64 tensor of append positions
   per step, as a server makes it) and one eager torch op (``pool.add_(0)``), interleaved in the same run.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time

import numpy as np

from kv_canary import bench, bench_host, bench_markdown

SENTINEL = -7  # what a pool holds where nothing was written
STEP_SIZES = tuple((bs, context) for bs in (64, 256) for context in (2048, 8192, 32768))
# bench.py's grid cases of 256K tokens and more (rows seq + 1 wide, so an append position can move each window), and a
# few small ones where launch cost dominates.
WINDOW_CASES = tuple(case for case in bench.CASES if case[0] * case[1] >= 2**18 and case[2] in (False, True) and not case[3])
SMALL_WINDOW_CASES = ((1, 128, False, False), (8, 2048, False, False), (64, 512, False, False), (256, 512, False, False))


@dataclasses.dataclass(frozen=True)
class Config:
    """What ``measure`` runs: the sizes and cases, the rounds of each part, the device and the kernels' backend."""

    device: str = "cuda"
    backend: str = "triton"
    step_sizes: tuple = STEP_SIZES
    step_rounds: int = 5
    step_calls: int = 20
    step_warmup: int = 3
    window_cases: tuple = SMALL_WINDOW_CASES + WINDOW_CASES
    window_rounds: int = bench.ROUNDS
    host_calls: int = bench_host.CALLS
    host_rounds: int = bench_host.ROUNDS


FULL = Config()
# The CPU test's: Triton's interpreter, sizes it steps through in seconds.
TINY = Config(device="cpu", step_sizes=((3, 16), (2, 40)), step_rounds=2, step_calls=2, step_warmup=1,
              window_cases=((3, 16, False, False), (4, 24, True, False)), window_rounds=2, host_calls=3, host_rounds=1)


def append_columns(offsets, width: int, seed: int = 0) -> np.ndarray:
    """int64 ``[bs]``: per request a column in ``[0, width - length]`` (0 where the request fills the row or more):
    an append position at which the whole request is still written."""
    lengths = np.diff(np.asarray(offsets, dtype=np.int64))
    room = np.maximum(width - lengths, 0)
    return np.random.default_rng(seed).integers(0, room, endpoint=True).astype(np.int64)


# -- 1. the serving step -------------------------------------------------------------


class Requests:
    """A runtime's live requests: every request's token ids so far (rows of ``tokens``) and their lengths.

    ``tokens`` holds each request's whole future (context, then the tokens the sampler will give), shared by the
    steps' states; a state's ``lengths`` say how much of it the runtime has. ``advance()`` is the runtime's decode
    bookkeeping: the sampler's output as a Python list of ints, appended (``previous``: the lengths before it).
    """

    def __init__(self, tokens: np.ndarray, context: int):
        self.tokens = tokens
        self.lengths = np.full(tokens.shape[0], context, dtype=np.int64)
        self.previous = self.lengths.copy()

    def advance(self) -> list:
        new = self.tokens[np.arange(self.tokens.shape[0]), self.lengths].tolist()
        self.previous = self.lengths.copy()
        self.lengths += 1
        return new

    def snapshot_views(self) -> list:
        return [row[:n] for row, n in zip(self.tokens, self.lengths.tolist())]


class FullSnapshotStep:
    """sglang's full-snapshot step (module docstring), ``pinned``: the snapshot into one reused page-locked buffer.

    ``snapshot_ns``: how long the last call took to build the snapshot (the host work before the cumulative sum).
    """

    snapshot_ns = None

    def __init__(self, torch, pool, rows, pinned: bool, capacity: int, backend: str):
        from kv_canary_torch import launch_scatter_req_token_ids_kernel

        self.torch, self.pool, self.rows, self.backend = torch, pool, rows, backend
        self.launch = launch_scatter_req_token_ids_kernel
        self.page_locked = pool.is_cuda  # page-locked memory needs CUDA
        self.flat = torch.empty(capacity, dtype=torch.int64, pin_memory=self.page_locked) if pinned else None

    def __call__(self, requests: Requests, new: list) -> None:
        torch, device = self.torch, self.pool.device
        begin = time.perf_counter_ns()
        views = requests.snapshot_views()
        if self.flat is None:
            flat_cpu = torch.from_numpy(np.concatenate(views))
        else:
            flat_cpu = self.flat[: int(requests.lengths.sum())]
            np.concatenate(views, out=flat_cpu.numpy())
        self.snapshot_ns = time.perf_counter_ns() - begin
        lens_cpu = torch.from_numpy(requests.lengths)
        bs = lens_cpu.shape[0]
        offsets_cpu = torch.zeros(bs + 1, dtype=torch.int64, pin_memory=self.page_locked)
        offsets_cpu[1:] = torch.cumsum(lens_cpu, dim=0)
        if int(offsets_cpu[bs].item()) != flat_cpu.shape[0]:
            raise AssertionError("the snapshot's lengths and tokens disagree")
        self.launch(flat_in=flat_cpu.to(device, non_blocking=True), offsets=offsets_cpu.to(device, non_blocking=True),
                    req_pool_indices=self.rows.to(device=device, dtype=torch.int64), pool_out=self.pool,
                    backend=self.backend)


class IncrementalStep:
    """The incremental step: each request's new token at its length before it, one ``IncrementalWriter`` step.

    Called as a runtime calls it: the sampler's output as it comes (a flat list of ints, one per request) in the flat
    form (``lengths=1``: no per-request lists, offsets without a cumulative sum); rows and start_cols as numpy int64
    arrays, the form a runtime keeps its request slots and lengths in (sglang's ``seq_lens_cpu`` is a CPU tensor, as
    cheap): one copy each, where a list costs a conversion per element.
    """

    def __init__(self, pool, bs: int, backend: str):
        from kv_canary_torch import IncrementalWriter

        self.writer = IncrementalWriter(pool, max_requests=bs, max_new_tokens=bs, backend=backend)
        self.rows = np.arange(1, bs + 1, dtype=np.int64)

    def __call__(self, requests: Requests, new: list) -> None:
        self.writer.step(new, self.rows, requests.previous, lengths=1)


def step_figures(torch, bs: int, context: int, config: Config) -> dict:
    """One size's step figures (module docstring, part 1): ``{step: {host_us, wall_us, ...}}`` and the ratio."""
    from shared_spec.reference import scatter_reference

    steps_each = config.step_rounds * (config.step_warmup + config.step_calls)
    width = context + steps_each
    rng = np.random.default_rng(bs * context)
    tokens = rng.integers(0, 2**31 - 1, size=(bs, width), dtype=np.int64)
    start = np.full((bs + 1, width), SENTINEL, dtype=np.int32)
    start[1:, :context] = tokens[:, :context]
    rows = torch.arange(1, bs + 1, dtype=torch.int64, device=config.device)

    def pool():
        return torch.from_numpy(start.copy()).to(config.device)

    runs = {}
    for name, make in (("full_pageable", lambda p: FullSnapshotStep(torch, p, rows, False, bs * width, config.backend)),
                       ("full_pinned", lambda p: FullSnapshotStep(torch, p, rows, True, bs * width, config.backend)),
                       ("incremental", lambda p: IncrementalStep(p, bs, config.backend))):
        out = pool()
        runs[name] = (make(out), Requests(tokens, context), out)
    runs["empty"] = (lambda requests, new: None, Requests(tokens, context), None)  # the timer's own cost
    sync, clock = bench_host.device_sync(torch, config.device), time.perf_counter_ns

    def timed(run):
        step, requests, _ = run
        out = []
        for _ in range(config.step_warmup + config.step_calls):
            new = requests.advance()
            begin = clock()
            step(requests, new)
            returned = clock()
            sync()
            out.append((returned - begin, clock() - begin, getattr(step, "snapshot_ns", None)))
        return out[config.step_warmup:]

    samples = bench.interleaved_samples(runs, timed, config.step_rounds)
    figures = {}
    for name, (_, requests, out) in runs.items():
        if out is not None:
            lengths = requests.lengths
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            expected = scatter_reference(np.concatenate(requests.snapshot_views()), offsets, np.arange(1, bs + 1), start)
            assert np.array_equal(out.cpu().numpy(), expected), f"step {name} at {bs}x{context}: the pool differs from the reference"
        host, wall, snapshot = ([timed_[i] for round_ in samples[name] for timed_ in round_] for i in (0, 1, 2))
        host, wall = bench_host.summary(host), bench_host.summary(wall)
        figures[name] = {"wall_us": wall["median_us"], "wall_p90_us": wall["p90_us"],
                         "host_us": host["median_us"], "host_p90_us": host["p90_us"]}
        if snapshot[0] is not None:
            figures[name]["snapshot_us"] = bench_host.summary(snapshot)["median_us"]
    figures["pinned_over_incremental"] = figures["full_pinned"]["wall_us"] / figures["incremental"]["wall_us"]
    figures["pageable_over_incremental"] = figures["full_pageable"]["wall_us"] / figures["incremental"]["wall_us"]
    # The pinned step were its snapshot already built (sglang's _populate_expected_token_pool alone): wall minus snapshot.
    figures["pinned_unbuilt_over_incremental"] = (
        (figures["full_pinned"]["wall_us"] - figures["full_pinned"]["snapshot_us"]) / figures["incremental"]["wall_us"])
    return {"bs": bs, "context": context, "snapshot_tokens": bs * context} | figures


# -- 2. the windowed kernel -----------------------------------------------------------


WINDOWINGS = ("unwindowed", "zeros", "append")


def window_figures(torch, case, config: Config, flushed=None, chained=None) -> dict:
    """One case's kernel figures (module docstring, part 2); ``flushed``/``chained``: the timers (``bench``'s)."""
    from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch
    from shared_spec.reference import scatter_reference

    flushed, chained = flushed or bench.flushed_us, chained or bench.chained_us
    bs, seq, ragged, aligned = case
    inputs = bench.make_inputs(bs, seq, ragged, aligned=aligned)
    flat_in, offsets, rows, pool = (torch.from_numpy(x).to(config.device) for x in inputs)
    width = inputs[3].shape[1]
    columns = {"unwindowed": None, "zeros": np.zeros(bs, dtype=np.int64), "append": append_columns(inputs[1], width)}
    device_columns = {name: None if c is None else torch.from_numpy(c).to(config.device) for name, c in columns.items()}
    pools = {name: [pool.clone() for _ in range(config.window_rounds)] for name in WINDOWINGS}
    current = {name: pools[name][0] for name in WINDOWINGS}

    def next_pool(k):
        for name in WINDOWINGS:
            current[name] = pools[name][k]

    def call(name):
        return lambda: launch(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=current[name],
                              start_cols=device_columns[name], backend=config.backend)

    runs = {name: call(name) for name in WINDOWINGS}
    figures = {f"{name}_us": us for name, us in flushed(torch, runs, rounds=config.window_rounds, before_round=next_pool).items()}
    next_pool(0)
    figures |= {f"{name}_chained_us": us for name, us in chained(torch, runs).items()}
    for name in WINDOWINGS:
        expected = scatter_reference(*inputs, columns[name])
        for k, written in enumerate(pools[name]):
            assert np.array_equal(written.cpu().numpy(), expected), f"{name} at {case}: pool {k} differs from the reference"
    for name in ("zeros", "append"):
        for suffix in ("", "_chained"):
            ours, base = figures[f"{name}{suffix}_us"], figures[f"unwindowed{suffix}_us"]
            figures[f"{name}{suffix}_ratio"] = ours / base if base > 0 else None
            figures[f"{name}{suffix}_minus_us"] = ours - base
    return {"bs": bs, "seq": seq, "ragged": ragged, "width": width, "tokens": int(inputs[0].shape[0])} | figures


# -- 3. host time with start_cols -----------------------------------------------------


HOST_RUNS = ("launcher", "windowed", "torch_op")


def host_figures(torch, config: Config) -> dict:
    """Each pattern's per-call host time (module docstring, part 3): ``{pattern/run: {median_us, p90_us}}``."""
    from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch
    from shared_spec.reference import scatter_reference

    device = config.device
    pools = {name: torch.full(bench_host.POOL, SENTINEL, dtype=torch.int32, device=device) for name in HOST_RUNS}
    results = {}
    for pattern in bench_host.PATTERNS:
        calls = bench_host.device_steps(torch, pattern, config.host_calls, device=device)
        windowed = [(f, o, r, torch.from_numpy(append_columns(o.cpu().numpy(), bench_host.POOL[1], seed=k)).to(device))
                    for k, (f, o, r) in enumerate(calls)]

        def ours(flat_in, offsets, rows, start_cols=None, *, out):
            launch(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=out, start_cols=start_cols)

        for name, steps_of in (("launcher", calls), ("windowed", windowed)):  # each call checked once first
            out = pools[name]
            for step in steps_of[:3]:
                out.fill_(SENTINEL)
                ours(*step, out=out)
                host = [None if t is None else t.cpu().numpy() for t in step]
                expected = scatter_reference(*host[:3], np.full(bench_host.POOL, SENTINEL, np.int32), *host[3:])
                assert np.array_equal(out.cpu().numpy(), expected), f"host {pattern} {name}: the pool differs from the reference"
        runs = {"launcher": (lambda *s: ours(*s, out=pools["launcher"]), calls, None),
                "windowed": (lambda *s: ours(*s, out=pools["windowed"]), windowed, None),
                "torch_op": (lambda *_: pools["torch_op"].add_(0), calls, None)}
        sync = bench_host.device_sync(torch, device)
        for name, ns in bench_host.time_calls(torch, runs, config.host_rounds, sync=sync).items():
            results[f"{pattern}/{name}"] = bench_host.summary(ns)
    return results


# -- the whole run --------------------------------------------------------------------


def measure(torch, config: Config = FULL, flushed=None, chained=None, say=None) -> dict:
    """Every figure of the module docstring: ``{"steps": [...], "windowed": [...], "host": {...}}``."""
    say = say or (lambda line: None)
    figures: dict = {"steps": [], "windowed": []}
    for bs, context in config.step_sizes:
        figures["steps"].append(step_figures(torch, bs, context, config))
        row = figures["steps"][-1]
        say(f"step {bs}x{context}: " + ", ".join(f"{k} {row[k]['wall_us']:.1f}/{row[k]['host_us']:.1f} us"
                                                 for k in ("full_pageable", "full_pinned", "incremental")))
    for case in config.window_cases:
        figures["windowed"].append(window_figures(torch, case, config, flushed, chained))
        row = figures["windowed"][-1]
        say(f"windowed {case}: " + ", ".join(f"{k}={row[k]:.2f}" for k in row if k.endswith("_us")))
    figures["host"] = host_figures(torch, config)
    say("host: " + ", ".join(f"{k}={v['median_us']:.2f}" for k, v in figures["host"].items()))
    return figures


def render(figures: dict) -> str:
    """The three tables of ``figures`` (``measure``'s) as markdown sections, each with what it answers."""
    parts = [
        "## torch: the serving step, full snapshot against incremental",
        bench_markdown.prose(
            "One decode step (one new token per request) as sglang's full-snapshot step runs it (every request's "
            "whole token ids snapshot on the host, pageable or into a pinned `flat_in`, copied and scattered) beside "
            "`IncrementalWriter`'s step (the new tokens alone, written at each request's length: one pinned buffer, "
            "one copy, one launch). Us per step, median over the steps of interleaved rounds: *wall* until the "
            "device's synchronize (`torch._C._cuda_synchronize()`) returns after the step, *host* until it returns, "
            "*snapshot* the host's concatenation of every request's ids alone; *timer* the wall of an empty step "
            "taking its turns too, the timer's own cost in every wall (`kv_canary/bench_incremental.py`)."),
    ]
    lines = ["| requests x context | snapshot tokens | full pageable wall / host (snapshot) "
             "| full pinned wall / host (snapshot) | incremental wall / host | pinned / incremental "
             "| pinned less snapshot / incremental | timer |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in figures["steps"]:
        cells = [f"{r[k]['wall_us']:.1f} / {r[k]['host_us']:.1f}" + (f" ({r[k]['snapshot_us']:.1f})" if "snapshot_us" in r[k] else "")
                 for k in ("full_pageable", "full_pinned", "incremental")]
        lines.append(f"| {r['bs']} x {r['context']} | {r['snapshot_tokens']} | " + " | ".join(cells)
                     + f" | {r['pinned_over_incremental']:.1f}x | {r['pinned_unbuilt_over_incremental']:.1f}x"
                     + f" | {r['empty']['wall_us']:.1f} |")
    parts.append("\n".join(lines))
    parts += [
        "## torch: the windowed Triton kernel against the unwindowed one",
        bench_markdown.prose(
            "The launcher's Triton kernel on the same inputs and pool, without `start_cols`, with `start_cols` all 0 "
            "(the same cells) and with an append position per request (every token still written: the same bytes). "
            "Us, median; flushed and chained as in the device-time tables, the three taking turns; *ratio*: over the "
            "unwindowed figure."),
    ]
    lines = ["| case | tokens | unwindowed | start_cols 0 | ratio | append | ratio | unwindowed chained "
             "| start_cols 0 chained | ratio | append chained | ratio |", "|---|---:|" + "---:|" * 10]
    for r in figures["windowed"]:
        cells = []
        for suffix in ("", "_chained"):
            cells.append(bench_markdown.number(r[f"unwindowed{suffix}_us"], 2))
            for name in ("zeros", "append"):
                cells += [bench_markdown.number(r[f"{name}{suffix}_us"], 2),
                          bench_markdown.number(r[f"{name}{suffix}_ratio"], 3)]
        lines.append(f"| {bench_markdown.case_label(r)} | {r['tokens']} | " + " | ".join(cells) + " |")
    parts.append("\n".join(lines))
    head = "| pattern | " + " | ".join(HOST_TITLES[name] for name in HOST_RUNS) + " |"
    lines = [head, "|---|" + "---:|" * len(HOST_RUNS)]
    for pattern in bench_host.PATTERNS:
        cells = [f"{figures['host'][f'{pattern}/{name}']['median_us']:.2f} / {figures['host'][f'{pattern}/{name}']['p90_us']:.2f}"
                 for name in HOST_RUNS]
        lines.append(f"| {bench_host.PATTERN_TITLES[pattern]} | " + " | ".join(cells) + " |")
    parts += [
        "## torch: host time with start_cols in the serving pattern",
        bench_markdown.prose(
            "The launcher called as a serving runtime calls it (`kv_canary/bench_host.py`'s patterns and timer), "
            "without and with `start_cols` (a new int64 tensor of append positions per step), beside one eager torch "
            "op; us per call, median / 90th percentile, interleaved in one run."),
        "\n".join(lines),
    ]
    return "\n\n".join(parts) + "\n"


HOST_TITLES = {"launcher": "launcher", "windowed": "launcher with start_cols", "torch_op": "one torch op (pool.add_(0))"}


def run(args) -> int:
    """``kv-canary bench --incremental`` (CUDA checked by the caller): ``FULL`` measured, its tables or JSON printed."""
    import torch

    quiet = getattr(args, "quiet", False)
    figures = measure(torch, FULL, say=None if quiet else lambda line: print(line, file=sys.stderr, flush=True))
    meta = bench.versions()
    stamp = bench_markdown.stamp(meta)
    if args.json:
        print(json.dumps({"meta": meta, "stamp": stamp, "incremental": figures}, indent=1))
    else:
        sys.stdout.write(bench_markdown.prose(stamp) + "\n\n" + render(figures))
    return 0
