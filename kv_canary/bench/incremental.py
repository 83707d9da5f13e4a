"""``kv-canary bench --incremental``: a decode step (one new token per request) two ways, wall time per step.

Per size (requests x context), the steps take turns (``timing.interleaved_samples``: ``ROUNDS`` rounds of ``WARMUP +
CALLS`` steps), each on a pool of its own holding every request's context and with its own ``Requests``. Before a
step, the sampler's tokens (a list of ints) are appended to the state, untimed; the step is timed until it returns
(*host*) and until the device's synchronize returns after it (*wall*):

- ``full_pinned``: sglang's full snapshot: every request's whole token ids concatenated into one reused pinned
  buffer (``snapshot_us``: that alone), the lengths' cumulative sum into a new pinned offsets tensor, both copied to
  the device, one launch from column 0;
- ``incremental``: ``IncrementalWriter.step`` of the new tokens at each request's length before them (its steps
  replayed from CUDA graphs once each slot has seen the batch's sizes);
- ``incremental_eager``: the same with ``graphs=False``: each step one copy and one launch through the launcher;
- ``empty``: nothing, the timer's own cost (``timer_us``).

The pools are compared with ``shared_spec.reference`` at the end.
"""

from __future__ import annotations

import time

import numpy as np

from kv_canary.bench import timing
from kv_canary.bench.torch_parts import SENTINEL, check
from shared_spec.reference import scatter_reference

SIZES = tuple((bs, context) for bs in (64, 256) for context in (2048, 8192, 32768))
ROUNDS, CALLS, WARMUP = 5, 20, 3


class Requests:
    """A runtime's live requests: each one's token ids (a row of ``tokens``, its whole future) and length so far."""

    def __init__(self, tokens: np.ndarray, context: int):
        self.tokens = tokens
        self.lengths = np.full(tokens.shape[0], context, dtype=np.int64)
        self.previous = self.lengths.copy()

    def advance(self) -> list:
        """The sampler's output: each request's next token, appended."""
        new = self.tokens[np.arange(self.tokens.shape[0]), self.lengths].tolist()
        self.previous = self.lengths.copy()
        self.lengths += 1
        return new

    def views(self) -> list:
        return [row[:n] for row, n in zip(self.tokens, self.lengths.tolist())]


class FullSnapshot:
    snapshot_ns = 0

    def __init__(self, torch, pool, rows, backend: str):
        from kv_canary_torch import launch_scatter_req_token_ids_kernel

        self.torch, self.pool, self.rows, self.backend = torch, pool, rows, backend
        self.launch = launch_scatter_req_token_ids_kernel
        self.pinned = pool.is_cuda
        self.flat = torch.empty(pool.shape[0] * pool.shape[1], dtype=torch.int64, pin_memory=self.pinned)

    def __call__(self, requests: Requests, new: list) -> None:
        torch, device = self.torch, self.pool.device
        begin = time.perf_counter_ns()
        flat = self.flat[: int(requests.lengths.sum())]
        np.concatenate(requests.views(), out=flat.numpy())
        self.snapshot_ns = time.perf_counter_ns() - begin
        offsets = torch.zeros(len(requests.lengths) + 1, dtype=torch.int64, pin_memory=self.pinned)
        offsets[1:] = torch.cumsum(torch.from_numpy(requests.lengths), dim=0)
        self.launch(flat_in=flat.to(device, non_blocking=True), offsets=offsets.to(device, non_blocking=True),
                    req_pool_indices=self.rows, pool_out=self.pool, backend=self.backend)


class Incremental:
    def __init__(self, pool, bs: int, backend: str, graphs: bool = True):
        from kv_canary_torch import IncrementalWriter

        self.writer = IncrementalWriter(pool, max_requests=bs, max_new_tokens=bs, backend=backend, graphs=graphs)
        self.rows = np.arange(1, bs + 1, dtype=np.int64)

    def __call__(self, requests: Requests, new: list) -> None:
        self.writer.step(new, self.rows, requests.previous, lengths=1)


def step_figures(torch, bs: int, context: int, device="cuda", backend="triton", rounds=ROUNDS, calls=CALLS,
                 warmup=WARMUP) -> dict:
    width = context + rounds * (warmup + calls)
    tokens = np.random.default_rng(bs * context).integers(0, 2**31 - 1, size=(bs, width), dtype=np.int64)
    start = np.full((bs + 1, width), SENTINEL, dtype=np.int32)
    start[1:, :context] = tokens[:, :context]
    rows = torch.arange(1, bs + 1, dtype=torch.int64, device=device)
    pools = {name: torch.from_numpy(start.copy()).to(device)
             for name in ("full_pinned", "incremental", "incremental_eager")}
    runs = {"full_pinned": FullSnapshot(torch, pools["full_pinned"], rows, backend),
            "incremental": Incremental(pools["incremental"], bs, backend),
            "incremental_eager": Incremental(pools["incremental_eager"], bs, backend, graphs=False),
            "empty": lambda requests, new: None}
    state = {name: Requests(tokens, context) for name in runs}
    sync, clock = timing.device_sync(torch, device), time.perf_counter_ns

    def timed(name):
        out = []
        for _ in range(warmup + calls):
            new = state[name].advance()
            begin = clock()
            runs[name](state[name], new)
            returned = clock()
            sync()
            out.append((returned - begin, clock() - begin, getattr(runs[name], "snapshot_ns", 0)))
        return out[warmup:]

    samples = timing.interleaved_samples({name: name for name in runs}, timed, rounds)
    figures = {}
    for name, rounds_ in samples.items():
        host, wall, snapshot = ([t[i] / 1e3 for r in rounds_ for t in r] for i in range(3))
        figures[name] = {"wall_us": timing.summary(wall)["median"], "wall_p90_us": timing.summary(wall)["p90"],
                         "host_us": timing.summary(host)["median"]}
        if name == "full_pinned":
            figures[name]["snapshot_us"] = timing.summary(snapshot)["median"]
        if name in pools:
            requests = state[name]
            offsets = np.concatenate([[0], np.cumsum(requests.lengths)])
            expected = scatter_reference(np.concatenate(requests.views()), offsets, np.arange(1, bs + 1), start)
            check(pools[name], expected, f"incremental {name} at {bs}x{context}")
    timer = figures.pop("empty")["wall_us"]
    ratio = figures["full_pinned"]["wall_us"] / figures["incremental"]["wall_us"]
    return {"requests": bs, "context": context, **figures, "timer_us": timer, "pinned_over_incremental": ratio}


def incremental(torch, say, sizes=SIZES, **options) -> list[dict]:
    rows = []
    for bs, context in sizes:
        rows.append(step_figures(torch, bs, context, **options))
        r = rows[-1]
        say(f"incremental {bs}x{context}: full pinned {r['full_pinned']['wall_us']:.1f} us, "
            f"incremental {r['incremental']['wall_us']:.1f} us, without graphs "
            f"{r['incremental_eager']['wall_us']:.1f} us a step")
    return rows
