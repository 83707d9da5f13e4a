"""``kv-canary``: the project's command line (``check``, ``bench``).

Contract: ``main(argv) -> int`` parses ``argv`` (``sys.argv[1:]`` when None),
runs the command and returns its exit code (``EXIT_*``; argparse's own exits,
``--help``, ``--version`` and usage errors, are returned too, not raised).
Standard output carries the result only (the table and verdict, or with
``--json`` one JSON object); progress lines, notes about what is being
loaded, and "nothing could run" explanations go to standard error.

- bare ``kv-canary``: the help, exit 0 (the first command a newcomer types;
  nothing was asked, so nothing failed).
- ``--version``: this package's version and the frameworks' versions, read from
  the installed packages' metadata (nothing is imported).
- ``check``: see ``CHECK_HELP``; ``--backend`` and ``--case`` are validated
  before anything slow is imported (a backend name of an installed frontend
  only once that frontend is loaded).
- A missing framework is named once with one install hint
  (``shared_spec.errors.install_hint``: the ``cpu`` extra, or the ``torch`` and
  ``jax`` extras around a build of your own).
- ``bench``: see ``BENCH_HELP``; on a TPU (JAX's default platform, where
  libtpu is installed) it times the JAX implementations there; elsewhere,
  without torch/triton/jax or without a CUDA GPU it explains what is missing
  and exits ``EXIT_NOTHING_RAN``, before importing the benchmark module.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.metadata
import json
import platform
import sys

from shared_spec import errors

EXIT_OK = 0  # everything that ran passed and agreed
EXIT_FAILED = 1  # a failure or disagreement (or, with --strict, a skipped backend)
EXIT_USAGE = 2  # argparse's code for a usage error
EXIT_NOTHING_RAN = 3  # a framework is missing, or bench has no CUDA GPU
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT

EXIT_CODES = f"""exit codes:
  {EXIT_OK}  everything that ran passed, and the backends agreed
  {EXIT_FAILED}  a case failed or backends disagreed (check), or with --strict a backend was skipped
  {EXIT_USAGE}  usage error: an unknown option, backend or case
  {EXIT_NOTHING_RAN}  nothing could run: torch/jax not installed, or no CUDA GPU for bench
"""

MAIN_HELP = """Check and time scatter_req_token_ids across its PyTorch and JAX backends.
Run 'kv-canary COMMAND --help' for what a command does, how long it takes and its options."""

CHECK_HELP = """Run each frontend/backend pair available here (torch/triton, jax/xla, ...;
--list names them all) over the conformance cases in
shared_spec/data/conformance.json. Every case is judged against the spec (the
expected pool, or the exact exception class and message with the pool left
untouched), and compared across backends: the same exception and message, or
the same pool byte for byte. Prints a table, the skip reasons and a verdict
that says how many backends ran.

Time: 30-60 s on a CPU-only machine, where the Triton and Pallas kernels run
in their interpreters (5 s of imports, then up to 10 s per backend, mostly
JAX compiling each case); a few seconds per backend on a GPU. A progress line
goes to stderr as each backend starts. --backend and --case run a subset.

