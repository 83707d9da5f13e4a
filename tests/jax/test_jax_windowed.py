"""Windowed writes (``start_cols``) in the JAX frontend, without a GPU: every implementation against the reference.

The Pallas kernels run in their interpreters (``interpret=True``); XLA's path is ``xla_windowed``. Pools are
sentinel-filled. Random batches draw first columns mostly inside the row (appends), some at its edges, some
anywhere in int64. Also: jit with the pool donated (the buffer reused), vmap (over pools and over start_cols),
the checked mode (eager, and under jit with checkify), the row-sharded pool (4 host devices), the static flag (an
unwindowed call traces as it does without the keyword) and the lowering of the windowed kernels for CUDA and TPU.
The GPU test is in test_jax_gpu.py.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from hypothesis import given  # noqa: E402
from jax.experimental import checkify  # noqa: E402

import kv_canary_jax  # noqa: E402
from kv_canary_jax import implementations  # noqa: E402
from kv_canary_jax.api import scatter_req_token_ids  # noqa: E402
from kv_canary_jax.windows import pool_window  # noqa: E402
from shared_spec import errors, scatter_reference  # noqa: E402
from shared_spec.reference import windowed_columns, written_columns  # noqa: E402
from tests.contract import assert_same_pool  # noqa: E402
from tests.jax_support import lower_for_cuda  # noqa: E402
from tests.profiles import property_settings  # noqa: E402
from tests.strategies import INT64_MAX, INT64_MIN, extreme_windowed_batches, large_batch, sentinel_pool, windowed_batches  # noqa: E402

P = errors.PREFIX
# (implementation, interpret, examples): every way to run here, with the random examples each can afford
# (an interpreted kernel compiles each new shape).
ALL_WAYS = [("xla", False, 12), ("pallas", True, 4), ("mosaic", True, 3), ("mosaic_tpu", True, 3)]
WAYS = [w for w in ALL_WAYS if implementations.unavailable_reason(w[0], "cpu", w[1]) is None]
IDS = [w[0] for w in WAYS]


@functools.cache
def jitted(implementation, interpret, check_values=False):
    """One jitted windowed call per way for the test run: shapes seen before compile once."""

    def f(flat_in, offsets, rows, pool, start_cols):
        return scatter_req_token_ids(
            flat_in, offsets, rows, pool, start_cols=start_cols, implementation=implementation,
            interpret=interpret, check_values=check_values,
        )

    return jax.jit(f)


def run(implementation, interpret, *batch) -> np.ndarray:
    return np.asarray(jitted(implementation, interpret)(*[jnp.asarray(a) for a in batch]))


def appends(seed, bs=6, width=9):
    """A well-formed serving step: distinct rows, each request's new tokens from a first column in ``[0, C]``."""
    flat_in, offsets, rows, pool = large_batch(bs=bs, width=width, seed=seed)
    start_cols = np.random.default_rng(seed).integers(0, width + 1, size=bs).astype(np.int64)
    return flat_in, offsets, rows, pool, start_cols


def test_pool_window_is_the_specs_window_in_pool_columns():
    rng = np.random.default_rng(0)
    extremes = np.array([INT64_MIN, INT64_MIN + 1, -7, -1, 0, 1, 5, INT64_MAX - 1, INT64_MAX], dtype=np.int64)
    starts, ends, cols = (rng.choice(extremes, 500) for _ in range(3))
    with np.errstate(over="ignore"):
        base, lo, hi = pool_window(starts, ends, cols, 6, 9, np)
        b, l, h, shift = windowed_columns(starts, ends, cols, 6, 9, np)
        unwindowed = pool_window(starts, ends, None, 6, 9, np)
        expected = written_columns(starts, ends, 6, 9, np)
    assert (lo == l + shift).all() and (hi == h + shift).all() and (base == b - shift).all()
    assert (lo >= 0).all() and (hi <= 6).all()
    live = lo < hi
    assert (base[live] + lo[live] >= 0).all() and (base[live] + hi[live] <= 9).all()
    assert all((x == y).all() for x, y in zip(unwindowed, expected))


@pytest.mark.parametrize("implementation,interpret,examples", WAYS, ids=IDS)
def test_random_windowed_batches_match_reference(implementation, interpret, examples):
    @property_settings(examples)
    @given(batch=windowed_batches(max_rows=6, max_width=40, max_bs=6, max_tokens=80, few_shapes=True))
    def check(batch):
        assert_same_pool(run(implementation, interpret, *batch), scatter_reference(*batch))

    check()


