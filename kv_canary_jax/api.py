"""``scatter_req_token_ids`` for JAX: checks, implementation choice, and the call.

Contract::

    scatter_req_token_ids(flat_in, offsets, req_pool_indices, pool_out, *, start_cols=None,
                          implementation=None, interpret=False, check_values=False) -> jax.Array

returns ``pool_out`` with each request's tokens written, as
``shared_spec.reference`` defines for any values (rows outside the pool
skipped, lengths exact in wrapping int64, tokens outside ``flat_in`` skipped,
values cut to their low 32 bits). ``start_cols`` (int64 ``[bs]``, or None):
request ``r`` writes from pool column ``start_cols[r]`` instead of 0 (a
windowed write: a serving step appends each request's new tokens at its
current length), clipped at column 0 and at the width, exact for every int64
value; None is the unwindowed op, which compiles exactly as without the
keyword (whether a call is windowed is static: a jit traces each kind once). JAX arrays are immutable: the result is a new
array, and ``pool_out`` is unchanged. Under ``jax.jit(f, donate_argnums=...)``
with ``pool_out`` donated, the result reuses the pool's buffer (an in-place
write, no copy).

Order of events, all before any computation: argument checks on shapes,
dtypes and devices (``checks``; at trace time under ``jit``), then the
implementation choice (``implementations``), then ``check_values`` must be a
bool (``bool`` or ``numpy.bool_``, else the spec's ``TypeError``), then, with
``check_values=True`` on concrete arrays, the value rules on the host
(``compute.prepare``).
Every error is the spec's exception with the spec's message; a failed call
leaves ``pool_out`` as it was (and never deletes it).

Arguments may be ``jax.Array`` (concrete or traced), ``numpy.ndarray`` (host
data, copied to pool_out's device) or, outside ``jit``, ``torch.Tensor``
(zero-copy on its own device where JAX can import it, one copy where it
cannot: strided or unaligned tensors); ``kv_canary_arrays.describe`` says how
each is described: with x64 disabled every int64 argument, whatever its
framework, fails its dtype check carrying ``errors.X64_NOTE``; the library
never changes ``jax_enable_x64``.
Devices are compared for single-device arrays; an array sharded over several
devices has no one device to compare and is left to JAX.

``check_values=True`` with traced ``offsets`` or ``req_pool_indices`` (under
``jit``, or batched under ``vmap``) stages the value rules as ``checkify``
checks: wrap the jitted function with
``checkify.checkify(..., errors=checkify.user_checks)``; without it, compiling
raises ``errors.CHECK_VALUES_UNTRACEABLE`` (see ``values`` for why this cannot
be caught while tracing). ``err.get()`` is the eager message plus checkify's
`` (`check` failed)``; ``error_from_checkify(err)`` gives the eager exception.
When a staged rule fails nothing is written: the returned pool equals
``pool_out``. Concrete ``offsets`` and ``req_pool_indices`` are checked on the
host and raise immediately: arrays passed outside ``jit``, and numpy arrays
closed over inside ``jit`` (they stay numpy arrays while tracing). A JAX array
made inside ``jit`` is a tracer even when built from a constant
(``jnp.asarray(const)``), so its rules are staged like any traced argument's.

``jax.vmap`` is supported, over any of the arguments (e.g. one batch written
into a stack of pools, ``in_axes=(None, None, None, 0)``): the checks see one
example's shapes, the XLA path batches natively, the Pallas kernel gets a
batch grid axis from ``pallas_call``'s batching rule, the Mosaic GPU and
Mosaic TPU kernels run once per example (``batching.per_example``). With
``offsets`` batched, the XLA path's choice between its two formulations
(``lax.cond``) becomes a select that evaluates both: time, not correctness.
"""

from __future__ import annotations

import jax

from kv_canary_arrays.adopt import jax_input
from kv_canary_arrays.frameworks import is_torch
from kv_canary_jax import checks, compute, platforms, sharded


def scatter_req_token_ids(
    flat_in,
    offsets,
    req_pool_indices,
    pool_out,
    *,
    start_cols=None,
    implementation=None,
    interpret: bool = False,
    check_values: bool = False,
) -> jax.Array:
    """Write each request's token ids into its row of ``pool_out``; return the new pool.

    ``start_cols``: None, or int64 ``[bs]``, each request's first pool column
    (checked like the other arguments, after them; on pool_out's device, or
    host data).

    ``implementation``: None (best available), ``"pallas"``, ``"mosaic"``,
    ``"mosaic_tpu"``, ``"xla"``, or a sequence tried in order. ``interpret``:
    run the Pallas kernels (``"pallas"``, ``"mosaic"``, ``"mosaic_tpu"``) in
    the Pallas interpreter (any platform; TPU interpret mode for
    ``"mosaic_tpu"``). ``check_values``: enforce the value rules of
    ``shared_spec.values`` (offsets non-decreasing from 0 up to ``len(flat_in)``,
    rows in range and distinct, first columns >= 0) before writing; a bool (or ``numpy.bool_``).
    """
    return _scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols, implementation, interpret, check_values)


def scatter_contiguous(flat_in, offsets, req_pool_indices, pool_out, start_cols, *, implementation=None,
                       interpret: bool = False) -> jax.Array:
    """``scatter_req_token_ids(..., start_cols=start_cols)`` for a caller whose ``offsets`` start at 0 and never
    decrease by construction (the assignment's running sum): the same checks and kernels, and an XLA path that finds
    each token's request by ``jnp.repeat`` on every platform (``xla_windowed._contiguous``); a row-sharded pool
    takes ``scatter_req_token_ids``' own path. Offsets that break the promise are not detected here: it is the
    caller's."""
    return _scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols, implementation, interpret, False,
                    contiguous=True)


def _scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols, implementation, interpret, check_values,
             contiguous: bool = False) -> jax.Array:
    if sharded.row_layout(pool_out) is not None:  # split by rows over several devices: one kernel per device
        return sharded.scatter_req_token_ids_sharded(
            flat_in, offsets, req_pool_indices, pool_out, start_cols=start_cols,
            implementation=implementation, interpret=interpret, check_values=check_values,
        )
    # The four arguments, and start_cols where the call passes one: values[4:] is () or (start_cols,).
    values = checks.check_arguments(flat_in, offsets, req_pool_indices, pool_out, start_cols)
    # Torch tensors become JAX arrays on their own device first, so that a torch pool decides the placement as a JAX one does.
    values = tuple(jax_input(v) if is_torch(v) else v for v in values)
    device, platform = placement(values)
    choice, staged = compute.prepare(values, platform, implementation, bool(interpret), check_values)
    arrays = [jax_input(v, device) for v in values]
    return compute.scatter(*arrays, choice=choice, interpret=bool(interpret), staged=staged, contiguous=contiguous)


def placement(values) -> tuple[object | None, str | None]:
    """(device for host data, platform that computes) of ``(flat_in, offsets, req_pool_indices, pool_out, ...)``:
    pool_out's, else another argument's.

    The platform is None when it cannot be known before lowering (tracers only).
    """
    traced = False
    for x in (values[3], *values[:3], *values[4:]):  # pool_out first: it decides
        if not isinstance(x, jax.Array):
            continue
        if platforms.is_tracer(x):
            traced = True
            continue
        device = platforms.single_device(x)
        return device, platforms.platform(next(iter(x.devices())))
    return None, (None if traced else platforms.default_platform())
