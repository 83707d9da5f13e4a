"""``kv-canary check``: every runner of both frontends over the conformance cases, judged, then compared.

Contract: ``run(args) -> (exit code, payload, text)`` (``kv_canary.cli``). Runners come from each frontend's
``conformance.runners()``: the torch ones and the JAX ones (JAX's defaults: x64 off) run in this process, the JAX ones
again in a child process with ``JAX_ENABLE_X64=1`` (``python -m kv_canary.check --x64-child``: the request as JSON on
stdin, one JSON object on stdout). Without a GPU the interpreted runners take a sample (``planned``). Each result is
judged against ``case.expected(runner.mode)`` (``shared_spec.conformance.check_case``); then, per case, runners whose
modes expect the same outcome must agree (``disagreements``). A framework that is not installed skips its frontend; a
frontend that does not load is a failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time

from kv_canary.cli import EXIT_FAILED, EXIT_NOTHING_RAN, EXIT_OK, gpu_visible, nothing_ran, usage_error
from kv_canary_arrays.frameworks import installed
from shared_spec import errors
from shared_spec.cases import Case, load_cases
from shared_spec.conformance import CaseResult, check_case, disagreements

# frontend: (module with runners(), the frameworks it needs)
FRONTENDS = {"torch": ("kv_canary_torch.conformance", ("torch",)), "jax": ("kv_canary_jax.conformance", ("jax", "jaxlib"))}
EVERY_CASE = ("torch/torch", "jax/xla")  # never interpreted: never sampled
SAMPLE_EVERY = 4  # by default, interpreted runners run every error case and every 4th value case
CHILD = "--x64-child"
FAST_CPU_COMPILE = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")


@dataclasses.dataclass
class Row:
    """One runner's results by case name (a case the sample left out is absent)."""

    name: str
    mode: str
    results: dict[str, CaseResult]
    seconds: float = 0.0
    sampled: bool = False  # interpreted, so it ran a sample of the value cases

    @property
    def label(self) -> str:
        return label(self.name, self.mode)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results.values())

    def to_json(self) -> dict:
        return {"name": self.name, "mode": self.mode, "seconds": self.seconds, "sampled": self.sampled,
                "results": [[r.case, r.status, r.detail, r.signature] for r in self.results.values()]}

    @classmethod
    def from_json(cls, raw: dict) -> "Row":
        results = {case: CaseResult(case, status, detail, _tuple(signature))
                   for case, status, detail, signature in raw["results"]}
        return cls(raw["name"], raw["mode"], results, raw["seconds"], raw["sampled"])


def label(name: str, mode: str) -> str:
    return name + (" (x64)" if mode == "jax" else "")


def _tuple(value):
    return tuple(_tuple(v) for v in value) if isinstance(value, list) else value


def portable(result: CaseResult) -> CaseResult:
    """The result with a signature JSON can carry and ``==`` can compare: a pool's bytes as their sha256."""
    signature = result.signature
    if signature is not None and signature[0] == "pool" and signature[1] is not None:
        shape, raw = signature[1]
        signature = ("pool", tuple(int(d) for d in shape), hashlib.sha256(raw).hexdigest())
    return dataclasses.replace(result, signature=signature)


def interpreted(runner) -> bool:
    """A kernel in an interpreter: a JAX runner's ``interpret``; a torch runner's Triton without a GPU."""
    return runner.name not in EVERY_CASE and getattr(runner, "interpret", runner.accelerator is None)


def planned(runner, case: Case, index: int, sample: bool) -> bool:
    """Whether ``runner`` runs ``case`` (``index``: its place in the case file)."""
    if not sample or not interpreted(runner) or case.expected(runner.mode).error_class is not None:
        return True
    return index % SAMPLE_EVERY == 0


