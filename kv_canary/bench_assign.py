"""``kv-canary bench --assign``: ``assign_req_to_token_pool`` against a same-run kernel of sglang's design.

Contract: ``measure(torch, config) -> dict`` measures the torch parts on ``config.device`` (``FULL``: the GPU run;
``TINY``: the CPU test's, in Triton's interpreter, where the times mean nothing but every table is checked);
``measure_jax(config) -> dict`` the JAX part (``FULL_JAX``; ``TINY_JAX`` on the CPU, XLA only); ``render(figures)``
is their markdown; ``run(args) -> int`` the command (the JAX part in a process of its own first, so that the two
frameworks never hold the GPU's memory at once; markdown, or with ``--json`` one JSON object, on stdout).

Cases (``CASES``), each into a ``TABLE`` (2049 x 32769 int32, sentinel-filled) with int64 indices as sglang's
callers pass them (``sglang_inputs``: distinct rows, each request's new slots after a random prefix, every slot
written): decode steps of 1, 64, 256 and 1024 requests of one token; extends of 8 x 2048, 64 x 512 and 256
requests of 1-511 tokens. Every table a part writes is compared with ``assignment_reference`` and the baseline's
(the correctness gate: identical tables); a mismatch raises AssertionError.

1. Device time (``device``): ``kv_canary_torch.assign_req_to_token_pool_func`` (its Triton kernel) beside
   ``baseline_assign.sglang_style_assign``, each on a table of its own, timed flushed and chained by
   ``kv_canary.bench``'s ``flushed_us`` and ``chained_us`` (the runs taking turns); ``ratio``: ours over the baseline.
2. Host time in the serving pattern (``host``): ``kv_canary.bench_host``'s timer and rounds (``time_calls``) over
   calls whose ``bs`` and lengths change every call (decode: one token each, bs in ``bench_host.BS_RANGE``;
   extend: lengths in ``bench_host.LENGTHS``), ours (its signature remembered by one call first, so that the
   launcher's native call path serves the timed calls; the share it served is reported), the baseline's launch
   (sglang's call: ``next_power_of_2`` and Triton's launch) and one eager torch op, interleaved.
3. JAX (``jax``): the marginal cost in ``kv_canary.bench_step``'s serving-like jitted step (its ``Step``, timer and
   rounds: ``MATMULS`` bf16 matmuls, the table donated) of ``kv_canary_jax.assign_req_to_token_pool`` (its default
   implementation) and its ``xla`` path (``implementation="xla"``, the CPU and TPU default) beside
   ``plain_xla_assign``, what a JAX user writes (``jnp.repeat`` and one ``.at[].set``): the wall figure (each step
   less the step without the op, medians of interleaved rounds) and, on a GPU, the device figure
   (``device_marginals``: the op's own kernels per step from a profiler trace of ``device_steps`` steps).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np

from kv_canary import bench, bench_host, bench_markdown, bench_step

SENTINEL = -7
TABLE = (2049, 32769)
# (label, bs, tokens per request: an int, or (low, high) drawn per request)
CASES = (
    ("decode 1", 1, 1), ("decode 64", 64, 1), ("decode 256", 256, 1), ("decode 1024", 1024, 1),
    ("extend 8 x 2048", 8, 2048), ("extend 64 x 512", 64, 512), ("extend 256 x 1-511", 256, (1, 511)),
)
RUNS = ("ours", "baseline")
HOST_RUNS = ("ours", "baseline", "torch_op")
HOST_PATTERNS = ("decode", "extend")
JAX_CHILD = "--assign-jax-child"


@dataclasses.dataclass(frozen=True)
class Config:
    device: str = "cuda"
    table: tuple = TABLE
    cases: tuple = CASES
    rounds: int = bench.ROUNDS
    host_calls: int = bench_host.CALLS
    host_rounds: int = bench_host.ROUNDS
    # JAX (bench_step's step)
    size: int = bench_step.SIZE
    matmuls: int = bench_step.MATMULS
    steps: int = bench_step.STEPS
    jax_rounds: int = bench_step.ROUNDS
    warmup: int = bench_step.WARMUP
    clock: str = "wall"  # bench_step.CLOCKS: "process" on a loaded CPU machine
    device_clock: bool = True  # on a GPU, also the op's kernels' time per step from a profiler trace
    device_steps: int = 20  # steps of each kind in that trace


FULL = Config()
TINY = Config(device="cpu", table=(40, 70), cases=(("decode 3", 3, 1), ("extend 20 x 1-30", 20, (1, 30))),
              rounds=2, host_calls=3, host_rounds=1, size=32, matmuls=1, steps=2, jax_rounds=2, warmup=1)


def sglang_inputs(bs: int, tokens, table: tuple, seed: int = 0):
    """numpy ``(req_pool_indices, start_offset, end_offset, out_cache_loc)``, int64, as sglang's callers pass them."""
    rng = np.random.default_rng(seed)
    n_rows, width = table
    lengths = (np.full(bs, tokens) if isinstance(tokens, int) else rng.integers(tokens[0], tokens[1], endpoint=True, size=bs))
    start = rng.integers(0, width - lengths, endpoint=True)
    rows = rng.permutation(n_rows)[:bs].astype(np.int64)
    loc = rng.integers(0, 2**31 - 1, int(lengths.sum()), dtype=np.int64)
    return rows, start.astype(np.int64), (start + lengths).astype(np.int64), loc


