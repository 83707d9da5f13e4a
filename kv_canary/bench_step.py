"""``python -m kv_canary.bench_step``: what the scatter adds to a jitted step like a server's, per JAX implementation.

Contract: ``main(argv) -> int`` parses the flags below and returns ``run(args)``:
0 when every result agrees with ``shared_spec.reference.scatter_reference``, 1
(after saying which disagreed, on stderr) when one does not. It prints a
markdown table, or with ``--json`` one JSON object (``meta``, ``rows``,
``default``), on stdout; progress goes to stderr. Needs JAX only (it never
imports torch). Without a GPU it runs on the CPU, where only XLA runs: how the
tests run it. It enables x64 for its own process (the command's choice; the
library never sets it).

The step: ``MATMULS`` bf16 ``SIZE x SIZE`` matmuls in a chain (each feeds the
next, so XLA keeps every one; the model's work of a decode step) and, in the
step *with* the scatter, ``scatter_req_token_ids`` of one batch
(``kv_canary.bench.make_inputs``: sglang's inputs) into the donated pool, all
in one ``jax.jit``; the step *without* it takes the same arguments and returns
the donated pool untouched. Each step is synced (``block_until_ready``), as a
server syncs to sample. With ``--fresh-inputs`` every step also copies the
batch's host arrays to the device first (both steps alike), as a server does
with each new batch, so a changed buffer address (which makes XLA re-record
its command buffer) is part of what is timed.

Method: per case, one step without the scatter and one with it per
implementation (``--impl``, default every one of ``mosaic``, ``pallas``,
``xla`` that runs here, ``plain`` and ``default``: ``implementation=None``,
reported with the name it resolves to), and with ``--windowed`` each of ``mosaic``, ``pallas``, ``xla`` and
``plain`` (``plain_windowed_scatter``) also with ``start_cols`` (``kv_canary.bench_incremental.append_columns``: an append position per request at which
every token is still written, the same bytes), reported as its own row beside the unwindowed one with
``over_unwindowed``, the ratio of the two marginal costs' medians (``--windowed`` alone defaults to those three,
without ``plain`` and ``default``). ``plain`` is not the library: it is
``plain_xla_scatter``, the scatter a JAX user writes by hand for well-formed
batches, the baseline the library's ``xla`` must not lose to; each row reports
its marginal cost over ``plain``'s (``vs_plain``, a ratio of medians; a windowed
row's over windowed ``plain``'s, None where that is not run). Each is compiled and run ``--warmup`` times, its
pool checked against the reference, then timed in ``--rounds`` interleaved
rounds: every round times every step of the case ``--steps`` times back to
back (the order rotated by one each round, so that no step always runs first)
and keeps each step's median time. The marginal cost of an implementation is,
per round, its step's median minus the step without the scatter; reported as
the median over rounds with the quartiles and the range of those per-round
differences (a drift of the machine moves both steps of a round alike). The
pools are checked again at the end.

Flags: ``--case BSxSEQ[r][a]`` (repeatable; ``kv_canary.bench.parse_case``:
``r`` ragged lengths, ``a`` rows ``seq`` wide), ``--impl NAME`` (repeatable:
``mosaic``, ``pallas``, ``xla``, ``default``), ``--rounds N``, ``--steps N``,
``--warmup N``, ``--size N`` (matmul side), ``--matmuls N``,
``--fresh-inputs``, ``--windowed``, ``--clock wall|process`` (``CLOCKS``), ``--json``, ``--short`` (the CPU variant: ``SHORT_CASES``,
``SHORT_SIZE``-wide matmuls, ``SHORT_ROUNDS`` rounds of ``SHORT_STEPS`` steps,
each overridable by its own flag; a few minutes on two CPU cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import time

import numpy as np

from kv_canary.bench import interleaved_samples, make_inputs, parse_case
from kv_canary.bench_incremental import append_columns

# sglang-like batches: long and mid prefills, a large one, a ragged mix, many short rows, a decode-sized batch.
CASES = ("64x8192", "256x2048", "256x8192", "256x32768", "4096x512", "256x8192r", "256x64")
# The same kinds of batches at sizes a CPU steps through in a few minutes (--short).
SHORT_CASES = ("16x2048", "64x512", "64x2048", "64x8192", "1024x128", "64x2048r", "64x16")
IMPLEMENTATIONS = ("mosaic", "pallas", "xla")
PLAIN = "plain"  # plain_xla_scatter: what a user writes, not the library
DEFAULT = "default"  # implementation=None, reported with the name it resolves to
WINDOWED = " windowed"  # the suffix of a step's label that passes start_cols
# A server step's model work: four bf16 2048 x 2048 matmuls (the step the Mosaic GPU default was chosen in).
SIZE, MATMULS = 2048, 4
ROUNDS, STEPS, WARMUP = 5, 120, 10
SHORT_SIZE, SHORT_ROUNDS, SHORT_STEPS = 256, 5, 20


def plain_xla_scatter(flat_in, offsets, rows, pool):
    """The scatter a JAX user writes by hand: each token's request by ``jnp.repeat``, one scatter.

    Correct for well-formed batches only (offsets non-decreasing from 0,
    segments no longer than the pool is wide, rows in the pool); nothing
    checks. The benchmark's baseline, never the library's path.
    """
    import jax.numpy as jnp

    (n_tokens,), (bs,) = flat_in.shape, rows.shape
    req = jnp.repeat(jnp.arange(bs), offsets[1:] - offsets[:-1], total_repeat_length=n_tokens)
    return pool.at[rows[req], jnp.arange(n_tokens) - offsets[req]].set(flat_in.astype(jnp.int32), mode="drop")


def plain_windowed_scatter(flat_in, offsets, rows, start_cols, pool):
    """``plain_xla_scatter`` with ``start_cols``: token ``t`` of request ``r`` to column ``start_cols[r] + t - offsets[r]``.

    Correct for well-formed windowed batches only (each request's tokens fit its
    row from its first column); the windowed baseline, never the library's path.
    """
    import jax.numpy as jnp

    (n_tokens,), (bs,) = flat_in.shape, rows.shape
    req = jnp.repeat(jnp.arange(bs), offsets[1:] - offsets[:-1], total_repeat_length=n_tokens)
    columns = start_cols[req] + jnp.arange(n_tokens) - offsets[req]
    return pool.at[rows[req], columns].set(flat_in.astype(jnp.int32), mode="drop")


@dataclasses.dataclass
class Step:
    """One jitted step of one case: ``implementation`` None for the step without the scatter."""

    label: str
    implementation: str | None
    fn: object
    args: tuple  # (x, w, flat_in, offsets, rows, start_cols or None): device arrays, or host ones re-copied each step
    pool: object
    fresh: bool
    windowed: bool = False

    def __call__(self) -> None:
        import jax

        x, w, *batch = self.args
        if self.fresh:
            batch = [None if a is None else jax.device_put(a) for a in batch]
        h, self.pool = self.fn(x, w, *batch, self.pool)
        jax.block_until_ready((h, self.pool))


def make_step(implementation: str | None, matmuls: int, windowed: bool = False):
    """The jitted step (see the module docstring): ``(x, w, flat_in, offsets, rows, start_cols, pool) -> (h, pool)``,
    pool donated; ``start_cols`` passed on where ``windowed`` (else it is None and unused).

    ``implementation`` None: no scatter. ``DEFAULT``: ``implementation=None``. ``PLAIN``: ``plain_xla_scatter``
    (``plain_windowed_scatter`` where ``windowed``).
    """
    import jax
    import jax.numpy as jnp

    from kv_canary_jax import scatter_req_token_ids

    def step(x, w, flat_in, offsets, rows, start_cols, pool):
        h = x
        for _ in range(matmuls):  # a chain: each matmul needs the one before
            h = jnp.dot(h, w, preferred_element_type=jnp.bfloat16)
        if implementation == PLAIN:
            pool = (plain_windowed_scatter(flat_in, offsets, rows, start_cols, pool) if windowed
                    else plain_xla_scatter(flat_in, offsets, rows, pool))
        elif implementation is not None:
            choice = None if implementation == DEFAULT else implementation
            windows = {"start_cols": start_cols} if windowed else {}
            pool = scatter_req_token_ids(flat_in, offsets, rows, pool, implementation=choice, **windows)
        return h, pool

    return jax.jit(step, donate_argnums=6)


def default_name() -> str:
    """What ``implementation=None`` runs on JAX's default platform here."""
    from kv_canary_jax import implementations, platforms

    ((_, name),) = implementations.choice(None, platforms.default_platform(), False)
    return name


