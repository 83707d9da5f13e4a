"""Row-sharded pools: ``scatter_req_token_ids`` on a pool split by rows over a mesh axis.

Contract::

    scatter_req_token_ids_sharded(flat_in, offsets, req_pool_indices, pool_out, *,
                                  start_cols=None, mesh=None, axis=None, implementation=None,
                                  interpret=False, check_values=False) -> jax.Array

takes ``pool_out`` split by rows over the mesh axis ``axis`` (sharding
``NamedSharding(mesh, P(axis, None))``; ``axis`` a name or a tuple of names)
and ``flat_in``, ``offsets``, ``req_pool_indices`` (and ``start_cols``, per
request like them, for a windowed call) replicated, and returns what
``api.scatter_req_token_ids`` returns for the same values on one device, byte
for byte, with the pool's sharding. The pool is never gathered: under
``jax.shard_map`` every device runs the single-device path (``compute.scatter``,
with the implementation ``implementations.choice`` picks, exactly as for one
device: a GPU kernel on CUDA GPUs, XLA elsewhere, the Pallas interpreter with
``interpret=True``) on its own block of ``R / n`` rows, with
``req_pool_indices`` shifted by the block's first row (columns, and so
``start_cols``, unchanged). The spec skips a row
outside ``[0, R)``, so a request whose row another device owns is skipped
locally, and every cell is written by exactly the device that owns it: the
compiled program has no collective at all (no all-gather, all-to-all,
collective-permute or all-reduce). The shift ``row - first`` is exact in
wrapping int64: it wraps only for ``row < INT64_MIN + first``, and then lands
in ``[2**63 - first, 2**63)``, at or past the block's end, skipped as the
unshifted row is.

Where it works: outside ``jit`` (concrete arrays; ``mesh`` and ``axis`` default
to the pool's own ``NamedSharding``), and under ``jax.jit`` (``mesh`` and
``axis`` are needed there, because a traced pool carries its sharding only in
JAX's explicit sharding mode, ``jax.make_mesh`` with ``AxisType.Explicit``,
where they are read from ``jax.typeof(pool_out).sharding``). Under
``jax.jit(..., donate_argnums=...)`` with the pool donated, every device writes
its shard in place (the result's shards are the donated buffers). Outside
``jit`` a concrete argument that is not already laid out as required (host
data, a torch tensor, an array on one device, a pool sharded otherwise) is
made a JAX array (``kv_canary_arrays.adopt.jax_input``) and put there with
``jax.device_put``; under ``jit`` JAX reshards such values itself
(correct, but then the pool moves between devices).

Order of events, as in ``api``: the spec's argument checks on the global
arguments (``checks.check_arguments``, the same messages as the
single-device call), then the layout (``mesh``/``axis``; the errors are the
``errors.SHARDED_*`` messages), then the implementation choice
(``implementations.choice``, for the mesh's platform), then with
``check_values=True`` the value rules on the global values and the global
``R`` (on the host for concrete ``offsets`` and ``req_pool_indices``; under
``jit`` staged as ``checkify`` checks outside the ``shard_map``, whose verdict
gates every device's write). One difference from the single-device call:
``checkify`` passes its error state through every ``shard_map`` and returns it
per device, so ``err.get()`` names the violation once per device, as lines
``at mapped index i: <message> (`check` failed)`` (every device reports the
same one: the rules see replicated values). In JAX's explicit sharding mode
that per-device error is itself sharded and JAX 0.10's ``err.get()`` cannot
read it; use the default mode, or ``check_values`` outside ``jit``.

Uneven pools are refused: ``R`` must be a multiple of the axis size
(``errors.SHARDED_UNEVEN``), because ``shard_map`` splits into equal blocks and
anything else (padding the pool, unequal blocks) would move or copy it.

Why ``shard_map`` and not ``custom_partitioning``: ``shard_map`` is public
(``jax.shard_map`` in every JAX this project supports; the older
``jax.experimental.shard_map`` is the fallback, and the keyword that turns its
check off is found by signature: ``check_vma``, formerly ``check_rep``),
composes with ``jit``, donation and ``checkify``, and the per-device program
is the single-device one.
``custom_partitioning`` would let a plain ``jit`` caller skip the wrapper, but
it needs a sharding rule of its own for Shardy (JAX's partitioner since 0.7)
and has no ``vmap`` rule (JAX 0.10), so putting it under
``api.scatter_req_token_ids`` would break ``vmap``. The ``check_vma`` check is off: the Pallas kernel's output type
carries no varying-axes annotation (JAX refuses it with the check on), and the
body has no collective for the check to verify.

``row_layout(x) -> Layout | None`` says whether an array is row-sharded in a
way this module can use (a concrete ``NamedSharding``, or a traced value in
explicit sharding mode, with rows split over axes of more than one device and
columns not split); ``api`` may use it to dispatch here automatically.
"""