@pytest.mark.parametrize("implementation,interpret,examples", WAYS, ids=IDS)
def test_int64_extremes_of_start_cols_offsets_and_rows(implementation, interpret, examples):
    @property_settings(examples)
    @given(batch=extreme_windowed_batches(max_bs=4, width=5, n_tokens=8))
    def check(batch):
        # One shape per bs: pad to 4 requests on rows outside the pool.
        flat_in, offsets, rows, pool, cols = batch
        pad = 4 - rows.shape[0]
        offsets = np.concatenate([offsets, np.full(pad, offsets[-1])]).astype(np.int64)
        rows = np.concatenate([rows, np.full(pad, INT64_MIN)]).astype(np.int64)
        cols = np.concatenate([cols, np.full(pad, INT64_MAX)]).astype(np.int64)
        pool = np.concatenate([pool, sentinel_pool(4 - pool.shape[0], 5, 1)])
        batch = (flat_in, offsets, rows, pool, cols)
        assert_same_pool(run(implementation, interpret, *batch), scatter_reference(*batch))

    check()


@pytest.mark.parametrize("implementation,interpret,examples", WAYS, ids=IDS)
def test_windows_across_the_copy_sizes_and_the_row_end(implementation, interpret, examples):
    """Windows of every length class up to the row's end and past it, from many first columns (Mosaic GPU's tiles, copies, staged path)."""
    width, bs = 3 * 128 + 5, 6
    lengths = np.array([1, 127, 128, 200, 389, 500], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat_in = np.random.default_rng(3).integers(INT64_MIN, INT64_MAX, size=int(offsets[-1]), dtype=np.int64, endpoint=True)
    rows = np.arange(bs, dtype=np.int64)
    for cols in ([0, 5, 3, 100, 0, -111], [width - 1, width - 127, 200, 189, -3, width], [388, 1, 257, -199, 7, 2**62]):
        batch = (flat_in, offsets, rows, sentinel_pool(bs, width, 4), np.asarray(cols, dtype=np.int64))
        assert_same_pool(run(implementation, interpret, *batch), scatter_reference(*batch))


@pytest.mark.parametrize("implementation,interpret,examples", WAYS, ids=IDS)
def test_repeated_rows_with_disjoint_windows_keep_both(implementation, interpret, examples):
    flat_in = np.arange(1, 21, dtype=np.int64)
    offsets = np.array([0, 4, 9, 9, 20], dtype=np.int64)
    rows = np.array([1, 1, 0, 1], dtype=np.int64)
    cols = np.array([0, 4, 3, 9], dtype=np.int64)
    batch = (flat_in, offsets, rows, sentinel_pool(2, 16, 5), cols)
    got = run(implementation, interpret, *batch)
    assert_same_pool(got, scatter_reference(*batch))
    assert got[1, :16].tolist() == list(range(1, 10)) + list(range(10, 17))


@pytest.mark.parametrize("implementation,interpret,examples", WAYS, ids=IDS)
def test_jit_with_donation_writes_the_donated_buffer(implementation, interpret, examples):
    """The incremental serving step: a prompt from column 0, then each step's new tokens at the current lengths."""

    def step(flat_in, offsets, rows, pool, start_cols):
        return scatter_req_token_ids(
            flat_in, offsets, rows, pool, start_cols=start_cols, implementation=implementation, interpret=interpret
        )

    f = jax.jit(step, donate_argnums=3)
    pool_np = sentinel_pool(5, 12, 6)
    pool = jnp.asarray(pool_np)
    pointer = pool.unsafe_buffer_pointer()
    rows = np.array([3, 0, 4], dtype=np.int64)
    lengths = np.zeros(3, dtype=np.int64)
    rng = np.random.default_rng(7)
    written = [[] for _ in rows]  # each request's tokens so far
    for n_new in ([4, 2, 5], [1, 1, 1], [1, 1, 1], [3, 1, 2]):  # a prefill, then decode steps and a chunk
        n_new = np.asarray(n_new, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(n_new)]).astype(np.int64)
        flat_in = rng.integers(0, 200_000, size=int(offsets[-1]), dtype=np.int64)
        for r in range(len(rows)):
            written[r] += flat_in[offsets[r] : offsets[r + 1]].tolist()
        before = pool
        pool = f(*[jnp.asarray(a) for a in (flat_in, offsets, rows)], pool, jnp.asarray(lengths))
        pool_np = scatter_reference(flat_in, offsets, rows, pool_np, lengths)
        lengths = lengths + n_new
        assert before.is_deleted() and pool.unsafe_buffer_pointer() == pointer
    assert_same_pool(np.asarray(pool), pool_np)
    # Each row holds its request's tokens from column 0 to its length, the rest of the row as it was.
    got = np.asarray(pool)
    for r, row in enumerate(rows):
        assert got[row, : lengths[r]].tolist() == written[r]
        assert_same_pool(got[row, lengths[r] :], sentinel_pool(5, 12, 6)[row, lengths[r] :])