# --clock: wall time, or the CPU time of this process's threads (on a CPU backend, what a loaded machine's other
# processes do not inflate; it misses a GPU's time, so it is for CPU runs only).
CLOCKS = {"wall": time.perf_counter, "process": time.process_time}


def median_step_us(step: Step, steps: int, clock=time.perf_counter) -> float:
    """The median time (``clock``, wall by default) of ``steps`` synced calls of ``step``, in microseconds."""
    times = []
    for _ in range(steps):
        start = clock()
        step()
        times.append(clock() - start)
    return statistics.median(times) * 1e6


def spread(values: list[float]) -> dict:
    """``median``, quartiles ``q1``/``q3`` and ``min``/``max`` of per-round figures."""
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else (values[0],) * 3
    return {"median": statistics.median(values), "q1": q1, "q3": q3, "min": min(values), "max": max(values)}


def agrees(step: Step, expected) -> bool:
    return np.array_equal(np.asarray(step.pool), expected)


def run_case(case: str, implementations, args) -> tuple[list[dict], list[str]]:
    """The rows of one case (one per implementation, and with ``args.windowed`` one more per windowed one) and the
    labels of those that disagreed with the reference."""
    import jax
    import jax.numpy as jnp

    from shared_spec.reference import scatter_reference

    bs, seq, ragged, aligned = parse_case(case)
    host = make_inputs(bs, seq, ragged, aligned=aligned)
    start_cols = append_columns(host[1], host[3].shape[1])
    expected = {False: scatter_reference(*host), True: scatter_reference(*host, start_cols)}
    key_x, key_w = jax.random.split(jax.random.key(0))
    x = jax.random.normal(key_x, (args.size, args.size), jnp.bfloat16)
    w = jax.random.normal(key_w, (args.size, args.size), jnp.bfloat16) / np.sqrt(args.size)  # keeps h bounded
    batch = (*host[:3], start_cols) if args.fresh_inputs else tuple(jax.device_put(a) for a in (*host[:3], start_cols))
    labels = [("without", None, False)] + [(i, i, False) for i in implementations]
    if args.windowed:
        labels += [(i + WINDOWED, i, True) for i in implementations if i in (*IMPLEMENTATIONS, PLAIN)]
    steps = {
        label: Step(label, impl, make_step(impl, args.matmuls, windowed), (x, w, *batch[:3], batch[3] if windowed else None),
                    jax.device_put(host[3]), args.fresh_inputs, windowed)
        for label, impl, windowed in labels
    }
    for step in steps.values():
        for _ in range(max(1, args.warmup)):
            step()
    failed = [label for label, step in steps.items() if step.implementation and not agrees(step, expected[step.windowed])]
    clock = CLOCKS[getattr(args, "clock", "wall")]
    samples = interleaved_samples(steps, lambda step: median_step_us(step, args.steps, clock), args.rounds)
    failed += [label for label, step in steps.items() if step.implementation and not agrees(step, expected[step.windowed])]
    without = samples["without"]
    rows = []
    for label, step in steps.items():
        if step.implementation is None:
            continue
        marginal = [with_ - without_ for with_, without_ in zip(samples[label], without)]
        impl = step.implementation
        rows.append({
            "case": case, "tokens": int(host[0].shape[0]), "implementation": impl, "windowed": step.windowed,
            "runs": default_name() if impl == DEFAULT else impl,
            "step_without_us": statistics.median(without), "step_with_us": statistics.median(samples[label]),
            "marginal_us": spread(marginal),
        })
    unwindowed = {r["implementation"]: r["marginal_us"]["median"] for r in rows if not r["windowed"]}
    for r in rows:
        base = unwindowed.get(r["implementation"])
        r["over_unwindowed"] = (r["marginal_us"]["median"] / base if r["windowed"] and base is not None and base > 0
                                else None)
    plain = {r["windowed"]: r["marginal_us"]["median"] for r in rows if r["implementation"] == PLAIN}
    for r in rows:
        base = plain.get(r["windowed"])
        r["vs_plain"] = r["marginal_us"]["median"] / base if base is not None and base > 0 else None
    return rows, sorted(set(failed))