def run_rows(runners, cases: list[Case], sample: bool, say) -> list[Row]:
    rows = []
    for i, runner in enumerate(runners):
        say(f"[{i + 1}/{len(runners)}] {label(runner.name, runner.mode)} ...")
        begin, results = time.perf_counter(), {}
        for index, case in enumerate(cases):
            if planned(runner, case, index, sample):
                try:
                    results[case.name] = portable(check_case(runner, case))
                except Exception as error:  # the runner itself broke (building arrays, reading a pool)
                    results[case.name] = CaseResult(case.name, "fail", f"the runner raised {type(error).__name__}: {error}")
        row = Row(runner.name, runner.mode, results, time.perf_counter() - begin, sample and interpreted(runner))
        say(f"    {row.count('pass')} passed, {row.count('fail')} failed, {row.count('skip')} skipped "
            f"in {row.seconds:.1f} s")
        rows.append(row)
    return rows


def load_runners(frontends) -> tuple[list, dict[str, str], list[str]]:
    """``(runners that can run here, {label: why not}, problems)`` of the installed ``frontends``."""
    runners, unavailable, problems = [], {}, []
    for frontend in frontends:
        module, needs = FRONTENDS[frontend]
        try:
            for framework in needs:
                importlib.import_module(framework)
        except Exception as error:
            unavailable[f"{frontend}/*"] = f"{framework} is installed but does not import ({type(error).__name__}: {error})"
            continue
        try:
            found = importlib.import_module(module).runners()
        except Exception as error:
            problems.append(f"{module} does not load: {type(error).__name__}: {error}")
            continue
        for runner in found:
            if runner.unavailable:
                unavailable[label(runner.name, runner.mode)] = runner.unavailable
            else:
                runners.append(runner)
    return runners, unavailable, problems


def matches(name: str, patterns) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(name, p) or name.split("/")[0] == p for p in patterns)


def select_cases(patterns) -> list[Case]:
    cases = load_cases()
    for pattern in patterns or ():
        if not any(fnmatch.fnmatchcase(c.name, pattern) for c in cases):
            raise usage_error(f"--case {pattern!r} matches no conformance case")
    return [c for c in cases if not patterns or any(fnmatch.fnmatchcase(c.name, p) for p in patterns)]


def wanted_frontends(patterns) -> list[str]:
    for pattern in patterns or ():
        if pattern.split("/")[0] not in FRONTENDS:
            raise usage_error(f"--backend {pattern!r}: expected a frontend (torch, jax) or a runner such as torch/triton")
    return [f for f in FRONTENDS if not patterns or any(p.split("/")[0] == f for p in patterns)]


def compile_fast_without_gpu(notes: list[str]) -> None:
    """XLA:CPU without LLVM's optimizations (set before JAX loads; the child inherits it): the CPU compiles a
    program for almost every case and runs it once, so compiling dominates, and the results are the same."""
    flags = os.environ.get("XLA_FLAGS", "")
    extra = [f for f in FAST_CPU_COMPILE if f.split("=")[0] not in flags]
    if extra:
        os.environ["XLA_FLAGS"] = " ".join([flags, *extra]).strip()
        notes.append(f"no GPU: XLA:CPU compiles without optimizations ({' '.join(extra)})")


def interpret_triton_without_gpu(notes: list[str]) -> bool:
    """Whether torch sees a CUDA GPU; without one, Triton's interpreter (set before any Triton kernel is defined)."""
    try:
        import torch
    except Exception:  # load_runners says why
        return False
    if torch.cuda.is_available():
        return True
    if "TRITON_INTERPRET" not in os.environ:
        os.environ["TRITON_INTERPRET"] = "1"
        notes.append("no CUDA GPU: Triton kernels run in Triton's interpreter (TRITON_INTERPRET=1)")
    return False


# -- the x64 child ---------------------------------------------------------------------------------------------------


def start_child(request: dict, quiet: bool, command=None) -> subprocess.Popen:
    """The JAX runners with x64 on, in a process of their own; ``finish_child`` reads what it found."""
    log = tempfile.TemporaryFile("w+") if quiet else None  # its progress: kept for a failure's message when quiet
    child = subprocess.Popen(command or [sys.executable, "-m", "kv_canary.check", CHILD], text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                             env=dict(os.environ, JAX_ENABLE_X64="1"))
    child.log = log
    child.stdin.write(json.dumps(request))
    child.stdin.close()
    return child


