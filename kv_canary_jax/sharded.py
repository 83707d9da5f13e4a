"""Row-sharded pools: the scatter (and the assignment) on a pool split by rows over a mesh axis.

``scatter_req_token_ids_sharded(flat_in, offsets, req_pool_indices, pool_out, *, start_cols=None, mesh=None,
axis=None, implementation=None, interpret=False, check_values=False)`` takes ``pool_out`` sharded
``NamedSharding(mesh, P(axis, None))`` (``axis`` a name or a tuple of names) and the per-request arrays replicated,
and returns what the single-device call returns, byte for byte, with the pool's sharding. Under ``jax.shard_map``
each device runs the single-device computation (``compute.write``) on its block of ``R / n`` rows with
``req_pool_indices`` shifted by the block's first row; a row another device owns falls outside the block and is
skipped, so the program has no collective and the pool never moves. The shift ``row - first`` is exact in any width
that holds ``R``: it wraps only below ``MIN + first``, landing in ``[MAX + 1 - first, MAX]``, at or past the block's
end, skipped as the true (negative) row would be.

``mesh`` and ``axis`` default to the pool's own ``NamedSharding`` (concrete pools; traced ones carry it only in
JAX's explicit sharding mode). Errors, after the spec's argument checks and narrowing: ``SHARDED_NOT_A_MESH``,
``SHARDED_UNKNOWN_AXIS``, ``SHARDED_LAYOUT_UNKNOWN``, ``SHARDED_UNEVEN`` (``R`` must be a multiple of the axis size:
``shard_map`` splits evenly, and anything else would move the pool); then ``interpret`` must be a bool, the
implementation choice for the mesh's platform and the value rules on the global values (staged outside the
``shard_map``, gating every block: checkify returns the error per device, which ``error_from_checkify`` reads).
Concrete arguments not laid out as required are put there with ``jax.device_put``; under ``jit`` JAX's automatic
mode reshards them itself, and its explicit mode through ``jax.reshard``, where staged value rules are refused
(``CHECK_VALUES_EXPLICIT_SHARDED``: ``checkify`` cannot carry them through ``shard_map`` there). ``shard_map``'s
varying-axes check is off: the Pallas kernels' outputs carry no such annotation, and the body has no collective to
check.
"""

from __future__ import annotations

import functools
import inspect
from typing import NamedTuple

import jax
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from kv_canary_arrays.bridge import jax_input
from kv_canary_arrays.describe import jax_platform
from kv_canary_arrays.frameworks import is_tracer
from kv_canary_jax import arguments, compute, implementations, values
from shared_spec import errors
from shared_spec.checks import SCATTER, require_bool

try:
    from jax.sharding import AbstractMesh
except ImportError:  # pragma: no cover
    AbstractMesh = ()
EXPLICIT = getattr(getattr(jax.sharding, "AxisType", None), "Explicit", None)

REPLICATED = PartitionSpec()
# The keyword that turns shard_map's check off: check_vma (JAX 0.7 on), formerly check_rep.
_CHECK = "check_vma" if "check_vma" in inspect.signature(jax.shard_map).parameters else "check_rep"


class Layout(NamedTuple):
    mesh: object
    axis: object  # a name, or a tuple of names


def _sharding(x):
    """A ``jax.Array``'s sharding; a tracer's as its type carries it (JAX's explicit mode), else None."""
    return getattr(jax.typeof(x), "sharding", None) if is_tracer(x) else x.sharding


def row_layout(x, min_devices: int = 2) -> Layout | None:
    """``(mesh, axis)`` where ``x`` is a 2-D ``jax.Array`` split by rows alone over ``min_devices`` or more."""
    if not isinstance(x, jax.Array) or x.ndim != 2:
        return None
    sharding = _sharding(x)
    if not isinstance(sharding, NamedSharding):
        return None
    rows, cols = (tuple(sharding.spec) + (None, None))[:2]
    names = rows if isinstance(rows, tuple) else (rows,)
    if cols is not None or not names or not all(isinstance(n, str) for n in names):
        return None
    if _size(sharding.mesh, names) < min_devices:
        return None
    return Layout(sharding.mesh, names[0] if len(names) == 1 else names)


