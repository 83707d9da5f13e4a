"""The ``xla`` path against ``plain`` in a server-like jitted step on the CPU (developer script).

``kv-canary bench --step`` times the GPU step and on a CPU only its ``--short`` variant; this runs that step
(``kv_canary.bench_step``'s step and measurement, reused as they are) on the CPU at the six cases the ``xla`` path's
CPU bar is set on, for ``xla`` and ``plain``, unwindowed and with ``start_cols`` (``plain_windowed_scatter``), and
prints per case the marginal costs (medians of interleaved rounds) and the same-run ratios ``xla / plain``, with
whether the bar holds: ``xla`` at most ``BAR_RATIO`` times ``plain`` or at most ``BAR_US`` more. Exit status 0 when
every result agrees with the reference (``bench_step``'s check), 1 otherwise; the bar is reported, not enforced.
``--assign`` times ``assign_req_to_token_pool``'s ``xla`` path against the plain XLA assignment instead, in
``kv_canary.bench_assign``'s JAX step (its cases and table, this script's rounds, steps and step size).

    PYTHONPATH=. python benchmarks/xla_cpu_step.py [--case BSxSEQ[r] ...] [--rounds 9] [--steps 20] [--clock process] [--json]
    PYTHONPATH=. python benchmarks/xla_cpu_step.py --assign [--rounds 9] [--steps 20] [--clock process]
"""

from __future__ import annotations

import argparse
import json
import sys

from kv_canary import bench_step

CASES = ("16x2048", "64x512", "64x2048", "64x8192", "1024x128", "64x2048r")
ROUNDS, STEPS, SIZE = 9, 20, 256
BAR_RATIO, BAR_US = 1.1, 10.0


def holds(xla_us: float, plain_us: float) -> bool:
    """The bar: ``xla`` at most ``BAR_RATIO`` times ``plain``, or at most ``BAR_US`` more."""
    return xla_us <= BAR_RATIO * plain_us or xla_us - plain_us <= BAR_US


def verdicts(rows: list[dict]) -> list[dict]:
    """Per case and windowedness: ``xla_us``, ``plain_us``, ``ratio`` and ``bar`` (whether the bar holds)."""
    out = []
    for r in rows:
        if r["implementation"] != "xla":
            continue
        (plain,) = [p for p in rows if p["case"] == r["case"] and p["windowed"] == r["windowed"]
                    and p["implementation"] == bench_step.PLAIN]
        xla_us, plain_us = r["marginal_us"]["median"], plain["marginal_us"]["median"]
        out.append({"case": r["case"], "windowed": r["windowed"], "xla_us": xla_us, "plain_us": plain_us,
                    "ratio": r["vs_plain"], "bar": holds(xla_us, plain_us)})
    return out


def assign_verdicts(rows: list[dict]) -> list[dict]:
    """Per assignment case: ``xla_us``, ``plain_us``, ``ratio`` and ``bar``, from ``bench_assign.measure_jax``'s rows."""
    out = []
    for r in rows:
        xla_us, plain_us = r["xla_marginal_us"]["median"], r["plain_marginal_us"]["median"]
        out.append({"case": r["case"], "xla_us": xla_us, "plain_us": plain_us, "ratio": r["xla_vs_plain"],
                    "bar": holds(xla_us, plain_us)})
    return out


def run_assign(rounds: int, steps: int, size: int, as_json: bool, clock: str = "wall") -> int:
    """``--assign`` (module docstring); every table is checked against the reference by ``measure_jax``."""
    from kv_canary import bench_assign

    config = bench_assign.Config(device="cpu", size=size, steps=steps, jax_rounds=rounds, clock=clock)
    rows = bench_assign.measure_jax(config, say=lambda line: print(line, file=sys.stderr, flush=True))
    result = assign_verdicts(rows)
    if as_json:
        print(json.dumps({"rows": rows, "verdicts": result}, indent=1))
        return 0
    print("| case | xla us | plain us | xla / plain | bar |\n|---|---|---|---|---|")
    for v in result:
        ratio = "" if v["ratio"] is None else f"{v['ratio']:.2f}x"
        print(f"| {v['case']} | {v['xla_us']:.1f} | {v['plain_us']:.1f} | {ratio} | {'holds' if v['bar'] else 'MISSED'} |")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--size", type=int, default=SIZE)
    ap.add_argument("--no-windowed", action="store_true", help="unwindowed rows only")
    ap.add_argument("--clock", choices=tuple(bench_step.CLOCKS), default="wall",
                    help="process: the CPU time of this process (robust to other processes on a loaded machine)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--assign", action="store_true", help="the assignment's xla path against the plain assignment")
    mine = ap.parse_args(argv)
    if mine.assign:
        import jax

        jax.config.update("jax_enable_x64", True)
        return run_assign(mine.rounds, mine.steps, mine.size, mine.json, mine.clock)
    args = bench_step.parser().parse_args(["--size", str(mine.size), "--rounds", str(mine.rounds),
                                           "--steps", str(mine.steps), "--clock", mine.clock] + ([] if mine.no_windowed else ["--windowed"]))
    import jax

    jax.config.update("jax_enable_x64", True)
    rows, failed = [], []
    for case in mine.case or CASES:
        case_rows, case_failed = bench_step.run_case(case, ["xla", bench_step.PLAIN], args)
        rows += case_rows
        failed += [f"{case} {label}" for label in case_failed]
        for v in verdicts(case_rows):
            print(f"{case}{bench_step.WINDOWED * v['windowed']}: xla {v['xla_us']:.1f} us, plain {v['plain_us']:.1f} us",
                  file=sys.stderr, flush=True)
    result = verdicts(rows)
    if mine.json:
        print(json.dumps({"jax": jax.__version__, "device": jax.devices()[0].device_kind, "rounds": mine.rounds, "clock": mine.clock,
                          "steps": mine.steps, "size": mine.size, "rows": rows, "verdicts": result}, indent=1))
    else:
        print(bench_step.table(rows) + "\n")
        print("| case | windowed | xla us | plain us | xla / plain | bar |\n|---|---|---|---|---|---|")
        for v in result:
            ratio = "" if v["ratio"] is None else f"{v['ratio']:.2f}x"
            print(f"| {v['case']} | {'yes' if v['windowed'] else 'no'} | {v['xla_us']:.1f} | {v['plain_us']:.1f} "
                  f"| {ratio} | {'holds' if v['bar'] else 'MISSED'} |")
    if failed:
        print("disagrees with the reference: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