from __future__ import annotations

import functools
import inspect
from typing import NamedTuple

import jax
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from kv_canary_arrays.adopt import jax_input
from kv_canary_jax import checks, compute, platforms, values
from shared_spec import errors

try:
    from jax.sharding import AbstractMesh
except ImportError:  # pragma: no cover - older JAX: concrete meshes only
    AbstractMesh = ()

REPLICATED = PartitionSpec()


class Layout(NamedTuple):
    """A mesh and the axis (a name, or a tuple of names) its pool's rows are split over."""

    mesh: object
    axis: object


def rows_spec(axis) -> PartitionSpec:
    """The pool's partition: rows over ``axis``, columns whole."""
    return PartitionSpec(axis, None)


# -- shard_map across JAX versions --------------------------------------------------


def _shard_map_api():
    """``(shard_map, keyword that turns the replication/varying-axes check off)``."""
    fn = getattr(jax, "shard_map", None)
    if fn is None:  # pragma: no cover - JAX before jax.shard_map
        from jax.experimental.shard_map import shard_map as fn
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # pragma: no cover
        params = {}
    return fn, ("check_vma" if "check_vma" in params else "check_rep")


_SHARD_MAP, _CHECK_FLAG = _shard_map_api()


def _shard_map(f, mesh, in_specs, out_specs):
    return _SHARD_MAP(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, **{_CHECK_FLAG: False})


# -- layouts -------------------------------------------------------------------------


def _typeof_sharding(x):
    """The sharding in a traced value's type (None when JAX has no such thing)."""
    typeof = getattr(jax, "typeof", None)
    try:
        aval = typeof(x) if typeof is not None else x.aval
    except Exception:  # pragma: no cover - a tracer without an abstract value
        return None
    return getattr(aval, "sharding", None)


def _rows_axis(sharding):
    """The axis splitting the rows of a 2-D array with this ``NamedSharding`` (None: not rows alone)."""
    if not isinstance(sharding, NamedSharding):
        return None
    spec = tuple(sharding.spec) + (None, None)
    rows, cols = spec[0], spec[1]
    if cols is not None or rows is None or rows is PartitionSpec.UNCONSTRAINED:
        return None
    names = rows if isinstance(rows, tuple) else (rows,)
    if not names or any(not isinstance(n, str) for n in names):
        return None
    return names[0] if len(names) == 1 else tuple(names)


def _axis_size(mesh, axis) -> int:
    names = axis if isinstance(axis, tuple) else (axis,)
    return int(np.prod([mesh.shape[n] for n in names], dtype=np.int64))


def row_layout(x, min_devices: int = 2) -> Layout | None:
    """``(mesh, axis)`` when ``x`` is a 2-D ``jax.Array`` split by rows alone over at least ``min_devices`` devices.

    Concrete arrays: their ``NamedSharding``. Traced values: the sharding in
    their type, which names axes only in JAX's explicit sharding mode.
    """
    if not isinstance(x, jax.Array) or x.ndim != 2:
        return None
    sharding = _typeof_sharding(x) if platforms.is_tracer(x) else x.sharding
    axis = _rows_axis(sharding)
    if axis is None or _axis_size(sharding.mesh, axis) < min_devices:
        return None
    return Layout(sharding.mesh, axis)


def _layout_unknown(pool) -> errors.KvCanaryValueError:
    if platforms.is_tracer(pool):
        reason = errors.SHARDED_LAYOUT_TRACED
    elif not isinstance(pool, jax.Array):
        reason = errors.SHARDED_LAYOUT_HOST.format(type_name=type(pool).__name__)
    else:
        sharding = pool.sharding
        described = f"PartitionSpec{tuple(sharding.spec)!r}" if isinstance(sharding, NamedSharding) else type(sharding).__name__
        reason = errors.SHARDED_LAYOUT_SHARDING.format(sharding=described)
    return errors.value_error(errors.SHARDED_LAYOUT_UNKNOWN, reason=reason)


