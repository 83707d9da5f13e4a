"""The conformance matrix: every frontend x backend available here over every case.

A row per runner (cases passed, failed, skipped); then, per case, whether every
runner that ran it produced the same thing: the same exception class and
message, or the same pool, byte for byte.
"""

from __future__ import annotations

import dataclasses
import importlib
import os

from kv_canary.platform import cuda_available, installed
from shared_spec.cases import Case, load_cases
from shared_spec.conformance import CaseResult, Runner, check_case

# Each frontend module exposes ``runners() -> list[Runner]``.
FRONTENDS = (("torch", "kv_canary_torch.conformance", "torch"), ("jax", "kv_canary_jax.conformance", "jax"))


@dataclasses.dataclass
class Matrix:
    rows: dict[str, list[CaseResult]]
    skipped: dict[str, str]  # runner or frontend -> why it did not run
    errors_identical: dict[str, bool]  # case -> all runners raised the same (error cases only)
    results_identical: dict[str, bool]  # case -> all runners left the same pool (value cases only)

    @property
    def ok(self) -> bool:
        failed = any(r.status == "fail" for results in self.rows.values() for r in results)
        agree = all(self.errors_identical.values()) and all(self.results_identical.values())
        return not failed and agree and bool(self.rows)

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "runners": {
                name: {
                    status: sum(r.status == status for r in results) for status in ("pass", "fail", "skip")
                }
                | {"failures": {r.case: r.detail for r in results if r.status == "fail"}}
                for name, results in self.rows.items()
            },
            "skipped": self.skipped,
            "errors_identical": self.errors_identical,
            "results_identical": self.results_identical,
        }


def prepare_environment() -> list[str]:
    """Set what must be set before any kernel is defined; returns what was done, to print.

    Without a GPU the Triton kernel runs in Triton's interpreter. JAX needs x64
    for int64 arrays: this command (an application, not the library) turns it on
    unless the environment says JAX_ENABLE_X64=0, in which case the JAX runners
    are reported as skipped.
    """
    notes = []
    if not cuda_available() and "TRITON_INTERPRET" not in os.environ:
        os.environ["TRITON_INTERPRET"] = "1"
        notes.append("no CUDA GPU: Triton kernels run in Triton's interpreter (TRITON_INTERPRET=1)")
    if installed("jax") and os.environ.get("JAX_ENABLE_X64", "") not in ("0", "false", "False"):
        import jax

        jax.config.update("jax_enable_x64", True)
        notes.append("JAX x64 enabled for this process (set JAX_ENABLE_X64=0 to see the JAX rows skipped)")
    return notes


def collect_runners() -> tuple[list[Runner], dict[str, str]]:
    """The runners that can run here, and why the others cannot."""
    runners, skipped = [], {}
    for frontend, module, needs in FRONTENDS:
        if not installed(needs):
            skipped[f"{frontend}/*"] = f"{needs} is not installed"
            continue
        for runner in importlib.import_module(module).runners():
            if runner.unavailable:
                skipped[runner.name] = runner.unavailable
            else:
                runners.append(runner)
    return runners, skipped


def run_matrix(runners: list[Runner], cases: list[Case] | None = None, skipped=None, progress=None) -> Matrix:
    cases = load_cases() if cases is None else cases
    rows = {}
    for runner in runners:
        rows[runner.name] = []
        for case in cases:
            rows[runner.name].append(check_case(runner, case))
        if progress:
            progress(runner.name, rows[runner.name])
    errors_identical, results_identical = {}, {}
    for i, case in enumerate(cases):
        seen = {results[i].signature for results in rows.values() if results[i].status != "skip"}
        if not seen:
            continue
        (errors_identical if case.expects_error else results_identical)[case.name] = len(seen) == 1
    return Matrix(rows, dict(skipped or {}), errors_identical, results_identical)
