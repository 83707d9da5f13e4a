"""The argument tables of both operations, their checks in order, and a fast predicate generated from them.

A frontend describes each argument as an ``ArrayView`` (or ``NotAnArray``) and
raises what ``first_failure(op, views, frontend)`` returns, before anything is
written. ``compile_fast_check(op, dialect)`` turns the same checks into one
boolean expression over a frontend's native arrays, for its hot path; where
it is False, the frontend describes the arguments and asks ``first_failure``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import numpy as np

from shared_spec import errors

TORCH, JAX = "torch", "jax"
FRONTENDS = (TORCH, JAX)
INDEX = "index"  # an index argument: its dtypes are the frontend's (INDEX_DTYPES)
# What each frontend takes for an index argument: sglang's int64 ABI in torch; int32, and int64 with x64, in JAX.
INDEX_DTYPES = {TORCH: ("int64",), JAX: ("int32", "int64")}
# The most requests one call takes: a program per request on CUDA's grid axis 0, which holds 2**31 - 1.
MAX_REQUESTS = 2**31 - 1
# The assignment's "slots" check: batch_size * len(out_cache_loc) below this keeps the running sum in int64.
SLOTS_LIMIT = 2**63


@dataclasses.dataclass(frozen=True)
class Arg:
    """One array argument: its name, rank, and dtypes (``INDEX``, or a tuple of dtype names)."""

    name: str
    rank: int
    dtypes: object = INDEX


@dataclasses.dataclass(frozen=True)
class Op:
    """One operation's table: its arguments in check order, the one it writes, its message prefix."""

    name: str
    args: tuple[Arg, ...]
    output: str
    optional: tuple[Arg, ...] = ()  # checked after ``args`` when a call passes them


SCATTER = Op(
    errors.OP_NAME,
    (Arg("flat_in", 1), Arg("offsets", 1), Arg("req_pool_indices", 1), Arg("pool_out", 2, ("int32",))),
    "pool_out",
    (Arg("start_cols", 1),),
)
# sglang's positional order; every index argument takes int32 or int64 on both frontends.
ASSIGN_INDEX = ("int32", "int64")
ASSIGN = Op(
    errors.ASSIGN_OP_NAME,
    (Arg("req_pool_indices", 1, ASSIGN_INDEX), Arg("req_to_token", 2, ("int32",)), Arg("start_offset", 1, ASSIGN_INDEX),
     Arg("end_offset", 1, ASSIGN_INDEX), Arg("out_cache_loc", 1, ASSIGN_INDEX)),
    "req_to_token",
)
PER_REQUEST = ("req_pool_indices", "start_offset", "end_offset")  # batch_size is at most each one's length

CHECK_ORDER = {
    SCATTER.name: ("array", "storage", "rank", "dtype", "offsets_length", "start_cols_length", "requests", "device",
                   "writable"),
    ASSIGN.name: ("array", "storage", "rank", "dtype", "batch_size", "requests", "slots", "device", "writable"),
}

STRIDED = "strided"  # ArrayView.layout of plain strided memory
SEVERAL_DEVICES = "several devices"  # ArrayView.device of a JAX array over more than one device
NO_DATA_DEVICES = ("meta",)
# ArrayView.storage_problem: why an array's memory does not hold its values as they read.
MASKED, DELETED, NEGATIVE_BIT, CONJUGATE_BIT, NO_MEMORY = "masked", "deleted", "negative_bit", "conjugate_bit", "no_memory"
STORAGE_MESSAGES: dict[str, tuple[Callable[..., Exception], str]] = {
    MASKED: (errors.type_error, errors.MASKED_ARRAY),
    DELETED: (errors.value_error, errors.DELETED_ARRAY),
    NEGATIVE_BIT: (errors.value_error, errors.NEGATIVE_BIT),
    CONJUGATE_BIT: (errors.value_error, errors.CONJUGATE_BIT),
    NO_MEMORY: (errors.value_error, errors.NO_MEMORY),
}


@dataclasses.dataclass(frozen=True)
class ArrayView:
    """What the checks read of one array: shape, canonical dtype name, canonical device (None: unknown, or host data
    that goes where the others are), why it cannot be written in place (None: it can), layout, storage problem."""

    shape: tuple[int, ...]
    dtype: str
    device: str | None = None
    write_problem: object = None
    layout: str = STRIDED
    storage_problem: str | None = None


@dataclasses.dataclass(frozen=True)
class NotAnArray:
    """An argument that is not an array the frontend accepts."""

    type_name: str


def accepted_dtypes(arg: Arg, frontend: str) -> tuple[str, ...]:
    return INDEX_DTYPES[frontend] if arg.dtypes == INDEX else arg.dtypes