def finish_child(child: subprocess.Popen) -> tuple[list[Row], dict[str, str], list[str]]:
    out = child.stdout.read()
    code = child.wait()
    try:
        found = json.loads(out)
        return [Row.from_json(r) for r in found["rows"]], found["unavailable"], found["problems"]
    except (ValueError, KeyError, TypeError):
        tail = ""
        if child.log is not None:
            child.log.seek(0)
            tail = ": " + child.log.read()[-2000:].strip()
        return [], {}, [f"the JAX x64 child process failed (exit {code}){tail}"]


def child_main() -> int:
    request = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):
        runners, unavailable, problems = load_runners(["jax"])
        runners = [r for r in runners if matches(r.name, request["backends"])]
        unavailable = {k: v for k, v in unavailable.items() if matches(k.split(" ")[0], request["backends"])}
        names = set(request["cases"])
        cases = [c for c in load_cases() if c.name in names]
        rows = run_rows(runners, cases, request["sample"], lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps({"rows": [r.to_json() for r in rows], "unavailable": unavailable, "problems": problems}))
    return 0


# -- the command -----------------------------------------------------------------------------------------------------


def compare(rows: list[Row], cases: list[Case]) -> list[dict]:
    """Per case, the runners that differ from the first of those whose modes expect the same outcome."""
    found = []
    for case in cases:
        results = {row.label: (row.mode, row.results[case.name]) for row in rows if case.name in row.results}
        names = disagreements(case, results)
        if names:
            outcomes = {name: outcome(result) for name, (_, result) in results.items() if result.signature}
            found.append({"case": case.name, "runners": names, "outcomes": outcomes})
    return found


def outcome(result: CaseResult) -> str:
    signature = result.signature
    if signature[0] == "error":
        return f"{signature[1]}: {signature[2]}"
    return "pool " + ("none" if signature[1] is None else f"{signature[1]} sha256 {signature[2][:12]}")


def verdict(rows, unavailable, problems, disagreeing, strict) -> tuple[int, str]:
    failed = sum(row.count("fail") for row in rows)
    counts = f"{len(rows)} runner{'s' * (len(rows) != 1)} ran {sum(len(r.results) for r in rows)} case runs"
    if problems or failed or disagreeing:
        return EXIT_FAILED, (f"FAILED: {counts}: {failed} failed, {len(disagreeing)} cases disagree"
                             + (f", {len(problems)} load problems" if problems else ""))
    if not rows:
        return EXIT_NOTHING_RAN, "NOTHING RAN: no selected runner can run here"
    if strict and unavailable:
        return EXIT_FAILED, f"FAILED (--strict): {counts}, but {len(unavailable)} cannot run here"
    skipped = f"; {len(unavailable)} cannot run here (--strict fails on that)" if unavailable else ""
    return EXIT_OK, f"OK: {counts}, every one as the spec expects, and the runners agree{skipped}"


def render(rows, unavailable, problems, disagreeing, notes, n_cases: int, line: str) -> str:
    out = [f"{'runner':<22} {'mode':<12} {'pass':>5} {'fail':>5} {'skip':>5} {'not run':>8} {'seconds':>8}"]
    for row in rows:
        not_run = n_cases - len(row.results)
        out.append(f"{row.label:<22} {row.mode:<12} {row.count('pass'):>5} {row.count('fail'):>5} "
                   f"{row.count('skip'):>5} {not_run:>8} {row.seconds:>8.1f}")
    out += [f"cannot run here: {name}: {why}" for name, why in unavailable.items()]
    out += [f"PROBLEM: {problem}" for problem in problems]
    skips: dict[str, list] = {}
    for row in rows:
        for r in row.results.values():
            if r.status == "fail":
                out.append(f"FAIL {row.label} {r.case}: {r.detail}")
            elif r.status == "skip":
                skips.setdefault(r.detail, []).append((row.label, r.case))
    for why, where in skips.items():
        runners, cases = sorted({w[0] for w in where}), sorted({w[1] for w in where})
        out.append(f"skipped {', '.join(cases)} on {', '.join(runners)}: {why}")
    for d in disagreeing:
        out.append(f"DISAGREE {d['case']}: {', '.join(d['runners'])} differ; "
                   + "; ".join(f"{k}: {v}" for k, v in d["outcomes"].items()))
    out += [f"note: {note}" for note in notes]
    return "\n".join(out + [line])


