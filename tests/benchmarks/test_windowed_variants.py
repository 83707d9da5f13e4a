"""benchmarks/windowed_variants.py without a GPU: every candidate formulation of the windowed window against the spec.

The JAX candidates on int64 extremes against ``pool_window`` (numpy), then through both GPU kernels in their
interpreters (the switch ``kv_canary_jax.windows.kernel_window`` set) on random and extreme windowed batches against
``scatter_reference``; the torch candidate (``IN_ROW``) through the lanes kernel (one tile and the loop) and the
tiled kernel in Triton's interpreter. Also: the switch is what the kernels trace, and the run without a GPU skips.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from hypothesis import given  # noqa: E402

from kv_canary_jax import implementations, windows  # noqa: E402
from kv_canary_jax.api import scatter_req_token_ids  # noqa: E402
from shared_spec import scatter_reference  # noqa: E402
from tests.contract import assert_same_pool  # noqa: E402
from tests.profiles import property_settings  # noqa: E402
from tests.strategies import INT64_MAX, INT64_MIN, extreme_windowed_batches, sentinel_pool, windowed_batches  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("windowed_variants", ROOT / "benchmarks" / "windowed_variants.py")
variants = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(variants)

CANDIDATES = [name for name in variants.JAX_VARIANT_NAMES if name != "spec"]
KERNELS = [k for k in ("pallas", "mosaic") if implementations.unavailable_reason(k, "cpu", True) is None]


@pytest.fixture
def variant(request):
    """The kernels traced with the JAX variant ``request.param``; ``pool_window`` again after."""
    variants.use_jax_variant(variants.jax_variants()[request.param])
    yield request.param
    variants.use_jax_variant(windows.pool_window)


def run(implementation, batch) -> np.ndarray:
    f = jax.jit(lambda f, o, r, p, s: scatter_req_token_ids(f, o, r, p, start_cols=s, implementation=implementation,
                                                            interpret=True))
    return np.asarray(f(*[jnp.asarray(a) for a in batch]))


@pytest.mark.parametrize("name", CANDIDATES)
def test_candidates_are_pool_window_on_int64_extremes(name):
    rng = np.random.default_rng(1)
    extremes = np.array([INT64_MIN, INT64_MIN + 1, -9, -7, -1, 0, 1, 3, 5, 6, 7, 9, 10, INT64_MAX - 1, INT64_MAX])
    starts, ends, cols = (rng.choice(extremes, 3000).astype(np.int64) for _ in range(3))
    function = variants.jax_variants()[name]
    for width, n_tokens in ((6, 9), (9, 6), (1, 1), (2**40, 2**62)):
        got = jax.vmap(lambda s, e, c: function(s, e, c, width, n_tokens, jnp))(starts, ends, cols)
        with np.errstate(over="ignore"):
            expected = windows.pool_window(starts, ends, cols, width, n_tokens, np)
        for g, x in zip(got, expected):
            assert (np.asarray(g) == x).all()
    ok = np.asarray(variants.in_row(starts, ends, cols, 6, 9))
    assert ok.any() and not ok.all()  # both branches taken


def test_the_unsigned_test_is_in_row():
    rng = np.random.default_rng(2)
    extremes = np.array([INT64_MIN, INT64_MIN + 1, -9, -1, 0, 1, 5, 6, 7, 9, 10, INT64_MAX - 1, INT64_MAX])
    starts, ends, cols = (rng.choice(extremes, 5000).astype(np.int64) for _ in range(3))
    for width, n_tokens in ((6, 9), (9, 6), (2**40, INT64_MAX)):
        expected = np.asarray(variants.in_row(starts, ends, cols, width, n_tokens))
        got = np.asarray(variants.in_row_unsigned(jnp.asarray(starts), jnp.asarray(ends), jnp.asarray(cols), width, n_tokens))
        assert (got == expected).all() and expected.any()


@pytest.mark.parametrize("implementation", KERNELS)
def test_the_kernels_trace_the_switch(implementation):
    batch = variants._times().variant_inputs("3x8")["append"]
    flat_in, offsets, rows, cols, pool, expected = batch
    try:
        # A window that writes nothing: the kernels must follow it.
        variants.use_jax_variant(lambda start, end, col, width, n, xp: (start, start - start, start - start))
        assert (run(implementation, (flat_in, offsets, rows, pool, cols)) == pool).all()
    finally:
        variants.use_jax_variant(windows.pool_window)
    assert (run(implementation, (flat_in, offsets, rows, pool, cols)) == expected).all()


@pytest.mark.parametrize("variant", CANDIDATES, indirect=True)
@pytest.mark.parametrize("implementation", KERNELS)
def test_candidates_in_the_kernels_match_the_reference(implementation, variant):
    @property_settings(4)
    @given(batch=windowed_batches(max_rows=6, max_width=40, max_bs=6, max_tokens=80))
    def random(batch):
        assert_same_pool(run(implementation, batch), scatter_reference(*batch))

    @property_settings(3)
    @given(batch=extreme_windowed_batches(max_bs=4, width=5, n_tokens=8))
    def extreme(batch):
        assert_same_pool(run(implementation, batch), scatter_reference(*batch))

    random()
    extreme()


@pytest.mark.parametrize("variant", CANDIDATES, indirect=True)
@pytest.mark.parametrize("width", [9, 3000, 2**31 + 5])
def test_candidates_lower_for_cuda(variant, width):
    """Both GPU kernels lower for CUDA with each candidate (int32 and int64 columns), as tests/jax/test_jax_mosaic.py's."""
    from kv_canary_jax import pallas_mosaic_gpu
    from tests.jax_support import assert_one_bare_mosaic_call, lower_for_cuda

    shapes = [((5000,), jnp.int64), ((11,), jnp.int64), ((10,), jnp.int64), ((11, width), jnp.int32), ((10,), jnp.int64)]
    assert_one_bare_mosaic_call(lower_for_cuda(pallas_mosaic_gpu.scatter, *shapes), windowed=True)
    if implementations.pallas_triton_import_error() is None:
        from kv_canary_jax import pallas_triton

        text = lower_for_cuda(pallas_triton.scatter, *shapes)
        assert text.count("stablehlo.custom_call") == 1


