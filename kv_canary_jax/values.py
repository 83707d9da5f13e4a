"""The checked mode (``check_values=True``): the spec's value rules, on the host or staged under checkify.

- ``prepare(checked, check_values, n_rows) -> bool``: ``check_values`` must be a bool (``require_bool``); concrete
  ``offsets``, ``req_pool_indices`` and ``start_cols`` are checked here, on the host, raising the first violation
  (``shared_spec.values.raise_first_value_error``); True where any is traced: the rules are then staged.
- ``staged_checks(...) -> jax.Array``: traced arrays; one ``checkify.check`` per rule, in order, with the spec's
  template and fields (in the index dtype), and returns the scalar "every rule holds" (the caller writes nothing
  otherwise). ``err.get()`` is the eager message followed by checkify's `` (`check` failed)``;
  ``error_from_checkify(err)`` is the eager exception.

Without ``checkify`` the staged checks cannot run, and tracing cannot tell a later ``checkify`` from none (it
rewrites the jaxpr afterwards). So every predicate passes through ``needs_checkify``, an identity primitive that
``checkify`` removes and whose lowering raises ``CHECK_VALUES_UNTRACEABLE``: ``jax.jit(f)`` with
``check_values=True`` fails when it compiles, before anything runs. Its checkify rule lives in
``jax._src.checkify.error_checks`` (internal); where a JAX moves it, the mark is a plain identity and JAX's own
functionalization error is raised instead.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from jax.interpreters import batching, mlir

from kv_canary_arrays.bridge import host_values
from kv_canary_arrays.frameworks import is_tracer
from shared_spec import errors, values
from shared_spec.checks import require_bool

try:
    from jax.extend.core import Primitive
except ImportError:  # pragma: no cover
    from jax._src.core import Primitive
try:
    from jax._src.checkify import error_checks as _checkify_rules
except ImportError:  # pragma: no cover
    _checkify_rules = None


def prepare(checked: dict, check_values, n_rows: int) -> bool:
    """Whether the value rules are staged (module docstring); ``checked``: the scatter's arrays by name."""
    if not require_bool("check_values", check_values):
        return False
    rules = [checked["offsets"], checked["req_pool_indices"], checked.get("start_cols")]
    if any(is_tracer(x) for x in rules):
        return True
    offsets, rows, start_cols = (None if x is None else host_values(x) for x in rules)
    values.raise_first_value_error(offsets, rows, checked["flat_in"].shape[0], n_rows, start_cols)
    return False


def staged_checks(offsets, rows, n_tokens: int, n_rows: int, start_cols=None) -> jax.Array:
    """Every rule as a checkify check, in order; the scalar "all rules hold"."""
    all_ok = jnp.bool_(True)
    for check in values.value_checks(jnp, offsets, rows, n_tokens, n_rows, start_cols):
        ok = needs_checkify(jnp.asarray(check.ok))
        checkify.check(ok, check.template, **{k: jnp.asarray(v, rows.dtype) for k, v in check.fields.items()})
        all_ok = all_ok & ok
    return all_ok


def error_from_checkify(err) -> errors.KvCanaryValueError | None:
    """The spec's exception for a checkify ``Error`` holding one of the value rules (None: no such failure).

    ``raise error_from_checkify(err)`` after ``err, pool = checkify.checkify(f)(...)`` raises what the eager call
    raises. Errors that came back per device (through ``shard_map``) are read from the first device.
    """
    exc = err.get_exception()
    per_device = getattr(exc, "error_mapping", None)
    if per_device:
        exc = per_device[min(per_device)]
    template = getattr(exc, "fmt_string", None)
    if template not in errors.VALUE_TEMPLATES:
        return None
    return errors.value_error(template, **{k: int(np.asarray(v)) for k, v in exc.kwargs.items()})


needs_checkify_p = Primitive("kv_canary_needs_checkify")
needs_checkify_p.def_impl(lambda x: x)  # the primitive's value is its operand's
needs_checkify_p.def_abstract_eval(lambda aval: aval)


def needs_checkify(x):
    """``x``, marked: compiling it without ``checkify`` raises ``CHECK_VALUES_UNTRACEABLE``."""
    return x if _checkify_rules is None else needs_checkify_p.bind(x)


def _lowering(ctx, x):
    if getattr(jax.config, "jax_experimental_unsafe_xla_runtime_errors", False):
        return [x]
    raise errors.value_error(errors.CHECK_VALUES_UNTRACEABLE)


def _checkify_rule(*args, **params):
    # JAX 0.10 calls rule(error, enabled_errors, x) and 0.11 adds a positional: the error by type, x last.
    return next(a for a in args if isinstance(a, checkify.Error)), args[-1]


mlir.register_lowering(needs_checkify_p, _lowering)
batching.primitive_batchers[needs_checkify_p] = lambda args, dims: (needs_checkify_p.bind(args[0]), dims[0])
if _checkify_rules is not None:
    _checkify_rules[needs_checkify_p] = _checkify_rule
