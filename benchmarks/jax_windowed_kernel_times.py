"""The JAX windowed kernels against the unwindowed ones on the same bytes, on the GPU profiler's clock (GPU).

    python benchmarks/jax_windowed_kernel_times.py [--impl pallas --impl mosaic] [--case 256x8192 ...]
        [--rounds 5] [--calls 5]
    python benchmarks/jax_windowed_kernel_times.py --smoke   # any machine: a tiny case, checked, not timed

For each case (default: ``kv_canary.bench_step.CASES``, the jitted step's batches) and implementation (``pallas``,
``mosaic``) three variants of ``scatter_req_token_ids`` on ``kv_canary.bench.make_inputs``' batch: *unwindowed*
(no ``start_cols``), *zeros* (``start_cols`` all 0: the same cells) and *append* (``start_cols`` an append position
per request, ``kv_canary.bench_incremental.append_columns``: every token still written, the same bytes). Each
variant is ``kv_canary.bench.jax_chain``'s jitted chain of ``CHAIN`` applications on a donated pool of its own,
checked against ``shared_spec.reference.scatter_reference``; then ``--rounds`` interleaved rounds
(``kv_canary.bench.interleaved_samples``, the order rotated each round) each trace ``--calls`` calls of every
variant's chain under ``jax.profiler`` (``kv_canary.device_trace``, as ``benchmarks/jax_kernel_times.py`` does) and
keep, per variant, the median of its kernels' own durations (the device's records of the kernels named
``kv_canary...``) and the chained device figure (``device_trace.chained_device_us``: kernel plus the device's gap
before it). Printed per case and implementation: each variant's kernel duration (median over rounds, us), and the
windowed variants' ratios over the unwindowed one: per round the windowed figure over the unwindowed figure of the
same round, the median over rounds (a drift of the machine moves a round's variants alike); ``chain`` the same
ratio of the chained device figures. The bar these serve: every ratio within 1.05.

``--smoke`` (any machine): the case ``SMOKE_CASE`` in the Pallas interpreter (``interpret=True``), each variant
applied once and checked against the reference; nothing is timed (the interpreter runs no GPU kernel). Without a
GPU and without ``--smoke`` it says so and exits 0 without measuring. Exit status 1 when a variant disagrees with
the reference.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from kv_canary import device_trace
from kv_canary.bench import CHAIN, KERNEL_MARKER, interleaved_samples, jax_chain, make_inputs, parse_case
from kv_canary.bench_incremental import append_columns
from kv_canary.bench_step import CASES
from shared_spec.reference import scatter_reference

IMPLEMENTATIONS = ("pallas", "mosaic")
VARIANTS = ("unwindowed", "zeros", "append")
SMOKE_CASE = "4x16"
NO_GPU = ("jax_windowed_kernel_times: no GPU here: the kernels' durations come from the profiler's GPU records, so "
          "nothing was measured (--smoke checks a tiny case in the interpreter)")


def variant_inputs(case: str) -> dict:
    """``{variant: (flat_in, offsets, rows, start_cols or None, pool, expected)}`` (numpy) of one case."""
    bs, seq, ragged, aligned = parse_case(case)
    flat_in, offsets, rows, pool = make_inputs(bs, seq, ragged, aligned=aligned)
    columns = {"unwindowed": None, "zeros": np.zeros(bs, np.int64), "append": append_columns(offsets, pool.shape[1])}
    return {name: (flat_in, offsets, rows, cols, pool, scatter_reference(flat_in, offsets, rows, pool, cols))
            for name, cols in columns.items()}


def applier(implementation: str, windowed: bool, interpret: bool):
    """``apply(flat_in, offsets, (rows, start_cols), pool) -> pool``: one application of the implementation (the
    rows and ``start_cols`` travel as one argument, the shape ``bench.jax_chain`` threads)."""
    from kv_canary_jax import scatter_req_token_ids

    def apply(flat_in, offsets, rows_and_cols, pool):
        rows, start_cols = rows_and_cols
        windows = {"start_cols": start_cols} if windowed else {}
        return scatter_req_token_ids(flat_in, offsets, rows, pool, implementation=implementation,
                                     interpret=interpret, **windows)

    return apply


def device_args(flat_in, offsets, rows, start_cols):
    import jax

    return jax.device_put(flat_in), jax.device_put(offsets), (jax.device_put(rows), jax.device_put(
        start_cols if start_cols is not None else np.zeros(0, np.int64)))


def smoke(implementations) -> int:
    """Each variant of ``SMOKE_CASE`` applied once in the interpreter and checked; prints a line per check."""
    import jax

    failed = 0
    for implementation in implementations:
        for name, (flat_in, offsets, rows, cols, pool, expected) in variant_inputs(SMOKE_CASE).items():
            apply = jax.jit(applier(implementation, cols is not None, interpret=True))
            got = np.asarray(apply(*device_args(flat_in, offsets, rows, cols), jax.device_put(pool)))
            agrees = np.array_equal(got, expected)
            failed += not agrees
            print(f"{SMOKE_CASE} {implementation} {name}: {'agrees with' if agrees else 'DISAGREES with'} the reference"
                  " (interpreted, not timed)")
    return 1 if failed else 0


def measure(inputs: dict, case: str, implementation: str, rounds: int, calls: int, interpret: bool = False) -> dict:
    """``{variant: {"kernel": [us per round], "chain": [us per round]}}`` of one case (``variant_inputs``) and
    implementation; NaN where the trace holds no kernel (``interpret``: the interpreter runs none, the CPU test's)."""
    import jax

    chains = {}
    for name, (flat_in, offsets, rows, cols, pool, expected) in inputs.items():
        args = device_args(flat_in, offsets, rows, cols)
        fns, _ = jax_chain(applier(implementation, cols is not None, interpret), args, pool, expected,
                           f"{case} {implementation} {name}")
        chains[name] = (fns[CHAIN], args, pool, expected)

    def timed(chain) -> tuple:
        fn, args, pool, _ = chain
        data = device_trace.trace_calls(fn, args, jax.device_put(pool), calls)
        events = device_trace.kernel_events(data, KERNEL_MARKER) if data is not None else []
        if not events:
            return float("nan"), float("nan")
        chained = device_trace.chained_device_us(events, CHAIN)
        return statistics.median(d for _, d in events), chained if chained is not None else float("nan")

    samples = interleaved_samples(chains, timed, rounds)
    for name, (fn, args, pool, expected) in chains.items():  # the chain of the timed calls, once more, checked
        out = np.asarray(fn(*args, jax.device_put(pool)))
        assert np.array_equal(out, expected), f"{case} {implementation} {name} disagrees with the reference"
    return {name: {"kernel": [k for k, _ in per], "chain": [c for _, c in per]} for name, per in samples.items()}


def ratios(figures: dict, variant: str, what: str) -> float:
    """The median over rounds of ``variant``'s ``what`` figure over the unwindowed one of the same round."""
    pairs = zip(figures[variant][what], figures["unwindowed"][what])
    return statistics.median(w / u for w, u in pairs) if figures[variant][what] else float("nan")


def table_row(case: str, implementation: str, tokens: int, figures: dict) -> str:
    kernel = {name: statistics.median(f["kernel"]) for name, f in figures.items()}
    cells = [case, str(tokens), implementation, f"{kernel['unwindowed']:.2f}"]
    for variant in VARIANTS[1:]:
        cells += [f"{kernel[variant]:.2f}", f"{ratios(figures, variant, 'kernel'):.3f}",
                  f"{ratios(figures, variant, 'chain'):.3f}"]
    return "| " + " | ".join(cells) + " |"


HEADER = ("| case | tokens | implementation | unwindowed kernel | zeros kernel | ratio | chain ratio | append kernel | ratio "
          "| chain ratio |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", action="append", choices=IMPLEMENTATIONS)
    parser.add_argument("--case", action="append")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5, help="traced calls of each chain per round")
    parser.add_argument("--smoke", action="store_true", help="a tiny case in the interpreter, checked, not timed")
    args = parser.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    implementations = args.impl or list(IMPLEMENTATIONS)
    if args.smoke:
        return smoke(implementations)
    if jax.devices()[0].platform != "gpu":
        print(NO_GPU, file=sys.stderr)
        return 0
    print(f"jax {jax.__version__} {jax.devices()[0].device_kind}; us, kernel durations on the profiler's clock, "
          f"median of {args.rounds} interleaved rounds of {args.calls} traced calls of a {CHAIN}-application chain",
          flush=True)
    print(HEADER, flush=True)
    for case in args.case or CASES:
        inputs = variant_inputs(case)
        tokens = int(inputs["unwindowed"][1][-1])
        for implementation in implementations:
            figures = measure(inputs, case, implementation, args.rounds, args.calls)
            print(table_row(case, implementation, tokens, figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