def run(args):
    cases = [] if args.list else select_cases(args.case)  # --list: every runner, no case
    frontends = wanted_frontends(args.backend)
    say = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    missing = {f: [m for m in FRONTENDS[f][1] if not installed(m)] for f in frontends}
    present = [f for f in frontends if not missing[f]]
    if not present:
        raise nothing_ran(errors.not_installed(dict.fromkeys(m for f in frontends for m in missing[f])))
    unavailable = {f"{f}/*": errors.not_installed(missing[f]) for f in frontends if missing[f]}
    notes: list[str] = []
    gpu = interpret_triton_without_gpu(notes) if "torch" in present else gpu_visible()
    if "jax" in present and not gpu:
        compile_fast_without_gpu(notes)
    # JAX takes most of a GPU's memory when it starts unless told not to; torch, JAX and the x64 child share it here
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    say("kv-canary check: loading the frontends ...")
    runners, more, problems = load_runners(present)
    unavailable |= more
    known = [r.name for r in runners] + [name.split(" ")[0] for name in unavailable]
    for pattern in args.backend or ():
        if "/" in pattern and not any(matches(name, [pattern]) for name in known):
            raise usage_error(f"--backend {pattern!r} is no runner; the runners: {', '.join(dict.fromkeys(known))}")
    runners = [r for r in runners if matches(r.name, args.backend)]
    unavailable = {k: v for k, v in unavailable.items() if matches(k.split(" ")[0], args.backend)}
    sample = not (args.all or args.case)
    child = None
    jax_here = [r for r in runners if r.name.startswith("jax/")]
    if any(r.mode == "jax" for r in jax_here):
        notes.append("JAX_ENABLE_X64 is on in this environment: the JAX runners ran with x64 on only")
    elif jax_here or any(k.startswith("jax/") for k in unavailable if k != "jax/*"):
        child = start_child({"cases": [c.name for c in cases], "backends": args.backend, "sample": sample}, args.quiet)
    rows = run_rows(runners, cases, sample, say)
    if child is not None:
        say("kv-canary check: waiting for the JAX x64 child ...")
        child_rows, child_unavailable, child_problems = finish_child(child)
        rows += child_rows
        unavailable |= child_unavailable
        problems += child_problems
    sampled = [r.label for r in rows if r.sampled]
    if cases and sampled:
        notes.append(f"interpreted, so they ran every error case and every {SAMPLE_EVERY}th value case: "
                     f"{', '.join(sampled)}; --all runs every case everywhere")
    disagreeing = compare(rows, cases)
    code, line = verdict(rows, unavailable, problems, disagreeing, args.strict)
    if args.list and code != EXIT_FAILED:
        line = f"{len(rows)} runners can run here, {len(unavailable)} cannot; {len(load_cases())} cases"
    payload = {
        "verdict": line, "sampled": sampled, "cases": len(cases),
        "runners": [{"runner": r.label, "name": r.name, "mode": r.mode, "pass": r.count("pass"),
                     "fail": r.count("fail"), "skip": r.count("skip"), "ran": len(r.results),
                     "seconds": round(r.seconds, 2)} for r in rows],
        "unavailable": unavailable, "problems": problems,
        "failures": [{"runner": r.label, "case": c.case, "detail": c.detail}
                     for r in rows for c in r.results.values() if c.status == "fail"],
        "skips": [{"runner": r.label, "case": c.case, "reason": c.detail}
                  for r in rows for c in r.results.values() if c.status == "skip"],
        "disagreements": disagreeing, "notes": notes,
    }
    return code, payload, render(rows, unavailable, problems, disagreeing, notes, len(cases), line)


if __name__ == "__main__" and sys.argv[1:] == [CHILD]:
    sys.exit(child_main())
