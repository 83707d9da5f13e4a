"""``kv-canary``: the project's command line.

    kv-canary check [--json]   every frontend x backend here over the conformance cases
    kv-canary bench [--json] [--write docs/performance.md] [--quick] [--no-jax]
                               device and host times over sglang's grid (needs a GPU)
"""

from __future__ import annotations

import argparse
import json
import sys


def check(args) -> int:
    from kv_canary import matrix

    notes = matrix.prepare_environment()
    runners, skipped = matrix.collect_runners()
    say = (lambda *a: None) if args.json else print
    for note in notes:
        say(f"note: {note}")

    def progress(name, results):
        failed = sum(r.status == "fail" for r in results)
        say(f"  ran {name}: {len(results)} cases, {failed} failed")

    result = matrix.run_matrix(runners, skipped=skipped, progress=progress)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(render_table(result))
    return 0 if result.ok else 1


def bench(args) -> int:
    from kv_canary import bench as bench_module

    return bench_module.run(args)


def render_table(result) -> str:
    errors_same = all(result.errors_identical.values())
    results_same = all(result.results_identical.values())
    lines = [
        "",
        f"{'frontend/backend':<18} {'passed':>6} {'failed':>6} {'skipped':>7}",
        "-" * 40,
    ]
    for name, results in result.rows.items():
        counts = [sum(r.status == s for r in results) for s in ("pass", "fail", "skip")]
        lines.append(f"{name:<18} {counts[0]:>6} {counts[1]:>6} {counts[2]:>7}")
    lines.append("-" * 40)
    lines.append(
        f"errors identical across backends:  {'yes' if errors_same else 'NO'} "
        f"({sum(result.errors_identical.values())}/{len(result.errors_identical)} error cases)"
    )
    lines.append(
        f"results identical across backends: {'yes' if results_same else 'NO'} "
        f"({sum(result.results_identical.values())}/{len(result.results_identical)} value cases)"
    )
    for name, why in result.skipped.items():
        lines.append(f"skipped {name}: {why}")
    skipped_cases: dict[tuple[str, str], list[str]] = {}
    for name, results in result.rows.items():
        for r in results:
            if r.status == "fail":
                lines.append(f"FAIL {name} {r.case}: {r.detail}")
            elif r.status == "skip":
                skipped_cases.setdefault((r.case, r.detail), []).append(name)
    for (case, why), names in skipped_cases.items():
        lines.append(f"case {case} skipped on {', '.join(names)}: {why}")
    for kind, table in (("errors", result.errors_identical), ("pools", result.results_identical)):
        for case, same in table.items():
            if not same:
                lines.append(f"DISAGREE {case}: {kind} differ across backends")
    lines.append("OK" if result.ok else "FAILED")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kv-canary", description=__doc__.strip().splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_check = sub.add_parser("check", help="run the conformance matrix over every backend available here")
    p_check.add_argument("--json", action="store_true", help="print the matrix as JSON")
    p_check.set_defaults(func=check)
    p_bench = sub.add_parser("bench", help="time every backend over sglang's benchmark grid (GPU)")
    p_bench.add_argument("--json", action="store_true", help="print the rows as JSON")
    p_bench.add_argument("--write", metavar="PATH", help="write the table as markdown (docs/performance.md)")
    p_bench.add_argument("--quick", action="store_true", help="only cases of at most 2M tokens")
    p_bench.add_argument("--no-jax", action="store_true", help="torch backends only")
    p_bench.set_defaults(func=bench)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