def expected_table(inputs, table: tuple) -> np.ndarray:
    from shared_spec.assignment import assignment_reference

    rows, start, end, loc = inputs
    return assignment_reference(rows, np.full(table, SENTINEL, np.int32), start, end, loc, rows.shape[0])


def _calls(torch):
    from kv_canary.baseline_assign import sglang_style_assign
    from kv_canary_torch import assign_req_to_token_pool_func

    return {"ours": assign_req_to_token_pool_func, "baseline": sglang_style_assign}


# -- 1. device time ---------------------------------------------------------------


def device_figures(torch, case, config: Config, flushed=None, chained=None) -> dict:
    """One case's flushed and chained figures (module docstring, part 1), after the correctness gate."""
    flushed, chained = flushed or bench.flushed_us, chained or bench.chained_us
    label, bs, tokens = case
    inputs = sglang_inputs(bs, tokens, config.table)
    rows, start, end, loc = (torch.from_numpy(x).to(config.device) for x in inputs)
    tables = {name: torch.full(config.table, SENTINEL, dtype=torch.int32, device=config.device) for name in RUNS}
    calls = _calls(torch)
    runs = {name: (lambda name=name: calls[name](rows, tables[name], start, end, loc, bs)) for name in RUNS}
    figures = {f"{name}_us": us for name, us in flushed(torch, runs, rounds=config.rounds, before_round=lambda k: None).items()}
    figures |= {f"{name}_chained_us": us for name, us in chained(torch, runs).items()}
    expected = expected_table(inputs, config.table)
    ours, baseline = (tables[name].cpu().numpy() for name in RUNS)
    assert np.array_equal(ours, baseline), f"{label}: our table differs from the baseline's"
    assert np.array_equal(ours, expected), f"{label}: our table differs from the reference"
    for suffix in ("", "_chained"):
        base = figures[f"baseline{suffix}_us"]
        figures[f"ratio{suffix}"] = figures[f"ours{suffix}_us"] / base if base > 0 else None
    return {"case": label, "bs": bs, "slots": int(loc.shape[0])} | figures


# -- 2. host time -----------------------------------------------------------------


def host_steps(torch, pattern: str, count: int, table: tuple, device: str, seed: int = 0) -> list:
    """``count`` calls' device tensors ``(rows, start, end, loc, bs)``, bs and lengths new every call (bs in
    ``bench_host.BS_RANGE`` up to the table's rows; decode: one token each, extend: ``bench_host.LENGTHS`` up to its
    width)."""
    rng = np.random.default_rng(seed)
    tokens = (1, 1) if pattern == "decode" else (bench_host.LENGTHS[0], min(bench_host.LENGTHS[1], table[1]))
    out = []
    for k in range(count):
        bs = min(int(rng.integers(*bench_host.BS_RANGE, endpoint=True)), table[0])
        inputs = sglang_inputs(bs, tokens, table, seed=seed + k)
        out.append((*(torch.from_numpy(x).to(device) for x in inputs), bs))
    return out


