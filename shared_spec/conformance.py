"""One harness that runs any backend over the conformance cases.

A frontend supplies a ``Runner`` per backend: how to build its native arrays
from case data, how to call the operation, how to read a pool back. Everything
else (placement, pool layouts, comparing pools and errors, checking that a
failed call left the pool untouched) lives here once, so adding a backend adds
no case code.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shared_spec.arguments import ARGUMENT_NAMES, OUTPUT, START_COLS
from shared_spec import assignment
from shared_spec.cases import ASSIGN, ArrayData, Case, PythonValue

# Extra columns around a "column_slice" pool: the slice starts at GUARD and the
# parent has GUARD columns on either side, all of which must stay untouched.
GUARD = 3
GUARD_FILL = -77


@dataclasses.dataclass
class Outcome:
    """What one call did: the pool it left (or None) and the exception it raised (or None)."""

    pool: np.ndarray | None
    error: BaseException | None
    guards_untouched: bool = True


@dataclasses.dataclass(frozen=True)
class CaseResult:
    case: str
    status: str  # "pass", "fail" or "skip"
    detail: str = ""
    # What the call produced, comparable across runners: ("error", class, message)
    # or ("pool", shape, bytes); None when skipped.
    signature: tuple | None = None


class Runner:
    """A frontend x backend pair that can run cases. Subclasses fill in the hooks.

    Hooks: ``array(data, device)`` builds a native array from ``ArrayData`` on a
    canonical device (``"cpu"`` or ``self.accelerator``); ``call(args,
    check_values)`` runs the operation and returns the native pool it leaves
    (the argument itself for in-place frontends); ``numpy(native)`` reads a
    native array back; ``args`` holds the four arguments by name, and ``"start_cols"`` where the case
    passes it (an array, or a Python value such as None: pass it on as the ``start_cols=`` keyword);
    ``assign(args)`` runs ``assign_req_to_token_pool`` (cases of ``op`` ``ASSIGN``: ``args`` holds the five
    arrays and ``batch_size`` by sglang's names) and returns the native table it leaves; runners with
    ``assigns`` False skip those cases;
    ``column_slice(parent, start, width)`` returns a strided
    view (in-place frontends only); ``broadcast_rows(row, n_rows)`` returns a
    pool whose rows alias one row (in-place frontends only).
    """

    frontend: str = ""
    backend: str = ""
    in_place: bool = False
    # Canonical name of the device the runner computes on, when not the CPU.
    accelerator: str | None = None
    # Why this runner cannot run at all here (None: it can).
    unavailable: str | None = None
    # Whether the runner runs assign_req_to_token_pool (the assign hook).
    assigns: bool = False

    @property
    def name(self) -> str:
        return f"{self.frontend}/{self.backend}"

    # -- hooks -------------------------------------------------------------
    def array(self, data: ArrayData, device: str):
        raise NotImplementedError

    def call(self, args: dict, check_values: bool):
        raise NotImplementedError

    def numpy(self, native) -> np.ndarray:
        raise NotImplementedError

    def assign(self, args: dict):
        raise NotImplementedError

    def column_slice(self, parent, start: int, width: int):
        raise NotImplementedError

    def broadcast_rows(self, row, n_rows: int):
        raise NotImplementedError

    # -- shared ------------------------------------------------------------
    @property
    def device(self) -> str:
        return self.accelerator or "cpu"

    def skip_reason(self, case: Case) -> str | None:
        """Why this runner does not apply to ``case`` (None: it applies)."""
        if self.unavailable:
            return self.unavailable
        if case.op == ASSIGN and not self.assigns:
            return f"this backend does not run {ASSIGN}"
        if "in_place" in case.requires and not self.in_place:
            return "the case is for frontends that write in place"
        if "accelerator" in case.requires and self.accelerator is None:
            return "the case needs an accelerator beside the CPU"
        return None

    def scatter(self, flat_in, offsets, req_pool_indices, pool_out, *, start_cols=None, check_values=False) -> np.ndarray:
        """numpy in, numpy out: the pool after one call (raises what the call raises).

        ``start_cols`` (None: the call passes none) goes to ``call`` as the args' ``"start_cols"``.
        """
        args = dict(zip(ARGUMENT_NAMES, (flat_in, offsets, req_pool_indices, pool_out)))
        if start_cols is not None:
            args[START_COLS.name] = start_cols
        native = {k: self.array(ArrayData.of(v), self.device) for k, v in args.items()}
        return self.numpy(self.call(native, check_values))

    def invoke(self, case: Case) -> Outcome:
        """Build the case's inputs natively, call once, and report what happened."""
        native = {}
        # start_cols only where the case has it: every other case calls with the four arguments.
        names = (*ARGUMENT_NAMES, *(n for n in (START_COLS.name,) if n in case.args))
        output = OUTPUT
        if case.op == ASSIGN:  # the assignment's five arrays and batch_size, by sglang's names
            names, output = (*assignment.ARGUMENT_NAMES, assignment.BATCH_SIZE), assignment.TABLE
        for name in names:
            arg = case.args[name]
            device = "cpu" if name in case.host else self.device
            native[name] = arg.value if isinstance(arg, PythonValue) else self.array(arg, device)
        pool_data = case.args[output]
        parent = None
        if isinstance(pool_data, ArrayData) and self.in_place and case.layout == "column_slice":
            pool = pool_data.numpy()
            wide = np.full((pool.shape[0], pool.shape[1] + 2 * GUARD), GUARD_FILL, dtype=pool.dtype)
            wide[:, GUARD : GUARD + pool.shape[1]] = pool
            parent = self.array(ArrayData.of(wide), self.device)
            native[output] = self.column_slice(parent, GUARD, pool.shape[1])
        elif isinstance(pool_data, ArrayData) and self.in_place and case.layout == "broadcast_rows":
            row = ArrayData.of(pool_data.numpy()[0])
            native[output] = self.broadcast_rows(self.array(row, self.device), pool_data.shape[0])
        before = self.numpy(native[output]) if isinstance(pool_data, ArrayData) else None
        try:
            result = self.assign(native) if case.op == ASSIGN else self.call(native, case.check_values)
        except Exception as error:  # the harness compares every exception
            after = self.numpy(native[output]) if before is not None else None
            untouched = before is None or np.array_equal(before, after)
            return Outcome(pool=after, error=error, guards_untouched=untouched)
        guards = True
        if parent is not None:
            wide = self.numpy(parent)
            guards = bool((wide[:, :GUARD] == GUARD_FILL).all() and (wide[:, -GUARD:] == GUARD_FILL).all())
        return Outcome(pool=self.numpy(result), error=None, guards_untouched=guards)


def check_case(runner: Runner, case: Case) -> CaseResult:
    """Run one case on one runner and judge it against the case's expectation."""
    reason = runner.skip_reason(case)
    if reason is not None:
        return CaseResult(case.name, "skip", reason)
    outcome = runner.invoke(case)
    problem = judge(case, outcome, runner.accelerator)
    return CaseResult(case.name, "fail" if problem else "pass", problem or "", signature(outcome))


def signature(outcome: Outcome) -> tuple:
    """What a call produced, in a form two runners' outcomes can be compared by."""
    if outcome.error is not None:
        return ("error", type(outcome.error).__name__, str(outcome.error))
    pool = outcome.pool
    return ("pool", None if pool is None else (pool.shape, pool.tobytes()))


def judge(case: Case, outcome: Outcome, accelerator: str | None = None) -> str | None:
    """What is wrong with ``outcome`` for ``case`` (None: nothing)."""
    if case.expects_error:
        error = outcome.error
        if error is None:
            return f"expected {case.error_class}, but the call returned"
        expected = case.message(accelerator)
        if type(error).__name__ != case.error_class:
            return f"expected {case.error_class}, got {type(error).__name__}: {error}"
        if str(error) != expected:
            return f"message differs:\n  expected: {expected}\n  got:      {error}"
        if not outcome.guards_untouched:
            return "the pool was written although the call raised"
        return None
    if outcome.error is not None:
        return f"unexpected {type(outcome.error).__name__}: {outcome.error}"
    expected = case.expected_pool.numpy()
    if outcome.pool is None or outcome.pool.shape != expected.shape or outcome.pool.dtype != expected.dtype:
        got = None if outcome.pool is None else (outcome.pool.shape, outcome.pool.dtype.name)
        return f"pool of shape {expected.shape} int32 expected, got {got}"
    wrong = np.argwhere(outcome.pool != expected)
    if len(wrong):
        r, c = wrong[0]
        return f"{len(wrong)} cells differ; first at [{r}, {c}]: expected {expected[r, c]}, got {outcome.pool[r, c]}"
    if not outcome.guards_untouched:
        return "cells outside the pool's column slice were written"
    return None
