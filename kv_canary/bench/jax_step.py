"""``kv-canary bench --step`` and the JAX half of ``--assign``: the op's marginal cost in a jitted serving-like step.

Runs in a child process that imports no torch (``python -m kv_canary.bench.jax_step scatter assign``: one JSON object
on stdout), with JAX's defaults: x64 off, int32 indices. The step: ``MATMULS`` bf16 ``SIZE x SIZE`` matmuls in a chain
(a decode step's model work) and the op into the donated pool, one ``jax.jit``, synced every step as a server syncs to
sample; the step *without* the op takes the same arguments. Per case, that step and one per implementation
(``default``: ``implementation=None``; each of ``available_implementations()``; ``plain``: what a JAX user writes by
hand, ``jnp.repeat`` and one ``.at[].set(mode="drop")``, right for well-formed batches only) are compiled, run
``WARMUP`` times and checked against the reference, then timed in ``ROUNDS`` interleaved rounds of ``STEPS`` steps
(each round's median). An implementation's marginal cost is, per round, its median less the step without's: the median
over rounds with quartiles and range; ``noise_us`` is the range of the step without's round medians; ``vs_plain`` a
ratio of medians. The pools are checked again after the timing.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time

import numpy as np

from kv_canary.bench import timing
from shared_spec import arg_specs
from shared_spec.reference import assign_reference, scatter_reference

SCATTER_CASES = ("64x8192", "256x2048", "256x8192", "256x32768", "4096x512", "256x8192r", "256x64")
SIZE, MATMULS = 2048, 4
ROUNDS, STEPS, WARMUP = 5, 60, 5
DEFAULT, PLAIN = "default", "plain"


def plain_scatter(flat_in, offsets, rows, pool):
    import jax.numpy as jnp

    (n,), (bs,) = flat_in.shape, rows.shape
    req = jnp.repeat(jnp.arange(bs), offsets[1:] - offsets[:-1], total_repeat_length=n)
    return pool.at[rows[req], jnp.arange(n) - offsets[req]].set(flat_in.astype(jnp.int32), mode="drop")


def plain_assign(rows, start, end, loc, table):
    import jax.numpy as jnp

    (n,), (bs,) = loc.shape, rows.shape
    lengths = end - start
    req = jnp.repeat(jnp.arange(bs), lengths, total_repeat_length=n)
    columns = start[req] + jnp.arange(n) - (jnp.cumsum(lengths) - lengths)[req]
    return table.at[rows[req], columns].set(loc.astype(jnp.int32), mode="drop")


def op_of(kind: str, implementation: str):
    """``(*batch, pool) -> pool`` of ``kind`` (``"scatter"``: flat_in, offsets, rows; ``"assign"``: rows, start, end,
    loc) by ``implementation``."""
    if implementation == PLAIN:
        return plain_scatter if kind == "scatter" else plain_assign
    from kv_canary_jax import assign_req_to_token_pool, scatter_req_token_ids

    choice = None if implementation == DEFAULT else implementation
    if kind == "scatter":
        return lambda f, o, r, pool: scatter_req_token_ids(f, o, r, pool, implementation=choice)
    return lambda r, s, e, loc, table: assign_req_to_token_pool(r, table, s, e, loc, implementation=choice)


class Step:
    """A jitted step ``(x, w, *batch, pool) -> (h, pool)``, the pool donated and threaded through calls."""

    def __init__(self, op, x, w, batch, pool):
        import jax
        import jax.numpy as jnp

        def step(x, w, *args):
            *inputs, pool = args
            h = x
            for _ in range(MATMULS):  # a chain: each matmul needs the one before
                h = jnp.dot(h, w, preferred_element_type=jnp.bfloat16)
            return h, (pool if op is None else op(*inputs, pool))

        self.fn = jax.jit(step, donate_argnums=2 + len(batch))
        self.args, self.pool = (x, w, *batch), jax.device_put(pool)

    def __call__(self) -> None:
        import jax

        h, self.pool = self.fn(*self.args, self.pool)
        jax.block_until_ready((h, self.pool))


def median_step_us(step: Step, steps: int) -> float:
    times = []
    for _ in range(steps):
        begin = time.perf_counter()
        step()
        times.append(time.perf_counter() - begin)
    return statistics.median(times) * 1e6


def measure_case(kind: str, label: str, batch: tuple, pool: np.ndarray, expected: np.ndarray, implementations,
                 failures: list, rounds=ROUNDS, steps=STEPS, warmup=WARMUP, size=SIZE) -> dict:
    import jax
    import jax.numpy as jnp

    key_x, key_w = jax.random.split(jax.random.key(0))
    x = jax.random.normal(key_x, (size, size), jnp.bfloat16)
    w = jax.random.normal(key_w, (size, size), jnp.bfloat16) / np.sqrt(size)  # keeps h bounded
    batch = tuple(jax.device_put(a) for a in batch)
    runs, row = {"without": Step(None, x, w, batch, pool)}, {"case": label, "errors": {}}
    for implementation in implementations:
        try:
            runs[implementation] = Step(op_of(kind, implementation), x, w, batch, pool)
            runs[implementation]()
        except Exception as error:  # every implementation offered here must run every case: a failure
            runs.pop(implementation, None)
            row["errors"][implementation] = f"{type(error).__name__}: {error}"
            failures.append(f"{kind} step {implementation} at {label}: {row['errors'][implementation]}")
    for run in runs.values():
        for _ in range(warmup):
            run()

    def checked():
        for name, run in runs.items():
            if name != "without" and not np.array_equal(np.asarray(run.pool), expected):
                failures.append(f"{kind} step {name} at {label}: the pool differs from shared_spec.reference")

    checked()
    samples = timing.interleaved_samples(runs, lambda run: median_step_us(run, steps), rounds)
    checked()
    without = samples.pop("without")
    row |= {"step_us": statistics.median(without), "noise_us": max(without) - min(without),
            "marginal_us": {name: timing.spread([a - b for a, b in zip(s, without)]) for name, s in samples.items()}}
    plain = row["marginal_us"].get(PLAIN, {}).get("median")
    row["vs_plain"] = {name: m["median"] / plain for name, m in row["marginal_us"].items() if plain and plain > 0}
    return row


def measure(kinds, say) -> dict:
    import jax

    if jax.default_backend() != "gpu":
        return {"unavailable": f"JAX sees no GPU (its default backend is {jax.default_backend()})"}
    from kv_canary.bench.torch_parts import ASSIGN_CASES, assign_inputs
    from kv_canary_jax import available_implementations

    out = {"meta": {"jax": jax.__version__, "device": jax.devices()[0].device_kind}, "failures": [], "seconds": {}}
    begin = time.perf_counter()
    if "scatter" in kinds:
        implementations = [DEFAULT, *[i for i in available_implementations() if i not in (DEFAULT, PLAIN)], PLAIN]
        out["step"] = []
        for name in SCATTER_CASES:
            flat_in, offsets, rows, pool = arg_specs.make_batch(name, dtype=np.int32)
            expected = scatter_reference(flat_in, offsets, rows, pool)
            out["step"].append(measure_case("scatter", name, (flat_in, offsets, rows), pool, expected, implementations,
                                            out["failures"]) | {"tokens": int(flat_in.shape[0])})
            say(f"step {name}: " + ", ".join(f"{k} {v['median']:.1f} us" for k, v in out["step"][-1]["marginal_us"].items()))
        out["seconds"]["step"] = time.perf_counter() - begin
    if "assign" in kinds:
        begin = time.perf_counter()
        out["assign_step"] = []
        for label, bs, new in ASSIGN_CASES:
            rows, table, start, end, loc = assign_inputs(bs, new, dtype=np.int32)
            expected = assign_reference(rows, table, start, end, loc)
            out["assign_step"].append(measure_case("assign", label, (rows, start, end, loc), table, expected,
                                                   [DEFAULT, "xla", PLAIN], out["failures"]) | {"slots": int(loc.shape[0])})
            say(f"assign step {label}: " + ", ".join(
                f"{k} {v['median']:.1f} us" for k, v in out["assign_step"][-1]["marginal_us"].items()))
        out["seconds"]["assign"] = time.perf_counter() - begin
    return out


if __name__ == "__main__":
    with contextlib.redirect_stdout(sys.stderr):  # stdout: the JSON alone
        found = measure(sys.argv[1:], lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(found))
