"""Host cost per application of each Pallas GPU lowering: chained wall clock minus device clock (GPU).

    python benchmarks/mosaic_host_cost.py [--case 256x2048 ...] [--rounds 5] [--json]

For each case, ``scatter_req_token_ids`` with ``implementation="pallas"`` and
``"mosaic"`` (whichever run here), and for three all but empty kernels (each
rewrites one cell of the pool: the Triton lowering and Mosaic GPU with the
pool alone, and Mosaic GPU with the scatter's four operands), in interleaved
rounds (``kv_canary.bench.interleaved_samples``), per round:

- wall: ``kv-canary bench``'s chained figure, a ``CHAIN``-application jit
  minus a one-application jit (the pool donated, each call synced), over
  ``CHAIN - 1``, from the medians of ``REPEATS`` alternating calls of each;
- device: the same ``CHAIN``-application jit on the device clock
  (``kv_canary.bench.jax_device_chained_us``: profiler kernel timestamps);
- host: wall minus device, the host's work per application that the device
  clock does not see.

Printed per row: the medians over rounds, and the host figure's range. Then,
per case, what our kernel's call adds on the host beyond an empty Mosaic GPU
kernel's (mosaic host minus 'mosaic empty, pool'), and what three more
operands cost ('mosaic empty, 4 operands' minus 'mosaic empty, pool'): where
both are within the rounds' spread of zero, the Mosaic GPU host cost is the
custom call's own (XLA's per-execution prepare and initialize stages of
``mosaic_gpu_v2``), not our kernel's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DEFAULT_CASES = ("1x128", "64x8192", "256x2048", "256x8192r", "1024x2048", "4096x512")
REPEATS = 20
EMPTY_POOL, EMPTY_FOUR = "mosaic empty, pool", "mosaic empty, 4 operands"


def empty_mosaic_four_operands(f, o, r, pool):
    """An all but empty Mosaic GPU kernel with the scatter's operands: three read-only arrays and the pool, aliased."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def write(pool_ref):
        def body(f_ref, o_ref, r_ref, ref):  # one cell rewritten: a kernel Pallas cannot drop
            ref[0, 0] = ref[0, 0]

        mesh = plgpu.Mesh(grid=(1,), grid_names=("x",))
        pl.kernel(body, out_type=(), mesh=mesh, name="kv_canary_empty_mosaic4")(f, o, r, pool_ref)

    return pl.run_state(write)(pool)


class Chain:
    """One row: the one- and ``CHAIN``-application jits of ``apply`` (``kv_canary.bench.jax_chain``), pools threaded through."""

    def __init__(self, name, apply, args, pool, expected):
        from kv_canary.bench import jax_chain

        self.fns, self.pools = jax_chain(apply, args, pool, expected, name)  # compiles both, checks one application
        self.name, self.args, self.host_pool = name, args, pool

    def wall_us(self) -> float:
        from kv_canary.bench import chained_wall_s

        return chained_wall_s(self.fns, self.args, self.pools, REPEATS) * 1e6

    def device_us(self) -> float:
        from kv_canary.bench import CHAIN, jax_device_chained_us

        us = jax_device_chained_us(self.fns[CHAIN], self.args, self.host_pool)
        return float("nan") if us is None else us

    def measure(self) -> dict:
        wall, device = self.wall_us(), self.device_us()
        return {"wall": wall, "device": device, "host": wall - device}


def chains(cases) -> list[Chain]:
    import jax
    import numpy as np

    from kv_canary.bench import make_inputs, parse_case
    from kv_canary_jax import available_implementations, scatter_req_token_ids
    from mosaic_launch_floor import empty_kernels
    from shared_spec.reference import scatter_reference

    pool = np.full((8, 128), -7, np.int32)
    unused = tuple(jax.device_put(np.zeros(1, np.int64)) for _ in range(3))
    impls = [i for i in ("pallas", "mosaic") if i in available_implementations()]
    floors = {**empty_kernels(), EMPTY_FOUR: empty_mosaic_four_operands}
    floors[EMPTY_POOL] = floors.pop("mosaic empty")
    if "pallas" not in impls:  # a JAX without the Triton lowering
        del floors["pallas-triton empty"]
    out = [Chain(name, apply, unused, pool, pool) for name, apply in floors.items()]
    for case in cases:
        bs, seq, ragged, aligned = parse_case(case)
        inputs = make_inputs(bs, seq, ragged, aligned=aligned)
        args = tuple(jax.device_put(x) for x in inputs[:3])
        expected = scatter_reference(*inputs)
        for impl in impls:
            def apply(f, o, r, p, impl=impl):
                return scatter_req_token_ids(f, o, r, p, implementation=impl)

            out.append(Chain(f"{impl} {case}", apply, args, inputs[3], expected))
        print(f"compiled {case}", file=sys.stderr, flush=True)
    return out


def summary(samples: dict) -> dict:
    """Per row: the medians over rounds of wall, device and host, and the host figure's range."""
    out = {}
    for name, rounds in samples.items():
        host = [r["host"] for r in rounds]
        out[name] = {key: statistics.median(r[key] for r in rounds) for key in ("wall", "device", "host")}
        out[name] |= {"host_min": min(host), "host_max": max(host)}
    return out


def ours(rows: dict, cases) -> list[str]:
    """What our kernel's call and its operands add on the host, beside an empty Mosaic GPU kernel's call."""
    floor = rows.get(EMPTY_POOL, {}).get("host")
    if floor is None:
        return []
    lines = [f"three more operands (empty kernel, 4 operands - pool alone): {rows[EMPTY_FOUR]['host'] - floor:+.2f} us/app"]
    for case in cases:
        if f"mosaic {case}" in rows:
            lines.append(f"mosaic {case}: host {rows[f'mosaic {case}']['host']:.2f} us/app, "
                         f"{rows[f'mosaic {case}']['host'] - floor:+.2f} beyond the empty kernel's {floor:.2f}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="append")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    from kv_canary.bench import interleaved_samples

    cases = args.case or DEFAULT_CASES
    rows = {c.name: c for c in chains(cases)}
    table = summary(interleaved_samples(rows, Chain.measure, args.rounds))
    if args.json:
        print(json.dumps({"jax": jax.__version__, "device": jax.devices()[0].device_kind, "rows": table}, indent=1))
        return 0
    print(f"jax {jax.__version__} {jax.devices()[0].device_kind}; us per application, medians of {args.rounds} rounds")
    print(f"{'row':28s} {'wall':>8s} {'device':>8s} {'host':>8s}  host range")
    for name, r in table.items():
        print(f"{name:28s} {r['wall']:8.2f} {r['device']:8.2f} {r['host']:8.2f}  {r['host_min']:.2f} to {r['host_max']:.2f}")
    print("\n".join(ours(table, cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