A backend that cannot run here (framework not installed, no GPU, JAX x64 off
through JAX_ENABLE_X64=0) is skipped and named with the reason; --strict
makes any skip a failure."""

BENCH_HELP = """Time every backend over sglang's benchmark grid plus larger and ragged
cases: device time, host time per launch, and JAX wall time (method in
kv_canary/bench.py). Needs a CUDA GPU, torch, triton and (unless --no-jax)
jax. Takes several minutes (--quick: only cases of at most 2M tokens). On a
TPU it times the Mosaic TPU kernel against XLA instead (jax only)."""

NO_GPU = "no CUDA GPU (torch.cuda.is_available() is False); bench times the compiled kernels on a GPU"


class UsageError(Exception):
    """A command-line value argparse cannot validate itself (an unknown backend or case)."""


def say(args, line: str) -> None:
    """A progress or status line on stderr (stdout stays the result's)."""
    if not getattr(args, "quiet", False):
        print(line, file=sys.stderr, flush=True)


# -- --version ---------------------------------------------------------------------


def version_text() -> str:
    """This package's version and its frameworks', from package metadata (nothing imported)."""
    lines = [f"kv-canary {_version('kv-canary') or 'unknown (not installed as a package)'}"]
    lines.append(f"python {platform.python_version()}")
    for name in ("torch", "triton", "jax", "jaxlib", "numpy"):
        lines.append(f"{name} {_version(name) or 'not installed'}")
    return "\n".join(lines)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


class VersionAction(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print the versions of kv-canary and its frameworks, then exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit(EXIT_OK)


# -- check -------------------------------------------------------------------------


def select_cases(patterns):
    """The conformance cases whose names match any of ``patterns`` (all cases when None)."""
    from shared_spec.cases import load_cases

    cases = load_cases()
    if not patterns:
        return cases
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(case.name, pattern) for case in cases):
            raise UsageError(f"--case {pattern!r} matches no conformance case ('kv-canary check --list' names them)")
    return [case for case in cases if any(fnmatch.fnmatchcase(case.name, p) for p in patterns)]


def selected_frontends(names) -> tuple[str, ...]:
    """The frontends ``--backend`` names (every frontend when None); unknown frontends are usage errors."""
    from kv_canary.matrix import FRONTEND_NAMES

    if not names:
        return FRONTEND_NAMES
    wanted = []
    for name in names:
        frontend = name.split("/", 1)[0]
        if frontend not in FRONTEND_NAMES or name.endswith("/"):
            raise UsageError(
                f"--backend {name!r}: expected a frontend ({', '.join(FRONTEND_NAMES)}) "
                "or frontend/backend, for example torch/triton or jax/xla"
            )
        if frontend not in wanted:
            wanted.append(frontend)
    return tuple(f for f in FRONTEND_NAMES if f in wanted)


def select_runners(names, runners, skipped):
    """Keep the runners and skip reasons ``--backend`` asked for; an unknown backend is a usage error.

    A backend of a frontend that could not load at all (``frontend/*`` skipped)
    is kept as that skip: which backends it has is unknown without it.
    """
    if not names:
        return runners, skipped
    known = [r.name for r in runners] + [name for name in skipped if not name.endswith("/*")]
    for name in names:
        if "/" in name and name not in known and f"{name.split('/')[0]}/*" not in skipped:
            raise UsageError(f"--backend {name!r} is not a backend; the backends are: {', '.join(known)}")

    def wanted(name: str) -> bool:
        frontend = name.split("/")[0]
        return frontend in names or name in names or (name.endswith("/*") and any(n.startswith(frontend + "/") for n in names))

    return [r for r in runners if wanted(r.name)], {k: v for k, v in skipped.items() if wanted(k)}


def verdict(result, strict: bool) -> tuple[int, str]:
    """The exit code and the verdict line for a finished matrix."""
    ran, skipped = len(result.rows), list(result.skipped)
    counts = f"{ran} backend{'s' * (ran != 1)} ran"
    if skipped:
        counts += f", {len(skipped)} skipped ({', '.join(skipped)})"
    if not result.rows:
        return EXIT_NOTHING_RAN, "NOTHING RAN: no selected backend can run here (see the skip reasons)"
    if result.failed:
        return EXIT_FAILED, f"FAILED: {counts}"
    if skipped and strict:
        return EXIT_FAILED, f"FAILED (--strict: a backend was skipped): {counts}"
    if skipped:
        return EXIT_OK, f"OK: {counts}; --strict fails on skips"
    return EXIT_OK, f"OK: {counts}"


def check(args) -> int:
    cases = select_cases(args.case)
    frontends = selected_frontends(args.backend)
    say(args, f"kv-canary check: loading {' and '.join(frontends)} (a few seconds)...")
    from kv_canary import matrix

    notes = matrix.prepare_environment(frontends)
    runners, skipped = matrix.collect_runners(frontends)
    runners, skipped = select_runners(args.backend, runners, skipped)
    missing = matrix.missing_frameworks(frontends)
    install = errors.install_hint(missing) if missing else None
    if args.list:
        return list_backends(args, runners, skipped, cases, install)
    for note in notes:
        say(args, f"note: {note}")

    def started(index, total, name):
        say(args, f"[{index + 1}/{total}] {name}: running {len(cases)} case{'s' * (len(cases) != 1)}...")

    def finished(name, results, seconds):
        counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "skip")}
        say(args, f"      {name}: {counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped ({seconds:.1f} s)")

    result = matrix.run_matrix(runners, cases, skipped=skipped, notes=notes, started=started, finished=finished)
    code, line = verdict(result, args.strict)
    if args.json:
        extra = {"install": install} if install else {}
        print(json.dumps(result.to_json() | extra | {"ok": code == EXIT_OK, "exit_code": code, "verdict": line}, indent=2))
        return code
    lines = [render_table(result)] if result.rows else [f"skipped {name}: {why}" for name, why in result.skipped.items()]
    print("\n".join(lines + ([f"install: {install}"] if install else []) + [line]))
    return code


