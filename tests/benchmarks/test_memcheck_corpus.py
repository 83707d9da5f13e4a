"""benchmarks/memcheck_corpus.py: the corpus, its comparison, and a CPU smoke run of the script.

On the GPU machine the same script runs under compute-sanitizer (see its docstring).
"""

from __future__ import annotations

import importlib.util
import pathlib
import re

import numpy as np
import pytest

from tests.children import Child

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "memcheck_corpus.py"


def _module():
    spec = importlib.util.spec_from_file_location("memcheck_corpus", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mc = _module()


def test_the_corpus_is_deterministic_and_counts_its_cases():
    first, again = list(mc.corpus(100, 32, seed=3)), list(mc.corpus(100, 32, seed=3))
    assert [launch[2].shape[0] // 2 for launch in first] == [32, 32, 32, 4]
    for a, b in zip(first, again):
        for x, y in zip(a[:4], b[:4]):
            np.testing.assert_array_equal(x, y)
    offsets = np.concatenate([launch[1] for launch in first])
    rows = np.concatenate([launch[2] for launch in first])
    assert offsets.min() == mc.INT64_MIN and offsets.max() == mc.INT64_MAX
    assert rows.min() == mc.INT64_MIN and rows.max() == mc.INT64_MAX
    assert {launch[4] for launch in mc.corpus(20 * 8, 8, seed=0)} == set(mc.LAYOUTS)
    windowed = [launch for launch in mc.corpus(40 * 8, 8, seed=0) if launch[5] is not None]
    assert {(launch[3].shape, launch[4]) for launch in windowed} == {
        (launch[3].shape, launch[4]) for launch in mc.corpus(40 * 8, 8, seed=0)
    }  # every geometry and layout windowed too
    starts = np.concatenate([launch[5] for launch in windowed])
    assert starts.min() == mc.INT64_MIN and starts.max() == mc.INT64_MAX and (starts == 0).any()


def test_the_comparison_allows_any_writer_of_a_shared_cell_and_nothing_else():
    flat_in = np.array([10, 11, 20, 21], dtype=np.int64)
    offsets = np.array([0, 2, 4], dtype=np.int64)
    rows = np.array([1, 1], dtype=np.int64)  # both requests write row 1, columns 0 and 1
    pool = np.zeros((2, 3), dtype=np.int32)
    got = pool.copy()
    got[1, :2] = [10, 21]  # one cell from each writer: allowed
    assert mc.mismatches(flat_in, offsets, rows, pool, got) == 0
    got[1, 2] = 7  # a cell nobody writes
    got[0, 0] = 11  # a writer's value in the wrong row
    assert mc.mismatches(flat_in, offsets, rows, pool, got) == 2
    start_cols = np.array([0, 1], dtype=np.int64)  # windowed: the second request writes columns 1 and 2
    got = pool.copy()
    got[1, :3] = [10, 20, 21]
    assert mc.mismatches(flat_in, offsets, rows, pool, got, start_cols) == 0
    got[1, 1] = 11  # one of its writers' values: the first request's column 1
    assert mc.mismatches(flat_in, offsets, rows, pool, got, start_cols) == 0
    got[1, 2] = 11  # no writer of column 2 holds 11
    assert mc.mismatches(flat_in, offsets, rows, pool, got, start_cols) == 1


def script_run(kernels: tuple[str, ...]) -> Child:
    return Child([str(SCRIPT), "--cases", "8", "--per-launch", "2", "--kernels", *kernels],
                 set_env={"TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})


# By default a kernel of each framework; the slow set adds the assignment's, the torch backend's and interpreted Pallas.
ONE_A_FRAMEWORK = ("torch/triton", "jax/xla")
FIVE = ("torch/triton", "torch/assign", "torch/torch", "jax/xla", "jax/pallas")
SCRIPT_RUNS = {kernels: script_run(kernels) for kernels in (ONE_A_FRAMEWORK, FIVE)}


@pytest.mark.parametrize("kernels, storage_cases", [
    pytest.param(ONE_A_FRAMEWORK, 8, id="one-a-framework", marks=SCRIPT_RUNS[ONE_A_FRAMEWORK].ahead),
    pytest.param(FIVE, 16, id="five", marks=[pytest.mark.slow, SCRIPT_RUNS[FIVE].ahead]),
])
def test_the_script_runs_on_the_cpu(kernels, storage_cases):
    result = SCRIPT_RUNS[kernels].run()
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    summary = re.search(r"cases run: (\d+) .* storage cases: (\d+), mismatches: (\d+), kernels: (.*)", result.stdout)
    assert summary is not None, result.stdout
    assert summary.groups() == (str(8 * len(kernels)), str(storage_cases), "0", ", ".join(kernels))


def test_the_launches_as_assignments_hold_every_kind_of_malformed_value_and_read_their_slots():
    # assignment_of's claims: negative lengths (one followed by a request that reads), int64 extremes (ends that
    # wrap, so the int64 difference is not the length), rows outside the table, windows past the width; every
    # request of a window's length reads all its slots (the long ones come last); and assignment_scatter is the
    # scatter whose reference is the assignment's, which lets mismatches compare the assignment's table.
    from shared_spec import assignment

    seen = set()
    for launch in mc.corpus(64 * 8, 64, seed=1):
        rows, start, end, loc = mc.assignment_of(launch)
        pool, starts = launch[3], start.tolist()
        n_rows, width = pool.shape
        exact = [e - s for s, e in zip(starts, end.tolist())]
        with np.errstate(over="ignore"):
            wrapped = (end - start).tolist()
        inside = [0 <= int(r) < n_rows for r in rows]
        seen |= {"negative_then_read" for r in range(len(rows) - 1) if exact[r] < 0 and 0 < exact[r + 1] <= width + 4}
        seen |= {"wrapped_difference" for x, w in zip(exact, wrapped) if x != w}
        seen |= {"int64_extreme" for x in (*starts, *end.tolist()) if x in (mc.INT64_MIN, mc.INT64_MAX)}
        seen |= {"row_outside" for i in inside if not i}
        seen |= {"past_width" for s, x, i in zip(starts, exact, inside) if i and 0 <= s < width < s + x <= s + width + 4}
        flat_in, offsets, scatter_rows, start_cols = mc.assignment_scatter(launch)
        np.testing.assert_array_equal(
            assignment.assignment_reference(rows, pool, start, end, loc, rows.shape[0]),
            mc.scatter_reference(flat_in, offsets, scatter_rows, pool, start_cols))
        assert (np.diff(offsets) >= 0).all()
        bs = min(mc.ASSIGN_BATCHES["jax/assign-16"], rows.shape[0])  # jax/assign-16: the first requests
        batch_in, batch_offsets, batch_rows, batch_cols = mc.assignment_scatter(launch, bs)
        np.testing.assert_array_equal(assignment.assignment_reference(rows, pool, start, end, loc, bs),
                                      mc.scatter_reference(batch_in, batch_offsets, batch_rows, pool, batch_cols))
        short = [r for r, x in enumerate(exact) if x <= width + 4]
        assert short == list(range(len(short)))  # the long ones last
        assert offsets[len(short)] < loc.shape[0]  # every short one read all its slots, and some are left
    assert seen == {"negative_then_read", "wrapped_difference", "int64_extreme", "row_outside", "past_width"}


def test_a_default_run_launches_every_triton_kernel():
    # The memory checker is only as good as the kernels the corpus reaches: with the script's defaults (2560 cases,
    # 64 per launch) the wide geometry takes the tiled kernel on a contiguous pool and the lanes kernel's tile loop
    # on a transposed one, the other geometries the lanes kernel with ONE in both shapes; windowed and not.
    from kv_canary_torch.launch import plan as launch_plan

    reached = set()
    for flat_in, offsets, rows, pool, layout, start_cols in mc.corpus(mc.DEFAULT_CASES, 64, seed=0):
        n_rows, width = pool.shape
        strides = {"contiguous": (width, 1), "transposed": (1, n_rows)}.get(layout)
        if strides:
            slot = launch_plan.plan(rows.shape[0], flat_in.shape[0], n_rows, width, *strides, 1, 1, 1, None).slot
            reached.add((slot, start_cols is not None))
    for windowed in (False, True):
        slots = {slot for slot, w in reached if w == windowed}
        assert slots >= {0, 2, launch_plan.LOOP_SLOT, launch_plan.TILED_SLOT}, (windowed, slots)
