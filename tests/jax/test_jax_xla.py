"""The JAX frontend's XLA implementation: the shared contract, each formulation on malformed values, and its lowerings."""

import re

import numpy as np
import pytest

pytest.importorskip("jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from hypothesis import given, strategies as st  # noqa: E402

from kv_canary_jax import scatter_req_token_ids, xla  # noqa: E402
from kv_canary_jax.conformance import XlaRunner  # noqa: E402
from shared_spec import scatter_reference  # noqa: E402
from shared_spec.reference import written_columns  # noqa: E402
from tests.children import Child  # noqa: E402
from tests.contract import ScatterContract, assert_same_pool  # noqa: E402
from tests.jax_support import ROOT  # noqa: E402
from tests.profiles import property_settings  # noqa: E402
from tests.strategies import INT64_MAX, INT64_MIN, draw_shape, sentinel_pool, token_ids  # noqa: E402


class TestJaxXla(ScatterContract):
    examples = 10  # XLA compiles each new shape (~0.1 s on a CPU)
    few_shapes = True
    @classmethod
    def make_runner(cls):
        return XlaRunner()


# -- the formulations on values the checked mode would refuse --------------------------------------

def direct(formulation):
    """``formulation`` as ``(flat_in, offsets, rows, pool) -> pool``."""
    def f(flat_in, offsets, rows, pool):
        return formulation(flat_in, xla._cells(offsets, rows, pool.shape[0], pool.shape[1], flat_in.shape[0]), pool)
    return f


def formulations():
    """Each formulation jitted, and the platform-chosen whole."""
    return {"enumeration": jax.jit(direct(xla._enumeration)), "token_pass": jax.jit(direct(xla._token_pass)),
            "per_request": jax.jit(direct(xla._per_request)), "scatter": jax.jit(xla.scatter)}


FORMULATIONS = formulations()


def allowed_values(flat_in, offsets, rows, pool):
    """Per cell, the values some request writes there (the reference's rule, request by request); empty where none does."""
    n_rows, width = pool.shape
    with np.errstate(over="ignore"):
        bases, los, his = written_columns(offsets[:-1], offsets[1:], width, flat_in.shape[0])
    cells: dict = {}
    for r, row in enumerate(rows):
        if 0 <= row < n_rows:
            for j in range(los[r], his[r]):
                cells.setdefault((int(row), j), set()).add(int(flat_in[bases[r] + j].astype(np.int32)))
    return cells


def assert_written_as_spec_allows(batch, got):
    """Every cell holds one of the values its writers write, or its old value where none writes it."""
    flat_in, offsets, rows, pool = batch
    allowed = allowed_values(*batch)
    assert got.dtype == np.int32 and got.shape == pool.shape
    for (row, j), values in allowed.items():
        assert int(got[row, j]) in values, (row, j)
    untouched = np.ones(pool.shape, bool)
    for row, j in allowed:
        untouched[row, j] = False
    assert np.array_equal(got[untouched], pool[untouched])


offset_values = st.one_of(st.integers(-6, 40), st.sampled_from([INT64_MIN, INT64_MIN + 1, INT64_MAX - 1, INT64_MAX]),
                          st.integers(INT64_MIN, INT64_MAX))
row_values = st.one_of(st.integers(-2, 7), st.sampled_from([INT64_MIN, INT64_MAX]))


@st.composite
def malformed_batches(draw):
    """Offsets in any order (decreasing, overlapping, int64 extremes), rows anywhere and repeated; a sentinel pool."""
    n_rows, width, bs, n_tokens = draw_shape(draw, (6, 30, 7, 36), few_shapes=True)
    flat_in = np.asarray(draw(st.lists(token_ids, min_size=n_tokens, max_size=n_tokens)), dtype=np.int64)
    if draw(st.booleans()):  # anything, in any order
        offsets = np.asarray(draw(st.lists(offset_values, min_size=bs + 1, max_size=bs + 1)), dtype=np.int64)
    else:  # nearly in order: segments of any length, some negative, some past the width
        lengths = draw(st.lists(st.integers(-width - 2, width + 4), min_size=bs, max_size=bs))
        offsets = draw(st.integers(-6, 6)) + np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = np.asarray(draw(st.lists(row_values, min_size=bs, max_size=bs)), dtype=np.int64)
    return flat_in, offsets, rows, sentinel_pool(n_rows, width, draw(st.integers(0, 2**16)))


@pytest.mark.parametrize("examples", [10, pytest.param(40, marks=pytest.mark.slow)])  # each example compiles anew
@pytest.mark.parametrize("name", FORMULATIONS)
def test_malformed_batches_are_written_as_the_spec_says(name, examples):
    @property_settings(examples)
    @given(batch=malformed_batches())
    def check(batch):
        got = np.asarray(FORMULATIONS[name](*batch))
        assert_written_as_spec_allows(batch, got)
        rows = batch[2]
        in_pool = rows[(rows >= 0) & (rows < batch[3].shape[0])]
        if len(set(in_pool.tolist())) == len(in_pool):  # distinct rows: one answer
            assert_same_pool(got, scatter_reference(*batch))

    check()


@pytest.mark.parametrize("name", FORMULATIONS)
def test_overlapping_windows_many_times_the_tokens(name):
    """Every request covers all of ``flat_in`` (``T = 6 N``): the enumeration's loop runs five times past its first ``N`` cells."""
    n_tokens = 11
    flat_in = np.arange(n_tokens, dtype=np.int64) * 1_000_003 - 5
    offsets = np.array([0, n_tokens, 0, n_tokens, -3, n_tokens + 4, 0], dtype=np.int64)  # overlapping, partly outside
    rows = np.array([4, 0, 2, 5, 1, 6], dtype=np.int64)
    pool = sentinel_pool(7, 16, 3)
    assert_same_pool(np.asarray(FORMULATIONS[name](flat_in, offsets, rows, pool)), scatter_reference(flat_in, offsets, rows, pool))


def overlapping_examples(n_examples: int, n_tokens: int = 7, bs: int = 5, shape=(6, 9)):
    """Batches whose windows overlap (``T`` from 0 to ``bs * N``, a different count per example), rows distinct."""
    rng = np.random.default_rng(8)
    flat = rng.integers(INT64_MIN, INT64_MAX, size=(n_examples, n_tokens), dtype=np.int64)
    offsets = rng.integers(-3, n_tokens + 3, size=(n_examples, bs + 1)).astype(np.int64)
    offsets[0, ::2], offsets[0, 1::2] = 0, n_tokens  # every request all of flat_in
    rows = np.stack([rng.permutation(np.arange(-1, shape[0] + 1))[:bs] for _ in range(n_examples)]).astype(np.int64)
    pools = np.stack([sentinel_pool(*shape, seed) for seed in range(n_examples)])
    return flat, offsets, rows, pools


@pytest.mark.parametrize("name", FORMULATIONS)
def test_vmap_over_batches_whose_windows_overlap(name):
    """Under vmap the enumeration's loop past N runs while any example has cells left; each example gets its own pool."""
    flat, offsets, rows, pools = overlapping_examples(4)
    f = jax.jit(jax.vmap(FORMULATIONS[name]))
    out = np.asarray(f(flat, offsets, rows, pools))
    for i in range(4):
        assert_same_pool(out[i], scatter_reference(flat[i], offsets[i], rows[i], pools[i]))
    # Over pools alone (the batch shared), and nested.
    out = np.asarray(jax.jit(jax.vmap(FORMULATIONS[name], in_axes=(None, None, None, 0)))(flat[0], offsets[0], rows[0], pools))
    for i in range(4):
        assert_same_pool(out[i], scatter_reference(flat[0], offsets[0], rows[0], pools[i]))
    nested = jax.jit(jax.vmap(jax.vmap(FORMULATIONS[name])))
    out = np.asarray(nested(*(a.reshape(2, 2, *a.shape[1:]) for a in (flat, offsets, rows, pools))))
    for i in range(4):
        assert_same_pool(out.reshape(4, *pools.shape[1:])[i], scatter_reference(flat[i], offsets[i], rows[i], pools[i]))


def test_checkify_of_vmap_over_batches_whose_windows_overlap():
    """checkify refuses a while loop on a batched predicate; the loop past N is batched on an unbatched one."""
    from jax.experimental import checkify

    flat, offsets, rows, pools = overlapping_examples(3)
    f = jax.jit(jax.vmap(lambda *a: scatter_req_token_ids(*a, implementation="xla")))
    err, out = checkify.checkify(f, errors=checkify.user_checks)(flat, offsets, rows, pools)
    assert err.get() is None
    for i in range(3):
        assert_same_pool(np.asarray(out[i]), scatter_reference(flat[i], offsets[i], rows[i], pools[i]))


def test_token_pass_with_int64_indices(monkeypatch):
    """The token pass's int64 path (rows and shifts summed apart: pools or batches past int32), forced here."""
    monkeypatch.setattr(xla, "INDEX32_BOUND", 0)
    f = jax.jit(direct(xla._token_pass))

    @property_settings(20)
    @given(batch=malformed_batches())
    def check(batch):
        assert_same_pool(np.asarray(f(*batch)), scatter_reference(*batch))

    check()


def test_windows_in_order_with_gaps_between_them():
    """Windows disjoint and in order, but a window ends before the next begins, inside the pool's width."""
    flat_in = np.arange(7, dtype=np.int64) + 100
    offsets = np.array([9, 2, 6, 5, 2, 2], dtype=np.int64)  # one window, tokens 2..5; the others empty
    rows = np.array([0, 5, 2, 6, -1], dtype=np.int64)
    pool = sentinel_pool(6, 9, 4)
    for f in FORMULATIONS.values():
        assert_same_pool(np.asarray(f(flat_in, offsets, rows, pool)), scatter_reference(flat_in, offsets, rows, pool))


def test_per_request_steps_over_requests(monkeypatch):
    """The per-request grid, forced into many small steps, still matches the reference."""
    rng = np.random.default_rng(15)
    bs, n_tokens, shape = 50, 40, (60, 9)
    flat_in = rng.integers(INT64_MIN, INT64_MAX, size=n_tokens, dtype=np.int64)
    offsets = rng.integers(-5, n_tokens + 5, size=bs + 1).astype(np.int64)
    rows = rng.permutation(np.arange(-3, shape[0] + 3, dtype=np.int64))[:bs]  # distinct; some outside
    pool = sentinel_pool(*shape, 15)
    monkeypatch.setattr(xla, "CELLS_PER_STEP", 20)  # window 9 -> 2 requests a step, 25 steps
    out = formulations()["per_request"](flat_in, offsets, rows, pool)
    assert_same_pool(np.asarray(out), scatter_reference(flat_in, offsets, rows, pool))


# -- the lowerings: nothing a value decides on the host --------------------------------------------

# StableHLO that moves data to or from the host.
HOST = re.compile(r"outfeed|infeed|stablehlo\.(send|recv)\b|callback|host", re.IGNORECASE)
CASE = re.compile(r'(%\w+) = "stablehlo\.case"\((%\w+)\)(?:.|\n)*?\}\) : \(tensor<i32>\) -> (\S+)')


def value_conditionals(text: str) -> list[str]:
    """The selectors of the ``stablehlo.case``/``stablehlo.if`` ops that branch on a value computed at run time.

    ``lax.platform_dependent`` lowered for one platform is a case on a
    constant (and a case on that case, returning the platform's index): XLA
    resolves it when compiling, so it is no branch. Every other conditional
    would be one (on a GPU, a predicate read back by the host).
    """
    static, branching = set(), []
    for out, selector, result in CASE.findall(text):
        if selector.startswith("%c") or selector in static:
            if result == "tensor<i32>":  # the platform index itself
                static.add(out)
        else:
            branching.append(selector)
    return branching + re.findall(r"stablehlo\.if\b", text)


def lowered(platform: str, bs: int, n_tokens: int, shape, f=xla.scatter) -> str:
    args = [jax.ShapeDtypeStruct(s, t) for s, t in (((n_tokens,), jnp.int64), ((bs + 1,), jnp.int64),
                                                     ((bs,), jnp.int64), (shape, jnp.int32))]
    return jax.jit(f, donate_argnums=3).trace(*args).lower(lowering_platforms=(platform,)).as_text()


# (bs, N, pool): one request (T <= N for any values), a full prefill batch and a short one whose windows may pass N cells.
SHAPES = [(1, 8192, (2, 8193)), (256, 8192 * 256, (257, 8193)), (64, 512, (65, 8193))]


@pytest.mark.parametrize("platform", ["tpu", "cuda", "cpu"])
@pytest.mark.parametrize("bs,n_tokens,shape", SHAPES)
def test_lowering_has_no_conditional_and_no_host_transfer(platform, bs, n_tokens, shape):
    text = lowered(platform, bs, n_tokens, shape)
    assert not value_conditionals(text) and not HOST.search(text)
    api = lowered(platform, bs, n_tokens, shape, lambda *a: scatter_req_token_ids(*a, implementation="xla"))
    assert not value_conditionals(api) and not HOST.search(api)


@pytest.mark.parametrize("bs,n_tokens,shape", SHAPES)
def test_enumeration_lowered_for_tpu_loops_only_where_it_takes_the_token_pass(bs, n_tokens, shape):
    """TPU, CPU: the per-request grid (no loop) where it has at most 3/2 cells per token, else the token pass (a
    while loop on the device for windows out of order); one scatter outside any loop either way."""
    text = lowered("tpu", bs, n_tokens, shape, direct(xla._enumeration))
    assert not value_conditionals(text) and not HOST.search(text)
    token_pass = xla.PER_TOKENS * bs * min(shape[1], n_tokens) > xla.GRID_CELLS * n_tokens
    assert text.count("stablehlo.while") == token_pass
    assert token_pass == ((bs, n_tokens) == (64, 512))  # the short batch in wide rows
    text = lowered("tpu", bs, n_tokens, shape, direct(xla._token_pass))
    assert not value_conditionals(text) and not HOST.search(text) and text.count("stablehlo.while") == 1


@pytest.mark.parametrize("bs,n_tokens,shape", SHAPES)
def test_per_request_lowered_for_cuda_has_no_control_flow(bs, n_tokens, shape):
    """The per-request grid (GPUs): one scatter, no conditional, no loop (one step at these sizes), no host transfer."""
    text = lowered("cuda", bs, n_tokens, shape, direct(xla._per_request))
    assert not value_conditionals(text) and not HOST.search(text)
    assert "stablehlo.while" not in text and text.count('"stablehlo.scatter"(') == 1


def test_the_platform_index_is_not_mistaken_for_a_branch():
    """The checker above finds a ``lax.cond`` on a value (what the implementation must never lower to)."""
    def branching(flat_in, offsets, rows, pool):
        return jax.lax.cond(offsets[0] > 0, lambda p: p + 1, lambda p: p, xla.scatter(flat_in, offsets, rows, pool))

    assert value_conditionals(lowered("tpu", 64, 512, (65, 8193), branching))


COMPILED_FOR_THE_CPU = """
import jax, jax.numpy as jnp
from kv_canary_jax import xla
args = [jax.ShapeDtypeStruct(s, t) for s, t in (((512,), jnp.int64), ((65,), jnp.int64), ((64,), jnp.int64), ((65, 8193), jnp.int32))]
text = jax.jit(xla.scatter).trace(*args).lower().compile().as_text()
print("conditional(" in text, "scatter(" in text, "while(" in text)
"""

COMPILED_FOR_THE_CPU_RUN = Child(["-c", COMPILED_FOR_THE_CPU], unset=["XLA_FLAGS"],
                                 set_env={"JAX_ENABLE_X64": "1", "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)})


@COMPILED_FOR_THE_CPU_RUN.ahead
def test_compiled_for_the_cpu_has_no_conditional():
    """XLA's optimized HLO under its default flags (the tests' own lower CPU optimization keeps dead branches):
    the platform index resolved, the enumeration's scatter and its loop past N, on the host that is the device."""
    done = COMPILED_FOR_THE_CPU_RUN.run()
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]


@pytest.mark.parametrize("platform", ["tpu", "cuda", "cpu"])
@pytest.mark.parametrize("bs,n_tokens,shape", SHAPES)
def test_windowed_lowering_has_no_conditional_and_no_host_transfer(platform, bs, n_tokens, shape):
    """``xla_windowed`` on each platform: the GPU's per-cell steps, elsewhere this module's formulations on its windows."""
    from kv_canary_jax import xla_windowed

    args = [jax.ShapeDtypeStruct(s, t) for s, t in (((n_tokens,), jnp.int64), ((bs + 1,), jnp.int64),
                                                     ((bs,), jnp.int64), (shape, jnp.int32), ((bs,), jnp.int64))]
    text = jax.jit(xla_windowed.scatter, donate_argnums=3).trace(*args).lower(lowering_platforms=(platform,)).as_text()
    assert not value_conditionals(text) and not HOST.search(text)
    token_pass = xla.PER_TOKENS * bs * min(shape[1], n_tokens) > xla.GRID_CELLS * n_tokens
    assert text.count("stablehlo.while") == (platform != "cuda" and token_pass)