def refuse_explicit_split(x, arg: str) -> None:
    """Raise ``SHARDED_EXPLICIT_SPLIT`` naming ``arg`` where JAX's explicit sharding mode splits the 2-D
    ``jax.Array`` ``x`` otherwise than by rows alone: no single-device program writes it."""
    if not isinstance(x, jax.Array) or x.ndim != 2 or row_layout(x) is not None:
        return
    sharding = _sharding(x)
    if not isinstance(sharding, NamedSharding):
        return
    kinds = dict(zip(sharding.mesh.axis_names, getattr(sharding.mesh, "axis_types", ())))
    used = [n for part in sharding.spec if part is not None for n in (part if isinstance(part, tuple) else (part,))]
    if any(kinds.get(n) == EXPLICIT for n in used):
        raise errors.value_error(errors.SHARDED_EXPLICIT_SPLIT, arg=arg, spec=f"PartitionSpec{tuple(sharding.spec)!r}")


def _size(mesh, names) -> int:
    return int(np.prod([mesh.shape[n] for n in names]))


def resolve_layout(pool, mesh=None, axis=None) -> Layout:
    """``mesh`` and ``axis`` as given, else the pool's own; the ``SHARDED_*`` errors."""
    if mesh is None or axis is None:
        found = row_layout(pool, min_devices=1)
        if found is None:
            if is_tracer(pool):
                reason = errors.SHARDED_LAYOUT_TRACED
            elif not isinstance(pool, jax.Array):
                reason = errors.SHARDED_LAYOUT_HOST.format(type_name=type(pool).__name__)
            else:
                spec = getattr(pool.sharding, "spec", None)
                shown = type(pool.sharding).__name__ if spec is None else f"PartitionSpec{tuple(spec)!r}"
                reason = errors.SHARDED_LAYOUT_SHARDING.format(sharding=shown)
            raise errors.value_error(errors.SHARDED_LAYOUT_UNKNOWN, reason=reason)
        mesh, axis = (found.mesh if mesh is None else mesh), (found.axis if axis is None else axis)
    if not isinstance(mesh, (Mesh, AbstractMesh)):
        raise errors.type_error(errors.SHARDED_NOT_A_MESH, type_name=type(mesh).__name__)
    names = axis if isinstance(axis, tuple) else (axis,)
    if not names or not all(isinstance(n, str) and n in mesh.axis_names for n in names):
        raise errors.value_error(errors.SHARDED_UNKNOWN_AXIS, axis=axis, axes=tuple(mesh.axis_names))
    axis = names[0] if len(names) == 1 else names
    if pool.shape[0] % _size(mesh, names):
        raise errors.value_error(errors.SHARDED_UNEVEN, rows=pool.shape[0], devices=_size(mesh, names), axis=axis)
    return Layout(mesh, axis)


def scatter_req_token_ids_sharded(flat_in, offsets, req_pool_indices, pool_out, *, start_cols=None, mesh=None,
                                  axis=None, implementation=None, interpret: bool = False,
                                  check_values: bool = False) -> jax.Array:
    """``scatter_req_token_ids`` on a pool split by rows over ``mesh``'s ``axis`` (module docstring)."""
    given = {"flat_in": flat_in, "offsets": offsets, "req_pool_indices": req_pool_indices, "pool_out": pool_out}
    if start_cols is not None:
        given["start_cols"] = start_cols
    checked = arguments.checked(SCATTER, given)
    layout = resolve_layout(checked["pool_out"], mesh, axis)
    interpret = require_bool("interpret", interpret)
    choice = implementations.choice(implementation, _platform(layout.mesh), interpret)
    staged = values.prepare(checked, check_values, checked["pool_out"].shape[0])
    if staged and EXPLICIT in getattr(layout.mesh, "axis_types", ()):
        raise errors.value_error(errors.CHECK_VALUES_EXPLICIT_SHARDED)
    arrays = _placed(checked, "pool_out", layout)
    return _scatter(*arrays, layout=layout, choice=choice, interpret=interpret, staged=staged)


