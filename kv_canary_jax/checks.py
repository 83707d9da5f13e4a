"""Argument checks for the JAX frontend: the spec's checks, at trace time.

Contract: ``check_arguments(flat_in, offsets, req_pool_indices, pool_out,
start_cols=None)`` returns the four arguments, as given, followed by
``start_cols`` when it is not None (a windowed call), when every check of
``shared_spec.checks.CHECK_ORDER`` passes, and otherwise raises exactly what
``shared_spec.checks.first_error`` names for the arguments as
``kv_canary_arrays.describe`` describes them for the JAX frontend (host data,
numpy arrays and torch tensors alike, with the dtype JAX would give it;
``start_cols``, when not None, described like the others under its name, so
the checks walk it after the four). With x64 disabled a dtype error carries
``errors.X64_NOTE`` (``e.add_note``; ``str(e)`` is unchanged). Only shapes,
dtypes and devices are read, so under ``jax.jit`` the checks run once, while
tracing, and cost nothing per call; nothing is written either way. JAX arrays
are functional, so the ``writable`` check never fails here; the storage check
refuses a deleted (donated) array, and numpy masked arrays and torch tensors
that are not plain strided memory, as the torch frontend does.

The passing path for JAX arrays is one generated boolean expression
(``fast_check``, built by ``shared_spec.checks.compile_fast_check`` from
``JAX_DIALECT``); it is True exactly when ``first_error`` finds nothing for
four ``jax.Array`` arguments. Anything else (numpy arrays, torch tensors,
non-arrays, a failing check) takes the full path through ``describe`` and the
spec's checker, which builds the message.
"""

from __future__ import annotations

import jax
import numpy as np

from kv_canary_arrays.describe import JAX, describe, jax_x64_enabled
from kv_canary_jax import platforms
from shared_spec import errors
from shared_spec.arguments import ARGUMENT_NAMES, START_COLS
from shared_spec.checks import Dialect, compile_fast_check, first_failure


def same_device(x, y) -> bool:
    """False only when both arrays have a known single device and the devices differ."""
    a, b = platforms.single_device(x), platforms.single_device(y)
    return a is None or b is None or a == b


JAX_DIALECT = Dialect(
    is_array="isinstance({x}, Array)",
    # A jax.Array is strided and holds its values, unless it was deleted (donated); a tracer has no buffer to lose.
    storage="(is_tracer({x}) or not {x}.is_deleted())",
    has_data=None,
    rank="{x}.ndim",
    dtype_is="{x}.dtype == {dtype}",
    length="{x}.shape[0]",
    same_device="same_device({x}, {y})",
    writable=None,
    dtype_object=np.dtype,
    namespace={"Array": jax.Array, "is_tracer": platforms.is_tracer, "same_device": same_device},
)

# fast_check(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> bool
fast_check = compile_fast_check(JAX_DIALECT)


def check_arguments(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> tuple:
    """The arguments, in argument order (``start_cols`` last, when not None), when every check passes; raises the spec's first error."""
    values = (flat_in, offsets, req_pool_indices, pool_out) + (() if start_cols is None else (start_cols,))
    if fast_check(*values):
        return values
    # The key of start_cols only when it is given: a call with start_cols=None is the unwindowed one.
    failure = first_failure(
        {name: describe(x, frontend=JAX) for name, x in zip((*ARGUMENT_NAMES, START_COLS.name), values)}
    )
    if failure is not None:
        check, error = failure
        if check == "dtype" and not jax_x64_enabled():
            error.add_note(errors.X64_NOTE)
        raise error
    return values