def list_backends(args, runners, skipped, cases, install: str | None) -> int:
    """``check --list``: the backends (and why some cannot run here), how to install a missing framework, the cases."""
    if args.json:
        listing = {"backends": [r.name for r in runners], "skipped": skipped, "cases": [c.name for c in cases]}
        print(json.dumps(listing | ({"install": install} if install else {}), indent=2))
        return EXIT_OK
    lines = ["backends:"] + [f"  {r.name}" for r in runners]
    lines += [f"  {name}  (cannot run here: {why})" for name, why in skipped.items()]
    lines += [f"install: {install}"] if install else []
    lines += ["cases:"] + [f"  {c.name}" for c in cases]
    print("\n".join(lines))
    return EXIT_OK


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
    return "\n".join(lines)


# -- bench -------------------------------------------------------------------------


def bench(args) -> int:
    from kv_canary.matrix import BROKEN_FRAMEWORK
    from kv_canary.platform import installed

    if not args.no_jax and installed("jax"):
        from kv_canary import bench as bench_module

        if bench_module.tpu_available():
            say(args, "kv-canary bench: on a TPU: timing mosaic_tpu against xla")
            return bench_module.run_tpu(args)

    needed = ("torch", "triton") + (() if args.no_jax else ("jax",))
    missing = [name for name in needed if not installed(name)]
    if missing:
        return nothing_ran(args, errors.not_installed(missing))
    say(args, "kv-canary bench: loading torch (a few seconds)...")
    from kv_canary.platform import cuda_available

    try:
        has_gpu = cuda_available()
    except ImportError as error:
        return nothing_ran(args, BROKEN_FRAMEWORK.format(module="torch", error=f"{type(error).__name__}: {error}"))
    if not has_gpu:
        return nothing_ran(args, NO_GPU)
    from kv_canary import bench as bench_module

    return bench_module.run(args)


def nothing_ran(args, reason: str) -> int:
    """Say why nothing could run (stderr; with --json also one JSON object on stdout)."""
    print(f"kv-canary {args.command}: nothing ran: {reason}", file=sys.stderr)
    if args.json:
        print(json.dumps({"ok": False, "exit_code": EXIT_NOTHING_RAN, "nothing_ran": reason}, indent=2))
    return EXIT_NOTHING_RAN


# -- main --------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    top = argparse.ArgumentParser(prog="kv-canary", description=MAIN_HELP, epilog=EXIT_CODES, formatter_class=formatter)
    top.add_argument("--version", action=VersionAction)
    sub = top.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    p_check = sub.add_parser(
        "check", description=CHECK_HELP, epilog=EXIT_CODES, formatter_class=formatter,
        help="run every backend here over the spec's conformance cases and compare them "
        "(under a minute on a CPU-only machine, seconds on a GPU)",
    )
    p_check.add_argument(
        "--json", action="store_true",
        help="print one JSON object on stdout instead of the table: counts, failures, notes, skip reasons, verdict",
    )
    p_check.add_argument(
        "--backend", action="append", metavar="NAME",
        help="run only this backend (frontend/backend, e.g. torch/triton) or frontend (torch, jax); repeatable",
    )
    p_check.add_argument(
        "--case", action="append", metavar="PATTERN",
        help="run only the cases whose name matches (exact, or a shell pattern such as 'checked_*'); repeatable",
    )
    p_check.add_argument("--strict", action="store_true", help="exit 1 when any selected backend was skipped")
    p_check.add_argument("--list", action="store_true", help="list the backends (and why any cannot run here) and the cases, then exit")
    p_check.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p_check.set_defaults(func=check, parser=p_check)
    p_bench = sub.add_parser(
        "bench", description=BENCH_HELP, epilog=EXIT_CODES, formatter_class=formatter,
        help="time every backend over sglang's benchmark grid (CUDA GPU only; several minutes)",
    )
    p_bench.add_argument("--json", action="store_true", help="print the rows as JSON")
    p_bench.add_argument("--write", metavar="PATH", help="write the table as markdown (docs/performance.md)")
    p_bench.add_argument("--quick", action="store_true", help="only cases of at most 2M tokens")
    p_bench.add_argument("--no-jax", action="store_true", help="torch backends only")
    p_bench.add_argument("-q", "--quiet", action="store_true", help="no status lines on stderr")
    p_bench.set_defaults(func=bench, parser=p_bench)
    return top


def main(argv=None) -> int:
    top = parser()
    try:
        args = top.parse_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error: argparse has printed it
        return done.code if isinstance(done.code, int) else EXIT_USAGE
    if args.command is None:
        top.print_help()
        return EXIT_OK
    try:
        return args.func(args)
    except UsageError as error:
        args.parser.print_usage(sys.stderr)
        print(f"kv-canary {args.command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"kv-canary {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