def first_failure(op: Op, views: Mapping, frontend: str, batch_size=None) -> tuple[str, Exception] | None:
    """``(check, exception)`` of the first failing check of ``CHECK_ORDER[op.name]``; None when all pass.

    ``views``: each argument's view by name (an optional one only where the call passes it). ``batch_size``: the
    assignment's (None: ``len(req_pool_indices)``).
    """
    args = op.args + tuple(a for a in op.optional if a.name in views)
    made = _made(op)
    for arg in args:
        if isinstance(views[arg.name], NotAnArray):
            return "array", made(errors.type_error, errors.NOT_AN_ARRAY, arg=arg.name, type_name=views[arg.name].type_name)
    for arg in args:
        error = storage_error(arg.name, views[arg.name])
        if error is not None:
            return "storage", errors.retitled(error) if op is ASSIGN else error
    for arg in args:
        if len(views[arg.name].shape) != arg.rank:
            return "rank", made(errors.value_error, errors.WRONG_RANK, arg=arg.name, rank=arg.rank,
                                shape=tuple(views[arg.name].shape))
    for arg in args:
        dtypes = accepted_dtypes(arg, frontend)
        if views[arg.name].dtype not in dtypes:
            return "dtype", made(errors.type_error, errors.WRONG_DTYPE, arg=arg.name, dtype=" or ".join(dtypes),
                                 got=views[arg.name].dtype)
    if op is SCATTER:
        failure = _scatter_lengths(views)
    else:
        failure = _assign_sizes(views, batch_size)
    if failure is not None:
        return failure
    error = device_error(op, views, tuple(a.name for a in args))
    if error is not None:
        return "device", error
    problem = views[op.output].write_problem
    if problem is not None:
        template = errors.NOT_WRITABLE if op is SCATTER else errors.ASSIGN_NOT_WRITABLE
        return "writable", errors.value_error(template, reason=problem)
    return None


def _made(op: Op):
    """``make(kind, template, **fields)`` with the template retitled for the assignment."""
    if op is SCATTER:
        return lambda kind, template, **fields: kind(template, **fields)
    return lambda kind, template, **fields: kind(errors.for_assignment(template), **fields)


def _scatter_lengths(views):
    length, bs = views["offsets"].shape[0], views["req_pool_indices"].shape[0]
    if length != bs + 1:
        return "offsets_length", errors.value_error(errors.OFFSETS_LENGTH, length=length, expected=bs + 1)
    if "start_cols" in views and views["start_cols"].shape[0] != bs:
        return "start_cols_length", errors.value_error(errors.START_COLS_LENGTH, length=views["start_cols"].shape[0], bs=bs)
    if bs > MAX_REQUESTS:
        return "requests", errors.value_error(errors.TOO_MANY_REQUESTS, bs=bs, limit=MAX_REQUESTS)
    return None


def _assign_sizes(views, batch_size):
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
    return None


def batch_size_value(batch_size):
    """``batch_size`` as a Python int, or the ``ASSIGN_BATCH_SIZE_TYPE`` error (a bool is no int here)."""
    if not isinstance(batch_size, (bool, np.bool_)) and hasattr(batch_size, "__index__"):
        try:
            return batch_size.__index__()
        except TypeError:  # a 1-element array's __index__ refuses
            pass
    return errors.type_error(errors.ASSIGN_BATCH_SIZE_TYPE, type_name=type(batch_size).__name__)


def device_error(op: Op, views: Mapping, names) -> Exception | None:
    """The device check: the output's device decides; where it has none (host data) the first argument with one.
    An output on ``SEVERAL_DEVICES`` takes every argument (the frontend puts each on all of its devices)."""
    if views[op.output].device == SEVERAL_DEVICES:
        return None
    placed = [name for name in (op.output, *names) if views[name].device is not None]
    if not placed:
        return None
    first, first_device = placed[0], views[placed[0]].device
    scatter = op is SCATTER
    for name in names:
        device = views[name].device
        if device is not None and device != first_device:
            if first == op.output:
                template = errors.DEVICE_MISMATCH if scatter else errors.ASSIGN_DEVICE_MISMATCH
                field = "pool_device" if scatter else "table_device"
                return errors.value_error(template, arg=name, device=device, **{field: first_device})
            template = errors.DEVICE_MISMATCH_HOST_POOL if scatter else errors.ASSIGN_DEVICE_MISMATCH_HOST_TABLE
            return errors.value_error(template, arg=name, device=device, first=first, first_device=first_device)
    return None


def storage_error(name: str, view: ArrayView) -> Exception | None:
    """The storage check of one argument: its layout, a device without data, then ``storage_problem``."""
    if view.layout != STRIDED:
        return errors.type_error(errors.NOT_STRIDED, arg=name, layout=view.layout)
    if view.device in NO_DATA_DEVICES:
        return errors.value_error(errors.NO_DATA, arg=name)
    if view.storage_problem is not None:
        make, template = STORAGE_MESSAGES[view.storage_problem]
        return make(template, arg=name)
    return None


def require_bool(option: str, value, template: str = errors.NOT_A_BOOL) -> bool:
    """``value`` as a ``bool`` (``bool`` or ``numpy.bool_``); the spec's ``TypeError`` (``template``: the scatter's
    message, or another ``BOOL_OPTION``'s) for anything else."""
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise errors.type_error(template, option=option, type_name=type(value).__name__)


