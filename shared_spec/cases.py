"""Conformance cases: loading ``data/conformance.json`` into typed records.

A case names its inputs and either the expected pool or the expected exception
(spec class name and exact message). Inputs are data, not arrays, so each
frontend builds them natively (``ArrayData.numpy()`` for numpy-backed ones).
Some cases need a setting a runner may not have; ``Case.requires`` names it:

- ``"in_place"``: only frontends that write ``pool_out`` in place apply.
- ``"accelerator"``: arguments named in ``Case.host`` stay on the CPU while the
  rest go to an accelerator; ``{accelerator}`` in the message is that device.

``Case.layout`` asks for a pool memory layout (``"column_slice"``: pool_out is
a column slice of a wider pool whose other columns must stay untouched;
``"broadcast_rows"``: every row aliases one row). Frontends without strides
build a plain array instead.

``Case.op`` names the operation: ``SCATTER`` (``scatter_req_token_ids``, the default, left out of the
file) or ``ASSIGN`` (``assign_req_to_token_pool``, ``shared_spec.assignment``: sglang's argument names,
``batch_size`` a Python value, the table ``req_to_token``). ``load_cases()`` gives the scatter's
cases, ``load_cases(op=ASSIGN)`` the assignment's, ``load_cases(op=None)`` every case.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import numpy as np

CASES_FILE = pathlib.Path(__file__).with_name("data") / "conformance.json"
SCATTER, ASSIGN = "scatter_req_token_ids", "assign_req_to_token_pool"


@dataclasses.dataclass(frozen=True)
class ArrayData:
    """An array as data: canonical dtype name, shape and row-major values."""

    dtype: str
    shape: tuple[int, ...]
    data: tuple

    def numpy(self) -> np.ndarray:
        """As a numpy array (bfloat16 and other ml_dtypes need ml_dtypes installed)."""
        dtype = np.dtype(self.dtype) if self.dtype != "bfloat16" else _ml_dtype(self.dtype)
        return np.asarray(self.data, dtype=dtype).reshape(self.shape)

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
class Case:
    name: str
    rule: str
    args: dict
    check_values: bool = False
    expected_pool: ArrayData | None = None
    error_class: str | None = None
    error_message: str | None = None
    requires: tuple[str, ...] = ()
    host: tuple[str, ...] = ()
    layout: str | None = None
    op: str = SCATTER

    @property
    def expects_error(self) -> bool:
        return self.error_class is not None

    def message(self, accelerator: str | None = None) -> str:
        """The expected message, with ``{accelerator}`` filled in where it appears."""
        assert self.error_message is not None
        return self.error_message.replace("{accelerator}", accelerator or "")

    def to_json(self) -> dict:
        out = {"name": self.name, "rule": self.rule, "check_values": self.check_values, "args": {}}
        for name, arg in self.args.items():
            out["args"][name] = {"python": arg.value} if isinstance(arg, PythonValue) else arg.to_json()
        if self.expected_pool is not None:
            out["expect"] = {"pool": self.expected_pool.to_json()}
        else:
            out["expect"] = {"error": {"class": self.error_class, "message": self.error_message}}
        for key in ("requires", "host"):
            if getattr(self, key):
                out[key] = list(getattr(self, key))
        if self.layout:
            out["layout"] = self.layout
        if self.op != SCATTER:
            out["op"] = self.op
        return out

    @classmethod
    def from_json(cls, raw: dict) -> "Case":
        args = {
            name: PythonValue(a["python"]) if "python" in a else ArrayData(a["dtype"], tuple(a["shape"]), tuple(a["data"]))
            for name, a in raw["args"].items()
        }
        expect = raw["expect"]
        pool = expect.get("pool")
        error = expect.get("error") or {}
        return cls(
            name=raw["name"],
            rule=raw["rule"],
            args=args,
            check_values=raw.get("check_values", False),
            expected_pool=ArrayData(pool["dtype"], tuple(pool["shape"]), tuple(pool["data"])) if pool else None,
            error_class=error.get("class"),
            error_message=error.get("message"),
            requires=tuple(raw.get("requires", ())),
            host=tuple(raw.get("host", ())),
            layout=raw.get("layout"),
            op=raw.get("op", SCATTER),
        )


def load_cases(path: pathlib.Path = CASES_FILE, op: str | None = SCATTER) -> list[Case]:
    """The conformance cases of ``op`` (None: every case), in file order."""
    cases = [Case.from_json(raw) for raw in json.loads(path.read_text())["cases"]]
    return cases if op is None else [case for case in cases if case.op == op]


def _ml_dtype(name: str):
    import ml_dtypes  # a dependency of jax; torch builds bfloat16 natively

    return np.dtype(getattr(ml_dtypes, name))
