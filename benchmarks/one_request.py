"""A batch of one request: ``xla_one_request`` against what would run it otherwise (developer script).

Per token count (``--tokens``), one request into a ``POOL`` pool (sentinel-filled, donated), every result checked
against ``shared_spec``'s reference:

- ``alone``: each way jitted alone, us per call (wall, medians over ``--calls`` interleaved calls): the XLA path's
  formulations for more requests (``xla._enumeration`` unwindowed, ``xla_windowed._contiguous`` windowed, the
  assignment's), ``xla_one_request.write`` and ``plain`` (``jnp.repeat`` and one ``.at[].set``), unwindowed and
  windowed (``start_cols``);
- ``device`` (a GPU only): the same ways and the Pallas kernels (``mosaic`` windowed and not, ``pallas``) in
  ``kv_canary.bench_step``'s jitted step, the op's own kernels per step on the profiler's clock
  (``kv_canary.device_trace``), medians of ``--traces`` traces of ``STEPS`` steps.

    PYTHONPATH=. python benchmarks/one_request.py [--tokens 1 16 2048 32768] [--calls 300] [--traces 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

POOL = (257, 32769)
SENTINEL, ROW, FIRST_COLUMN = -7, 5, 100
STEPS = 20


def ways(kernels: bool) -> dict:
    """``{name: f(flat_in, offsets, rows, start_cols, pool) -> pool}``."""
    from kv_canary.bench_step import plain_windowed_scatter, plain_xla_scatter
    from kv_canary_jax import scatter_req_token_ids, xla, xla_one_request, xla_windowed

    n_rows, width = POOL
    found = {
        "former xla": lambda f, o, r, s, p: xla._enumeration(f, xla._cells(o, r, n_rows, width, f.shape[0]), p),
        "one request": lambda f, o, r, s, p: xla_one_request.write(f, o, r, p),
        "plain": lambda f, o, r, s, p: plain_xla_scatter(f, o, r, p),
        "former xla windowed": lambda f, o, r, s, p: xla_windowed._contiguous(f, o, r, p, s),
        "one request windowed": lambda f, o, r, s, p: xla_one_request.write(f, o, r, p, s),
        "plain windowed": lambda f, o, r, s, p: plain_windowed_scatter(f, o, r, s, p),
    }
    if kernels:
        found |= {
            "mosaic": lambda f, o, r, s, p: scatter_req_token_ids(f, o, r, p, implementation="mosaic"),
            "pallas": lambda f, o, r, s, p: scatter_req_token_ids(f, o, r, p, implementation="pallas"),
            "mosaic windowed": lambda f, o, r, s, p: scatter_req_token_ids(f, o, r, p, start_cols=s, implementation="mosaic"),
        }
    return found


def batch(tokens: int, seed: int = 0):
    """numpy ``(flat_in, offsets, rows, start_cols)`` of one request of ``tokens`` tokens."""
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 2**31 - 1, tokens).astype(np.int64), np.array([0, tokens], np.int64),
            np.array([ROW], np.int64), np.array([FIRST_COLUMN], np.int64))


def measure(tokens_list, calls: int, traces: int) -> list[dict]:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)  # this process's choice
    from kv_canary.bench_method import interleaved_samples
    from shared_spec import scatter_reference

    on_gpu = jax.default_backend() == "gpu"
    found = ways(on_gpu)
    rows_out = []
    for tokens in tokens_list:
        host = batch(tokens)
        args = tuple(jax.device_put(a) for a in host)
        fns = {name: jax.jit(f, donate_argnums=4) for name, f in found.items()}
        pools = {name: jnp.full(POOL, SENTINEL, jnp.int32) for name in fns}

        def timed(name):
            start = time.perf_counter()
            pools[name] = fns[name](*args, pools[name])
            pools[name].block_until_ready()
            return time.perf_counter() - start

        times = interleaved_samples({name: name for name in fns}, timed, calls)
        pool = np.full(POOL, SENTINEL, np.int32)
        expected = {False: scatter_reference(*host[:3], pool), True: scatter_reference(*host[:3], pool, start_cols=host[3])}
        for name in fns:
            assert np.array_equal(np.asarray(pools[name]), expected["windowed" in name]), f"{name} at {tokens} tokens"
        row = {"tokens": tokens, "alone_us": {name: statistics.median(t[calls // 10:]) * 1e6 for name, t in times.items()}}
        if on_gpu:
            row["device_us"] = device_figures(found, args, traces)
        rows_out.append(row)
    return rows_out


def device_figures(found: dict, args, traces: int) -> dict:
    """Per way, the kernels it adds to ``bench_step``'s step, us per step on the profiler's clock (median of ``traces``
    interleaved traces of ``STEPS`` steps)."""
    import jax
    import jax.numpy as jnp

    from kv_canary import bench_step, device_trace
    from kv_canary.bench_method import interleaved_samples

    key_x, key_w = jax.random.split(jax.random.key(0))
    x = jax.random.normal(key_x, (bench_step.SIZE, bench_step.SIZE), jnp.bfloat16)
    w = jax.random.normal(key_w, (bench_step.SIZE, bench_step.SIZE), jnp.bfloat16) / np.sqrt(bench_step.SIZE)

    def steps_of(fn):
        """``STEPS`` calls of ``bench_step``'s step (its matmuls, then ``fn`` on the donated pool; None: no op)."""
        def step(x, w, f, o, r, s, pool):
            h = x
            for _ in range(bench_step.MATMULS):
                h = jnp.dot(h, w, preferred_element_type=jnp.bfloat16)
            return h, (pool if fn is None else fn(f, o, r, s, pool))

        one = bench_step.Step("", None, jax.jit(step, donate_argnums=6), (x, w, *args), jnp.full(POOL, SENTINEL, jnp.int32),
                              False)
        one()  # compiled before any trace
        return lambda: [one() for _ in range(STEPS)]

    names = device_trace.kernel_names(device_trace.trace(steps_of(None)))
    samples = interleaved_samples({name: steps_of(fn) for name, fn in found.items()},
                                  lambda run: device_trace.added_kernel_us(run, names, STEPS), traces)
    return {name: statistics.median(us) for name, us in samples.items() if None not in us}  # None: no trace came back


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 2048, 32768])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--traces", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = measure(args.tokens, args.calls, args.traces)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for row in rows:
        for kind in ("alone_us", "device_us"):
            if kind in row:
                print(f"{row['tokens']:>6} tokens {kind[:-3]:>6}: " + ", ".join(f"{k} {v:.2f}" for k, v in row[kind].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