@pytest.mark.parametrize("implementation,interpret,examples", WAYS, ids=IDS)
def test_vmap_over_pools_and_over_start_cols(implementation, interpret, examples):
    f = functools.partial(scatter_req_token_ids, implementation=implementation, interpret=interpret)
    flat_in, offsets, rows, _, cols = appends(8)
    pools = np.stack([sentinel_pool(7, 9, seed) for seed in range(3)])
    over_pools = jax.jit(jax.vmap(lambda p: f(flat_in, offsets, rows, p, start_cols=cols)))(pools)
    many_cols = np.stack([cols, cols[::-1].copy(), np.full_like(cols, 4)])
    over_cols = jax.vmap(lambda c: f(flat_in, offsets, rows, pools[0], start_cols=c))(many_cols)
    for i in range(3):
        assert_same_pool(np.asarray(over_pools[i]), scatter_reference(flat_in, offsets, rows, pools[i], cols))
        assert_same_pool(np.asarray(over_cols[i]), scatter_reference(flat_in, offsets, rows, pools[0], many_cols[i]))


@pytest.mark.parametrize("implementation,interpret,examples", WAYS, ids=IDS)
def test_checked_mode_eager_and_under_checkify(implementation, interpret, examples):
    flat_in, offsets, rows, pool, cols = appends(9)
    bad = cols.copy()
    bad[4] = -3
    message = f"{P} start_cols[4] must be >= 0, got -3"
    args = [jnp.asarray(a) for a in (flat_in, offsets, rows, pool)]
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(*args, start_cols=bad, implementation=implementation, interpret=interpret, check_values=True)
    assert str(info.value) == message
    checked = jax.jit(checkify.checkify(jitted(implementation, interpret, True), errors=checkify.user_checks))
    err, out = checked(*args, jnp.asarray(bad))
    assert err.get() == message + " (`check` failed)"
    assert str(kv_canary_jax.error_from_checkify(err)) == message
    assert_same_pool(np.asarray(out), pool)  # a failed check writes nothing
    past = cols.copy()
    past[2] = 9 + 40  # at or past the width: truncation, not malformed
    err, out = checked(*args, jnp.asarray(past))
    assert err.get() is None
    assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool, past))


def test_an_unwindowed_call_traces_as_without_the_keyword():
    """start_cols=None is static: the same jaxpr as a call that never names it, the kernels' four operands."""
    b = [jnp.asarray(a) for a in large_batch(bs=5, width=7, seed=10)]
    for implementation in ("xla", "pallas"):
        plain = jax.make_jaxpr(lambda *a: scatter_req_token_ids(*a, implementation=implementation, interpret=True))(*b)
        none = jax.make_jaxpr(
            lambda *a: scatter_req_token_ids(*a, start_cols=None, implementation=implementation, interpret=True)
        )(*b)
        assert str(plain) == str(none)
    windowed = jax.make_jaxpr(
        lambda *a: scatter_req_token_ids(*a[:4], start_cols=a[4], implementation="pallas", interpret=True)
    )(*b, jnp.zeros(5, jnp.int64))
    assert str(windowed) != str(plain)


def test_argument_errors_name_start_cols_under_jit():
    b = [jnp.asarray(a) for a in large_batch(bs=5, width=7, seed=11)]
    f = jax.jit(lambda *a, s: scatter_req_token_ids(*a, start_cols=s), static_argnames=())
    with pytest.raises(errors.KvCanaryValueError) as info:
        f(*b, s=jnp.zeros(4, jnp.int64))
    assert str(info.value) == f"{P} start_cols length 4 != bs (5)"
    with pytest.raises(errors.KvCanaryTypeError) as info:
        scatter_req_token_ids(*b, start_cols=[0] * 5)
    assert str(info.value) == f"{P} start_cols must be an array, got list"
    with pytest.raises(errors.KvCanaryTypeError) as info:
        scatter_req_token_ids(*b, start_cols=np.zeros(5, np.int32))
    assert str(info.value) == f"{P} start_cols must be int64, got int32"


