"""``kv-canary bench`` measures JAX in a child process that never imports torch (``bench_jax.jax_in_own_process``, importable from ``kv_canary.bench``).

On a CPU the child times XLA alone (the Pallas kernels need a GPU), which is
enough to check the plumbing: the cases go in, every case's figures come back
under its own key, and torch stays out of the child.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("jax")

from kv_canary import bench  # noqa: E402
from tests.children import ROOT, Child  # noqa: E402

CASES = [(1, 128, False, False), (2, 64, True, True)]


def test_every_case_comes_back_with_its_jax_figures():
    rows = bench.jax_in_own_process(CASES)
    assert sorted(rows) == sorted(CASES)
    for measures in rows.values():
        assert measures["jax_xla_us"] > -1e3 and measures["jax_xla_wall_us"] > 0 and measures["jax_dispatch_floor_wall_us"] > 0


# The child as bench starts it, then a check that it left torch out.
JAX_CHILD = (
    "import runpy, sys\n"
    f"sys.argv = ['bench', {bench.JAX_CHILD!r}, {json.dumps([list(CASES[0])])!r}]\n"
    "runpy.run_module('kv_canary.bench_jax', run_name='__main__')\n"
    "assert 'torch' not in sys.modules, 'the JAX child imported torch'\n"
)
JAX_CHILD_RUN = Child(["-c", JAX_CHILD], set_env={"PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")},
                      timeout=600)


@JAX_CHILD_RUN.ahead
def test_the_child_never_imports_torch():
    done = JAX_CHILD_RUN.run()
    assert done.returncode == 0, done.stderr[-3000:]
    assert [tuple(case) for case, _ in json.loads(done.stdout)] == [CASES[0]]


def test_a_failing_child_raises():
    with pytest.raises(RuntimeError, match="JAX measurements failed"):
        bench.jax_in_own_process([("not a batch size", 128, False, False)])
