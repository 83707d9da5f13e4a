"""``kv-canary``: ``check``, ``bench`` and ``plot``.

Contract: ``main(argv) -> int`` parses ``argv`` (``sys.argv[1:]`` when None), runs the command and returns its exit
code (``EXIT_*``). Standard output carries the result alone (a table, the markdown, or with ``--json`` exactly one JSON
object holding ``ok``, ``exit_code`` and, where the command did not do what was asked, ``error``, usage errors
included); progress and reasons go to standard error. A command is a module's ``run(args) -> (code, payload, text)``
(``kv_canary.check``, ``.bench``, ``.plot``), which raises ``CommandError`` where it cannot do what was asked. Bare
``kv-canary`` prints the help and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib
import importlib.metadata
import json
import os
import platform
import sys
import traceback

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOTHING_RAN, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class CommandError(Exception):
    """Why a command could not do what was asked; ``code`` is its exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED, payload: dict | None = None):
        super().__init__(message)
        self.code, self.payload = code, payload or {}


def usage_error(message: str) -> CommandError:
    return CommandError(message, EXIT_USAGE)


def nothing_ran(message: str, payload: dict | None = None) -> CommandError:
    return CommandError(f"nothing ran: {message}", EXIT_NOTHING_RAN, payload)


def gpu_visible() -> bool:
    """A CUDA device node, and CUDA_VISIBLE_DEVICES not empty: known without importing a framework."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def exit_codes(meanings: dict[int, str]) -> str:
    return "exit codes:\n" + "".join(f"  {code:<3}  {text}\n" for code, text in meanings.items())


MAIN_HELP = """Check and time scatter_req_token_ids and assign_req_to_token_pool across the torch and JAX frontends.
'kv-canary COMMAND --help' says what a command does, how long it takes and its exit codes."""

CHECK_HELP = """Run every runner of both frontends that can run here (torch/triton, torch/torch, jax/xla, jax/pallas,
jax/mosaic, jax/mosaic_tpu) over the conformance cases of shared_spec/data/conformance.json. Each result is judged
against what the case expects of the runner's mode (the pool, or the exception's class and exact message with the
pool untouched), then runners whose modes expect the same outcome are compared with each other (the same exception
and message, or the same pool byte for byte). The JAX runners run twice: in this process with JAX's defaults (x64
off, mode jax_x64_off) and in a child process with JAX_ENABLE_X64=1 (mode jax, rows marked "(x64)").

A kernel in an interpreter (Triton without a GPU; Pallas with interpret=True, as mosaic_tpu is off a TPU) runs every
error case and a fixed sample of the value cases; torch/torch, jax/xla and compiled kernels run every case; --all
runs every case everywhere.

Time: about 25 s on a 2-core machine without a GPU, --all about 50 s; on a GPU, where the kernels compile for each
case's shapes, a minute or two. Progress goes to stderr. A runner that cannot run here is named with the reason;
--strict makes that a failure."""

BENCH_HELP = """Time the kernels on a CUDA GPU, every run of a comparison taking turns with the others (interleaved
rounds, the order rotated each round), medians, ratios against baselines measured in the same run:
  --device       the torch launcher's Triton kernel against a same-run kernel of sglang's design
                 (kv_canary/baseline.py), over shared_spec.arg_specs' primary workloads: flushed (L2 flushed
                 before each call, CUDA events) and chained (16 calls in a CUDA graph)
  --host         the launcher's host time per call as a server calls it (a new len(flat_in) every call, bs
                 changing, a repeat), against sglang's launcher and one eager torch op
  --first-call   a fresh process with empty caches: the first call, calls 3-50 and the settled figure
  --incremental  IncrementalWriter.step against sglang's full-snapshot step (pinned), one token per request
  --step         JAX: the op's marginal cost in a jitted serving-like step, per implementation, against the
                 scatter a JAX user writes by hand (int32 indices, x64 off)
  --assign       assign_req_to_token_pool: device and host time against sglang's design, and its JAX step
With none of them, all. Every pool written is compared with shared_spec.reference; a mismatch fails the run.

Time: all parts about 2 minutes on one H100 (each section of the page it writes states the seconds its part
took). Without a CUDA GPU it exits 3 at once."""

PLOT_HELP = """Draw docs/performance.json's device-time ratios (ours over sglang's design, flushed and chained, per
workload) as one bar chart. Needs matplotlib (pip install 'kv-canary[plot]'). Takes a few seconds."""

MAIN_CODES = exit_codes({EXIT_OK: "the help or the version was printed", EXIT_USAGE: "usage error"})
CHECK_CODES = exit_codes({
    EXIT_OK: "every case that ran passed and the runners compared agreed",
    EXIT_FAILED: "a case failed, runners disagreed, a frontend failed to load, or with --strict a runner was skipped",
    EXIT_USAGE: "usage error: an unknown option, backend or case",
    EXIT_NOTHING_RAN: "nothing could run: torch and jax not installed, or no selected runner can run here",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
})
BENCH_CODES = exit_codes({
    EXIT_OK: "every selected part was measured",
    EXIT_FAILED: "a result differed from the reference, or a part failed (its traceback on stderr)",
    EXIT_USAGE: "usage error",
    EXIT_NOTHING_RAN: "nothing could run: no CUDA GPU, or the frameworks the parts need are not installed",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
})
PLOT_CODES = exit_codes({
    EXIT_OK: "the picture was written (its path on stdout)",
    EXIT_USAGE: "usage error, or the file is not what kv-canary bench --write writes",
    EXIT_NOTHING_RAN: "matplotlib is not installed, or the file holds no device-time rows",
})


class Parser(argparse.ArgumentParser):
    """argparse, options spelled in full, errors raised (``usage_error``) with this parser's usage on stderr."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)

    def error(self, message):
        self.print_usage(sys.stderr)
        raise usage_error(message)


