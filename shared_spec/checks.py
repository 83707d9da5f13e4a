"""The argument checks, their order, and a fast pass/fail predicate derived from them.

A frontend describes each argument as an ``ArrayView`` (or ``NotAnArray``) and
asks ``first_error`` (or ``first_failure``, which also names the check) for the
exception of the first failing check in ``CHECK_ORDER``; it raises that
exception before anything is written. Describing four tensors costs
microseconds, so a frontend on a hot path first runs
``compile_fast_check(dialect)``'s predicate (one generated boolean expression
over its native arrays, built once at import) and describes the arguments only
when that predicate says something is wrong.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import numpy as np

from shared_spec import errors
from shared_spec.arguments import ARGUMENTS, ARGUMENT_NAMES, OUTPUT, START_COLS

CHECK_ORDER: tuple[str, ...] = (
    "array",  # every argument, in argument order, is an array of the frontend
    "storage",  # every argument, in order, is a strided array whose memory holds its values (STORAGE_MESSAGES)
    "rank",  # flat_in, offsets, req_pool_indices are 1-D; pool_out is 2-D
    "dtype",  # int64, int64, int64, int32
    "offsets_length",  # len(offsets) == len(req_pool_indices) + 1
    "start_cols_length",  # len(start_cols) == len(req_pool_indices), when start_cols is given
    "requests",  # len(req_pool_indices) <= MAX_REQUESTS
    "device",  # each argument, in order, is on pool_out's device (where pool_out has none: the first argument's that has one)
    "writable",  # pool_out can be written in place (frontends that write in place)
)


# The most requests one call takes: the kernels run a program per request on CUDA's grid axis 0, which holds
# 2**31 - 1 of them. A limit of the spec, so that every backend refuses the same batches with the same message.
MAX_REQUESTS = 2**31 - 1

# ArrayView.layout of an array whose elements sit at strided offsets of one buffer (numpy's, JAX's, a dense torch tensor).
STRIDED = "strided"
# Devices whose arrays hold no data (torch's meta tensors: shapes and dtypes only).
NO_DATA_DEVICES: tuple[str, ...] = ("meta",)
# ArrayView.storage_problem: why an array's memory does not hold its values as they read.
MASKED = "masked"  # a numpy masked array: its mask is part of its value
DELETED = "deleted"  # a deleted (or donated) jax.Array: no buffer left
NEGATIVE_BIT = "negative_bit"  # a torch view with the negative bit set: memory holds -x
CONJUGATE_BIT = "conjugate_bit"  # a torch view with the conjugate bit set: memory holds conj(x)
# A torch tensor with elements whose data pointer is null or whose storage ends before the last byte its
# sizes and strides reach (a storage freed by resize_(0), as FSDP does; a zero tensor): no kernel may touch it.
NO_MEMORY = "no_memory"
STORAGE_MESSAGES: dict[str, tuple[Callable[..., Exception], str]] = {
    MASKED: (errors.type_error, errors.MASKED_ARRAY),
    DELETED: (errors.value_error, errors.DELETED_ARRAY),
    NEGATIVE_BIT: (errors.value_error, errors.NEGATIVE_BIT),
    CONJUGATE_BIT: (errors.value_error, errors.CONJUGATE_BIT),
    NO_MEMORY: (errors.value_error, errors.NO_MEMORY),
}


@dataclasses.dataclass(frozen=True)
class ArrayView:
    """What the checks need to know of one array argument.

    shape: the array's shape (``()`` for an array that is not ``STRIDED``,
    which the storage check refuses before any shape is read). dtype: its
    canonical dtype name (numpy's ``dtype.name``: ``int32``, ``bfloat16``,
    ``bool``). device: canonical device (``cpu``, ``cuda:0``, ``meta``), or None
    when unknown (a JAX tracer). write_problem: one of the ``errors.WRITE_*``
    reasons, filled in (a str, or an ``errors.Message`` formatted with the
    error), when the frontend would have to write this array in
    place and cannot; None otherwise. layout: ``STRIDED``, or the name of the
    array's other layout (torch's, without ``torch.``: ``sparse_coo``,
    ``sparse_csr``, ``jagged``; ``nested`` for a nested tensor of strided
    layout). storage_problem: one of ``STORAGE_MESSAGES``' keys when the
    array's memory does not hold its values as they read; None otherwise.
    """

    shape: tuple[int, ...]
    dtype: str
    device: str | None = None
    write_problem: str | None = None
    layout: str = STRIDED
    storage_problem: str | None = None


@dataclasses.dataclass(frozen=True)
class NotAnArray:
    """An argument that is not an array the frontend accepts."""

    type_name: str


def first_error(views: Mapping[str, ArrayView | NotAnArray]) -> Exception | None:
    """The exception the first failing check raises, or None when all pass."""
    failure = first_failure(views)
    return None if failure is None else failure[1]


def first_failure(views: Mapping[str, ArrayView | NotAnArray]) -> tuple[str, Exception] | None:
    """``(check, exception)``: the first failing check's name in ``CHECK_ORDER`` and what it raises; None when all pass.

    ``views`` holds the four arguments, and ``start_cols`` when the call passes one (a call without it, or with
    ``start_cols=None``, leaves it out): each check walks it after the four.
    """
    arguments = ARGUMENTS + ((START_COLS,) if START_COLS.name in views else ())
    names = tuple(arg.name for arg in arguments)
    for arg in arguments:
        view = views[arg.name]
        if isinstance(view, NotAnArray):
            return "array", errors.type_error(errors.NOT_AN_ARRAY, arg=arg.name, type_name=view.type_name)
    for arg in arguments:
        error = storage_error(arg.name, views[arg.name])
        if error is not None:
            return "storage", error
    for arg in arguments:
        shape = views[arg.name].shape
        if len(shape) != arg.rank:
            return "rank", errors.value_error(errors.WRONG_RANK, arg=arg.name, rank=arg.rank, shape=tuple(shape))
    for arg in arguments:
        got = views[arg.name].dtype
        if got != arg.dtype:
            return "dtype", errors.type_error(errors.WRONG_DTYPE, arg=arg.name, dtype=arg.dtype, got=got)
    length, bs = views["offsets"].shape[0], views["req_pool_indices"].shape[0]
    if length != bs + 1:
        return "offsets_length", errors.value_error(errors.OFFSETS_LENGTH, length=length, expected=bs + 1)
    if START_COLS.name in views and views[START_COLS.name].shape[0] != bs:
        return "start_cols_length", errors.value_error(
            errors.START_COLS_LENGTH, length=views[START_COLS.name].shape[0], bs=bs
        )
    if bs > MAX_REQUESTS:
        return "requests", errors.value_error(errors.TOO_MANY_REQUESTS, bs=bs, limit=MAX_REQUESTS)
    error = device_error(views, OUTPUT, names, errors.DEVICE_MISMATCH, errors.DEVICE_MISMATCH_HOST_POOL, "pool_device")
    if error is not None:
        return "device", error
    problem = views[OUTPUT].write_problem
    if problem is not None:
        return "writable", errors.value_error(errors.NOT_WRITABLE, reason=problem)
    return None


def device_error(views: dict, output: str, names, mismatch: str, mismatch_host: str, output_field: str) -> Exception | None:
    """The device check of ``names`` (``output`` the array written): ``output``'s device decides; host data (a numpy
    output in the JAX frontend) has none and goes where the arrays are, so there the first argument with a device
    decides. ``mismatch`` (its device named by ``output_field``) or ``mismatch_host`` for the first argument on
    another device; None where they agree."""
    placed = [name for name in (output, *names) if views[name].device is not None]
    if not placed:
        return None
    first, first_device = placed[0], views[placed[0]].device
    for name in names:
        device = views[name].device
        if device is not None and device != first_device:
            if first == output:
                return errors.value_error(mismatch, arg=name, device=device, **{output_field: first_device})
            return errors.value_error(mismatch_host, arg=name, device=device, first=first, first_device=first_device)
    return None


def storage_error(name: str, view: ArrayView) -> Exception | None:
    """The storage check for one argument: its layout, then a device without data, then ``storage_problem``."""
    if view.layout != STRIDED:
        return errors.type_error(errors.NOT_STRIDED, arg=name, layout=view.layout)
    if view.device in NO_DATA_DEVICES:
        return errors.value_error(errors.NO_DATA, arg=name)
    if view.storage_problem is not None:
        return storage_problem_error(name, view.storage_problem)
    return None


def storage_problem_error(name: str, problem: str) -> Exception:
    """What the storage check raises for argument ``name`` with ``problem`` (one of ``STORAGE_MESSAGES``' keys)."""
    make, template = STORAGE_MESSAGES[problem]
    return make(template, arg=name)


def require_bool(option: str, value) -> bool:
    """``value`` as a Python ``bool``; the spec's ``TypeError`` (``errors.NOT_A_BOOL``) otherwise.

    For flags such as ``check_values``. ``bool`` and ``numpy.bool_`` (what a
    numpy comparison gives) are accepted; ints, strings, arrays and everything
    else are refused, so a truthy ``"yes"`` or ``1`` never switches a mode on.
    """
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise errors.type_error(errors.NOT_A_BOOL, option=option, type_name=type(value).__name__)


def cells_overlap(shape, strides) -> bool:
    """True when two cells of a 2-D array with these element strides share memory."""
    (rows, cols), (s0, s1) = shape, strides
    if rows == 0 or cols == 0:
        return False
    if rows == 1 or cols == 1:
        return (rows > 1 and s0 == 0) or (cols > 1 and s1 == 0)
    if s0 <= 0 or s1 <= 0:
        return True
    # Cells (r, c) and (r + a, c - b) share memory when a * s0 == b * s1; the
    # smallest such a, b > 0 are s1 / g and s0 / g with g = gcd(s0, s1).
    g = _gcd(s0, s1)
    return s1 // g < rows and s0 // g < cols


def _gcd(a: int, b: int) -> int:
    """``math.gcd`` of two positive ints, spelled out: TorchDynamo traces this loop on symbolic sizes, not ``math.gcd``."""
    while b:
        a, b = b, a % b
    return a


@dataclasses.dataclass(frozen=True)
class Dialect:
    """How a frontend spells each check as a Python expression over its arrays.

    Each template has ``{x}`` (and ``{y}`` for ``same_device``) for an argument
    name; ``dtype_is`` also has ``{dtype}``, replaced by the name of a constant
    that ``dtype_object`` supplies. ``namespace`` holds the names the
    expressions use. ``writable`` is None for a frontend that never writes in place.

    ``storage`` is the storage check for one argument except its device;
    ``has_data`` (None for a frontend without data-less devices) is that part,
    spelled for ``pool_out`` alone: every other argument must be on pool_out's
    device (the device terms), so none is on a device without data unless
    pool_out is. A term may rely on the terms before it: ``storage`` comes
    right after ``is_array``, so what follows never meets an array without
    strides or data.
    """

    is_array: str
    storage: str
    has_data: str | None
    rank: str
    dtype_is: str
    length: str
    same_device: str
    writable: str | None
    dtype_object: Callable[[str], object]
    namespace: Mapping[str, object]


def compile_fast_check(dialect: Dialect) -> Callable[..., bool]:
    """A predicate ``check(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> bool``.

    It is True exactly when ``first_error`` would find nothing (``start_cols`` None: left out of the views), and
    evaluates the same checks as one short-circuiting expression, so a failing call costs no more than a passing
    one before it falls back to ``first_error`` for the message. The terms of ``start_cols`` come last, behind its
    ``is None`` test: a call without it pays one identity test.
    """
    namespace = dict(dialect.namespace)
    window = START_COLS.name

    def argument_terms(args):
        terms = [dialect.is_array.format(x=a.name) for a in args]
        terms += [dialect.storage.format(x=a.name) for a in args]
        terms += [f"{dialect.rank.format(x=a.name)} == {a.rank}" for a in args]
        for a in args:
            constant = f"DTYPE_{a.dtype}"
            namespace[constant] = dialect.dtype_object(a.dtype)
            terms.append(dialect.dtype_is.format(x=a.name, dtype=constant))
        return terms

    terms = argument_terms(ARGUMENTS)
    if dialect.has_data is not None:
        terms.append(dialect.has_data.format(x=OUTPUT))
    terms.append(
        f"{dialect.length.format(x='offsets')} == {dialect.length.format(x='req_pool_indices')} + 1"
    )
    terms.append(f"{dialect.length.format(x='req_pool_indices')} <= {MAX_REQUESTS}")
    terms += [dialect.same_device.format(x=name, y=OUTPUT) for name in ARGUMENT_NAMES if name != OUTPUT]
    if dialect.writable is not None:
        terms.append(dialect.writable.format(x=OUTPUT))
    windowed = argument_terms((START_COLS,)) + [
        f"{dialect.length.format(x=window)} == {dialect.length.format(x='req_pool_indices')}",
        dialect.same_device.format(x=window, y=OUTPUT),
    ]
    terms.append(f"({window} is None or (" + " and ".join(windowed) + "))")
    return compiled_predicate(f"{', '.join(ARGUMENT_NAMES)}, {window}=None", terms, namespace, "<kv-canary fast_check>")


def compiled_predicate(parameters: str, terms: list[str], namespace: dict, filename: str):
    """``def fast_check(<parameters>): return <terms joined by and>``, compiled in ``namespace``; its source kept as
    ``.source``."""
    source = f"def fast_check({parameters}):\n    return (\n        " + "\n        and ".join(terms) + "\n    )\n"
    exec(compile(source, filename, "exec"), namespace)
    check = namespace["fast_check"]
    check.source = source
    return check