def test_host_start_cols_go_to_the_pools_device():
    flat_in, offsets, rows, pool, cols = appends(12)
    out = scatter_req_token_ids(*[jnp.asarray(a) for a in (flat_in, offsets, rows, pool)], start_cols=cols)
    assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool, cols))


def test_xla_windowed_steps_over_requests(monkeypatch):
    """The GPU formulation (run here directly), forced into many small steps."""
    from kv_canary_jax import xla, xla_windowed

    monkeypatch.setattr(xla_windowed, "CELLS_PER_STEP", 16)  # a few requests a step: the fori_loop path
    batch = flat_in, offsets, rows, pool, cols = [jnp.asarray(a) for a in appends(13, bs=11, width=9)]
    cells = xla._cells(offsets, rows, *pool.shape, flat_in.shape[0], cols)
    out = xla_windowed._per_cell(flat_in, offsets, rows, pool, cols, cells)
    assert_same_pool(np.asarray(out), scatter_reference(*batch))


@functools.cache
def windowed_formulation(name):
    """One of the CPU/TPU formulations of a windowed call, jitted: ``(flat_in, offsets, rows, pool, start_cols)``."""
    from kv_canary_jax import xla, xla_windowed

    def f(flat_in, offsets, rows, pool, start_cols):
        if min(*flat_in.shape, *rows.shape, *pool.shape) == 0:  # what xla_windowed.scatter returns as is
            return pool
        cells = xla._cells(offsets, rows, *pool.shape, flat_in.shape[0], start_cols)
        if name == "per_cell":
            return xla_windowed._per_cell(flat_in, offsets, rows, pool, start_cols, cells)
        return getattr(xla, name)(flat_in, cells, pool)

    return jax.jit(f)


FORMULATIONS = ["_token_pass", "_per_request", "per_cell"]


@pytest.mark.parametrize("name", FORMULATIONS)
def test_each_xla_formulation_on_random_and_extreme_windowed_batches(name):
    """Whichever formulation a shape takes, on any platform: the token pass (its fix-up where windows overlap or go
    out of order), the per-request grid, the GPU's per-cell steps."""
    f = windowed_formulation(name)

    @property_settings(12)
    @given(batch=windowed_batches(max_rows=6, max_width=40, max_bs=6, max_tokens=80, few_shapes=True))
    def random(batch):
        assert_same_pool(np.asarray(f(*[jnp.asarray(a) for a in batch])), scatter_reference(*batch))

    @property_settings(12)
    @given(batch=extreme_windowed_batches(max_bs=4, width=5, n_tokens=8))
    def extreme(batch):
        assert_same_pool(np.asarray(f(*[jnp.asarray(a) for a in batch])), scatter_reference(*batch))

    random()
    extreme()


def contiguous_batch(batch):
    """``batch`` with offsets that start at 0 and never decrease (clipped to ``[0, N + 3]`` and sorted): the promise
    ``xla_windowed.scatter(..., contiguous=True)`` takes."""
    flat_in, offsets, rows, pool, cols = batch
    offsets = np.sort(np.clip(offsets, 0, flat_in.shape[0] + 3))
    offsets[0] = 0
    return flat_in, offsets, rows, pool, cols


def test_the_contiguous_path_on_random_and_extreme_batches():
    """``contiguous=True`` (the assignment's XLA path, every platform): exact wherever the segments tile ``[0,
    offsets[bs])``, with first columns and rows anywhere (int64 extremes included) and segments past ``N``."""
    from kv_canary_jax import xla_windowed

    f = jax.jit(functools.partial(xla_windowed.scatter, contiguous=True))

    @property_settings(15)
    @given(batch=windowed_batches(max_rows=6, max_width=40, max_bs=6, max_tokens=80, few_shapes=True))
    def random(batch):
        batch = contiguous_batch(batch)
        assert_same_pool(np.asarray(f(*[jnp.asarray(a) for a in batch])), scatter_reference(*batch))

    @property_settings(15)
    @given(batch=extreme_windowed_batches(max_bs=4, width=5, n_tokens=8))
    def extreme(batch):
        batch = contiguous_batch(batch)
        assert_same_pool(np.asarray(f(*[jnp.asarray(a) for a in batch])), scatter_reference(*batch))

    random()
    extreme()