def host_figures(torch, config: Config) -> dict:
    """Each pattern's per-call host time (module docstring, part 2): ``{pattern/run: {median_us, p90_us}}``; ours also
    has ``native_share``: the share of its timed and warm-up calls the launcher's native call path served (None where
    it is off: no GPU, no C++ compiler), so that the table says which path it timed."""
    from kv_canary_torch.launch import dispatch

    device, calls = config.device, _calls(torch)
    table = (min(config.table[0], bench_host.POOL[0]), min(config.table[1], bench_host.POOL[1]))
    tables = {name: torch.full(table, SENTINEL, dtype=torch.int32, device=device) for name in HOST_RUNS}
    results = {}
    for pattern in HOST_PATTERNS:
        steps = host_steps(torch, pattern, config.host_calls, table, device)
        runs = {name: (lambda *s, name=name: calls[name](s[0], tables[name], *s[1:]), steps, None) for name in RUNS}
        runs["torch_op"] = (lambda *_: tables["torch_op"].add_(0), steps, None)
        calls["ours"](steps[0][0], tables["ours"], *steps[0][1:])  # a signature's first call: checked, then remembered
        before = dispatch.served()
        sync = bench_host.device_sync(torch, device)
        for name, ns in bench_host.time_calls(torch, runs, config.host_rounds, sync=sync).items():
            results[f"{pattern}/{name}"] = bench_host.summary(ns)
        after = dispatch.served()
        ours_calls = len(steps) * (config.host_rounds + 1)  # the warm-up round's too
        results[f"{pattern}/ours"]["native_share"] = None if before is None else (after - before) / ours_calls
    return results


# -- 3. JAX -----------------------------------------------------------------------


def plain_xla_assign(rows, start, end, loc, table):
    """The assignment a JAX user writes by hand: each slot's request by ``jnp.repeat``, one scatter.

    Right for well-formed batches only (what sglang's callers pass); nothing checks. The baseline, never the
    library's path.
    """
    import jax.numpy as jnp

    (n,), (bs,) = loc.shape, rows.shape
    lengths = end - start
    pt = jnp.cumsum(lengths) - lengths
    req = jnp.repeat(jnp.arange(bs), lengths, total_repeat_length=n)
    cols = start[req] + jnp.arange(n) - pt[req]
    return table.at[rows[req], cols].set(loc.astype(jnp.int32), mode="drop")


def make_jax_step(kind: str | None, matmuls: int):
    """``(x, w, rows, start, end, loc, table) -> (h, table)``, table donated: ``kind`` None (no assignment),
    ``"library"`` (``assign_req_to_token_pool``, its default implementation), ``"xla"`` (its ``xla`` path) or
    ``"plain"``."""
    import jax
    import jax.numpy as jnp

    from kv_canary_jax import assign_req_to_token_pool

    def step(x, w, rows, start, end, loc, table):
        h = x
        for _ in range(matmuls):
            h = jnp.dot(h, w, preferred_element_type=jnp.bfloat16)
        if kind == "library":
            table = assign_req_to_token_pool(rows, table, start, end, loc)
        elif kind == "xla":
            table = assign_req_to_token_pool(rows, table, start, end, loc, implementation="xla")
        elif kind == "plain":
            table = plain_xla_assign(rows, start, end, loc, table)
        return h, table

    return jax.jit(step, donate_argnums=6)


