"""The Mosaic TPU kernel (``implementation="mosaic_tpu"``) without a TPU: the shared contract, edges, choice, lowering.

The kernel runs in Pallas's TPU interpreter here (``interpret=True`` selects
``pltpu.InterpretParams()``), which simulates SMEM, DMAs and DMA semaphores and
raises on any DMA that leaves its array. The shared contract runs the real
kernel where JAX's accelerator is a TPU. Edge tests share one shape so they
share one compile. The kernel is also lowered for TPU (Pallas's lowering to
Mosaic; Mosaic's own passes need a TPU host).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.experimental import checkify  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from kv_canary_jax import implementations, pallas_mosaic_tpu as tpu_kernel  # noqa: E402
from kv_canary_jax.api import scatter_req_token_ids  # noqa: E402
from kv_canary_jax.values import error_from_checkify  # noqa: E402
from kv_canary_jax.conformance import MosaicTpuRunner  # noqa: E402
from kv_canary_jax.sharded import scatter_req_token_ids_sharded  # noqa: E402
from shared_spec import errors, scatter_reference  # noqa: E402
from shared_spec.reference import written_columns  # noqa: E402
from tests.contract import (  # noqa: E402
    INTERPRETED_CASE_EVERY, ScatterContract, assert_same_pool, assert_written_by_its_requests,
)
from tests.jax_support import (  # noqa: E402
    check_donation_writes_in_place, check_unavailable_falls_through, check_vmap_over_pools_and_over_batches,
    default_gpu_kernel,
)
from tests.strategies import large_batch, sentinel_pool  # noqa: E402

P = errors.PREFIX
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@pytest.fixture(autouse=True)
def host_default_device():
    """TPU interpret mode simulates the TPU on the host: the tests' arrays live there, also on a GPU machine."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


class TestJaxMosaicTpu(ScatterContract):
    case_every = INTERPRETED_CASE_EVERY  # a compile per case: a sample by default (tests/contract.py)
    # Each new shape re-traces and re-compiles the interpreted kernel, and every
    # SMEM read and DMA of the interpreter is a host callback (about 1 ms each
    # on a busy CI host): a few examples, and 300 requests for the large batch
    # (three grid steps of REQUESTS_PER_STEP = 128, the last one part padding).
    examples = 6
    few_shapes = True
    large_bs = 300

    @classmethod
    def make_runner(cls):
        return MosaicTpuRunner()


@jax.jit
def _interpreted(flat_in, offsets, rows, pool):
    return tpu_kernel.scatter(flat_in, offsets, rows, pool, interpret=True)


def interpreted(*batch):
    """The interpreted kernel's pool (jitted once per shape: tests share shapes to share compiles)."""
    return np.asarray(_interpreted(*[jnp.asarray(a) for a in batch]))


def tokens(n, seed):
    return np.random.default_rng(seed).integers(INT64_MIN, INT64_MAX, size=n, dtype=np.int64, endpoint=True)


# One shape for the edge tests (one compile): eight rows of 300 columns, six requests, 1000 tokens.
ROWS, WIDTH, TOKENS, BS = 8, 300, 1000, 6


def edge_batch(offsets, rows, seed):
    offsets, rows = np.asarray(offsets, dtype=np.int64), np.asarray(rows, dtype=np.int64)
    assert offsets.shape == (BS + 1,) and rows.shape == (BS,)
    return tokens(TOKENS, seed), offsets, rows, sentinel_pool(ROWS, WIDTH, seed)


def check(*batch):
    assert_same_pool(interpreted(*batch), scatter_reference(*batch))


# -- the copy plan, on the host ---------------------------------------------------------------------


@pytest.mark.parametrize("width,n_tokens", [(1, 1), (5, 1000), (300, 1000), (4096, 5000), (2**20 + 3, 2**19 + 1)])
def test_copies_are_disjoint_inside_the_window_and_cover_it(width, n_tokens):
    bits = tpu_kernel.copy_bits(width, n_tokens)
    span = min(width, n_tokens)
    assert bits == tuple(range(span.bit_length() - 1, -1, -1))  # every length up to the longest window has its sizes
    rng = np.random.default_rng(span)
    for m in sorted({*range(0, min(span, 70) + 1), *rng.integers(1, span + 1, size=200).tolist(), span}):
        covered = np.zeros(m, dtype=np.int64)
        plan = [(int(o), s) for when, o, s in tpu_kernel.window_copies(np.int32(m), bits, np) if when]
        for offset, size in plan:
            assert 0 <= offset and offset + size <= m, (m, offset, size)
            covered[offset : offset + size] += 1
        assert (covered == 1).all(), m  # each column of the window once, nothing outside it
        assert len(plan) == bin(m).count("1")


