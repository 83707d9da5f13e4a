"""``assign_req_to_token_pool``: sglang's assignment of new KV-cache slots, as the windowed scatter.

sglang (``mem_cache/common.py``) writes each request's newly allocated slots into its row of the
request-to-token table::

    pt = 0
    for r in range(batch_size):
        n = end_offset[r] - start_offset[r]
        req_to_token[req_pool_indices[r], start_offset[r] : end_offset[r]] = out_cache_loc[pt : pt + n]
        pt += n

That is ``scatter_req_token_ids`` with a window (``shared_spec.reference``): ``flat_in = out_cache_loc``,
``offsets = [0, cumsum(length)]``, ``start_cols = start_offset``, ``req_pool_indices`` as they are,
``pool_out = req_to_token``, for the first ``batch_size`` requests, request ``r``'s length being
``clip(end_offset[r] - start_offset[r], 0, N)`` in exact arithmetic (``N = len(out_cache_loc)``). ``windows``
writes that mapping once; every rule follows from the scatter's, for any values:

- a request with ``end_offset < start_offset`` (a negative length) writes nothing and leaves the running sum
  where it is (sglang's callers never pass one);
- a length is clipped to ``N``, which changes no write: a segment starting at ``pt >= 0`` reads nothing past
  ``N``, and every later segment then starts at or past ``N``;
- the lengths are exact (int64 extremes do not wrap; int32 inputs are widened first), and their running sum never
  wraps: the ``"slots"`` check holds ``batch_size * N`` below ``2**63``, so ``offsets`` lie in ``[0, batch_size * N]``,
  never decrease, and every non-empty segment is disjoint from, and after, the earlier ones;
- columns are clipped to ``[0, C)`` (a window past the table's width, or starting before column 0, is cut),
  rows outside ``[0, R)`` are skipped (their slots still count in the running sum), and ``out_cache_loc`` is
  never read outside ``[0, N)``;
- values are cut to their low 32 bits (an int64 ``out_cache_loc`` into the int32 table).

Arguments, in sglang's order: ``req_pool_indices``, ``start_offset``, ``end_offset`` (1-D, int32 or int64, each
with at least ``batch_size`` entries; entries past ``batch_size`` are not read), ``req_to_token`` (2-D int32,
written), ``out_cache_loc`` (1-D, int32 or int64), ``batch_size`` (an int, ``0 <= batch_size <=`` the length of
each of the three per-request arrays; None, where a frontend has no such argument, is
``len(req_pool_indices)``). The argument checks (``first_failure``) run in ``CHECK_ORDER`` with the scatter's
message templates retitled (``errors.for_assignment``) and the assignment's own (``errors.ASSIGN_*``);
``compile_fast_check(dialect)`` generates a frontend's passing-path predicate from the scatter's ``Dialect``.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Mapping

import numpy as np

from shared_spec import errors
from shared_spec.checks import (MAX_REQUESTS, ArrayView, Dialect, NotAnArray, compiled_predicate, device_error,
                                 storage_error)
from shared_spec.reference import scatter_reference

OP_NAME = errors.ASSIGN_OP_NAME
TABLE = "req_to_token"
BATCH_SIZE = "batch_size"
INDEX_DTYPES = ("int32", "int64")


@dataclasses.dataclass(frozen=True)
class AssignArgument:
    """One array argument: its name, rank and the dtypes it may have (one, or the index dtypes)."""

    name: str
    rank: int
    dtypes: tuple[str, ...]


# In sglang's positional order; the checks walk this order.
ARGUMENTS: tuple[AssignArgument, ...] = (
    AssignArgument("req_pool_indices", 1, INDEX_DTYPES),
    AssignArgument(TABLE, 2, ("int32",)),
    AssignArgument("start_offset", 1, INDEX_DTYPES),
    AssignArgument("end_offset", 1, INDEX_DTYPES),
    AssignArgument("out_cache_loc", 1, INDEX_DTYPES),
)
ARGUMENT_NAMES: tuple[str, ...] = tuple(a.name for a in ARGUMENTS)
# The arrays with an entry per request: batch_size may be at most each one's length.
PER_REQUEST: tuple[str, ...] = ("req_pool_indices", "start_offset", "end_offset")

CHECK_ORDER: tuple[str, ...] = (
    "array",  # every argument, in order, is an array of the frontend
    "storage",  # every argument, in order, is a strided array whose memory holds its values
    "rank",  # req_to_token is 2-D, the others 1-D
    "dtype",  # req_to_token int32; the others int32 or int64
    "batch_size",  # an int (not a bool), 0 <= batch_size <= the length of each PER_REQUEST array, in order
    "requests",  # batch_size <= checks.MAX_REQUESTS
    "slots",  # batch_size * len(out_cache_loc) < SLOTS_LIMIT: the running sum of the lengths fits int64
    "device",  # each argument on req_to_token's device (where it has none: the first argument's that has one)
    "writable",  # req_to_token can be written in place (frontends that write in place)
)
# The "slots" check's bound: batch_size * len(out_cache_loc) below it keeps the running sum of lengths clipped to
# [0, len(out_cache_loc)] in int64.
SLOTS_LIMIT = 2**63


def lengths(start, end, n_tokens: int, xp=np):
    """Each request's length ``clip(end - start, 0, n_tokens)``, exact for any int64 ``start`` and ``end``, int64.

    Branch-free in wrapping int64: where ``end > start`` but ``end - start`` wrapped negative, the true difference
    is at least ``2**63``, past ``n_tokens``. ``xp``: numpy, jax.numpy or torch (each spells ``where`` alike).
    """
    d = end - start  # wraps where the true difference is outside int64
    return xp.where(end > start, xp.where((d < 0) | (d > n_tokens), n_tokens, d), 0)


def windows(start_offset, end_offset, batch_size: int, n_tokens: int, xp=np):
    """``(offsets, start_cols)`` of the windowed scatter for the first ``batch_size`` requests, int64.

    ``offsets = [0, cumsum(lengths)]`` (``lengths``: ``clip(end - start, 0, n_tokens)``, exact) and
    ``start_cols = start``, ``n_tokens`` being ``len(out_cache_loc)``; the offsets never decrease, and with
    ``batch_size * n_tokens < SLOTS_LIMIT`` (the ``"slots"`` check) never wrap. ``xp``: numpy, jax.numpy or torch
    (each spells ``asarray``, ``where``, ``cumsum(x, 0)`` and ``concatenate`` alike), on the inputs' own device: no
    host sync.
    """
    start = xp.asarray(start_offset[:batch_size], dtype=xp.int64)
    end = xp.asarray(end_offset[:batch_size], dtype=xp.int64)
    return running_sum(lengths(start, end, n_tokens, xp), xp), start


def running_sum(request_lengths, xp=np):
    """``[0, cumsum(request_lengths)]``: the offsets of segments of these lengths, in ``xp`` on their device."""
    # offsets[0] = 0 as an array of the inputs' framework and device: the sum of no entries, as a 1-entry array
    zero = request_lengths[:0].sum().reshape(1)
    return xp.concatenate((zero, xp.cumsum(request_lengths, 0)))


def assignment_reference(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size=None):
    """A new table: ``req_to_token`` with the assignment written (inputs untouched); the scatter's reference."""
    rows = np.asarray(req_pool_indices, dtype=np.int64)
    bs = rows.shape[0] if batch_size is None else operator.index(batch_size)
    loc = np.asarray(out_cache_loc, dtype=np.int64)
    with np.errstate(over="ignore"):
        offsets, start_cols = windows(np.asarray(start_offset), np.asarray(end_offset), bs, loc.shape[0])
    return scatter_reference(loc, offsets, rows[:bs], req_to_token, start_cols)