def resolve_layout(pool, mesh=None, axis=None) -> Layout:
    """The layout to compute with: ``mesh``/``axis`` as given, else the pool's own; raises the SHARDED_* errors."""
    if mesh is None or axis is None:
        found = row_layout(pool, min_devices=1)
        if found is None:
            raise _layout_unknown(pool)
        mesh = found.mesh if mesh is None else mesh
        axis = found.axis if axis is None else axis
    if not isinstance(mesh, (Mesh, AbstractMesh)):
        raise errors.type_error(errors.SHARDED_NOT_A_MESH, type_name=type(mesh).__name__)
    names = axis if isinstance(axis, tuple) else (axis,)
    if not names or any(not isinstance(n, str) or n not in mesh.axis_names for n in names):
        raise errors.value_error(errors.SHARDED_UNKNOWN_AXIS, axis=axis, axes=tuple(mesh.axis_names))
    axis = names[0] if len(names) == 1 else tuple(names)
    devices = _axis_size(mesh, axis)
    rows = pool.shape[0]
    if rows % devices:
        raise errors.value_error(errors.SHARDED_UNEVEN, rows=rows, devices=devices, axis=axis)
    return Layout(mesh, axis)


# -- the call ------------------------------------------------------------------------


def scatter_req_token_ids_sharded(
    flat_in,
    offsets,
    req_pool_indices,
    pool_out,
    *,
    start_cols=None,
    mesh=None,
    axis=None,
    implementation=None,
    interpret: bool = False,
    check_values: bool = False,
) -> jax.Array:
    """``scatter_req_token_ids`` on a pool split by rows over ``mesh``'s ``axis`` (see the module docstring).

    ``mesh``: a ``jax.sharding.Mesh``; ``axis``: the name (or tuple of names) of
    the mesh axis the rows are split over. Both default to ``pool_out``'s
    ``NamedSharding`` (concrete pools; traced pools in explicit sharding mode).
    ``start_cols``, ``implementation``, ``interpret`` and ``check_values`` are as in
    ``api.scatter_req_token_ids``.
    """
    values = checks.check_arguments(flat_in, offsets, req_pool_indices, pool_out, start_cols)
    layout = resolve_layout(values[3], mesh, axis)
    interpret = bool(interpret)
    choice, staged = compute.prepare(values, _platform(layout.mesh), implementation, interpret, check_values)
    specs = (REPLICATED, REPLICATED, REPLICATED, rows_spec(layout.axis), REPLICATED)  # the last: start_cols
    arrays = [_place(v, layout.mesh, spec) for v, spec in zip(values, specs)]
    return _scatter(*arrays, mesh=layout.mesh, axis=layout.axis, choice=choice, interpret=interpret, staged=staged)


def _platform(mesh) -> str | None:
    """Where the mesh computes; None for an abstract mesh (the choice is then made per platform)."""
    if not isinstance(mesh, Mesh) or not np.size(mesh.devices):
        return None
    return platforms.platform(np.asarray(mesh.devices).flat[0])


def _place(value, mesh, spec):
    """``value`` as a JAX array laid out by ``spec`` on ``mesh`` (tracers, and any value on an abstract mesh, as they are)."""
    if platforms.is_tracer(value) or not isinstance(mesh, Mesh):
        return jax_input(value)
    sharding = NamedSharding(mesh, spec)
    if isinstance(value, jax.Array) and value.sharding.is_equivalent_to(sharding, value.ndim):
        return value
    # Host data and torch tensors become JAX arrays first (jax.device_put knows neither torch nor byte order).
    return jax.device_put(jax_input(value), sharding)


def _local_scatter(flat_in, offsets, rows, pool, *extra, axis, choice, interpret, windowed, staged):
    """One device's block: rows shifted by the block's first row; others fall outside and are skipped.

    ``extra``: ``start_cols`` (``windowed``), then ``ok`` (``staged``): the
    replicated "every value rule holds"; the block is written only when it is True.
    """
    first = lax.axis_index(axis).astype(rows.dtype) * pool.shape[0]
    args = (flat_in, offsets, rows - first, pool) + extra[:windowed]
    write = functools.partial(compute.scatter, choice=choice, interpret=interpret, staged=False)
    if not staged:
        return write(*args)
    return lax.cond(extra[-1], write, lambda *args: args[3], *args)


@functools.partial(jax.jit, static_argnames=("mesh", "axis", "choice", "interpret", "staged"))
def _scatter(flat_in, offsets, rows, pool, start_cols=None, *, mesh, axis, choice, interpret, staged):
    windowed = start_cols is not None
    local = functools.partial(
        _local_scatter, axis=axis, choice=choice, interpret=interpret, windowed=windowed, staged=staged
    )
    pool_spec = rows_spec(axis)
    args = (flat_in, offsets, rows, pool) + ((start_cols,) if windowed else ())
    if staged:
        # The checks see the global values; the gate goes inside the shard_map
        # (a cond around it breaks checkify's rule for shard_map).
        args += (values.staged_checks(offsets, rows, flat_in.shape[0], pool.shape[0], start_cols),)
    specs = (REPLICATED,) * 3 + (pool_spec,) + (REPLICATED,) * (len(args) - 4)
    return _shard_map(local, mesh, specs, pool_spec)(*args)
