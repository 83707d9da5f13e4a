"""The contract every backend passes: one test class, subclassed per backend with its runner.

A backend's test module defines ``class TestX(Contract)`` with ``make_runner()`` (a ``shared_spec.conformance.Runner``)
and the class attributes below. The conformance cases run on every backend (interpreted kernels take a sample by
default: every error case and every ``case_every``-th value case; ``-m slow`` the rest); hostile random batches
(``shared_spec.arg_specs.hostile_batch``, drawn by Hypothesis) are compared with the reference, windowed and not,
in the backend's index dtypes; and a large well-formed batch crosses the kernels' launch shapes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from shared_spec import arg_specs
from shared_spec.cases import ASSIGN, load_cases
from shared_spec.conformance import Runner, check_case
from shared_spec.reference import assign_reference, scatter_reference

CASES = load_cases()


def examples(n: int) -> settings:
    """``n`` examples in the default run, ten times that with ``KV_CANARY_THOROUGH=1``."""
    return settings(max_examples=n * (10 if settings.default.max_examples > 25 else 1))


def sampled(every: int) -> list:
    """The cases a default run takes: every error case and every ``every``-th value case; the rest marked slow."""
    out, k = [], 0
    for case in CASES:
        keep = case.expect.pool is None or k % every == 0
        k += case.expect.pool is not None
        out.append(case if keep else pytest.param(case, marks=pytest.mark.slow))
    return out


def assert_same_pool(got, expected) -> None:
    got = np.asarray(got)
    assert got.dtype == np.int32 and got.shape == expected.shape, (got.dtype, got.shape, expected.shape)
    wrong = np.argwhere(got != expected)
    assert len(wrong) == 0, f"{len(wrong)} cells differ, first at {wrong[0].tolist()}"


class Contract:
    examples = 20  # random batches a run (interpreted kernels lower it)
    case_every = 1  # the default run's share of the value cases
    dtypes = (np.int64,)  # the index dtypes the backend takes
    few_shapes = False  # draws shapes from arg_specs.PROPERTY_SHAPES (backends that compile per shape)
    large_bs = 3000  # requests of the large well-formed batch
    assigns = True  # runs assign_req_to_token_pool

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

    def test_conformance_case(self, runner, case):
        if case.op == ASSIGN and not self.assigns:
            pytest.skip("this backend does not run the assignment")
        result = check_case(runner, case)
        if result.status == "skip":
            pytest.skip(result.detail)
        assert result.status == "pass", result.detail

    @pytest.mark.parametrize("windowed", [False, True])
    def test_hostile_batches_match_the_reference(self, runner, windowed):
        @examples(self.examples)
        @given(seed=st.integers(0, 2**32 - 1), shape=st.integers(0, len(arg_specs.PROPERTY_SHAPES) - 1),
               sizes=st.tuples(st.integers(1, 8), st.integers(1, 24), st.integers(0, 8), st.integers(0, 64)),
               dtype=st.sampled_from(self.dtypes))
        def check(seed, shape, sizes, dtype):
            if self.few_shapes:
                sizes = arg_specs.property_shape(shape, (8, 24, 8, 64))
            batch = arg_specs.hostile_batch(np.random.default_rng(seed), *sizes, dtype=dtype, windowed=windowed)
            flat_in, offsets, rows, pool, start_cols = batch
            expected = scatter_reference(flat_in, offsets, rows, pool, start_cols)
            assert_same_pool(runner.call_numpy(flat_in, offsets, rows, pool, start_cols), expected)

        check()

    def test_assignment_matches_the_reference(self, runner):
        if not self.assigns:
            pytest.skip("this backend does not run the assignment")

        @examples(self.examples)
        @given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(self.dtypes), sglang_inputs=st.booleans())
        def check(seed, dtype, sglang_inputs):
            rng = np.random.default_rng(seed)
            bs, width = int(rng.integers(0, 6)), int(rng.integers(1, 12))
            if sglang_inputs:  # what sglang's callers pass: distinct rows, each request's new slots after its prefix
                start = rng.integers(0, width, size=bs)
                end = start + rng.integers(0, width - start + 1)
                rows = rng.permutation(bs + 1)[:bs]
                loc = rng.integers(0, 10_000, size=int((end - start).sum()))
            else:
                flat_in, offsets, rows, _, start = arg_specs.hostile_batch(rng, 4, width, bs, 12, dtype, windowed=True)
                end, loc = offsets[1:] + start - offsets[:-1], flat_in
            arrays = [np.asarray(a, dtype) for a in (rows, start, end, loc)]
            table = arg_specs.hostile_batch(rng, bs + 1, width, 0, 0)[3]
            expected = assign_reference(arrays[0], table, *arrays[1:], bs)
            assert_same_pool(runner.assign_numpy(arrays[0], table, *arrays[1:], bs), expected)

        check()

    def test_a_large_well_formed_batch(self, runner):
        flat_in, offsets, rows, pool = arg_specs.make_batch(f"{self.large_bs}x9r", seed=3, dtype=self.dtypes[0])
        assert_same_pool(runner.call_numpy(flat_in, offsets, rows, pool), scatter_reference(flat_in, offsets, rows, pool))

