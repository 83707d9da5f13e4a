"""The torch parts of ``kv-canary bench``: device time, host time, and the assignment's two (CUDA; torch passed in).

- ``device``: per workload of ``shared_spec.arg_specs`` (``make_batch``), the launcher's Triton kernel and sglang's
  design (``kv_canary.baseline.per_request_tile``), flushed and chained (``timing``); each run writes a pool of its own
  per round, so that where a pool lies in memory favours neither.
- ``host``: the launcher as a server calls it, every call's inputs made beforehand (``host_steps``: ``new_n`` a new
  ``len(flat_in)`` every call, ``new_bs_n`` bs and N both new, ``repeat`` the same tensors), beside the launcher with
  ``start_cols``, sglang's launcher (its checks, then its kernel) and one eager torch op (``pool.add_(0)``).
- ``assign_device``, ``assign_host``: ``assign_req_to_token_pool_func`` against ``kv_canary.baseline.sglang_assign``
  (and one torch op), decode steps of one token and extends, from ``arg_specs.decode_step`` (``assign_inputs``).

Every pool a part writes is compared with ``shared_spec.reference``; a difference raises ``Mismatch``.
"""

from __future__ import annotations

import numpy as np

from kv_canary.bench import timing
from shared_spec import arg_specs
from shared_spec.reference import assign_reference, scatter_reference

SENTINEL = -7
HOST_POOL = (97, 8192)  # the host patterns' pool: rows for bs up to 96, each request's tokens fit a row
ASSIGN_CONTEXT = 32768
# (label, requests, tokens each)
ASSIGN_CASES = (("decode 1", 1, 1), ("decode 64", 64, 1), ("decode 256", 256, 1), ("decode 1024", 1024, 1),
                ("extend 8 x 2048", 8, 2048), ("extend 64 x 512", 64, 512))


class Mismatch(AssertionError):
    """A result that differs from ``shared_spec.reference``."""


def check(got, expected: np.ndarray, what: str) -> None:
    if not np.array_equal(got.cpu().numpy(), expected):
        raise Mismatch(f"{what}: the pool differs from shared_spec.reference")


def on_device(torch, *arrays, device="cuda"):
    return [None if a is None else torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in arrays]


def device(torch, workloads, say) -> list[dict]:
    from kv_canary import baseline
    from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch

    rows = []
    for w in workloads:
        batch = arg_specs.make_batch(w)
        flat_in, offsets, req, pool = on_device(torch, *batch)
        pools = {name: [pool.clone() for _ in range(timing.ROUNDS)] for name in ("ours", "sglang")}
        current = {name: p[0] for name, p in pools.items()}
        runs = {"ours": lambda: launch(flat_in=flat_in, offsets=offsets, req_pool_indices=req, pool_out=current["ours"],
                                       backend="triton"),
                "sglang": lambda: baseline.per_request_tile(flat_in, offsets, req, current["sglang"])}
        flushed = timing.flushed_us(torch, runs, before_round=lambda k: current.update({n: pools[n][k] for n in pools}))
        current.update({n: pools[n][0] for n in pools})
        chained = timing.chained_us(torch, runs)
        expected = scatter_reference(*batch)
        for name, written in pools.items():
            for p in written:
                check(p, expected, f"{name} at {w.name}")
        rows.append({"workload": w.name, "tokens": int(batch[0].shape[0]), "ours_us": flushed["ours"],
                     "sglang_us": flushed["sglang"], "ours_chained_us": chained["ours"],
                     "sglang_chained_us": chained["sglang"]})
        say(f"device {w.name}: ours {flushed['ours']:.2f} us, sglang's {flushed['sglang']:.2f} us; chained "
            f"{chained['ours']:.2f} / {chained['sglang']:.2f} us")
    return rows


def host_steps(pattern: str, count: int, seed: int = 0, context: int = HOST_POOL[1]) -> list[tuple]:
    """``count`` numpy steps ``(flat_in, offsets, req_pool_indices, start_cols)`` of ``pattern`` (module docstring)."""
    rng = np.random.default_rng(seed)
    steps, bs = [], 64
    for i in range(count):
        new = 16
        if pattern == "new_n":
            new = 16 + i
        elif pattern == "new_bs_n":
            bs = int(rng.choice([b for b in range(32, HOST_POOL[0] - 1) if b != bs]))
            new = int(rng.integers(16, 400))
        elif pattern != "repeat":
            raise ValueError(pattern)
        flat_in, offsets, rows, _, start_cols = arg_specs.decode_step(bs, context, new, seed=seed + i)
        steps.append((flat_in, offsets, rows, start_cols))
        if pattern == "repeat":
            return steps * count  # one step, every call
    return steps


HOST_PATTERNS = ("new_n", "new_bs_n", "repeat")