def measure_jax(config: Config = FULL, say=None) -> list[dict]:
    """Per case, the marginal cost of the library's assignment and of the plain one (module docstring, part 3)."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)  # this process's choice, as bench_step's
    say = say or (lambda line: None)
    key_x, key_w = jax.random.split(jax.random.key(0))
    x = jax.random.normal(key_x, (config.size, config.size), jnp.bfloat16)
    w = jax.random.normal(key_w, (config.size, config.size), jnp.bfloat16) / np.sqrt(config.size)
    rows_out = []
    for label, bs, tokens in config.cases:
        inputs = sglang_inputs(bs, tokens, config.table)
        expected = expected_table(inputs, config.table)
        batch = tuple(jax.device_put(a) for a in inputs)
        steps = {kind: bench_step.Step(kind or "without", kind, make_jax_step(kind, config.matmuls), (x, w, *batch),
                                       jax.device_put(np.full(config.table, SENTINEL, np.int32)), False)
                 for kind in (None, "library", "xla", "plain")}
        steps = {step.label: step for step in steps.values()}
        for step in steps.values():
            for _ in range(max(1, config.warmup)):
                step()
        samples = bench.interleaved_samples(steps, lambda step: bench_step.median_step_us(step, config.steps, bench_step.CLOCKS[config.clock]), config.jax_rounds)
        for name in ("library", "xla", "plain"):
            assert bench_step.agrees(steps[name], expected), f"jax {name} at {label}: the table differs from the reference"
        row = {"case": label, "bs": bs, "slots": int(inputs[3].shape[0]), "runs": bench_step.default_name()}
        for name in ("library", "xla", "plain"):
            row[f"{name}_marginal_us"] = bench_step.spread([a - b for a, b in zip(samples[name], samples["without"])])
        plain = row["plain_marginal_us"]["median"]
        row["vs_plain"] = row["library_marginal_us"]["median"] / plain if plain > 0 else None
        row["xla_vs_plain"] = row["xla_marginal_us"]["median"] / plain if plain > 0 else None
        if config.device_clock and jax.default_backend() == "gpu":
            row |= device_marginals(steps, config.device_steps)
        say(f"jax {label}: library {row['library_marginal_us']['median']:.1f} us, xla {row['xla_marginal_us']['median']:.1f} us, "
            f"plain {plain:.1f} us" + "".join(f"; {name} device {row[f'{name}_device_us']:.2f} us"
                                              for name in ("library", "xla", "plain") if row.get(f"{name}_device_us") is not None))
        rows_out.append(row)
    return rows_out


def device_marginals(steps: dict, calls: int) -> dict:
    """Per kind, the device time per step of the kernels the step without the op does not run (``device_trace``):
    the op's own kernels, summed, on the profiler's clock; with the ratios to plain's."""
    from kv_canary import device_trace

    def run(step):
        return lambda: [step() for _ in range(calls)]

    without = device_trace.trace(run(steps["without"]))
    if without is None:
        return {}
    names = device_trace.kernel_names(without)
    figures = {f"{name}_device_us": device_trace.added_kernel_us(run(steps[name]), names, calls)
               for name in ("library", "xla", "plain")}
    plain = figures["plain_device_us"]
    for name, key in (("library", "vs_plain_device"), ("xla", "xla_vs_plain_device")):
        mine = figures[f"{name}_device_us"]
        figures[key] = mine / plain if mine is not None and plain else None
    return figures


# -- the whole run ----------------------------------------------------------------


def measure(torch, config: Config = FULL, flushed=None, chained=None, say=None) -> dict:
    """The torch parts: ``{"device": [...], "host": {...}}``."""
    say = say or (lambda line: None)
    figures: dict = {"device": []}
    for case in config.cases:
        figures["device"].append(device_figures(torch, case, config, flushed, chained))
        row = figures["device"][-1]
        say(f"{case[0]}: " + ", ".join(f"{k}={row[k]:.2f}" for k in row if k.endswith("_us")))
    figures["host"] = host_figures(torch, config)
    say("host: " + ", ".join(f"{k}={v['median_us']:.2f}" for k, v in figures["host"].items()))
    return figures


