"""The checked mode (``check_values=True``): the spec's value rules, eagerly or under checkify.

Contract:

- ``raise_eagerly(offsets, rows, n_tokens, n_rows, start_cols=None)``: concrete arrays. Runs
  ``shared_spec.values.raise_first_value_error`` on host copies of ``offsets``,
  ``rows`` and ``start_cols`` (rule 6, for a windowed call); raises ``KvCanaryValueError`` with the spec's exact message
  before anything runs.
- ``staged_checks(offsets, rows, n_tokens, n_rows, start_cols=None) -> jax.Array``: traced
  arrays (under ``jit``, ``vmap``, ``checkify``). Stages one
  ``jax.experimental.checkify.check`` per rule of
  ``shared_spec.values.value_checks(jnp, ...)``, in order, with the spec's
  template and fields, and returns the scalar "every rule holds". checkify keeps
  the first failed check, so ``err.get()`` is the numpy path's message followed
  by checkify's own suffix `` (`check` failed)``; ``error_from_checkify(err)``
  turns the error back into the spec's ``KvCanaryValueError`` with the exact
  message. The caller writes nothing unless the returned scalar is True.

Why no trace-time error without checkify: ``checkify.checkify`` traces the
function exactly as ``jit`` does and only then rewrites the jaxpr, so while the
checks are being traced nothing tells a later ``checkify`` from none. What
fails is compiling the un-functionalized checks. Every predicate therefore goes
through ``needs_checkify``, an identity primitive that ``checkify`` removes
(its checkify rule) and whose lowering raises
``KvCanaryValueError(errors.CHECK_VALUES_UNTRACEABLE)``. So ``jax.jit(f)`` with
``check_values=True`` and no checkify raises that error when it compiles,
before anything runs (``jit(f)(...)``, ``jit(f).lower(...)``); tracing alone
(``jax.make_jaxpr``) does not. With JAX's unsafe XLA runtime errors enabled
(``jax_experimental_unsafe_xla_runtime_errors``) the checks compile to
runtime errors and ``needs_checkify`` lowers to nothing.

The rule for ``needs_checkify`` is registered in
``jax._src.checkify.error_checks``, the table ``checkify`` consults per
primitive (an internal name, present since checkify's introduction). Should a
JAX release move it, ``needs_checkify`` degrades to a plain identity and the
un-checkified compile fails with JAX's own functionalization error instead.

Under ``jax.vmap`` the same holds (``_scatter`` is a ``jax.jit``, so batched
checks are compiled too); checks staged inside ``vmap`` are reduced over the
batch by checkify, so ``err.get()`` names the first failing example's
violation, without its batch index.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from jax.interpreters import batching, mlir

from kv_canary_arrays.adopt import host_values
from shared_spec import errors, values

try:
    from jax.extend.core import Primitive
except ImportError:  # pragma: no cover
    from jax._src.core import Primitive
try:
    from jax._src.checkify import error_checks as _checkify_rules
except ImportError:  # pragma: no cover - then needs_checkify is a plain identity (JAX's own message)
    _checkify_rules = None


def raise_eagerly(offsets, rows, n_tokens: int, n_rows: int, start_cols=None) -> None:
    """Raise the first violated rule on concrete arrays (host copies of the small vectors)."""
    window = None if start_cols is None else host_values(start_cols)
    values.raise_first_value_error(host_values(offsets), host_values(rows), n_tokens, n_rows, window)


def staged_checks(offsets, rows, n_tokens: int, n_rows: int, start_cols=None) -> jax.Array:
    """Stage every rule as a checkify check, in order; the scalar "all rules hold"."""
    all_ok = jnp.bool_(True)
    for check in values.value_checks(jnp, offsets, rows, n_tokens, n_rows, start_cols):
        ok = needs_checkify(jnp.asarray(check.ok))
        fields = {name: jnp.asarray(value, dtype=jnp.int64) for name, value in check.fields.items()}
        checkify.check(ok, check.template, **fields)
        all_ok = all_ok & ok
    return all_ok


_TEMPLATES = frozenset(
    (
        errors.OFFSETS_START, errors.OFFSETS_DECREASING, errors.OFFSETS_END, errors.ROW_OUT_OF_RANGE,
        errors.ROW_REPEATED, errors.START_COLS_NEGATIVE,
    )
)


def error_from_checkify(err) -> errors.KvCanaryValueError | None:
    """The spec's exception for a checkify ``Error`` holding one of these checks (None: no such failure).

    ``raise error_from_checkify(err)`` after ``err, pool = checkify.checkify(jitted)(...)``
    gives the class and message the eager path raises.
    """
    exc = err.get_exception()
    per_device = getattr(exc, "error_mapping", None)  # checks through a shard_map come back per device
    if per_device:
        exc = per_device[min(per_device)]
    template = getattr(exc, "fmt_string", None)
    if template not in _TEMPLATES:
        return None
    return errors.value_error(template, **{k: int(np.asarray(v)) for k, v in exc.kwargs.items()})


# -- needs_checkify: an identity that refuses to compile outside checkify ----------

needs_checkify_p = Primitive("kv_canary_needs_checkify")
needs_checkify_p.def_impl(lambda x: x)  # eager (e.g. vmap without jit): checks run as they go
needs_checkify_p.def_abstract_eval(lambda aval: aval)


def needs_checkify(x):
    """``x``, marked: compiling it without ``checkify`` raises CHECK_VALUES_UNTRACEABLE."""
    if _checkify_rules is None:  # checkify could not remove the mark: leave JAX's own error
        return x
    return needs_checkify_p.bind(x)


def _lowering(ctx, x):
    if getattr(jax.config, "jax_experimental_unsafe_xla_runtime_errors", False):
        return [x]
    raise errors.value_error(errors.CHECK_VALUES_UNTRACEABLE)


def _batching(args, dims):
    (x,), (dim,) = args, dims
    return needs_checkify_p.bind(x), dim


def _checkify_rule(*args, **params):
    # JAX 0.10 calls rule(error, enabled_errors, x); 0.11 passes one more
    # positional. Find the error by type; the marked operand is the last one.
    del params
    error = next(a for a in args if isinstance(a, checkify.Error))
    return error, args[-1]


mlir.register_lowering(needs_checkify_p, _lowering)
batching.primitive_batchers[needs_checkify_p] = _batching
if _checkify_rules is not None:
    _checkify_rules[needs_checkify_p] = _checkify_rule
