"""The conformance matrix: every frontend x backend available here over every case.

A row per runner (cases passed, failed, skipped); then, per case, whether every
runner that ran it produced the same thing: the same exception class and
message, or the same pool, byte for byte.

Contract:

- ``prepare_environment(frontends)``: what must be set before any kernel is
  defined (Triton's interpreter without a GPU, JAX's x64 for this process);
  returns the notes to show.
- ``collect_runners(frontends)``: the runners of those frontends that can run
  here, and for every other one why not (``"torch/*"`` when a whole frontend's
  framework is not installed or does not import). A frontend is imported only
  when asked for. ``missing_frameworks(frontends)``: the frameworks not
  installed, for the one install hint (``shared_spec.errors.install_hint``).
- ``run_matrix(runners, cases, skipped, notes, started, finished)``: runs
  them, calling ``started(index, total, name)`` before and ``finished(name,
  results, seconds)`` after each runner, and returns a ``Matrix``. A case is
  compared across runners only where two or more ran it; one that a single
  runner ran is listed as not compared, never counted as agreeing.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import time

from kv_canary.platform import cuda_available, installed
from shared_spec import errors
from shared_spec.cases import Case, load_cases
from shared_spec.conformance import CaseResult, Runner, check_case

# (frontend, module exposing ``runners() -> list[Runner]``, the framework it needs).
FRONTENDS = (("torch", "kv_canary_torch.conformance", "torch"), ("jax", "kv_canary_jax.conformance", "jax"))
FRONTEND_NAMES: tuple[str, ...] = tuple(name for name, _, _ in FRONTENDS)
BROKEN_FRAMEWORK = "{module} is installed but does not import ({error})"


def missing_frameworks(frontends=FRONTEND_NAMES) -> list[str]:
    """The frameworks that ``frontends`` need and are not installed here."""
    return [needs for frontend, _, needs in FRONTENDS if frontend in frontends and not installed(needs)]


@dataclasses.dataclass
class Matrix:
    rows: dict[str, list[CaseResult]]
    skipped: dict[str, str]  # runner or frontend -> why it did not run
    errors_identical: dict[str, bool]  # case -> all runners raised the same (error cases two or more ran)
    results_identical: dict[str, bool]  # case -> all runners left the same pool (value cases two or more ran)
    notes: list[str] = dataclasses.field(default_factory=list)  # what was set up for this run
    not_compared: list[str] = dataclasses.field(default_factory=list)  # cases only one runner ran

    @property
    def failed(self) -> bool:
        """A case failed on some runner, or two runners disagreed on a case."""
        failed = any(r.status == "fail" for results in self.rows.values() for r in results)
        return failed or not all(self.errors_identical.values()) or not all(self.results_identical.values())

    @property
    def ok(self) -> bool:
        """Something ran, and nothing failed or disagreed (skipped runners aside)."""
        return bool(self.rows) and not self.failed

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "notes": self.notes,
            "runners": {
                name: {
                    status: sum(r.status == status for r in results) for status in ("pass", "fail", "skip")
                }
                | {
                    "failures": {r.case: r.detail for r in results if r.status == "fail"},
                    "skipped_cases": {r.case: r.detail for r in results if r.status == "skip"},
                }
                for name, results in self.rows.items()
            },
            "skipped": self.skipped,
            "errors_identical": self.errors_identical,
            "results_identical": self.results_identical,
            "not_compared": self.not_compared,
        }


def prepare_environment(frontends=FRONTEND_NAMES) -> list[str]:
    """Set what must be set before any kernel is defined; returns what was done, to print.

    Without a GPU the Triton kernel runs in Triton's interpreter. JAX needs x64
    for int64 arrays: this command (an application, not the library) turns it on
    unless the environment says JAX_ENABLE_X64=0, in which case the JAX runners
    are reported as skipped. Only the named frontends' frameworks are touched.
    """
    notes = []
    if "torch" in frontends and installed("torch") and installed("triton") and "TRITON_INTERPRET" not in os.environ:
        try:
            interpret = not cuda_available()
        except ImportError:  # torch does not import: collect_runners reports it
            interpret = False
        if interpret:
            os.environ["TRITON_INTERPRET"] = "1"
            notes.append("no CUDA GPU: Triton kernels run in Triton's interpreter (TRITON_INTERPRET=1)")
    if "jax" in frontends and installed("jax") and os.environ.get("JAX_ENABLE_X64", "") not in ("0", "false", "False"):
        try:
            import jax
        except ImportError:  # collect_runners reports it
            return notes
        jax.config.update("jax_enable_x64", True)
        notes.append("JAX x64 enabled for this process (set JAX_ENABLE_X64=0 to see the JAX rows skipped)")
    elif "jax" in frontends and installed("jax"):
        notes.append("JAX_ENABLE_X64 is off in the environment: JAX x64 left off, so the JAX rows are skipped")
    return notes


def collect_runners(frontends=FRONTEND_NAMES) -> tuple[list[Runner], dict[str, str]]:
    """The runners of ``frontends`` that can run here, and why the others cannot."""
    runners, skipped = [], {}
    missing = missing_frameworks(frontends)
    for frontend, module, needs in FRONTENDS:
        if frontend not in frontends:
            continue
        if needs in missing:
            skipped[f"{frontend}/*"] = errors.NOT_INSTALLED.format(modules=needs, verb="is")
            continue
        try:
            found = importlib.import_module(module).runners()
        except ImportError as error:  # installed but broken (a missing jaxlib, a mismatched build)
            skipped[f"{frontend}/*"] = BROKEN_FRAMEWORK.format(module=needs, error=f"{type(error).__name__}: {error}")
            continue
        for runner in found:
            if runner.unavailable:
                skipped[runner.name] = runner.unavailable
            else:
                runners.append(runner)
    return runners, skipped


def run_matrix(
    runners: list[Runner], cases: list[Case] | None = None, skipped=None, notes=(), started=None, finished=None
) -> Matrix:
    cases = load_cases() if cases is None else cases
    rows = {}
    for index, runner in enumerate(runners):
        if started:
            started(index, len(runners), runner.name)
        begin = time.perf_counter()
        rows[runner.name] = [check_case(runner, case) for case in cases]
        if finished:
            finished(runner.name, rows[runner.name], time.perf_counter() - begin)
    errors_identical, results_identical, not_compared = {}, {}, []
    for i, case in enumerate(cases):
        ran = [results[i].signature for results in rows.values() if results[i].status != "skip"]
        if len(ran) == 1:
            not_compared.append(case.name)
        elif ran:
            (errors_identical if case.expects_error else results_identical)[case.name] = len(set(ran)) == 1
    return Matrix(rows, dict(skipped or {}), errors_identical, results_identical, list(notes), not_compared)