def batch_size_value(batch_size):
    """``batch_size`` as a Python int, or the ``ASSIGN_BATCH_SIZE_TYPE`` error (a bool is no int here)."""
    if isinstance(batch_size, (bool, np.bool_)) or not hasattr(batch_size, "__index__"):
        return errors.type_error(errors.ASSIGN_BATCH_SIZE_TYPE, type_name=type(batch_size).__name__)
    try:
        return operator.index(batch_size)
    except TypeError:  # a 1-element array's __index__ refuses
        return errors.type_error(errors.ASSIGN_BATCH_SIZE_TYPE, type_name=type(batch_size).__name__)


def first_error(views: Mapping[str, ArrayView | NotAnArray], batch_size=None) -> Exception | None:
    """The exception of the first failing check, or None."""
    failure = first_failure(views, batch_size)
    return None if failure is None else failure[1]


def first_failure(views: Mapping[str, ArrayView | NotAnArray], batch_size=None) -> tuple[str, Exception] | None:
    """``(check, exception)`` of the first failing check of ``CHECK_ORDER``; None when all pass.

    ``views`` holds the five arrays by name; ``batch_size`` None stands for ``len(req_pool_indices)``.
    """
    for arg in ARGUMENTS:
        view = views[arg.name]
        if isinstance(view, NotAnArray):
            return "array", errors.type_error(errors.for_assignment(errors.NOT_AN_ARRAY), arg=arg.name, type_name=view.type_name)
    for arg in ARGUMENTS:
        error = storage_error(arg.name, views[arg.name])
        if error is not None:
            return "storage", errors.retitled(error)
    for arg in ARGUMENTS:
        shape = views[arg.name].shape
        if len(shape) != arg.rank:
            return "rank", errors.value_error(errors.for_assignment(errors.WRONG_RANK), arg=arg.name, rank=arg.rank, shape=tuple(shape))
    for arg in ARGUMENTS:
        got = views[arg.name].dtype
        if got not in arg.dtypes:
            if len(arg.dtypes) == 1:
                return "dtype", errors.type_error(errors.for_assignment(errors.WRONG_DTYPE), arg=arg.name, dtype=arg.dtypes[0], got=got)
            return "dtype", errors.type_error(errors.ASSIGN_WRONG_DTYPE, arg=arg.name, got=got)
    bs = views["req_pool_indices"].shape[0] if batch_size is None else batch_size_value(batch_size)
    if isinstance(bs, Exception):
        return "batch_size", bs
    for name in PER_REQUEST:
        limit = views[name].shape[0]
        if not 0 <= bs <= limit:
            return "batch_size", errors.value_error(errors.ASSIGN_BATCH_SIZE_RANGE, bs=bs, limit=limit, arg=name)
    if bs > MAX_REQUESTS:
        return "requests", errors.value_error(errors.for_assignment(errors.TOO_MANY_REQUESTS), bs=bs, limit=MAX_REQUESTS)
    n_tokens = views["out_cache_loc"].shape[0]
    if bs * n_tokens >= SLOTS_LIMIT:
        return "slots", errors.value_error(errors.ASSIGN_TOO_MANY_SLOTS, bs=bs, n=n_tokens)
    error = device_error(views, TABLE, ARGUMENT_NAMES, errors.ASSIGN_DEVICE_MISMATCH,
                         errors.ASSIGN_DEVICE_MISMATCH_HOST_TABLE, "table_device")
    if error is not None:
        return "device", error
    problem = views[TABLE].write_problem
    if problem is not None:
        return "writable", errors.value_error(errors.ASSIGN_NOT_WRITABLE, reason=problem)
    return None