def test_windows_are_exact_int32_and_empty_where_nothing_is_written():
    width, n_tokens, n_rows = 300, 1000, 8
    starts = np.array([0, -5, -width, -width - 1, INT64_MIN, n_tokens - 1, n_tokens, INT64_MAX, 10, 10], np.int64)
    ends = np.array([5, 400, 0, 2**62, INT64_MAX, n_tokens + 50, n_tokens + 1, INT64_MIN, 9, 310], np.int64)
    rows = np.array([0, 7, 1, 2, 3, 4, 5, 6, -1, 8], np.int64)
    offsets = np.empty(2 * len(rows) + 1, np.int64)  # request 2k: (starts[k], ends[k]); odd ones name no row
    offsets[0:-1:2], offsets[1::2] = starts, ends
    offsets[-1] = 0
    rows2 = np.full(2 * len(rows), n_rows, np.int64)
    rows2[::2] = rows
    steps = 1
    table = np.asarray(tpu_kernel.windows(jnp.asarray(offsets), jnp.asarray(rows2), n_tokens, n_rows, width, steps))
    assert table.dtype == np.int32 and table.shape == (4 * tpu_kernel.REQUESTS_PER_STEP,)
    fields = table.reshape(-1, 4)
    with np.errstate(over="ignore"):
        base, lo, hi = written_columns(offsets[:-1], offsets[1:], width, n_tokens)
    for r in range(len(rows2)):
        row, column, token, length = fields[r].tolist()
        if 0 <= rows2[r] < n_rows and hi[r] > lo[r]:
            assert (row, column, token, length) == (rows2[r], lo[r], base[r] + lo[r], hi[r] - lo[r])
            assert 0 <= token and token + length <= n_tokens and column + length <= width
        else:
            assert (row, column, token, length) == (0, 0, 0, 0), r
    assert not fields[len(rows2):].any()  # padding writes nothing


# -- edges, interpreted ------------------------------------------------------------------------------


def test_segments_at_the_edges():
    """Segments ending exactly at flat_in's end, starting below 0 and below -C, past the end, on the pool's last rows."""
    offsets = [-WIDTH - 3, -100, TOKENS - WIDTH, TOKENS, TOKENS - 1, TOKENS + 9, 2**62]
    check(*edge_batch(offsets, [ROWS - 1, 0, ROWS - 2, 3, 4, ROWS], 2))


def test_windows_reaching_the_row_end_and_every_length_class():
    """Full-width windows on the last rows (column C - 1 written), lengths 2**k - 1, 2**k and 2**k + 1."""
    lengths = [WIDTH, WIDTH + 40, 255, 256, 257, 1]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    check(*edge_batch(offsets, [ROWS - 1, ROWS - 2, 0, 2, 1, ROWS - 3], 4))


def test_starts_far_below_zero_and_far_past_the_end():
    offsets = [INT64_MIN + 5, -WIDTH - 1, -WIDTH, -WIDTH + 1, TOKENS - 1, TOKENS + 1, INT64_MAX]
    check(*edge_batch(offsets, [0, 1, 2, 3, 4, 5], 8))


def test_repeated_rows_never_undo_each_other():
    """Unchecked mode allows a row twice: cells one request writes hold its value, cells both write one of the two."""
    lengths = [300, 5, 130, 7, 280, 1]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    rows = [1, 1, 1, 0, 0, 6]
    flat_in, offsets, rows, pool = edge_batch(offsets, rows, 10)
    assert_written_by_its_requests(flat_in, offsets, rows, pool, interpreted(flat_in, offsets, rows, pool))


