"""``jax.vmap`` and the checked mode: eager on the host, staged under checkify, refused to compile without it."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

from kv_canary_jax import error_from_checkify, scatter_req_token_ids
from shared_spec import arg_specs, errors
from shared_spec.cases import load_cases
from shared_spec.reference import scatter_reference
from tests.contract import assert_same_pool
from tests.jax_support import WAY_IDS, WAYS, batch, fresh, jitted, scatter_fn

P = errors.PREFIX
CHECKED = [c for c in load_cases() if c.check_values and c.expect.error_class and "start_cols" not in c.host
           and c.expected("jax_x64_off").error_message == c.expect.error_message and not c.requires]


def hostile(seed, n=3, windowed=True):
    """``n`` hostile batches of one shape (overlapping and decreasing segments), stacked."""
    rng = np.random.default_rng(seed)
    batches = [arg_specs.hostile_batch(rng, 5, 9, 4, 30, np.int32, windowed=windowed) for _ in range(n)]
    return batches, [np.stack([b[i] for b in batches]) for i in range(4 + windowed)]


def overlapping():
    """Two batches whose cells are three times their tokens (offsets fall back to re-read them): several chunks of
    the XLA implementation, its loop under vmap."""
    flat_in = np.array([[7, 8, 9], [4, 5, 6]], np.int32)
    offsets = np.array([[0, 3, 0, 3, 0, 3, 0]] * 2, np.int32)
    rows = np.array([[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0]], np.int32)
    start_cols = np.array([[0, 1, 2, 3, 4, 5], [2, 2, 2, 2, 2, 2]], np.int32)
    pools = np.stack([np.full((6, 5), -1, np.int32), np.full((6, 5), -2, np.int32)])
    return flat_in, offsets, rows, pools, start_cols


@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
def test_vmap_over_pools(implementation, interpret):
    flat_in, offsets, rows, pool = batch(bs=6, seed=1)
    pools = np.stack([pool, pool - 7, pool + 3])
    f = jax.jit(jax.vmap(scatter_fn(implementation, interpret), in_axes=(None, None, None, 0)))
    out = f(flat_in, offsets, rows, pools)
    for i in range(3):
        assert_same_pool(np.asarray(out[i]), scatter_reference(flat_in, offsets, rows, pools[i]))


@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
def test_vmap_over_offsets_and_start_cols_of_overlapping_batches(implementation, interpret):
    batches, stacked = hostile(seed=2)
    f = jax.vmap(scatter_fn(implementation, interpret), in_axes=(None, 0, None, None, 0))
    out = jax.jit(f)(batches[0][0], stacked[1], batches[0][2], batches[0][3], stacked[4])
    for i, (_, offsets, _, _, start_cols) in enumerate(batches):
        expected = scatter_reference(batches[0][0], offsets, batches[0][2], batches[0][3], start_cols)
        assert_same_pool(np.asarray(out[i]), expected)
    out = jax.vmap(scatter_fn(implementation, interpret))(*stacked)  # everything batched, eager
    for i, b in enumerate(batches):
        assert_same_pool(np.asarray(out[i]), scatter_reference(*b))
    stacked = overlapping()
    out = jax.jit(jax.vmap(scatter_fn(implementation, interpret)))(*stacked)
    for i in range(2):
        assert_same_pool(np.asarray(out[i]), scatter_reference(*(a[i] for a in stacked)))


def test_check_values_must_be_a_bool():
    b = batch(seed=3)
    assert_same_pool(np.asarray(scatter_req_token_ids(*b, check_values=np.bool_(True))), scatter_reference(*b))
    with pytest.raises(errors.KvCanaryTypeError) as info:
        scatter_req_token_ids(*b, check_values=1)
    assert str(info.value) == f"{P} check_values must be a bool, got int"


def test_the_eager_checked_mode_raises_before_writing():
    flat_in, offsets, rows, pool = batch(seed=4)
    rows[3] = rows[1]
    pool = jnp.asarray(pool)
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(flat_in, offsets, rows, pool, check_values=True)
    assert str(info.value) == f"{P} req_pool_indices[3]={rows[1]} repeats req_pool_indices[1]"
    assert not pool.is_deleted()


@functools.cache
def checkified(implementation, interpret):
    return jax.jit(checkify.checkify(jitted(implementation, interpret, check_values=True), errors=checkify.user_checks))


@pytest.mark.parametrize("case", CHECKED, ids=[c.name for c in CHECKED])
def test_checkify_under_jit_reports_the_eager_message(case):
    names = [n for n in ("flat_in", "offsets", "req_pool_indices", "pool_out", "start_cols") if n in case.args]
    args = [jnp.asarray(case.args[n].numpy().astype(np.int32)) for n in names]
    err, out = checkified("xla", False)(*args)
    assert err.get() == case.expect.error_message + " (`check` failed)"
    error = error_from_checkify(err)
    assert type(error) is errors.KvCanaryValueError and str(error) == case.expect.error_message
    assert_same_pool(np.asarray(out), case.args["pool_out"].numpy())  # a failed rule writes nothing


@pytest.mark.parametrize("implementation,interpret", WAYS, ids=WAY_IDS)
def test_checkify_with_every_implementation(implementation, interpret):
    flat_in, offsets, rows, pool = batch(bs=5, seed=5)
    err, out = checkified(implementation, interpret)(flat_in, offsets, rows, pool)
    assert err.get() is None and error_from_checkify(err) is None
    assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool))
    offsets[2] = offsets[3] + 1
    err, out = checkified(implementation, interpret)(flat_in, offsets, rows, pool)
    assert str(error_from_checkify(err)) == (
        f"{P} offsets must be non-decreasing, got offsets[2]={offsets[2]} > offsets[3]={offsets[3]}")
    assert_same_pool(np.asarray(out), pool)


def test_checked_mode_under_jit_without_checkify_fails_to_compile():
    b = batch(seed=6)
    pool = fresh(b[3])
    f = jitted("xla", False, donate=True, check_values=True)
    for run in (lambda: f(*b[:3], pool), lambda: f.lower(*b[:3], pool)):
        with pytest.raises(errors.KvCanaryValueError) as info:
            run()
        assert str(info.value) == errors.CHECK_VALUES_UNTRACEABLE
    assert not pool.is_deleted()
    jax.make_jaxpr(scatter_fn("xla", check_values=True))(*b)  # tracing alone cannot tell a later checkify


@pytest.mark.parametrize("implementation,interpret", [WAYS[0], WAYS[2]], ids=[WAY_IDS[0], WAY_IDS[2]])
def test_checkify_of_vmap_gates_each_example(implementation, interpret):
    flat_in, offsets, rows, pool = batch(bs=4, seed=7)
    bad = rows.copy()
    bad[2] = bad[0]
    f = jax.vmap(scatter_fn(implementation, interpret, check_values=True), in_axes=(None, None, 0, 0))
    err, out = checkify.checkify(jax.jit(f), errors=checkify.user_checks)(flat_in, offsets, np.stack([rows, bad]),
                                                                          np.stack([pool, pool]))
    assert str(error_from_checkify(err)) == f"{P} req_pool_indices[2]={bad[0]} repeats req_pool_indices[0]"
    assert_same_pool(np.asarray(out[0]), scatter_reference(flat_in, offsets, rows, pool))
    assert_same_pool(np.asarray(out[1]), pool)
    g = jax.vmap(scatter_fn(implementation, interpret, check_values=True))  # the XLA loop under vmap, checkified
    err, out = checkify.checkify(jax.jit(g), errors=checkify.user_checks)(*overlapping())
    assert str(error_from_checkify(err)) == f"{P} offsets must be non-decreasing, got offsets[1]=3 > offsets[2]=0"
    assert_same_pool(np.asarray(out), overlapping()[3])