# -- torch: IN_ROW ------------------------------------------------------------------------


def check_in_row(expected_kernel: str, examples: int, **sizes):
    torch = pytest.importorskip("torch")

    @property_settings(examples)
    @given(batch=windowed_batches(**sizes))
    def check(batch):
        flat_in, offsets, rows, pool, start_cols = (torch.tensor(x) for x in batch)
        for in_row_test in (True, False):
            written = pool.clone()
            call, kernel = variants.torch_launcher(torch, flat_in, offsets, rows, [written], start_cols, in_row_test)
            call()
            assert kernel in (expected_kernel, "none")
            assert_same_pool(written.numpy(), scatter_reference(*batch))

    check()


def test_in_row_in_the_lanes_kernel():
    check_in_row("lanes", 20)


def test_in_row_on_int64_extremes_of_start_cols_and_offsets():
    # As tests/torch/test_torch_windowed.py's: requests alternate (start, end) and (end, start), every first column in turn.
    torch = pytest.importorskip("torch")
    flat_in = np.arange(40, dtype=np.int64) * 7 - 3
    edges = [INT64_MIN, INT64_MIN + 1, -41, -1, 0, 1, 5, 9, 10, 11, 2**31, 2**32 + 3, INT64_MAX - 1, INT64_MAX]
    bs = len(edges)
    for start in (0, 3, 39, 40, -5, INT64_MIN, INT64_MAX):
        for end in (0, 4, 40, 41, INT64_MAX, INT64_MIN):
            offsets = np.array(([start, end] * bs)[: bs + 1], dtype=np.int64)
            batch = (flat_in, offsets, np.arange(bs, dtype=np.int64), sentinel_pool(bs, 10, seed=2),
                     np.array(edges, dtype=np.int64))
            written = torch.tensor(batch[3])
            call, _ = variants.torch_launcher(torch, *(torch.tensor(x) for x in batch[:3]), [written],
                                              torch.tensor(batch[4]), True)
            call()
            assert_same_pool(written.numpy(), scatter_reference(*batch))


def test_in_row_in_the_lanes_kernel_loop():
    from kv_canary_torch.launch import plan as launch_plan
    from tests.torch_support import using_rule

    rule = launch_plan.RULE._replace(large_block=16, small_block=8, target_programs=2, small_cells=-1,
                                     tiled_min_tokens=2**62)
    for _ in using_rule(rule):
        check_in_row("lanes", 15, max_rows=4, max_width=70, max_bs=4, max_tokens=200)


def test_in_row_in_the_tiled_kernel(monkeypatch):
    from tests.torch_support import tiled_everywhere

    for _ in tiled_everywhere(monkeypatch, 16):
        check_in_row("tiled", 20, max_rows=6, max_width=67, max_bs=6, max_tokens=160)


def test_without_a_gpu_it_says_so_and_measures_nothing(capsys):
    if jax.devices()[0].platform == "gpu":
        pytest.skip("the skip is for machines without a GPU")
    assert variants.main(["--case", "4096x512"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip() == variants.NO_GPU
    assert "benchmarks" not in sys.modules


def test_the_torch_case_runs_and_checks_every_run_in_the_interpreter():
    torch = pytest.importorskip("torch")
    calls = []

    def flushed(torch, runs, rounds, before_round):
        for k in range(rounds):
            before_round(k)
            for name, run in runs.items():
                run()
                calls.append(name)
        return {name: 2.0 for name in runs}

    def chained(torch, runs):
        return {name: 1.0 + (name != "unwindowed") for name in runs}

    result = variants.torch_case(torch, "3x16", rounds=2, device="cpu", timers=(flushed, chained))
    assert sorted(calls) == sorted(variants.TORCH_RUNS * 2) and result["kernel"] == "lanes"
    lines = variants.torch_rows("3x16", result, 1.0)
    assert [line.split(" | ")[2] for line in lines] == ["current", "in_row"]
    assert all(line.count("|") == variants.HEADER.splitlines()[0].count("|") for line in lines)
    assert "| 2.00 | 1.000 | 2.000 |" in lines[1]


def test_a_jax_row_has_the_headers_cells():
    figures = {"unwindowed": {"kernel": [2.0, 2.0], "chain": [4.0, 4.0]},
               "zeros": {"kernel": [2.2, 2.2], "chain": [4.0, 4.4]}, "append": {"kernel": [2.0, 2.1], "chain": [4.0, 4.0]}}
    row = variants.jax_row("4096x512", "mosaic", "ordered_cond", figures, variants._times(), 12.0)
    assert row == "| 4096x512 | jax mosaic kernel us | ordered_cond | 2.00 | 2.20 | 1.100 | 1.050 | 2.05 | 1.025 | 1.000 | 12 |"
    assert row.count("|") == variants.HEADER.splitlines()[0].count("|")