def test_no_races_in_interpret_mode_race_detection(monkeypatch):
    """Pallas's race detector (``detect_races=True``) finds none in the kernel, and does find a planted one.

    The verdict is read where JAX 0.10 keeps it (``races.races_found`` of the
    interpreter module, private); where a JAX keeps it elsewhere the test skips.
    In JAX 0.10 it does not report two DMAs of one core that write the same
    cells (tried: a repeated row), so what it checks here is the kernel's own
    accesses against its DMAs; a request's DMAs are disjoint by construction,
    checked on the host above (``window_copies``).
    """
    races_state = pytest.importorskip("jax._src.pallas.mosaic.interpret.interpret_pallas_call")
    if not hasattr(races_state, "races"):
        pytest.skip("this JAX keeps the race detector's verdict elsewhere")
    detect = pltpu.InterpretParams(detect_races=True)

    def racy(x_ref, o_ref, buf, sem):  # reads a buffer a DMA is still writing: the detector's positive control
        copy = pltpu.make_async_copy(x_ref, buf, sem)
        copy.start()
        o_ref[...] = buf[...]
        copy.wait()

    pl.pallas_call(
        racy, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.int32), pltpu.SemaphoreType.DMA(())], interpret=detect,
    )(jnp.zeros((8, 128), jnp.int32)).block_until_ready()
    assert races_state.races.races_found

    monkeypatch.setattr(tpu_kernel, "REQUESTS_PER_STEP", 4)  # several steps, few requests
    batch = large_batch(bs=9, width=40, seed=12)
    out = tpu_kernel.scatter(*[jnp.asarray(a) for a in batch], interpret=detect)
    assert_same_pool(np.asarray(out), scatter_reference(*batch))
    assert not races_state.races.races_found


def test_shapes_past_int32_use_xla(monkeypatch):
    """N, R or C of 2**31 or more does not fit the kernel's int32 scalars: the XLA formulation runs (limit forced small here)."""
    monkeypatch.setattr(tpu_kernel, "INT32_LIMIT", WIDTH)
    batch = edge_batch([0, 5, 300, 310, 700, 900, 1000], [0, 1, 2, 3, 4, 5], 13)
    f = functools.partial(tpu_kernel.scatter, interpret=True)
    assert not list(pallas_calls(jax.make_jaxpr(f)(*batch).jaxpr))
    assert_same_pool(np.asarray(f(*batch)), scatter_reference(*batch))


# -- in place, vmap, checkify, sharded ---------------------------------------------------------------


def pallas_calls(jaxpr):
    """The pallas_call equations of a jaxpr, nested ones (under custom_vmap, jit, ...) included."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                yield from pallas_calls(inner)


def test_the_pool_is_aliased_to_the_output():
    batch = [jnp.asarray(a) for a in large_batch(bs=4, width=9, seed=14)]
    jaxpr = jax.make_jaxpr(functools.partial(tpu_kernel.scatter, interpret=True))(*batch)
    (call,) = pallas_calls(jaxpr.jaxpr)
    assert call.params["input_output_aliases"] == ((2, 0),)  # windows, tokens, pool -> the output


def test_jit_with_donation_writes_the_donated_buffer():
    check_donation_writes_in_place("mosaic_tpu", interpret=True)


def test_vmap_over_pools_and_over_batches():
    """The kernel's own batching rule (``batching.per_example``): one kernel per example."""
    check_vmap_over_pools_and_over_batches("mosaic_tpu", interpret=True)


def test_checkify_under_jit():
    f = functools.partial(scatter_req_token_ids, implementation="mosaic_tpu", interpret=True, check_values=True)
    checked = jax.jit(checkify.checkify(f, errors=checkify.user_checks))
    flat_in, offsets, rows, pool = large_batch(bs=5, width=9, seed=20)
    err, out = checked(flat_in, offsets, rows, pool)
    assert err.get() is None
    assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool))
    rows = rows.copy()
    rows[3] = rows[1]
    err, out = checked(flat_in, offsets, rows, pool)
    assert str(error_from_checkify(err)) == f"{P} req_pool_indices[3]={rows[1]} repeats req_pool_indices[1]"
    assert_same_pool(np.asarray(out), pool)  # nothing written