def compile_fast_check(dialect: Dialect):
    """A predicate ``check(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size) ->
    bool``, True exactly when ``first_error`` finds nothing, for arrays of ``dialect``'s frontend and ``batch_size``
    None or a plain ``int`` (any other batch_size, a numpy integer, is False: the frontend asks ``first_error``).

    The scatter's ``checks.compile_fast_check`` for the assignment: the same dialect's terms, one short-circuiting
    expression generated once.
    """
    namespace = dict(dialect.namespace)
    terms = [dialect.is_array.format(x=a.name) for a in ARGUMENTS]
    terms += [dialect.storage.format(x=a.name) for a in ARGUMENTS]
    terms += [f"{dialect.rank.format(x=a.name)} == {a.rank}" for a in ARGUMENTS]
    for a in ARGUMENTS:
        alternatives = []
        for dtype in a.dtypes:
            namespace[f"DTYPE_{dtype}"] = dialect.dtype_object(dtype)
            alternatives.append(dialect.dtype_is.format(x=a.name, dtype=f"DTYPE_{dtype}"))
        terms.append("(" + " or ".join(alternatives) + ")")
    if dialect.has_data is not None:
        terms.append(dialect.has_data.format(x=TABLE))
    terms.append(f"({BATCH_SIZE} is None or type({BATCH_SIZE}) is int)")
    bs = f"({dialect.length.format(x='req_pool_indices')} if {BATCH_SIZE} is None else {BATCH_SIZE})"
    terms += [f"0 <= {bs} <= {dialect.length.format(x=name)}" for name in PER_REQUEST]
    terms.append(f"{bs} <= {MAX_REQUESTS}")
    terms.append(f"{bs} * {dialect.length.format(x='out_cache_loc')} < {SLOTS_LIMIT}")  # Python ints: no overflow
    terms += [dialect.same_device.format(x=name, y=TABLE) for name in ARGUMENT_NAMES if name != TABLE]
    if dialect.writable is not None:
        terms.append(dialect.writable.format(x=TABLE))
    return compiled_predicate(f"{', '.join(ARGUMENT_NAMES)}, {BATCH_SIZE}", terms, namespace,
                              "<kv-canary assignment fast_check>")