def versions() -> str:
    lines = [f"kv-canary {_version('kv-canary') or 'unknown (not installed)'}", f"python {platform.python_version()}"]
    lines += [f"{name} {_version(name) or 'not installed'}" for name in ("torch", "triton", "jax", "jaxlib", "numpy")]
    return "\n".join(lines)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def command(args):
    """The command's module, imported only now: ``kv_canary.check``, ``kv_canary.bench``, ``kv_canary.plot``."""
    return importlib.import_module(f"kv_canary.{args.command}").run(args)


def parser() -> Parser:
    top = Parser(prog="kv-canary", description=MAIN_HELP, epilog=MAIN_CODES)
    top.add_argument("--version", action="version", version=versions(), help="the versions of kv-canary and its frameworks")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", title="commands", parser_class=Parser)

    p = sub.add_parser("check", description=CHECK_HELP, epilog=CHECK_CODES,
                       help="run every runner here over the conformance cases and compare them")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the table")
    p.add_argument("--all", action="store_true", help="every case on every runner, interpreted kernels included")
    p.add_argument("--backend", action="append", metavar="NAME",
                   help="only this runner (torch/triton, jax/xla, ...; a shell pattern such as 'jax/*') or frontend "
                        "(torch, jax); repeatable")
    p.add_argument("--case", action="append", metavar="NAME",
                   help="only the cases of this name (a shell pattern such as 'windowed_*'), every one on every runner; "
                        "repeatable")
    p.add_argument("--list", action="store_true", help="the runners and why any cannot run here, running no case")
    p.add_argument("--strict", action="store_true", help="a runner that cannot run here is a failure")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")

    p = sub.add_parser("bench", description=BENCH_HELP, epilog=BENCH_CODES,
                       help="time the kernels against same-run baselines (CUDA GPU)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the markdown")
    for part, text in (("device", "the scatter's device time"), ("host", "the launcher's host time"),
                       ("first-call", "the first calls of a fresh process"), ("incremental", "IncrementalWriter.step"),
                       ("step", "JAX: the marginal cost in a jitted step"), ("assign", "assign_req_to_token_pool")):
        p.add_argument(f"--{part}", action="store_true", help=f"run this part: {text}")
    p.add_argument("--quick", action="store_true", help="--device over the small workloads only")
    p.add_argument("--write", nargs="?", const="docs", metavar="DIR",
                   help="merge the parts measured into DIR/performance.json and write DIR/performance.md (DIR: docs)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")

    p = sub.add_parser("plot", description=PLOT_HELP, epilog=PLOT_CODES,
                       help="draw the device-time ratios of docs/performance.json (needs matplotlib; seconds)")
    p.add_argument("bench_json", nargs="?", default="docs/performance.json", metavar="PERFORMANCE.json",
                   help="what kv-canary bench --write wrote (default: docs/performance.json)")
    p.add_argument("--out", metavar="PNG", help="the picture's path (default: beside the JSON, performance.png)")
    return top


def run(argv: list[str]) -> tuple[int, dict, str, str | None]:
    """``(exit code, JSON payload, text, error message)`` of one command line."""
    top = parser()
    try:
        args = top.parse_args(argv)
    except SystemExit as done:  # --help or --version, printed
        return (done.code if isinstance(done.code, int) else EXIT_OK), {}, "", None
    except CommandError as error:
        print(f"kv-canary: error: {error}", file=sys.stderr)
        return error.code, {}, "", str(error)
    if args.command is None:
        top.print_help()
        return EXIT_OK, {}, "", None
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the result's alone
            code, payload, text = command(args)
        return code, payload, text, None
    except CommandError as error:
        print(f"kv-canary {args.command}: {error}", file=sys.stderr)
        return error.code, error.payload, "", str(error)
    except KeyboardInterrupt:
        print(f"kv-canary {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED, {}, "", "interrupted"
    except Exception as crash:  # a bug: the traceback on stderr, and still one JSON object with --json
        traceback.print_exc()
        return EXIT_FAILED, {}, "", f"{type(crash).__name__}: {crash}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    code, payload, text, error = run(argv)
    wants_json = "--json" in argv and not ({"-h", "--help", "--version"} & set(argv))
    if wants_json:
        out = {**payload, "ok": code == EXIT_OK, "exit_code": code} | ({"error": error} if error else {})
        print(json.dumps(out, indent=1))
    elif text:
        print(text)
    return code


if __name__ == "__main__":  # python -m kv_canary.cli: run the imported module, whose CommandError the commands raise
    from kv_canary import cli

    sys.exit(cli.main())
