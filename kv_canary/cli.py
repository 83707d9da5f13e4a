"""``kv-canary``: the project's command line (``check``, ``bench``, ``plot``).

Contract: ``main(argv) -> int`` parses ``argv`` (``sys.argv[1:]`` when None),
runs the command and returns its exit code (``EXIT_*``; ``--help``,
``--version`` and usage errors are returned too, not raised). Standard output
carries the result only (the table and verdict); progress lines, notes about
what is being loaded, and why a command could not run go to standard error.

- Usage errors: the usage of the parser that met the error (a command's own
  for ``kv-canary check --bogus``) and the message on stderr, exit
  ``EXIT_USAGE``. Options are spelled in full (no argparse abbreviations), so
  that ``--json`` is known before parsing has succeeded and a new option never
  makes an old abbreviation ambiguous.
- ``--json``: standard output is always exactly one JSON object, errors
  included (a usage error, nothing ran, an interrupt, a crash): it holds
  ``exit_code``, ``ok`` and, where the command did not do what was asked,
  ``error`` (the message), beside whatever the command's own object holds
  where it printed one (``main`` captures what the command prints and merges
  the error into it). ``--help`` still prints the help.
- Each command's ``--help`` ends with its own exit codes (``CHECK_EXIT_CODES``,
  ``BENCH_EXIT_CODES``).
- A missing framework is named once with one install hint
  (``shared_spec.errors.install_hint``: the ``cpu`` extra, or the ``torch`` and
  ``jax`` extras around a build of your own).

- bare ``kv-canary``: the help, exit 0 (the first command a newcomer types;
  nothing was asked, so nothing failed).
- ``--version``: this package's version and the frameworks' versions, read from
  the installed packages' metadata (nothing is imported).
- ``check``: see ``CHECK_HELP``; ``--backend`` and ``--case`` are validated
  before anything slow is imported (a backend name of an installed frontend
  only once that frontend is loaded).
- ``bench``: see ``BENCH_HELP``; on a TPU (JAX's default platform, where
  libtpu is installed) it times the JAX implementations there; elsewhere,
  without torch/triton/jax or without a CUDA GPU it explains what is missing
  and exits ``EXIT_NOTHING_RAN``, before importing the benchmark module.
- ``plot``: see ``PLOT_HELP`` (``kv_canary.plot``); without matplotlib it
  names the ``plot`` extra and exits ``EXIT_NOTHING_RAN``.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import importlib.metadata
import io
import json
import platform
import sys

from shared_spec import errors

EXIT_OK = 0  # everything that ran passed and agreed
EXIT_FAILED = 1  # a failure or disagreement (or, with --strict, a skipped backend)
EXIT_USAGE = 2  # argparse's code for a usage error
EXIT_NOTHING_RAN = 3  # a framework is missing, or bench has no CUDA GPU
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
JSON = "--json"  # the option every command has; main looks for it in argv before parsing


def exit_codes(meanings: dict[int, str]) -> str:
    """A help epilog: each exit code a command can return, and what it means."""
    return "exit codes:\n" + "".join(f"  {code:<3}  {meaning}\n" for code, meaning in meanings.items())


MAIN_EXIT_CODES = exit_codes({
    EXIT_OK: "the help or the version was printed",
    EXIT_USAGE: "usage error: an unknown command or option",
}) + "Each command's --help lists its own exit codes.\n"
CHECK_EXIT_CODES = exit_codes({
    EXIT_OK: "every backend that ran passed every case, and the backends compared agreed",
    EXIT_FAILED: "a case failed or backends disagreed, or with --strict a backend was skipped",
    EXIT_USAGE: "usage error: an unknown option, backend or case",
    EXIT_NOTHING_RAN: "nothing could run: no selected backend can run here (torch/jax not installed, JAX x64 off)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
})
BENCH_EXIT_CODES = exit_codes({
    EXIT_OK: "every backend was timed (the table, or with --json the rows, on stdout)",
    EXIT_FAILED: "a backend disagreed with the reference or a measurement failed (the traceback on stderr)",
    EXIT_USAGE: "usage error: an unknown option",
    EXIT_NOTHING_RAN: "nothing could run: torch, triton or jax not installed, or no CUDA GPU (and no TPU)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
})

MAIN_HELP = """Check and time scatter_req_token_ids across its PyTorch and JAX backends.
Run 'kv-canary COMMAND --help' for what a command does, how long it takes and its options."""

CHECK_HELP = """Run each frontend/backend pair available here (torch/triton, jax/xla, ...;
--list names them all) over the conformance cases in
shared_spec/data/conformance.json. Every case is judged against the spec (the
expected pool, or the exact exception class and message with the pool left
untouched), and compared across the backends that ran it (two or more): the
same exception and message, or the same pool byte for byte. Prints a table,
what was compared, the skip reasons and a verdict that says how many backends
ran.