def cells_overlap(shape, strides) -> bool:
    """True when two cells of a 2-D array with these element strides share memory."""
    (rows, cols), (s0, s1) = shape, strides
    if rows <= 1 or cols <= 1:
        return (rows > 1 and s0 == 0) or (cols > 1 and s1 == 0)
    s0, s1 = abs(s0), abs(s1)  # a negative stride mirrors the array, which changes no overlap
    if s0 == 0 or s1 == 0:
        return True
    # Cells (r, c) and (r + a, c - b) share memory when a * s0 == b * s1; the least such a, b > 0 are s1/g, s0/g.
    a, b = s0, s1
    while b:  # gcd, spelled out: TorchDynamo traces this loop on symbolic strides, not math.gcd
        a, b = b, a % b
    return s1 // a < rows and s0 // a < cols


@dataclasses.dataclass(frozen=True)
class Dialect:
    """How a frontend spells each check over its native arrays.

    Templates take ``{x}`` (and ``{y}``, the output, in ``same_device`` and ``bindings``) for an argument name;
    ``dtype_is`` takes ``{dtype}``, the name of a constant ``dtype_object`` supplies; ``storage`` takes
    ``{itemsize}``, the element size: a constant where the argument has one dtype, else ``itemsize``'s spelling.
    ``storage`` is the storage check but its device, ``has_data`` that part for the output alone (every other
    argument must be on its device). ``bindings``, a statement run once every argument is an array, names what the
    ``same_device`` terms share. ``namespace`` holds the names the expressions use.
    """

    frontend: str
    is_array: str
    storage: str
    itemsize: str
    has_data: str
    rank: str
    dtype_is: str
    length: str
    same_device: str
    writable: str
    dtype_object: Callable[[str], object]
    namespace: Mapping[str, object]
    bindings: str = ""


def compile_fast_check(op: Op, dialect: Dialect) -> Callable[..., bool]:
    """A predicate over the native arguments, True exactly when ``first_failure`` finds nothing.

    The scatter's: ``check(flat_in, offsets, req_pool_indices, pool_out, start_cols=None)`` (None: not passed).
    The assignment's: ``check(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
    batch_size)``, False for a ``batch_size`` that is not None or an ``int``. The terms are ``first_failure``'s
    conditions, each a necessary one, ordered so that none is asked of a value an earlier one would refuse; the
    function's text is its ``source``.
    """
    namespace = dict(dialect.namespace)
    d = dialect

    def argument_terms(a):
        alternatives = []
        dtypes = accepted_dtypes(a, d.frontend)
        for dtype in dtypes:
            namespace[f"DTYPE_{dtype}"] = d.dtype_object(dtype)
            alternatives.append(d.dtype_is.format(x=a.name, dtype=f"DTYPE_{dtype}"))
        itemsize = np.dtype(dtypes[0]).itemsize if len(dtypes) == 1 else d.itemsize.format(x=a.name)
        return ["(" + " or ".join(alternatives) + ")", f"{d.rank.format(x=a.name)} == {a.rank}",
                d.storage.format(x=a.name, itemsize=itemsize)]

    names = [a.name for a in op.args]
    guard = [d.is_array.format(x=name) for name in names]
    if op is ASSIGN:
        guard.append("(batch_size is None or type(batch_size) is int)")
    terms = [term for a in op.args for term in argument_terms(a)] + [d.has_data.format(x=op.output)]
    rows = d.length.format(x="req_pool_indices")
    if op is SCATTER:
        terms += [f"{d.length.format(x='offsets')} == (bs := {rows}) + 1", f"bs <= {MAX_REQUESTS}"]
    else:
        terms.append(f"0 <= (bs := {rows} if batch_size is None else batch_size) <= {rows}")
        terms += [f"bs <= {d.length.format(x=name)}" for name in PER_REQUEST if name != "req_pool_indices"]
        terms += [f"bs <= {MAX_REQUESTS}", f"bs * {d.length.format(x='out_cache_loc')} < {SLOTS_LIMIT}"]
    terms += [d.same_device.format(x=name, y=op.output) for name in names if name != op.output]
    terms.append(d.writable.format(x=op.output))
    parameters = ", ".join(names)
    for a in op.optional:  # after a "<name> is None" test: a call without it pays one identity test
        more = [d.is_array.format(x=a.name), *argument_terms(a), f"{d.length.format(x=a.name)} == bs",
                d.same_device.format(x=a.name, y=op.output)]
        terms.append(f"({a.name} is None or (" + " and ".join(more) + "))")
        parameters += f", {a.name}=None"
    if op is ASSIGN:
        parameters += ", batch_size=None"
    indent = "\n        and "
    source = (f"def fast_check({parameters}):\n    if not ({' and '.join(guard)}):\n        return False\n"
              + (f"    {d.bindings.format(y=op.output)}\n" if d.bindings else "")
              + f"    return (\n        {indent.join(terms)}\n    )\n")
    exec(compile(source, f"<kv-canary {op.name} fast_check>", "exec"), namespace)
    check = namespace["fast_check"]
    check.source = source
    return check
