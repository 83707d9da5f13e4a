"""The JAX entry points: ``scatter_req_token_ids`` and ``assign_req_to_token_pool``.

Both return a new pool (JAX arrays are immutable) with the writes ``shared_spec.reference`` defines, for any values.
Under ``jax.jit(f, donate_argnums=...)`` with the pool donated, the kernels (and XLA's scatter) write its buffer in
place. Arguments may be ``jax.Array`` (concrete or traced), numpy arrays (host data, put on the pool's device) or,
outside ``jit``, torch tensors. Index arrays are int32, or int64 with x64 enabled (``arguments``: with x64 off,
int64 host data whose values fit int32 is narrowed, else refused); the pool is int32. The library never changes
``jax_enable_x64``.

Order of events, all before anything runs: the spec's argument checks (at trace time under ``jit``), narrowing,
the pool's sharding, ``interpret`` must be a bool (``require_bool``), the implementation choice
(``implementations``), ``check_values`` must be a bool, then the value rules: on the host for concrete arrays, or
staged as ``checkify`` checks for traced ones (``values``; without ``checkify.checkify`` the compile raises
``CHECK_VALUES_UNTRACEABLE``). Every error is the spec's exception with the spec's message, and a failed call writes
nothing. A pool split by rows over several devices goes to ``sharded`` (its layout errors); one whole on several
devices takes the other arguments whole on each (``arguments.placed``); one JAX's explicit sharding mode splits
otherwise is refused (``SHARDED_EXPLICIT_SPLIT``).
"""

from __future__ import annotations

import jax

from kv_canary_jax import arguments, compute, implementations, sharded, values
from shared_spec.checks import ASSIGN, SCATTER, batch_size_value, require_bool
from shared_spec import errors


def scatter_req_token_ids(flat_in, offsets, req_pool_indices, pool_out, *, start_cols=None, implementation=None,
                          interpret: bool = False, check_values: bool = False) -> jax.Array:
    """Write each request's tokens into its row of ``pool_out``; return the new pool.

    Request ``r`` writes ``flat_in[offsets[r]:offsets[r + 1]]`` into row ``req_pool_indices[r]`` from column
    ``start_cols[r]`` (0 without ``start_cols``), clipped to the pool and to ``flat_in``, values cut to their low
    32 bits. ``implementation``: None (the best available), ``"pallas"``, ``"mosaic"``, ``"mosaic_tpu"``, ``"xla"``
    or a sequence tried in order; ``interpret``: run the Pallas kernels in their interpreter (any platform).
    ``check_values``: enforce ``shared_spec.values``' rules (offsets non-decreasing from 0 to ``len(flat_in)``, rows
    in range and distinct, first columns >= 0) before writing.
    """
    if sharded.row_layout(pool_out) is not None:
        return sharded.scatter_req_token_ids_sharded(
            flat_in, offsets, req_pool_indices, pool_out, start_cols=start_cols, implementation=implementation,
            interpret=interpret, check_values=check_values)
    given = {"flat_in": flat_in, "offsets": offsets, "req_pool_indices": req_pool_indices, "pool_out": pool_out}
    if start_cols is not None:
        given["start_cols"] = start_cols
    checked = arguments.checked(SCATTER, given)
    sharded.refuse_explicit_split(checked["pool_out"], "pool_out")
    checked, platform = arguments.placed(checked, "pool_out")
    interpret = require_bool("interpret", interpret)
    choice = implementations.choice(implementation, platform, interpret)
    staged = values.prepare(checked, check_values, checked["pool_out"].shape[0])
    return compute.scatter(*checked.values(), choice=choice, interpret=interpret, staged=staged)


def assign_req_to_token_pool(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                             batch_size=None, *, implementation=None, interpret: bool = False) -> jax.Array:
    """Write each request's new slots into its row of ``req_to_token``; return the new table.

    sglang's assignment: request ``r < batch_size`` (None: ``len(req_pool_indices)``; a Python int, static under
    ``jit``) writes ``out_cache_loc[pt_r : pt_r + len_r]`` into row ``req_pool_indices[r]`` from column
    ``start_offset[r]``, ``len_r = clip(end_offset[r] - start_offset[r], 0, N)`` and ``pt_r`` the lengths' running
    sum before it (``shared_spec.reference.assign_reference``): the running sum in XLA, then the scatter.
    ``implementation`` and ``interpret`` as for the scatter; its errors carry the assignment's name.
    """
    given = {"req_pool_indices": req_pool_indices, "req_to_token": req_to_token, "start_offset": start_offset,
             "end_offset": end_offset, "out_cache_loc": out_cache_loc}
    try:
        checked = arguments.checked(ASSIGN, given, batch_size)
        bs = checked["req_pool_indices"].shape[0] if batch_size is None else batch_size_value(batch_size)
        if sharded.row_layout(checked["req_to_token"]) is not None:
            return sharded.assign(checked, bs, implementation, interpret)
        sharded.refuse_explicit_split(checked["req_to_token"], "req_to_token")
        checked, platform = arguments.placed(checked, "req_to_token")
        interpret = require_bool("interpret", interpret)
        choice = implementations.choice(implementation, platform, interpret)
    except (errors.KvCanaryTypeError, errors.KvCanaryValueError) as error:
        raise errors.retitled(error) from None
    return compute.assign(*checked.values(), bs=bs, choice=choice, interpret=interpret)