Time: 30-60 s on a CPU-only machine, where the Triton and Pallas kernels run
in their interpreters (5 s of imports, then up to 10 s per backend, mostly
JAX compiling each case); a few seconds per backend on a GPU. A progress line
goes to stderr as each backend starts. --backend and --case run a subset.

A backend that cannot run here (framework not installed, no GPU, JAX x64 off
through JAX_ENABLE_X64=0) is skipped and named with the reason; --strict
makes any skip a failure."""

BENCH_HELP = """Time every backend over sglang's benchmark grid plus larger, ragged and
skewed cases: first the torch launcher's host time as a serving runtime calls
it (shapes that change every call; kv_canary/bench_host.py), then device time
and JAX wall time (method in kv_canary/bench.py). Needs a CUDA GPU, torch,
triton and (unless --no-jax) jax. Takes several minutes (--quick: only cases
of at most 2M tokens; --case: only the device-time rows of the cases named,
to run one again; --host: the host table alone, under a minute; --step: the
JAX step bench alone, kv_canary/bench_step.py, a few minutes, jax only, with
--windowed each implementation also with start_cols; --incremental: the
windowed write's tables, kv_canary/bench_incremental.py, a few minutes, torch
and triton only: the serving step, sglang's full snapshot against the
incremental one, the windowed Triton kernel against the unwindowed one, host
time with start_cols, printed as markdown to paste into docs/performance.md; --assign:
assign_req_to_token_pool against a same-run kernel of sglang's design,
kv_canary/bench_assign.py, a few minutes: device time, host time and, unless
--no-jax, the JAX step's marginal cost beside the plain XLA assignment). On a
TPU it times the Mosaic TPU kernel against XLA instead (jax only). Every mode
refuses a machine without a GPU in a second or two, but one: --step --short,
a short run of the step bench that also works on a CPU."""

PLOT_HELP = """Draw the figures of a kv-canary bench run (the JSON that kv-canary bench --json
prints; docs/performance.json is the last run's) as PNGs: the Triton kernel over
the per-request-tile baseline at every case, flushed and chained, and the
launcher's host time in the serving pattern (kv_canary/plot.py). Any machine;
needs matplotlib (pip install 'kv-canary[plot]'). Takes a few seconds."""
PLOT_EXIT_CODES = exit_codes({
    EXIT_OK: "the PNGs were written (their paths on stdout)",
    EXIT_USAGE: "usage error: an unknown option, or a file that is not a bench run's JSON",
    EXIT_NOTHING_RAN: "nothing was drawn: matplotlib not installed, or the run has no figures to draw",
})

NO_GPU = (
    "no CUDA GPU here; bench times the compiled kernels on a GPU "
    "(the one CPU variant: bench --step --short, a short run of the step bench)"
)


class CommandError(Exception):
    """Why a command could not do what was asked: ``main`` prints it and returns ``exit_code``."""

    exit_code = EXIT_FAILED


class UsageError(CommandError):
    """A usage error: argparse's own (``Parser.error``), or a value it cannot validate (an unknown backend or case).

    ``parser`` is the parser whose usage to print (None: the command's).
    """

    exit_code = EXIT_USAGE

    def __init__(self, message: str, parser: argparse.ArgumentParser | None = None):
        super().__init__(message)
        self.parser = parser


class NothingRan(CommandError):
    """Nothing could run here (a framework missing or broken, no GPU); the message says why."""

    exit_code = EXIT_NOTHING_RAN

    def __init__(self, reason: str):
        super().__init__(f"nothing ran: {reason}")


class Parser(argparse.ArgumentParser):
    """argparse's parser, with options spelled in full and usage errors raised as ``UsageError``.

    An argument that a command's parser does not know is that command's usage
    error (argparse would hand it up to the top parser, whose usage names none
    of the command's options).
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        namespace, unknown = super().parse_known_args(args, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}" + self.misplaced_hint(unknown, namespace))
        return namespace, unknown

    def misplaced_hint(self, unknown: list[str], namespace) -> str:
        """Where an unknown option is one of the chosen command's (``kv-canary --json check``): say it goes after the command."""
        commands = [action for action in self._actions if isinstance(action, argparse._SubParsersAction)]
        command = getattr(namespace, "command", None)
        if not commands or command not in commands[0].choices:
            return ""
        known = commands[0].choices[command]._option_string_actions
        misplaced = [word for word in unknown if word.split("=", 1)[0] in known]
        if not misplaced:
            return ""
        words = " ".join(misplaced)
        what = "is an option" if len(misplaced) == 1 else "are options"
        return f" ({words} {what} of {command}: write {'it' if len(misplaced) == 1 else 'them'} after the command, 'kv-canary {command} {words}')"

    def error(self, message):
        raise UsageError(message, parser=self)


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
    """The conformance cases whose names match any of ``patterns`` (all cases, of every op, when None)."""
    from shared_spec.cases import load_cases

    cases = load_cases(op=None)
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
    from kv_canary import matrix

    missing = matrix.missing_frameworks(frontends)
    loading = [name for frontend, _, name in matrix.FRONTENDS if frontend in frontends and name not in missing]
    if loading:  # nothing to load where neither framework is installed: the skips and the install hint say so
        say(args, f"kv-canary check: loading {' and '.join(loading)} (a few seconds)...")
    notes = matrix.prepare_environment(frontends)
    runners, skipped = matrix.collect_runners(frontends)
    runners, skipped = select_runners(args.backend, runners, skipped)
    install = errors.install_hint(missing) if missing else None
    if args.list:
        return list_backends(args, runners, skipped, cases, install)
    for note in notes:
        say(args, f"note: {note}")

    spent: list[float] = []  # seconds of each backend that finished

    def started(index, total, name):
        left = f" (about {time_left(spent, total - index)} left)" if spent else ""
        say(args, f"[{index + 1}/{total}] {name}: running {len(cases)} case{'s' * (len(cases) != 1)}...{left}")

    def finished(name, results, seconds):
        spent.append(seconds)
        counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "skip")}
        say(args, f"      {name}: {counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped ({seconds:.1f} s)")

    result = matrix.run_matrix(runners, cases, skipped=skipped, notes=notes, started=started, finished=finished)
    code, line = verdict(result, args.strict)
    if args.json:
        extra = {"install": install} if install else {}
        extra |= {"error": line} if code == EXIT_NOTHING_RAN else {}
        print(json.dumps(result.to_json() | extra | {"ok": code == EXIT_OK, "exit_code": code, "verdict": line}, indent=2))
        return code
    lines = [render_table(result)] if result.rows else [f"skipped {name}: {why}" for name, why in result.skipped.items()]
    print("\n".join(lines + ([f"install: {install}"] if install else []) + [line]))
    return code


def time_left(spent: list[float], remaining: int) -> str:
    """A rough time for ``remaining`` more backends at the mean pace of those that finished (``spent``, seconds)."""
    seconds = sum(spent) / len(spent) * remaining
    if seconds < 1:
        return "a second"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


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


def comparison_lines(result) -> list[str]:
    """What was compared across backends, and only that: the cases two or more backends ran."""
    if len(result.rows) < 2:
        return [f"compared across backends: nothing ({len(result.rows)} backend ran)"]
    lines = []
    for kind, table, cases in (("errors", result.errors_identical, "error"), ("results", result.results_identical, "value")):
        if table:
            same = sum(table.values())
            label = f"{kind} identical across backends:"
            lines.append(f"{label:<35}{'yes' if same == len(table) else 'NO'} ({same}/{len(table)} {cases} cases)")
    if result.not_compared:
        lines.append(f"not compared (ran on one backend only): {', '.join(result.not_compared)}")
    return lines


def render_table(result) -> str:
    lines = [
        "",
        f"{'frontend/backend':<18} {'passed':>6} {'failed':>6} {'skipped':>7}",
        "-" * 40,
    ]
    for name, results in result.rows.items():
        counts = [sum(r.status == s for r in results) for s in ("pass", "fail", "skip")]
        lines.append(f"{name:<18} {counts[0]:>6} {counts[1]:>6} {counts[2]:>7}")
    lines.append("-" * 40)
    lines += comparison_lines(result)
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
    from kv_canary.bench import parse_case  # numpy only: a bad --case is a usage error before anything slow loads
    from kv_canary.platform import installed

    for text in args.case or ():
        try:
            parse_case(text)
        except ValueError as error:
            raise UsageError(f"--case {error}") from None
    if args.case and args.host:
        raise UsageError("--case selects device-time cases; --host times the launcher's host work alone")
    if args.windowed and not args.step:
        raise UsageError("--windowed is the step bench's: bench --step --windowed")
    if args.assign:
        _own_tables(args, "--assign runs its own cases and prints its tables (markdown, or --json)",
                    (("--case", args.case), ("--host", args.host), ("--step", args.step), ("--quick", args.quick),
                     ("--incremental", args.incremental), ("--short", args.short), ("--write", args.write)))
        from kv_canary import bench_assign

        return bench_assign.run(args)
    if args.incremental:
        _own_tables(args, "--incremental runs its own sizes and prints its tables (markdown to paste into "
                          "docs/performance.md, or --json)",
                    (("--case", args.case), ("--host", args.host), ("--step", args.step), ("--quick", args.quick),
                     ("--no-jax", args.no_jax), ("--write", args.write)))
        from kv_canary import bench_incremental

        return bench_incremental.run(args)

    if args.short and not args.step:
        raise UsageError("--short is the step bench's CPU variant: bench --step --short")
    if args.step:  # JAX alone: what the scatter adds to a jitted step like a server's (kv_canary.bench_step)
        if not installed("jax"):
            raise NothingRan(errors.not_installed(["jax"]))
        from kv_canary import bench_step

        step_argv = (["--json"] if args.json else []) + [arg for text in args.case or () for arg in ("--case", text)]
        step_argv += ["--windowed"] if args.windowed else []
        if args.short:
            if bench_step.parser().parse_known_args(["--short"])[1]:
                raise UsageError("--short: this kv_canary.bench_step has no short variant")
            return bench_step.main(step_argv + ["--short"])
        say(args, "kv-canary bench: loading jax (a few seconds)...")
        from kv_canary_jax.platforms import gpu_device

        if gpu_device() is None:  # on a CPU the full step bench runs for tens of minutes: refuse, as every mode does
            raise NothingRan(NO_GPU)
        return bench_step.main(step_argv)
    if not args.no_jax and installed("jax"):
        from kv_canary import bench as bench_module

        if bench_module.tpu_available():
            say(args, "kv-canary bench: on a TPU: timing mosaic_tpu against xla")
            return bench_module.run_tpu(args)

    needed = ("torch", "triton") + (() if args.no_jax else ("jax",))
    missing = [name for name in needed if not installed(name)]
    if missing:
        raise NothingRan(errors.not_installed(missing))
    require_gpu(args)
    from kv_canary import bench as bench_module

    return bench_module.run(args)


def _own_tables(args, what: str, options) -> None:
    """A bench mode that runs its own cases on torch and Triton: refuses the ``options`` (``(flag, given)`` pairs) it
    takes none of, then a machine without torch, Triton or a GPU."""
    from kv_canary.platform import installed

    if others := [name for name, on in options if on]:
        raise UsageError(f"{what}; it takes no {', '.join(others)}")
    if missing := [name for name in ("torch", "triton") if not installed(name)]:
        raise NothingRan(errors.not_installed(missing))
    require_gpu(args)


def require_gpu(args) -> None:
    """Load torch and refuse a machine where it sees no CUDA GPU (``NO_GPU``), as every torch bench mode does."""
    from kv_canary.matrix import BROKEN_FRAMEWORK
    from kv_canary.platform import cuda_available

    say(args, "kv-canary bench: loading torch (a few seconds)...")
    try:
        has_gpu = cuda_available()
    except ImportError as error:
        raise NothingRan(BROKEN_FRAMEWORK.format(module="torch", error=f"{type(error).__name__}: {error}")) from None
    if not has_gpu:
        raise NothingRan(NO_GPU)


# -- plot --------------------------------------------------------------------------


def plot(args) -> int:
    import pathlib

    try:  # the argument first: a wrong file is a usage error on every machine, matplotlib or not
        saved = json.loads(pathlib.Path(args.bench_json).read_text())
        saved["meta"], saved["rows"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{args.bench_json} is not the JSON of kv-canary bench --json ({error})") from None
    try:
        from kv_canary import plot as plot_module
    except ImportError as error:  # the plot extra is not installed: its hint
        raise NothingRan(str(error)) from None
    written = [str(path) for path in plot_module.write(saved, pathlib.Path(args.out))]
    if not written:
        raise NothingRan(f"{args.bench_json} has no figures to draw")
    print(json.dumps({"written": written, "ok": True, "exit_code": EXIT_OK}, indent=2) if args.json else "\n".join(written))
    return EXIT_OK


# -- main --------------------------------------------------------------------------


def parser() -> Parser:
    top = Parser(prog="kv-canary", description=MAIN_HELP, epilog=MAIN_EXIT_CODES)
    top.add_argument("--version", action=VersionAction)
    sub = top.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    p_check = sub.add_parser(
        "check", description=CHECK_HELP, epilog=CHECK_EXIT_CODES,
        help="run every backend here over the spec's conformance cases and compare them "
        "(under a minute on a CPU-only machine, seconds on a GPU)",
    )
    p_check.add_argument(
        JSON, action="store_true",
        help="print one JSON object on stdout instead of the table: counts, failures, notes, skip reasons, verdict "
        "(or the error and exit code)",
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
    # bench
    p_bench = sub.add_parser(
        "bench", description=BENCH_HELP, epilog=BENCH_EXIT_CODES,
        help="time every backend over sglang's benchmark grid (CUDA GPU only; several minutes)",
    )
    p_bench.add_argument(JSON, action="store_true", help="print one JSON object on stdout: the rows (or the error and exit code)")
    p_bench.add_argument("--write", metavar="PATH", help="write the table as markdown (docs/performance.md)")
    p_bench.add_argument("--quick", action="store_true", help="only cases of at most 2M tokens")
    p_bench.add_argument("--case", action="append", metavar="CASE",
                         help="only this case (BSxSEQ[r][a], such as 256x8192 or 64x32768r, or a skewed workload's name "
                              "such as one_long_among_short_bs64): to run a case again; repeatable")
    p_bench.add_argument("--no-jax", action="store_true", help="torch backends only")
    p_bench.add_argument("--host", action="store_true", help="only the torch launcher's host time in the serving pattern (seconds)")
    p_bench.add_argument("--step", action="store_true",
                         help="only JAX: the scatter's marginal cost in a jitted step like a server's, per implementation (minutes)")
    p_bench.add_argument("--windowed", action="store_true",
                         help="with --step: each implementation also with start_cols, and the ratio over the unwindowed one")
    p_bench.add_argument("--incremental", action="store_true",
                         help="only the windowed write's tables (torch): the serving step, full snapshot against incremental; "
                              "the windowed Triton kernel; host time with start_cols (a few minutes; markdown to paste into "
                              "docs/performance.md, or --json)")
    p_bench.add_argument("--assign", action="store_true",
                         help="only assign_req_to_token_pool against a same-run kernel of sglang's design: device time, "
                              "host time, the JAX step's marginal cost (a few minutes; markdown, or --json)")
    p_bench.add_argument("--short", action="store_true",
                         help="with --step: a short run that also works on a CPU (where only XLA runs)")
    p_bench.add_argument("-q", "--quiet", action="store_true", help="no status lines on stderr")
    p_bench.set_defaults(func=bench, parser=p_bench)
    # plot
    p_plot = sub.add_parser(
        "plot", description=PLOT_HELP, epilog=PLOT_EXIT_CODES,
        help="draw a bench run's figures as PNGs (any machine; needs the plot extra; seconds)",
    )
    p_plot.add_argument("bench_json", metavar="BENCH.json", help="what kv-canary bench --json printed (docs/performance.json)")
    p_plot.add_argument("--out", default=".", metavar="DIR", help="the folder to write the PNGs into (default: here)")
    p_plot.add_argument(JSON, action="store_true", help="print one JSON object on stdout: the files written (or the error)")
    p_plot.set_defaults(func=plot, parser=p_plot)
    return top


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if JSON not in argv:
        return run(argv)[0]
    printed = io.StringIO()  # what the command prints: one JSON object, or none where it failed first
    try:
        with contextlib.redirect_stdout(printed):
            code, error = run(argv)
    except Exception as crash:  # a bug: the JSON object says so, then the traceback reaches stderr
        print(json_error(printed.getvalue(), EXIT_FAILED, f"{type(crash).__name__}: {crash}"))
        raise
    if error is None:
        sys.stdout.write(printed.getvalue())
    else:
        print(json_error(printed.getvalue(), code, error))
    return code


def json_error(printed: str, code: int, error: str) -> str:
    """The one JSON object for a command that failed: the object it printed (if any) with the error merged in."""
    try:
        result = json.loads(printed) if printed.strip() else {}
    except ValueError:
        result = None
    if not isinstance(result, dict):  # not a JSON object: keep it for the reader, off stdout
        sys.stderr.write(printed)
        result = {}
    return json.dumps(result | {"ok": False, "exit_code": code, "error": error}, indent=2)


def run(argv: list[str]) -> tuple[int, str | None]:
    """Parse ``argv`` and run the command: the exit code, and the error message where it did not do what was asked."""
    top = parser()
    try:
        args = top.parse_args(argv)
    except SystemExit as done:  # --help or --version: argparse has printed it
        return (done.code if isinstance(done.code, int) else EXIT_OK), None
    except UsageError as error:
        return report(error, top)
    if args.command is None:
        top.print_help()
        return EXIT_OK, None
    try:
        return args.func(args), None
    except CommandError as error:
        return report(error, args.parser)
    except KeyboardInterrupt:
        print(f"{args.parser.prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED, "interrupted"


def report(error: CommandError, command: argparse.ArgumentParser) -> tuple[int, str]:
    """Say on stderr why ``command`` failed (a usage error after its parser's usage); its exit code and message."""
    if isinstance(error, UsageError):
        usage_of = error.parser or command
        usage_of.print_usage(sys.stderr)
        print(f"{usage_of.prog}: error: {error}", file=sys.stderr)
    else:
        print(f"{command.prog}: {error}", file=sys.stderr)
    return error.exit_code, str(error)


if __name__ == "__main__":
    sys.exit(main())
