"""The contract every backend passes: one test class, subclassed per backend.

A backend's test file defines a subclass with ``make_runner()`` returning its
``shared_spec.conformance.Runner`` and ``examples``, the random-batch
property's example count in the default Hypothesis profile (``tests.profiles``
scales it: sized to what one example costs on that backend). The runner is
made once per class. Nothing here knows a framework.

The conformance cases are a sweep: a class whose kernel runs interpreted (a compile per case) sets ``case_every``,
and the default run then takes ``sampled_cases``: every error case (refused before any kernel runs) and every
``case_every``-th value case, the others marked ``slow`` (``mark_unsampled_cases_slow``, called by tests/conftest.py
before ``-m`` deselects). ``-m slow`` runs the rest; ``kv-canary check`` (CI) runs every case on every backend.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from shared_spec import scatter_reference
from shared_spec.cases import load_cases
from shared_spec.conformance import Runner, check_case
from tests.profiles import property_settings
from tests.strategies import batches, large_batch, windowed_batches

CASES = load_cases()
CASE_NAMES = [c.name for c in CASES]
# The conformance cases of an interpreted kernel's default run: every INTERPRETED_CASE_EVERY-th value case.
INTERPRETED_CASE_EVERY = 3
# The conformance cases that are plain calls (no error, the pool as given), as numpy
# (flat_in, offsets, req_pool_indices, pool_out): int64 extremes of rows and offsets,
# overflowing differences, wrapping values.
SEMANTIC_BATCHES = [
    [c.args[name].numpy() for name in ("flat_in", "offsets", "req_pool_indices", "pool_out")]
    for c in CASES if c.error_class is None and c.layout is None and "start_cols" not in c.args
]


def assert_same_pool(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == np.int32 and got.shape == expected.shape, (got.dtype, got.shape, expected.shape)
    wrong = np.argwhere(got != expected)
    assert len(wrong) == 0, f"{len(wrong)} cells differ, first at {wrong[0].tolist()}"


def assert_written_by_its_requests(flat_in, offsets, rows, pool, got: np.ndarray) -> None:
    """For batches that repeat rows (well-formed segments): each cell holds a value one of its row's requests writes there, or its old value if none does."""
    for row in range(pool.shape[0]):
        writers = [r for r in range(len(rows)) if rows[r] == row]
        for j in range(pool.shape[1]):
            values = {int(flat_in[offsets[r] + j].astype(np.int32)) for r in writers if j < offsets[r + 1] - offsets[r]}
            if values:
                assert int(got[row, j]) in values, (row, j)
            else:
                assert got[row, j] == pool[row, j], (row, j)


def sampled_cases(cases, every: int) -> list:
    """The cases a default run takes from ``cases`` (module docstring): the error cases, every ``every``-th other."""
    value_index = {c.name: i for i, c in enumerate(c for c in cases if c.error_class is None)}
    return [c for c in cases if value_index.get(c.name, 0) % every == 0]


def mark_unsampled_cases_slow(items) -> None:
    """Mark ``slow`` the conformance cases a contract class's ``case_every`` leaves out of the default run."""
    taken: dict[int, set] = {}  # case_every -> the names of the cases sampled_cases takes
    for item in items:
        cls = getattr(item, "cls", None)
        if cls is None or not issubclass(cls, ScatterContract) or getattr(item, "originalname", "") != "test_conformance_case":
            continue
        if cls.case_every not in taken:
            taken[cls.case_every] = {c.name for c in sampled_cases(CASES, cls.case_every)}
        if item.callspec.params["case"].name not in taken[cls.case_every]:
            item.add_marker(pytest.mark.slow)


class ScatterContract:
    # Random batches per run in the default profile; interpreted kernels lower it.
    examples: int = 20
    # The backend compiles a program per shape (JAX's): its random batches take tests.strategies.FEW_SHAPES.
    few_shapes: bool = False
    # The default run's share of the conformance cases: every case_every-th (module docstring).
    case_every: int = 1
    # Requests in the large well-formed batch; kernels whose interpreter pays a
    # host callback per request lower it (to a size still past one launch's block).
    large_bs: int = 3000

    @classmethod
    def make_runner(cls) -> Runner:
        raise NotImplementedError

    @pytest.fixture(scope="class")
    @classmethod
    def runner(cls) -> Runner:
        runner = cls.make_runner()
        if runner.unavailable:
            pytest.skip(runner.unavailable)
        return runner

    @pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
    def test_conformance_case(self, runner, case):
        result = check_case(runner, case)
        if result.status == "skip":
            pytest.skip(result.detail)
        assert result.status == "pass", result.detail

    def test_random_batches_match_reference(self, runner):
        @property_settings(self.examples)
        @given(batch=batches(few_shapes=self.few_shapes))
        def check(batch):
            assert_same_pool(runner.scatter(*batch), scatter_reference(*batch))

        check()

    def test_random_windowed_batches_match_reference(self, runner):
        """start_cols: each request from its own first column (appends, windows past either edge, any int64)."""

        @property_settings(self.examples)
        @given(batch=windowed_batches(few_shapes=self.few_shapes))
        def check(batch):
            *arrays, start_cols = batch
            assert_same_pool(runner.scatter(*arrays, start_cols=start_cols), scatter_reference(*batch))

        check()

    def test_thousands_of_requests(self, runner):
        batch = large_batch(bs=self.large_bs, width=9, seed=3)
        assert_same_pool(runner.scatter(*batch), scatter_reference(*batch))

    def test_checked_mode_accepts_a_valid_batch(self, runner):
        batch = large_batch(bs=40, width=7, seed=5)
        assert_same_pool(runner.scatter(*batch, check_values=True), scatter_reference(*batch))