def assign(checked: dict, bs: int, implementation, interpret) -> jax.Array:
    """The assignment on a row-sharded table (``api.assign_req_to_token_pool``'s checked arguments), its errors in
    the scatter's order."""
    layout = resolve_layout(checked["req_to_token"])
    interpret = require_bool("interpret", interpret)
    choice = implementations.choice(implementation, _platform(layout.mesh), interpret)
    arrays = _placed(checked, "req_to_token", layout)
    return _assign(*arrays, bs=bs, layout=layout, choice=choice, interpret=interpret)


def _platform(mesh) -> str | None:
    """Where the mesh computes; None for an abstract mesh (chosen per platform when lowering)."""
    return jax_platform(mesh.devices.flat[0]) if isinstance(mesh, Mesh) else None


def _placed(checked: dict, output: str, layout: Layout) -> list:
    """Every argument a JAX array laid out on the mesh: the output by rows, the rest replicated."""
    out = []
    for name, x in checked.items():
        if is_tracer(x) or not isinstance(layout.mesh, Mesh):
            out.append(jax_input(x))
            continue
        out.append(arguments.onto(x, NamedSharding(layout.mesh, PartitionSpec(layout.axis, None) if name == output
                                                   else REPLICATED)))
    return out


def _sharded(flat_in, offsets, rows, pool, start_cols=None, *, layout, choice, interpret, staged, contiguous=False):
    """The shard_map of ``compute.write`` over the pool's blocks, gated by the value rules where ``staged``."""
    dtype = compute.index_dtype((offsets, rows, start_cols), (flat_in.shape[0], *pool.shape))
    whole = functools.partial(_whole, mesh=layout.mesh)
    args = [whole(flat_in), whole(offsets.astype(dtype)), whole(rows.astype(dtype)), pool]
    if start_cols is not None:
        args.append(whole(start_cols.astype(dtype)))
    if staged:  # the rules see the global values; the gate goes inside (a cond around shard_map breaks checkify)
        args.append(values.staged_checks(args[1], args[2], flat_in.shape[0], pool.shape[0], *args[4:]))
    write = functools.partial(compute.write, choice=choice, interpret=interpret, staged=False, contiguous=contiguous)

    def local(flat_in, offsets, rows, pool, *extra):
        first = lax.axis_index(layout.axis).astype(rows.dtype) * pool.shape[0]
        block = (flat_in, offsets, rows - first, pool, extra[0] if start_cols is not None else None)
        return lax.cond(extra[-1], write, lambda *a: a[3], *block) if staged else write(*block)

    pool_spec = PartitionSpec(layout.axis, None)
    specs = (REPLICATED,) * 3 + (pool_spec,) + (REPLICATED,) * (len(args) - 4)
    return jax.shard_map(local, mesh=layout.mesh, in_specs=specs, out_specs=pool_spec, **{_CHECK: False})(*args)


def _whole(x, mesh):
    """``x`` replicated for ``shard_map``: resharded where JAX's explicit mode splits it (the automatic one does)."""
    spec = getattr(_sharding(x), "spec", None)
    return jax.reshard(x, NamedSharding(mesh, REPLICATED)) if spec and any(s is not None for s in spec) else x


_scatter = jax.jit(_sharded, static_argnames=("layout", "choice", "interpret", "staged", "contiguous"))


@functools.partial(jax.jit, static_argnames=("bs", "layout", "choice", "interpret"))
def _assign(rows, table, start, end, loc, *, bs: int, layout, choice, interpret: bool):
    offsets, rows, start = compute.assignment_offsets(rows, start, end, loc.shape[0], bs)
    return _sharded(loc, offsets, rows, table, start, layout=layout, choice=choice, interpret=interpret,
                    staged=False, contiguous=True)
