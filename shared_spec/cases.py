"""Conformance cases: ``data/conformance.json`` as typed records.

A case names its operation (``op``: the scatter, or ``ASSIGN``), its inputs as data and what a call must do: leave
the expected pool, or raise the expected exception (class and exact message) with the pool untouched. Where the
frontends differ (a dtype one accepts and the other refuses, host data JAX narrows), ``by_mode`` overrides the
expectation for a mode: ``"torch"``, ``"jax"`` (x64 on) or ``"jax_x64_off"``. ``requires`` names a setting:
``"in_place"`` (frontends that write in place), ``"accelerator"`` (the arguments in ``host`` stay on the CPU, the
rest go to an accelerator; ``{accelerator}`` in a message is that device). ``layout``: ``"column_slice"`` (the
pool is a column slice of a wider one whose other columns must stay untouched) or ``"broadcast_rows"``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import numpy as np

CASES_FILE = pathlib.Path(__file__).with_name("data") / "conformance.json"
SCATTER, ASSIGN = "scatter_req_token_ids", "assign_req_to_token_pool"
MODES = ("torch", "jax", "jax_x64_off")


@dataclasses.dataclass(frozen=True)
class ArrayData:
    """An array as data: dtype name, shape and row-major values."""

    dtype: str
    shape: tuple[int, ...]
    data: tuple

    def numpy(self) -> np.ndarray:
        if self.dtype == "bfloat16":
            import ml_dtypes  # a dependency of jax; torch builds bfloat16 itself

            return np.asarray(self.data, dtype=ml_dtypes.bfloat16).reshape(self.shape)
        return np.asarray(self.data, dtype=self.dtype).reshape(self.shape)

    def to_json(self) -> dict:
        return {"dtype": self.dtype, "shape": list(self.shape), "data": list(self.data)}

    @classmethod
    def of(cls, array) -> "ArrayData":
        array = np.asarray(array)
        return cls(array.dtype.name, tuple(array.shape), tuple(array.reshape(-1).tolist()))


@dataclasses.dataclass(frozen=True)
class PythonValue:
    """A non-array argument (a list, an int, None)."""

    value: Any


@dataclasses.dataclass(frozen=True)
class Expect:
    """A pool, or an exception's class name and message."""

    pool: ArrayData | None = None
    error_class: str | None = None
    error_message: str | None = None

    def to_json(self) -> dict:
        if self.pool is not None:
            return {"pool": self.pool.to_json()}
        return {"error": {"class": self.error_class, "message": self.error_message}}

    @classmethod
    def from_json(cls, raw: dict) -> "Expect":
        if "pool" in raw:
            return cls(pool=_array(raw["pool"]))
        return cls(error_class=raw["error"]["class"], error_message=raw["error"]["message"])


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    rule: str
    args: dict
    expect: Expect
    by_mode: dict = dataclasses.field(default_factory=dict)
    check_values: bool = False
    requires: tuple[str, ...] = ()
    host: tuple[str, ...] = ()
    layout: str | None = None
    op: str = SCATTER

    def expected(self, mode: str) -> Expect:
        return self.by_mode.get(mode, self.expect)

    def to_json(self) -> dict:
        out = {"name": self.name, "rule": self.rule, "args": {
            name: {"python": a.value} if isinstance(a, PythonValue) else a.to_json() for name, a in self.args.items()}}
        out["expect"] = self.expect.to_json()
        if self.by_mode:
            out["by_mode"] = {mode: e.to_json() for mode, e in self.by_mode.items()}
        for key in ("check_values", "requires", "host", "layout"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.op != SCATTER:
            out["op"] = self.op
        return out

    @classmethod
    def from_json(cls, raw: dict) -> "Case":
        args = {name: PythonValue(a["python"]) if "python" in a else _array(a) for name, a in raw["args"].items()}
        return cls(
            name=raw["name"], rule=raw["rule"], args=args, expect=Expect.from_json(raw["expect"]),
            by_mode={mode: Expect.from_json(e) for mode, e in raw.get("by_mode", {}).items()},
            check_values=raw.get("check_values", False), requires=tuple(raw.get("requires", ())),
            host=tuple(raw.get("host", ())), layout=raw.get("layout"), op=raw.get("op", SCATTER),
        )


def _array(raw: dict) -> ArrayData:
    return ArrayData(raw["dtype"], tuple(raw["shape"]), tuple(raw["data"]))


def load_cases(path: pathlib.Path = CASES_FILE, op: str | None = None) -> list[Case]:
    """The cases of ``op`` (None: every case), in file order."""
    cases = [Case.from_json(raw) for raw in json.loads(path.read_text())["cases"]]
    return cases if op is None else [case for case in cases if case.op == op]