def table(rows: list[dict]) -> str:
    """The rows as markdown; a last column, windowed over unwindowed, where some row is windowed."""
    windowed = any(r["windowed"] for r in rows)
    head = ("| case | tokens | implementation | step without us | step with us | marginal us (median) "
            "| marginal IQR us | marginal min-max us | vs plain |" + (" windowed / unwindowed |" if windowed else ""))
    lines = [head, "|" + "---|" * (9 + windowed)]
    for r in rows:
        m = r["marginal_us"]
        name = {DEFAULT: f"default ({r['runs']})", PLAIN: "plain (what a user writes)"}.get(r["implementation"], r["implementation"])
        name += ", start_cols" if r["windowed"] else ""
        vs = "" if r["vs_plain"] is None else f"{r['vs_plain']:.2f}x"
        over = "" if r["over_unwindowed"] is None else f" {r['over_unwindowed']:.3f}x |"
        lines.append(
            f"| {r['case']} | {r['tokens']} | {name} | {r['step_without_us']:.1f} | {r['step_with_us']:.1f} "
            f"| {m['median']:.1f} | {m['q1']:.1f} to {m['q3']:.1f} | {m['min']:.1f} to {m['max']:.1f} | {vs} |"
            + ((over or " |") if windowed else "")
        )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m kv_canary.bench_step", description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", help=f"BSxSEQ[r][a], repeatable (default: {' '.join(CASES)})")
    ap.add_argument("--impl", action="append", choices=(*IMPLEMENTATIONS, PLAIN, DEFAULT),
                    help="repeatable (default: every one that runs here, plain, and default)")
    ap.add_argument("--rounds", type=int, help=f"default {ROUNDS} ({SHORT_ROUNDS} with --short)")
    ap.add_argument("--steps", type=int, help=f"timed steps per step and round (default {STEPS}, {SHORT_STEPS} with --short)")
    ap.add_argument("--warmup", type=int, default=WARMUP)
    ap.add_argument("--size", type=int, help=f"side of the bf16 matmuls (default {SIZE}, {SHORT_SIZE} with --short)")
    ap.add_argument("--matmuls", type=int, default=MATMULS)
    ap.add_argument("--fresh-inputs", action="store_true", help="copy the batch to the device before every step")
    ap.add_argument("--windowed", action="store_true",
                    help="also each of mosaic, pallas, xla, plain with start_cols (an append position per request), "
                         "with the ratio over the unwindowed marginal cost")
    ap.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                    help="wall (default), or process: this process's CPU time (CPU runs on a loaded machine)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--short", action="store_true", help=f"the CPU variant: cases {' '.join(SHORT_CASES)}, smaller matmuls, fewer steps")
    return ap


