"""The argument table of ``scatter_req_token_ids``: names, ranks and dtypes.

Every frontend reads its expectations from here; nothing else in the project
spells out which argument is 1-D or int64.
"""

from __future__ import annotations

import dataclasses

OP_NAME = "scatter_req_token_ids"


@dataclasses.dataclass(frozen=True)
class Argument:
    """One array argument: its keyword name, rank and canonical dtype name."""

    name: str
    rank: int
    dtype: str


# In argument order; the checks walk this order (see checks.CHECK_ORDER).
ARGUMENTS: tuple[Argument, ...] = (
    Argument("flat_in", 1, "int64"),
    Argument("offsets", 1, "int64"),
    Argument("req_pool_indices", 1, "int64"),
    Argument("pool_out", 2, "int32"),
)

ARGUMENT_NAMES: tuple[str, ...] = tuple(a.name for a in ARGUMENTS)
# The optional argument of windowed writes (default None: every request writes from column 0). When given, the
# checks walk it after the four above, in each check; its length is bs (checks.CHECK_ORDER's start_cols_length).
START_COLS = Argument("start_cols", 1, "int64")
# The argument that is written; the one whose device decides where the kernel runs.
OUTPUT = "pool_out"


def format_shape(shape) -> str:
    """A shape as a Python tuple: ``(2, 3)``, ``(5,)``, ``()``."""
    # str.format, not repr: TorchDynamo formats a symbolic size lazily, where it cannot trace repr of one.
    return "{}".format(tuple(int(d) for d in shape))