def render(figures: dict) -> str:
    """The tables of ``figures`` (``device``, ``host``, and ``jax`` where present) as markdown."""
    parts = [
        "## torch: assign_req_to_token_pool against a kernel of sglang's design",
        bench_markdown.prose(
            "`assign_req_to_token_pool_func`'s Triton kernel beside a same-run kernel of sglang's design "
            "(`kv_canary/baseline_assign.py`), sglang's inputs into a 2049 x 32769 table; us, median, flushed and "
            "chained as in the device-time tables, the two taking turns; *ratio*: ours over the baseline."),
    ]
    lines = ["| case | slots | ours | baseline | ratio | ours chained | baseline chained | ratio |", "|---|---:|" + "---:|" * 6]
    for r in figures["device"]:
        cells = [bench_markdown.number(r[key], 3 if key.startswith("ratio") else 2)
                 for key in ("ours_us", "baseline_us", "ratio", "ours_chained_us", "baseline_chained_us", "ratio_chained")]
        lines.append(f"| {r['case']} | {r['slots']} | " + " | ".join(cells) + " |")
    parts.append("\n".join(lines))
    lines = ["| pattern | ours | sglang's launch | one torch op (table.add_(0)) | ours served natively |",
             "|---|---:|---:|---:|---:|"]
    for pattern in HOST_PATTERNS:
        cells = [f"{figures['host'][f'{pattern}/{n}']['median_us']:.2f} / {figures['host'][f'{pattern}/{n}']['p90_us']:.2f}"
                 for n in HOST_RUNS]
        native_share = figures["host"][f"{pattern}/ours"].get("native_share")
        cells.append("off" if native_share is None else f"{100 * native_share:.0f}%")
        lines.append(f"| {pattern} (bs and lengths change every call) | " + " | ".join(cells) + " |")
    parts += ["## torch: the assignment's host time in the serving pattern",
              bench_markdown.prose(
                  "us per call, median / 90th percentile (`kv_canary/bench_host.py`'s timer), interleaved: ours "
                  "(`assign_req_to_token_pool_func`, its signature remembered by one call before, so the launcher's "
                  "native call path serves it), sglang's call of its kernel (`next_power_of_2` and Triton's launch), "
                  "one eager torch op; *ours served natively*: the share of our calls the native call path served."),
              "\n".join(lines)]
    if figures.get("jax"):
        lines = ["| case | slots | runs | library device | vs plain | xla device | vs plain | plain device "
                 "| library wall | xla wall | plain wall |", "|---|---:|---|" + "---:|" * 8]
        for r in figures["jax"]:
            device = [bench_markdown.number(r.get(key)) for key in
                      ("library_device_us", "vs_plain_device", "xla_device_us", "xla_vs_plain_device", "plain_device_us")]
            wall = [f"{r[f'{name}_marginal_us']['median']:.1f}" for name in ("library", "xla", "plain")]
            lines.append(f"| {r['case']} | {r['slots']} | {r['runs']} | " + " | ".join(device + wall) + " |")
        parts += ["## JAX: the assignment's marginal cost in a jitted step",
                  bench_markdown.prose(
                      "What `assign_req_to_token_pool` (its default implementation, and its `xla` path) and the plain XLA assignment "
                      "(`jnp.repeat` and one `.at[].set`) add to `kv_canary/bench_step.py`'s step, the table donated; us. "
                      "*device*: the op's own kernels per step on the profiler's clock (the kernels the step without the op "
                      "does not run, summed; GPU only); *vs plain*: over plain's device figure; *wall*: the step's wall "
                      "time less the step's without the op, median over interleaved rounds (the step moves by several us "
                      "from round to round, so the wall figure of an op of a few us is mostly that motion)."),
                  "\n".join(lines)]
    return "\n\n".join(parts) + "\n"


def jax_in_own_process(quiet: bool) -> list[dict] | None:
    """The JAX part in a child process (None where jax is not installed or the child fails: said on stderr)."""
    from kv_canary.platform import installed

    if not installed("jax"):
        return None
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    done = subprocess.run([sys.executable, "-m", "kv_canary.bench_assign", JAX_CHILD], capture_output=True, text=True, env=env)
    if not quiet and done.stderr:
        sys.stderr.write(done.stderr)
    if done.returncode != 0:
        print(f"kv-canary bench --assign: the JAX part failed (exit {done.returncode})", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(args) -> int:
    """``kv-canary bench --assign`` (CUDA checked by the caller): ``FULL`` measured, its tables or JSON printed."""
    quiet = getattr(args, "quiet", False)
    say = None if quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    jax_rows = None if getattr(args, "no_jax", False) else jax_in_own_process(quiet)
    import torch

    figures = measure(torch, FULL, say=say)
    figures["jax"] = jax_rows
    meta = bench.versions()
    stamp = bench_markdown.stamp(meta)
    if args.json:
        print(json.dumps({"meta": meta, "stamp": stamp, "assign": figures}, indent=1))
    else:
        sys.stdout.write(bench_markdown.prose(stamp) + "\n\n" + render(figures))
    return 0


if __name__ == "__main__" and sys.argv[1:] == [JAX_CHILD]:
    print(json.dumps(measure_jax(FULL, say=lambda line: print(line, file=sys.stderr, flush=True))))
