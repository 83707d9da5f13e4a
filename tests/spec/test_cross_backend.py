"""Cross-backend properties: every backend leaves the same pool, every frontend raises the same error.

The backends are whatever ``kv_canary.matrix.collect_runners`` finds here (on a
CPU machine: torch's Triton kernel in Triton's interpreter, vectorized torch,
the Pallas kernel through the torch frontend, and the JAX frontend's XLA,
Pallas, Mosaic GPU and Mosaic TPU paths, the kernels interpreted). Each of them has its
``tests.contract.ScatterContract`` class, which runs every conformance case
and random batches against the exact expected pool or message: runners that
all pass those agree with each other, so the full matrix is not run again here
(``kv-canary check``, in CI, runs it); the matrix's own bookkeeping is tested
on the two cheapest runners. Bad arguments go through both frontends with
native arrays and with the other framework's arrays (moved by
``kv_canary.bridge``): the class and the message must be identical, and the
pool untouched.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kv_canary.matrix import collect_runners, run_matrix
from shared_spec import scatter_reference
from shared_spec.arguments import ARGUMENTS, OUTPUT
from shared_spec.cases import ArrayData, PythonValue
from tests.profiles import property_settings

RUNNERS, SKIPPED = collect_runners()
BY_NAME = {runner.name: runner for runner in RUNNERS}


def test_every_frontend_and_the_four_backends_are_here():
    assert {"torch/triton", "torch/torch", "jax/xla", "jax/pallas", "jax/mosaic_tpu"} <= set(BY_NAME), SKIPPED


def test_the_matrix_of_both_frontends_agrees():
    """The matrix over one runner per frontend: every case passes and the two agree on every case they both run."""
    matrix = run_matrix([BY_NAME["torch/torch"], BY_NAME["jax/xla"]], skipped=SKIPPED)
    assert matrix.ok, matrix.to_json()
    assert matrix.errors_identical and matrix.results_identical


# -- bad arguments --------------------------------------------------------------

DTYPES = ["int64", "int32", "float32", "bool", "uint8", "bfloat16"]


@st.composite
def bad_arguments(draw):
    """Argument data with some ranks, dtypes, lengths or kinds wrong (sometimes none)."""
    bs = draw(st.integers(0, 4))
    lengths = {"flat_in": draw(st.integers(0, 9)), "offsets": bs + 1, "req_pool_indices": bs}
    args = {}
    for arg in ARGUMENTS:
        kind = draw(st.sampled_from(["good"] * 5 + ["rank", "dtype", "length", "python"]))
        if kind == "python":
            args[arg.name] = PythonValue(draw(st.sampled_from([None, 3, "x", [1, 2]])))
            continue
        rank = arg.rank if kind != "rank" else draw(st.sampled_from([r for r in (0, 1, 2, 3) if r != arg.rank]))
        dtype = arg.dtype if kind != "dtype" else draw(st.sampled_from([d for d in DTYPES if d != arg.dtype]))
        if arg.rank == 1 and rank == 1:
            shape = (lengths[arg.name] + (draw(st.integers(1, 2)) if kind == "length" else 0),)
        else:
            shape = tuple(draw(st.integers(1, 3)) for _ in range(rank))
        size = int(np.prod(shape, dtype=np.int64))
        data = tuple((i * 7) % 5 for i in range(size))  # fits every dtype drawn
        if dtype == "bool":
            data = tuple(bool(x) for x in data)
        args[arg.name] = ArrayData(dtype, shape, data)
    return args


def outcome(runner, args, builder):
    """(class, message) or ("returned", None), and whether pool_out kept its values."""
    native = {
        name: value.value if isinstance(value, PythonValue) else builder.array(value, builder.device)
        for name, value in args.items()
    }
    if isinstance(args[OUTPUT], ArrayData):  # the pool always in the runner's own framework
        native[OUTPUT] = runner.array(args[OUTPUT], runner.device)
    before = runner.numpy(native[OUTPUT]) if isinstance(args[OUTPUT], ArrayData) else None
    try:
        runner.call(native, False)
    except Exception as error:  # compared below, class and message
        after = runner.numpy(native[OUTPUT]) if before is not None else None
        untouched = before is None or np.array_equal(before, after)
        return (type(error).__name__, str(error)), untouched
    return ("returned", None), True


FRONTENDS = [name for name in ("torch/torch", "jax/xla") if name in BY_NAME]


@pytest.mark.skipif(len(FRONTENDS) < 2, reason="needs both frontends")
@property_settings(40)
@given(args=bad_arguments())
def test_bad_arguments_raise_identically_through_both_frontends(args):
    torch_runner, jax_runner = BY_NAME["torch/torch"], BY_NAME["jax/xla"]
    ways = {
        "torch": outcome(torch_runner, args, torch_runner),
        "torch with jax inputs": outcome(torch_runner, args, jax_runner),
        "jax": outcome(jax_runner, args, jax_runner),
        "jax with torch inputs": outcome(jax_runner, args, torch_runner),
    }
    results = {way: result for way, (result, _) in ways.items()}
    assert len(set(results.values())) == 1, results
    assert all(untouched for _, untouched in ways.values()), ways


@pytest.mark.skipif(len(FRONTENDS) < 2, reason="needs both frontends")
def test_a_jax_pool_is_refused_by_the_torch_launcher():
    torch_runner, jax_runner = BY_NAME["torch/torch"], BY_NAME["jax/xla"]
    args = {
        "flat_in": torch_runner.array(ArrayData("int64", (3,), (1, 2, 3)), torch_runner.device),
        "offsets": torch_runner.array(ArrayData("int64", (2,), (0, 3)), torch_runner.device),
        "req_pool_indices": torch_runner.array(ArrayData("int64", (1,), (0,)), torch_runner.device),
        "pool_out": jax_runner.array(ArrayData("int32", (1, 4), (-5, -6, -7, -8)), torch_runner.device),
    }
    with pytest.raises(ValueError) as info:
        torch_runner.call(args, False)
    assert str(info.value) == (
        "kv-canary: scatter_req_token_ids pool_out cannot be written in place: "
        "it is an immutable jax.Array; pass a writable tensor"
    )
    assert jax_runner.numpy(args["pool_out"]).tolist() == [[-5, -6, -7, -8]]


def test_the_torch_launcher_takes_numpy_arrays_and_writes_a_numpy_pool_in_place():
    from kv_canary_torch import launch_scatter_req_token_ids_kernel

    batch = [np.array([5, 6, 7], np.int64), np.array([0, 3], np.int64), np.array([1], np.int64)]
    pool = np.full((2, 4), -3, np.int32)
    expected = scatter_reference(*batch, pool)
    launch_scatter_req_token_ids_kernel(flat_in=batch[0], offsets=batch[1], req_pool_indices=batch[2], pool_out=pool, backend="torch")
    np.testing.assert_array_equal(pool, expected)
    frozen = np.full((2, 4), -3, np.int32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError) as info:
        launch_scatter_req_token_ids_kernel(flat_in=batch[0], offsets=batch[1], req_pool_indices=batch[2], pool_out=frozen)
    assert str(info.value) == (
        "kv-canary: scatter_req_token_ids pool_out cannot be written in place: "
        "it is an immutable read-only numpy.ndarray; pass a writable tensor"
    )
    assert (frozen == -3).all()