def test_sharded_pool_each_device_runs_the_kernel_on_its_rows():
    cpus = jax.devices("cpu")
    if len(cpus) < 4:
        pytest.skip("needs 4 host devices (tests/conftest.py sets XLA_FLAGS)")
    mesh = Mesh(np.array(cpus[:4]), ("rows",))
    sharding = NamedSharding(mesh, PartitionSpec("rows", None))
    flat_in, offsets, _, _ = large_batch(bs=10, width=9, seed=21)
    rows = np.array([3, 0, 5, 11, 2, 8, 9, 6, 1, 10], np.int64)  # distinct; the first and last rows, shard edges
    pool = sentinel_pool(12, 9, 22)
    f = jax.jit(
        lambda *a: scatter_req_token_ids_sharded(*a, mesh=mesh, axis="rows", implementation="mosaic_tpu", interpret=True),
        donate_argnums=3,
    )
    with jax.default_device(cpus[0]):
        placed = jax.device_put(pool, sharding)
        out = f(flat_in, offsets, rows, placed)
    assert placed.is_deleted() and out.sharding.is_equivalent_to(sharding, 2)
    assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool))


# -- lowering for TPU (no TPU needed) ----------------------------------------------------------------


@pytest.fixture
def tpu_lowering(monkeypatch):
    """Lets Pallas lower for TPU on this host: its lowering asks the default device for TPU facts (v5e's here).

    ``tpu_info.registry`` is Pallas's private table of device kinds it does not
    know; where a JAX lacks it the test skips.
    """
    tpu_info = pytest.importorskip("jax._src.pallas.mosaic.tpu_info")
    if not hasattr(tpu_info, "registry") or not hasattr(tpu_info, "get_tpu_info_for_chip"):
        pytest.skip("this JAX has no way to lower Pallas TPU kernels without a TPU")
    v5e = lambda: tpu_info.get_tpu_info_for_chip(tpu_info.ChipVersion.TPU_V5E, 1)  # noqa: E731
    for kind in {jax.devices()[0].device_kind, jax.devices("cpu")[0].device_kind}:  # the default device, or the host
        monkeypatch.setitem(tpu_info.registry, kind, v5e)


def lower_for_tpu(f, *shapes, donate=True):
    args = [jax.ShapeDtypeStruct(s, t) for s, t in shapes]
    return jax.jit(f, donate_argnums=3 if donate else ()).trace(*args).lower(lowering_platforms=("tpu",)).as_text()


@pytest.mark.parametrize("windowed", [False, True], ids=["plain", "windowed"])
@pytest.mark.parametrize("n_tokens,bs,n_rows,width", [(5000, 300, 301, 3000), (3, 2, 5, 1), (2**20, 8, 9, 8193)])
def test_lowers_for_tpu(tpu_lowering, n_tokens, bs, n_rows, width, windowed):
    """Pallas's Mosaic TPU lowering takes the kernel (int32 scalars and indices, even with x64 on), windowed too."""
    shapes = [((n_tokens,), jnp.int64), ((bs + 1,), jnp.int64), ((bs,), jnp.int64), ((n_rows, width), jnp.int32)]
    shapes += [((bs,), jnp.int64)] * windowed
    text = lower_for_tpu(tpu_kernel.scatter, *shapes)
    assert text.count("stablehlo.custom_call @tpu_custom_call") == 1
    assert "output_operand_aliases" in text and "tf.aliasing_output = 0" in text


# PLATFORM_DEFAULTS without a TPU entry (as shipped) and with the one it gets once the kernel has passed on a TPU.
TPU_DEFAULTS = [{}, {"tpu": ("mosaic_tpu", "xla")}]