def host(torch, say, calls: int = timing.HOST_CALLS, rounds: int = timing.HOST_ROUNDS, device="cuda",
         pool=HOST_POOL) -> dict:
    from kv_canary import baseline
    from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch

    pools = {name: torch.full(pool, SENTINEL, dtype=torch.int32, device=device)
             for name in ("ours", "ours_start_cols", "sglang", "torch_op")}
    calls_of = {
        "ours": lambda f, o, r, s: launch(flat_in=f, offsets=o, req_pool_indices=r, pool_out=pools["ours"]),
        "ours_start_cols": lambda f, o, r, s: launch(flat_in=f, offsets=o, req_pool_indices=r, start_cols=s,
                                                     pool_out=pools["ours_start_cols"]),
        "sglang": lambda f, o, r, s: baseline.sglang_launcher(f, o, r, pools["sglang"]),
        "torch_op": lambda *_: pools["torch_op"].add_(0),
    }
    figures = {}
    for pattern in HOST_PATTERNS:
        host_side = host_steps(pattern, calls, context=pool[1])
        steps = [tuple(on_device(torch, *step, device=device)) for step in host_side[:1 if pattern == "repeat" else None]]
        steps = steps * calls if pattern == "repeat" else steps  # repeat: the same tensors every call
        for name in ("ours", "ours_start_cols", "sglang"):  # the gate: a few calls against the reference
            for step, numpy_step in zip(steps[:3], host_side[:3]):
                pools[name].fill_(SENTINEL)
                calls_of[name](*step)
                windows = numpy_step[3] if name == "ours_start_cols" else None
                check(pools[name], scatter_reference(*numpy_step[:3], np.full(pool, SENTINEL, np.int32), windows),
                      f"host {pattern} {name}")
        ns = timing.host_ns({name: (fn, steps) for name, fn in calls_of.items()}, timing.device_sync(torch, device), rounds)
        figures[pattern] = {name: {k: v / 1e3 for k, v in timing.summary(t).items()} for name, t in ns.items()}
        say(f"host {pattern}: " + ", ".join(f"{n} {f['median']:.2f} us" for n, f in figures[pattern].items()))
    return figures


def assign_inputs(bs: int, new: int, context: int = ASSIGN_CONTEXT, seed: int = 0, dtype=np.int64):
    """numpy ``(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc)``: ``decode_step``'s batch
    as sglang's assignment (each request's slots from its current length)."""
    flat_in, offsets, rows, table, start = arg_specs.decode_step(bs, context, new, seed=seed, dtype=dtype)
    return rows, table, start, (start + np.diff(offsets)).astype(dtype), flat_in


def assign_device(torch, say, cases=ASSIGN_CASES) -> list[dict]:
    from kv_canary import baseline
    from kv_canary_torch import assign_req_to_token_pool_func as ours

    out = []
    for label, bs, new in cases:
        inputs = assign_inputs(bs, new)
        rows, table, start, end, loc = on_device(torch, *inputs)
        tables = {"ours": table.clone(), "sglang": table.clone()}
        runs = {"ours": lambda: ours(rows, tables["ours"], start, end, loc, bs, backend="triton"),
                "sglang": lambda: baseline.sglang_assign(rows, tables["sglang"], start, end, loc, bs)}
        flushed, chained = timing.flushed_us(torch, runs), timing.chained_us(torch, runs)
        expected = assign_reference(*inputs, bs)
        for name in runs:
            check(tables[name], expected, f"assign {name} at {label}")
        out.append({"case": label, "slots": int(loc.shape[0]), "ours_us": flushed["ours"],
                    "sglang_us": flushed["sglang"], "ours_chained_us": chained["ours"],
                    "sglang_chained_us": chained["sglang"]})
        say(f"assign device {label}: ours {flushed['ours']:.2f} us, sglang's {flushed['sglang']:.2f} us")
    return out


def assign_host(torch, say, calls: int = timing.HOST_CALLS, rounds: int = timing.HOST_ROUNDS, device="cuda",
                table=HOST_POOL) -> dict:
    from kv_canary import baseline
    from kv_canary_torch import assign_req_to_token_pool_func as ours

    rng = np.random.default_rng(0)
    tables = {name: torch.full(table, SENTINEL, dtype=torch.int32, device=device) for name in ("ours", "sglang", "torch_op")}
    calls_of = {"ours": lambda r, s, e, l, bs: ours(r, tables["ours"], s, e, l, bs),
                "sglang": lambda r, s, e, l, bs: baseline.sglang_assign(r, tables["sglang"], s, e, l, bs),
                "torch_op": lambda *_: tables["torch_op"].add_(0)}
    figures = {}
    for pattern in ("decode", "extend"):
        host_side = []
        for i in range(calls):
            bs = int(rng.integers(32, HOST_POOL[0] - 1))
            host_side.append(assign_inputs(bs, 1 if pattern == "decode" else int(rng.integers(16, 400)), table[1], i))
        steps = [(*on_device(torch, rows, start, end, loc, device=device), rows.shape[0])
                 for rows, _, start, end, loc in host_side]
        for name in ("ours", "sglang"):
            for step, inputs in zip(steps[:3], host_side[:3]):
                tables[name].fill_(SENTINEL)
                calls_of[name](*step)
                check(tables[name], assign_reference(inputs[0], np.full(table, SENTINEL, np.int32), *inputs[2:]),
                      f"assign host {pattern} {name}")
        ns = timing.host_ns({name: (fn, steps) for name, fn in calls_of.items()}, timing.device_sync(torch, device), rounds)
        figures[pattern] = {name: {k: v / 1e3 for k, v in timing.summary(t).items()} for name, t in ns.items()}
        say(f"assign host {pattern}: " + ", ".join(f"{n} {f['median']:.2f} us" for n, f in figures[pattern].items()))
    return figures
