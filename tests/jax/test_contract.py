"""Every JAX implementation passes the shared contract (``tests/contract.py``), with JAX's defaults and with x64.

With x64 off (the default) index arrays are int32, and int64 host data is narrowed or refused (the cases'
``jax_x64_off`` expectations). The x64 classes make their runner and run every test inside ``jax.enable_x64(True)``:
int32 and int64 index arrays, and the same pool from either. The kernels run interpreted here, a sample of the
value cases each (``-m slow`` runs the rest).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, strategies as st

from kv_canary_jax.conformance import JaxRunner
from shared_spec import arg_specs
from tests.contract import Contract, assert_same_pool, examples
from tests.jax_support import scatter_fn


class JaxContract(Contract):
    implementation = "xla"
    dtypes = (np.int32,)
    few_shapes = True  # a compile per shape

    @classmethod
    def make_runner(cls):
        return JaxRunner(cls.implementation)

    def test_runner_mode(self, runner):
        assert runner.mode == ("jax" if np.int64 in self.dtypes else "jax_x64_off")


class InterpretedContract(JaxContract):
    case_every = 5
    examples = 4
    large_bs = 300


class X64Contract(JaxContract):
    dtypes = (np.int32, np.int64)

    @classmethod
    def make_runner(cls):
        with jax.enable_x64(True):
            return JaxRunner(cls.implementation)

    @pytest.fixture(autouse=True)
    def _x64(self):
        with jax.enable_x64(True):
            yield

    def test_int32_and_int64_inputs_give_the_same_pool(self, runner):
        f = scatter_fn(self.implementation, runner.interpret)

        @examples(self.examples)
        @given(seed=st.integers(0, 2**32 - 1), windowed=st.booleans(), widths=st.sampled_from(["64", "32", "mixed"]))
        def check(seed, windowed, widths):
            batch = arg_specs.hostile_batch(np.random.default_rng(seed), 4, 12, 5, 30, np.int32, windowed=windowed)
            flat_in, offsets, rows, pool, start_cols = batch
            wide = {"64": (1, 1, 1, 1), "32": (0, 0, 0, 0), "mixed": (1, 0, 1, 0)}[widths]
            args = [a if a is None or not w else a.astype(np.int64)
                    for a, w in zip((flat_in, offsets, rows, start_cols), wide)]
            narrow = f(flat_in, offsets, rows, pool, start_cols)
            assert_same_pool(np.asarray(f(args[0], args[1], args[2], pool, args[3])), np.asarray(narrow))

        check()


class TestXla(JaxContract):
    pass


class TestPallas(InterpretedContract):
    implementation = "pallas"


class TestMosaic(InterpretedContract):
    implementation = "mosaic"


class TestMosaicTpu(InterpretedContract):
    implementation = "mosaic_tpu"


class TestXlaX64(X64Contract):
    pass


class TestMosaicX64(X64Contract, InterpretedContract):
    implementation = "mosaic"
