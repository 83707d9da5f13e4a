"""One harness that runs any backend over the conformance cases and compares backends.

A frontend supplies a ``Runner`` per backend (how to build its arrays, call each operation, read a pool back);
placement, pool layouts, judging against the case and checking that a failed call wrote nothing live here.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shared_spec.cases import ASSIGN, ArrayData, Case, Expect, PythonValue
from shared_spec.checks import ASSIGN as ASSIGN_OP, SCATTER as SCATTER_OP

# A "column_slice" pool starts GUARD columns into a parent with GUARD more on the right, all of them GUARD_FILL.
GUARD, GUARD_FILL = 3, -77


@dataclasses.dataclass(frozen=True)
class CaseResult:
    case: str
    status: str  # "pass", "fail" or "skip"
    detail: str = ""
    # What the call did, comparable across runners: ("error", class, message) or ("pool", shape, bytes).
    signature: tuple | None = None


class Runner:
    """A frontend and backend that can run cases.

    Hooks: ``array(data, device)`` a native array of ``ArrayData`` on ``"cpu"`` or ``self.accelerator``;
    ``scatter(args, check_values)`` and ``assign(args)`` call the operation with the case's arguments by name
    (``start_cols`` only where the case passes it; the assignment's ``batch_size`` a Python value) and return the
    pool they leave; ``numpy(native)``; ``column_slice(parent, start, width)`` and ``broadcast_rows(row, n)`` for
    frontends that write in place.
    """

    frontend = ""
    backend = ""
    mode = ""  # the expectation this runner is judged by: cases.MODES
    in_place = False
    accelerator: str | None = None
    unavailable: str | None = None  # why this runner cannot run here (None: it can)

    @property
    def name(self) -> str:
        return f"{self.frontend}/{self.backend}"

    @property
    def device(self) -> str:
        return self.accelerator or "cpu"

    def array(self, data: ArrayData, device: str):
        raise NotImplementedError

    def scatter(self, args: dict, check_values: bool):
        raise NotImplementedError

    def assign(self, args: dict):
        raise NotImplementedError

    def numpy(self, native) -> np.ndarray:
        raise NotImplementedError

    def column_slice(self, parent, start: int, width: int):
        raise NotImplementedError

    def broadcast_rows(self, row, n_rows: int):
        raise NotImplementedError

    def call_numpy(self, flat_in, offsets, rows, pool, start_cols=None, check_values=False) -> np.ndarray:
        """numpy in, numpy out: the pool one scatter leaves (raises what the call raises)."""
        args = {arg.name: value for arg, value in zip(SCATTER_OP.args, (flat_in, offsets, rows, pool))}
        if start_cols is not None:
            args["start_cols"] = start_cols
        native = {k: self.array(ArrayData.of(v), self.device) for k, v in args.items()}
        return self.numpy(self.scatter(native, check_values))

    def assign_numpy(self, rows, table, start, end, loc, batch_size) -> np.ndarray:
        """numpy in, numpy out: the table one assignment leaves."""
        names = [arg.name for arg in ASSIGN_OP.args]
        native = {n: self.array(ArrayData.of(v), self.device) for n, v in zip(names, (rows, table, start, end, loc))}
        return self.numpy(self.assign({**native, "batch_size": batch_size}))

    def skip_reason(self, case: Case) -> str | None:
        if self.unavailable:
            return self.unavailable
        if "in_place" in case.requires and not self.in_place:
            return "the case is for frontends that write in place"
        if "accelerator" in case.requires and self.accelerator is None:
            return "the case needs an accelerator beside the CPU"
        return None

    def run(self, case: Case) -> tuple[np.ndarray | None, BaseException | None, bool]:
        """``(pool after the call, exception raised, cells outside the pool untouched)`` for one call."""
        output = (ASSIGN_OP if case.op == ASSIGN else SCATTER_OP).output
        native = {name: arg.value if isinstance(arg, PythonValue) else
                  self.array(arg, "cpu" if name in case.host else self.device) for name, arg in case.args.items()}
        pool_data, parent = case.args[output], None
        if isinstance(pool_data, ArrayData) and self.in_place and case.layout == "column_slice":
            pool = pool_data.numpy()
            wide = np.full((pool.shape[0], pool.shape[1] + 2 * GUARD), GUARD_FILL, dtype=pool.dtype)
            wide[:, GUARD:GUARD + pool.shape[1]] = pool
            parent = self.array(ArrayData.of(wide), self.device)
            native[output] = self.column_slice(parent, GUARD, pool.shape[1])
        elif isinstance(pool_data, ArrayData) and self.in_place and case.layout == "broadcast_rows":
            row = self.array(ArrayData.of(pool_data.numpy()[0]), self.device)
            native[output] = self.broadcast_rows(row, pool_data.shape[0])
        before = self.numpy(native[output]) if isinstance(pool_data, ArrayData) else None
        try:
            result = self.assign(native) if case.op == ASSIGN else self.scatter(native, case.check_values)
        except Exception as error:  # every exception is judged
            after = None if before is None else self.numpy(native[output])
            return after, error, before is None or np.array_equal(before, after)
        untouched = True
        if parent is not None:
            wide = self.numpy(parent)
            untouched = bool((wide[:, :GUARD] == GUARD_FILL).all() and (wide[:, -GUARD:] == GUARD_FILL).all())
        return self.numpy(result), None, untouched


def check_case(runner: Runner, case: Case) -> CaseResult:
    """Run one case on one runner and judge it against the runner's mode's expectation."""
    reason = runner.skip_reason(case)
    if reason is not None:
        return CaseResult(case.name, "skip", reason)
    pool, error, untouched = runner.run(case)
    problem = judge(case.expected(runner.mode), pool, error, untouched, runner.accelerator)
    if error is not None:
        signature = ("error", type(error).__name__, str(error))
    else:
        signature = ("pool", None if pool is None else (pool.shape, pool.tobytes()))
    return CaseResult(case.name, "fail" if problem else "pass", problem or "", signature)


def judge(expect: Expect, pool, error, untouched: bool, accelerator: str | None = None) -> str | None:
    """What is wrong with a call's outcome (None: nothing)."""
    if expect.error_class is not None:
        message = expect.error_message.replace("{accelerator}", accelerator or "")
        if error is None:
            return f"expected {expect.error_class}, but the call returned"
        if type(error).__name__ != expect.error_class or str(error) != message:
            return f"expected {expect.error_class}: {message}\n  got {type(error).__name__}: {error}"
        return None if untouched else "the pool was written although the call raised"
    if error is not None:
        return f"unexpected {type(error).__name__}: {error}"
    expected = expect.pool.numpy()
    if pool is None or pool.shape != expected.shape or pool.dtype != expected.dtype:
        return f"pool of shape {expected.shape} int32 expected, got {None if pool is None else (pool.shape, pool.dtype.name)}"
    wrong = np.argwhere(pool != expected)
    if len(wrong):
        r, c = wrong[0]
        return f"{len(wrong)} cells differ; first at [{r}, {c}]: expected {expected[r, c]}, got {pool[r, c]}"
    return None if untouched else "cells outside the pool's column slice were written"


def disagreements(case: Case, results: dict[str, tuple[str, CaseResult]]) -> list[str]:
    """Runners whose outcomes differ where their modes expect the same: ``results`` maps a runner's name to its mode
    and result. Returns the names of the runners that disagree with the first of their group (empty: all agree)."""
    groups: dict[str, list[tuple[str, tuple]]] = {}
    for name, (mode, result) in results.items():
        if result.signature is not None:
            key = repr(case.expected(mode).to_json())
            groups.setdefault(key, []).append((name, result.signature))
    return [name for members in groups.values() for name, sig in members[1:] if sig != members[0][1]]