def run(args) -> int:
    """The bench for parsed ``args`` (see the module docstring); 1 if a result disagreed with the reference."""
    import jax

    jax.config.update("jax_enable_x64", True)
    from kv_canary_jax import available_implementations

    for name, full, short in (("rounds", ROUNDS, SHORT_ROUNDS), ("steps", STEPS, SHORT_STEPS), ("size", SIZE, SHORT_SIZE)):
        if getattr(args, name) is None:
            setattr(args, name, short if args.short else full)
    implementations = args.impl or [i for i in IMPLEMENTATIONS if i in available_implementations()] + (
        [] if args.windowed else [PLAIN, DEFAULT])
    meta = {"python": platform.python_version(), "jax": jax.__version__, "device": jax.devices()[0].device_kind,
            "size": args.size, "matmuls": args.matmuls, "rounds": args.rounds, "steps": args.steps,
            "fresh_inputs": args.fresh_inputs, "windowed": args.windowed, "clock": args.clock}
    rows, failed = [], []
    for case in args.case or (SHORT_CASES if args.short else CASES):
        case_rows, case_failed = run_case(case, implementations, args)
        rows += case_rows
        failed += [f"{case} {label}" for label in case_failed]
        for r in case_rows:
            print(f"{case} {r['implementation']}{WINDOWED * r['windowed']}: marginal {r['marginal_us']['median']:.1f} us", file=sys.stderr, flush=True)
    default = next((r["runs"] for r in rows if r["implementation"] == DEFAULT), None)
    if args.json:
        print(json.dumps({"meta": meta, "rows": rows, "default": default}, indent=1))
    else:
        print(", ".join(f"{k} {v}" for k, v in meta.items()) + "\n\n" + table(rows))
    if failed:
        print("disagrees with the reference: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    return run(parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