@pytest.mark.parametrize("defaults", TPU_DEFAULTS, ids=["no-tpu-entry", "tpu-entry"])
@pytest.mark.parametrize("implementation", [None, ("mosaic_tpu", "xla")])
def test_lowers_to_the_kernel_on_tpu_under_vmap_and_checkify(tpu_lowering, monkeypatch, defaults, implementation):
    # The default takes the kernel on a TPU only with a TPU entry in PLATFORM_DEFAULTS; XLA's scatter without.
    # (A sequence: the host, where this traces, runs "xla"; a TPU picks the kernel when lowering.)
    monkeypatch.setattr(implementations, "PLATFORM_DEFAULTS", defaults)
    expected = implementation is not None or "tpu" in defaults
    call = functools.partial(scatter_req_token_ids, implementation=implementation)
    shapes = [((500,), jnp.int64), ((5,), jnp.int64), ((4,), jnp.int64), ((5, 200), jnp.int32)]
    assert ("@tpu_custom_call" in lower_for_tpu(call, *shapes)) == expected
    f = functools.partial(call, check_values=True)
    lowered = lower_for_tpu(checkify.checkify(f, errors=checkify.user_checks), *shapes, donate=False)
    assert ("@tpu_custom_call" in lowered) == expected
    pools = [*shapes[:3], ((3, 5, 200), jnp.int32)]
    assert ("@tpu_custom_call" in lower_for_tpu(jax.vmap(call, in_axes=(None, None, None, 0)), *pools)) == expected


# -- choosing "mosaic_tpu" ---------------------------------------------------------------------------


@pytest.mark.parametrize("defaults", TPU_DEFAULTS, ids=["no-tpu-entry", "tpu-entry"])
def test_the_tpu_default_and_the_other_defaults(monkeypatch, defaults):
    monkeypatch.setattr(implementations, "PLATFORM_DEFAULTS", defaults)
    choice = implementations.choice
    on_tpu = "mosaic_tpu" if defaults else "xla"
    assert choice(None, "tpu", False) == ((None, on_tpu),)
    interpreted = "mosaic_tpu" if defaults else default_gpu_kernel("tpu", True)
    assert choice(None, "tpu", True) == ((None, interpreted),)
    assert choice(None, "cuda", False) == ((None, default_gpu_kernel("cuda", False)),)  # unchanged elsewhere
    assert choice(None, "cpu", False) == ((None, "xla"),)
    assert dict(choice(None, None, False)).get("tpu", "xla") == on_tpu  # traced: picked per platform when lowering
    assert choice("mosaic_tpu", "tpu", False) == ((None, "mosaic_tpu"),)
    assert choice(("mosaic_tpu", "xla"), "tpu", False) == ((None, "mosaic_tpu"),)


@pytest.mark.skipif(jax.devices()[0].platform == "tpu", reason="a TPU is here")
def test_without_a_tpu_mosaic_tpu_needs_the_interpreter():
    check_unavailable_falls_through("mosaic_tpu", errors.MOSAIC_TPU_NEEDS_TPU)
    assert "mosaic_tpu" in implementations.available_implementations(interpret=True)
    assert "mosaic_tpu" not in implementations.available_implementations()


def test_interpret_params_pass_through():
    params = pltpu.InterpretParams(detect_races=True)
    assert tpu_kernel.interpret_params(params) is params
    assert isinstance(tpu_kernel.interpret_params(True), pltpu.InterpretParams)
    assert tpu_kernel.interpret_params(False) is False


# -- kv-canary bench on a TPU ------------------------------------------------------------------------


def test_bench_tpu_path_runs_here_with_what_is_available(monkeypatch, tmp_path, capsys):
    """``run_tpu`` end to end on a tiny case (on this host only "xla" runs natively; on a TPU also "mosaic_tpu")."""
    import argparse

    from kv_canary import bench, bench_cases, bench_jax, bench_method

    # Where run_tpu's parts read them (kv_canary.bench only re-exports them): one tiny case, short chains, few wall calls.
    monkeypatch.setattr(bench_cases, "CASES", [(2, 8, False, False)])
    for module in (bench_method, bench_jax):
        monkeypatch.setattr(module, "CHAIN", 2)
    monkeypatch.setattr(bench_jax, "WALL_CALLS", 5)
    out = tmp_path / "tpu.md"
    args = argparse.Namespace(case=None, quick=True, json=False, write=str(out))
    with jax.default_device(jax.devices()[0]):  # where the command computes (the TPU, on a TPU host)
        assert bench.run_tpu(args) == 0
    table = capsys.readouterr().out
    assert "| 2 | 8 | no | 9 | 16 |" in table and "XLA us" in table
    assert len([line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]) == 1  # that case alone
    assert out.read_text().startswith(bench.TPU_PERFORMANCE_HEADER)
    assert not bench.tpu_available() or jax.devices()[0].platform == "tpu"