@pytest.mark.parametrize("platform", ["cuda", "tpu", "cpu"])
@pytest.mark.parametrize("bs,n_tokens,width", [(1, 1, 32769), (256, 65536, 32769), (1024, 1024, 32769)])
def test_the_contiguous_path_lowers_to_no_loop_no_conditional_no_host_transfer_and_no_grid(platform, bs, n_tokens,
                                                                                           width):
    """On a GPU too: nothing read back, and no ``bs * min(C, N)`` grid, whatever the width."""
    from kv_canary_jax import xla_windowed
    from tests.jax.test_jax_xla import HOST, value_conditionals

    args = [jax.ShapeDtypeStruct(s, t) for s, t in (((n_tokens,), jnp.int64), ((bs + 1,), jnp.int64),
                                                     ((bs,), jnp.int64), ((bs + 1, width), jnp.int32),
                                                     ((bs,), jnp.int64))]
    f = functools.partial(xla_windowed.scatter, contiguous=True)
    text = jax.jit(f, donate_argnums=3).trace(*args).lower(lowering_platforms=(platform,)).as_text()
    assert not value_conditionals(text) and not HOST.search(text)
    assert "stablehlo.while" not in text
    grid = bs * min(width, n_tokens)
    assert grid <= n_tokens or f"tensor<{grid}x" not in text and f"tensor<{bs}x{min(width, n_tokens)}x" not in text


def test_the_token_pass_fixes_up_windows_out_of_order():
    """Decreasing and overlapping segments with first columns: the token pass writes nothing, its loop every cell."""
    flat_in = np.arange(20, dtype=np.int64) + 100
    offsets = np.array([10, 14, 2, 9, 12, 20], dtype=np.int64)  # request 1 reads back, request 3 overlaps request 2
    rows = np.array([0, 1, 2, 0, 3], dtype=np.int64)
    cols = np.array([3, 0, 5, -2, 1], dtype=np.int64)
    pool = sentinel_pool(4, 12, 9)
    out = windowed_formulation("_token_pass")(*[jnp.asarray(a) for a in (flat_in, offsets, rows, pool, cols)])
    assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool, cols))


# -- lowering for CUDA (no GPU needed; Mosaic GPU's and Mosaic TPU's windowed lowering: test_jax_mosaic*.py) -----------------------------------------------


def test_windowed_pallas_triton_lowers_for_cuda():
    if implementations.pallas_triton_import_error() is not None:
        pytest.skip(implementations.pallas_triton_import_error())
    from kv_canary_jax import pallas_triton

    shapes = [((5000,), jnp.int64), ((11,), jnp.int64), ((10,), jnp.int64), ((11, 3000), jnp.int32), ((10,), jnp.int64)]
    text = lower_for_cuda(pallas_triton.scatter, *shapes)
    assert text.count("stablehlo.custom_call") == 1 and "tf.aliasing_output = 0" in text


def test_the_kernels_window_is_pool_window_on_int64_extremes():
    # kernel_window (what the GPU kernels trace) on scalars, vmapped here: its in-row branch and pool_window agree
    # with the spec's pool_window for every int64, both branches taken.
    from kv_canary_jax import windows

    rng = np.random.default_rng(1)
    extremes = np.array([INT64_MIN, INT64_MIN + 1, -9, -7, -1, 0, 1, 3, 5, 6, 7, 9, 10, INT64_MAX - 1, INT64_MAX])
    starts, ends, cols = (rng.choice(extremes, 3000).astype(np.int64) for _ in range(3))
    for width, n_tokens in ((6, 9), (9, 6), (1, 1), (2**40, 2**62)):
        got = jax.vmap(lambda s, e, c: windows.kernel_window(s, e, c, width, n_tokens))(starts, ends, cols)
        with np.errstate(over="ignore"):
            expected = windows.pool_window(starts, ends, cols, width, n_tokens, np)
        for g, x in zip(got, expected):
            np.testing.assert_array_equal(np.asarray(g), x)
    ok = np.asarray(windows.in_row(starts, ends, cols, 6, 9))
    assert ok.any() and not ok.all()
