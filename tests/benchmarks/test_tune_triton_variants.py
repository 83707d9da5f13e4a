"""The experimental kernels of benchmarks/tune_triton.py against the reference (interpreted on a CPU-only machine).

Each variant must write exactly the library kernel's cells (those of
``shared_spec.reference.scatter_reference``) on any input, hostile ones
included. Small BLOCKs make every kind of tile occur on small shapes: tiles
inside a window (the unmasked paths), tiles at its edges (masked), tiles past
it (nothing), and, with rows a multiple of BLOCK wide, windows that start on a
tile. The floor kernel writes a subset: column 0 of each request whose window
starts there. Only correctness is tested here, never timing.
"""

from __future__ import annotations

import functools
import importlib.util
import pathlib

import numpy as np
import pytest
import torch
from hypothesis import given

from shared_spec import scatter_reference
from shared_spec.reference import written_columns
from tests.contract import SEMANTIC_BATCHES, assert_same_pool
from tests.profiles import property_settings
from tests.strategies import large_batch, tile_batches
from tests.torch_support import device_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEVICE = device_for("triton")


def _load_tune():
    """benchmarks/tune_triton.py as a module (benchmarks/ is not a package); defining its kernels needs no GPU."""
    spec = importlib.util.spec_from_file_location("tune_triton", ROOT / "benchmarks" / "tune_triton.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tune = _load_tune()
BLOCK = 16
# Variant name -> launch(flat_in, offsets, rows, pool, block, warps). The switch
# goes to interior from two tiles' worth of columns, so that both of its sides run.
LAUNCHES = {
    "interior": tune.launch_interior,
    "tiled": tune.launch_tiled,
    "srcaligned": tune.launch_srcaligned,
    "switch": functools.partial(tune.launch_switch, columns=2 * BLOCK),
    "flat": tune.launch_flat,
}


def run(launch, batch, block=BLOCK) -> np.ndarray:
    """The pool ``launch`` leaves, on copies of ``batch`` (which stays as it was, for the reference)."""
    flat_in, offsets, rows, pool = (torch.tensor(x, device=DEVICE) for x in batch)
    launch(flat_in, offsets, rows, pool, block, 4)
    return pool.cpu().numpy()


@pytest.mark.parametrize("variant", LAUNCHES)
def test_variants_match_the_reference_on_random_batches(variant):
    # The benchmark's candidates, not the library's kernels (their own tests hold those to every input): fewer
    # examples than the library's kernels get, still enough that every kind of tile meets each variant.
    @property_settings(15)
    @given(batch=tile_batches(BLOCK))
    def check(batch):
        assert_same_pool(run(LAUNCHES[variant], batch), scatter_reference(*batch))

    check()


@pytest.mark.parametrize("variant", LAUNCHES)
def test_variants_match_the_reference_on_a_large_batch(variant):
    """Many well-formed requests: windows of most lengths up to the width, rows at every alignment to the tiles.

    (The row width, 5 more than a multiple of BLOCK, is coprime to it: rows
    start at every offset within a tile.)
    """
    batch = large_batch(bs=64, width=3 * BLOCK + 5, seed=1)
    assert_same_pool(run(LAUNCHES[variant], batch), scatter_reference(*batch))


@pytest.mark.parametrize("variant", LAUNCHES)
def test_variants_match_the_conformance_cases(variant):
    for batch in SEMANTIC_BATCHES:
        for block in (2, 4):  # tiles smaller than the cases' rows
            assert_same_pool(run(LAUNCHES[variant], batch, block), scatter_reference(*batch))


def floor_model(flat_in, offsets, rows, pool) -> np.ndarray:
    """What ``floor_kernel`` leaves: ``pool[row, 0] = int32(flat_in[base])`` for each request with ``lo == 0 < hi``."""
    out = pool.copy()
    with np.errstate(over="ignore"):
        base, lo, hi = written_columns(offsets[:-1], offsets[1:], pool.shape[1], flat_in.shape[0])
    row_ok = (rows >= 0) & (rows < pool.shape[0])
    for r in np.flatnonzero(row_ok & (lo == 0) & (hi > 0)):
        out[rows[r], 0] = flat_in[base[r]].astype(np.int32)
    return out


def check_floor(batch):
    got = run(lambda f, o, r, p, block, warps: tune.launch_floor(f, o, r, p), batch)
    assert_same_pool(got, floor_model(*batch))
    changed = got != batch[3]
    assert (got[changed] == scatter_reference(*batch)[changed]).all()  # a subset of the spec's writes


@property_settings(15)
@given(batch=tile_batches(BLOCK))
def test_the_floor_kernel_writes_column_zero_of_each_window_starting_there(batch):
    check_floor(batch)


def test_the_floor_kernel_on_the_conformance_cases():
    for batch in SEMANTIC_BATCHES:
        check_floor(batch)


def test_the_script_runs_its_checks_and_report():
    """``--check-only``: every config of the sweep (real BLOCKs, tiny cases) against the reference, and the report code."""
    assert tune.main(["--check-only"]) == 0


@pytest.mark.parametrize("dependent", [False, True])
@pytest.mark.parametrize("n_tokens", [1, 1023, 1024, 3000])
def test_the_copy_kernel_copies_the_tokens_into_the_first_cells(dependent, n_tokens):
    """``copy_kernel`` (the copy floor): ``pool.flat[i] = int32(flat_in[i])`` for ``i < N``, every other cell untouched."""
    rng = np.random.default_rng(n_tokens)
    flat_in = rng.integers(-(2**40), 2**40, n_tokens, dtype=np.int64)
    offsets = np.array([0, n_tokens // 2, n_tokens], dtype=np.int64)
    pool = np.full((3, 1100), -7, dtype=np.int32)
    got = torch.from_numpy(pool).to(DEVICE)
    tune.launch_copy(*(torch.from_numpy(x).to(DEVICE) for x in (flat_in, offsets)), got, dependent)
    expected = pool.copy().reshape(-1)
    expected[:n_tokens] = flat_in.astype(np.int32)
    assert_same_pool(got.cpu().numpy().reshape(-1), expected)


def test_the_copy_floor_runs_its_checks_and_report():
    """``--copy-floor``: the copies, the library launcher and the baseline on the tiny cases, checked, and the report."""
    assert tune.main(["--check-only", "--copy-floor"]) == 0
