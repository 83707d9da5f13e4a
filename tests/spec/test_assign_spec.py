"""The assignment's spec (``shared_spec.assignment``): its reference, its windows, its cases and its checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from shared_spec import assignment, errors
from shared_spec.build_assign_cases import assign_oracle
from shared_spec.build_cases import loop_oracle
from shared_spec.cases import ASSIGN, SCATTER, load_cases
from shared_spec.checks import ArrayView, NotAnArray
from tests.assign_support import EXTREME_WINDOWS, anything, assignments, literal_assignment
from tests.profiles import property_settings

ASSIGN_CASES = load_cases(op=ASSIGN)


def case_arguments(case):
    values = {name: (arg.numpy() if hasattr(arg, "numpy") else arg.value) for name, arg in case.args.items()}
    return [values[name] for name in (*assignment.ARGUMENT_NAMES, assignment.BATCH_SIZE)]


def test_cases_are_in_the_shared_table_and_apart_from_the_scatters():
    every = load_cases(op=None)
    assert {c.name for c in ASSIGN_CASES} == {c.name for c in every if c.op == ASSIGN}
    assert all(c.op == SCATTER for c in load_cases())
    assert len(every) == len(load_cases()) + len(ASSIGN_CASES)
    rules = {c.rule for c in ASSIGN_CASES}
    assert {"assign", "array", "rank", "dtype", "order", "device", "writable"} <= rules


@pytest.mark.parametrize("case", [c for c in ASSIGN_CASES if c.expected_pool is not None], ids=lambda c: c.name)
def test_stored_tables_match_the_vectorized_reference(case):
    np.testing.assert_array_equal(assignment.assignment_reference(*case_arguments(case)), case.expected_pool.numpy())


@property_settings(200, health_checks=True)
@given(batch=assignments())
def test_reference_is_sglangs_loop_clipped(batch):
    np.testing.assert_array_equal(assignment.assignment_reference(*batch), literal_assignment(*batch))


@property_settings(100, health_checks=True)
@given(batch=anything())
def test_reference_is_the_oracle_of_the_cases(batch):
    np.testing.assert_array_equal(assignment.assignment_reference(*batch), assign_oracle(loop_oracle, *batch))


@pytest.mark.parametrize("start,end", EXTREME_WINDOWS)
def test_int64_extremes_match_the_oracle(start, end):
    from shared_spec.build_cases import sentinel_pool

    rows = np.arange(len(start))
    args = (rows, sentinel_pool(len(start), 5), np.asarray(start, np.int64), np.asarray(end, np.int64), np.arange(1, 8))
    np.testing.assert_array_equal(assignment.assignment_reference(*args), assign_oracle(loop_oracle, *args))


def test_negative_length_lowers_the_running_sum():
    offsets, start_cols = assignment.windows(np.array([0, 5, 1]), np.array([3, 2, 4]), 3)
    assert offsets.tolist() == [0, 3, 0, 3] and start_cols.tolist() == [0, 5, 1]


def test_windows_wrap_in_int64_and_widen_int32():
    offsets, _ = assignment.windows(np.array([-(2**63), 0], np.int64), np.array([2**63 - 1, 2], np.int64), 2)
    assert offsets.dtype == np.int64 and offsets.tolist() == [0, -1, 1]
    offsets, start_cols = assignment.windows(np.array([-(2**31)], np.int32), np.array([2**31 - 1], np.int32), 1)
    assert offsets.tolist() == [0, 2**32 - 1] and start_cols.dtype == np.int64


def test_windows_in_torch_and_jax_are_numpys():
    torch = pytest.importorskip("torch")
    start, end = np.array([0, 5, 1, 7], np.int32), np.array([3, 2, 4, 9], np.int64)
    expected = [x.tolist() for x in assignment.windows(start, end, 3)]
    got = assignment.windows(torch.from_numpy(start), torch.from_numpy(end), 3, torch)
    assert [x.tolist() for x in got] == expected and all(x.dtype == torch.int64 for x in got)
    jnp = pytest.importorskip("jax.numpy")
    import jax

    if jax.config.read("jax_enable_x64"):
        got = assignment.windows(jnp.asarray(start), jnp.asarray(end), 3, jnp)
        assert [np.asarray(x).tolist() for x in got] == expected


def views(**changes):
    base = {
        "req_pool_indices": ArrayView((2,), "int64", "cpu"),
        "req_to_token": ArrayView((4, 6), "int32", "cpu"),
        "start_offset": ArrayView((2,), "int32", "cpu"),
        "end_offset": ArrayView((2,), "int64", "cpu"),
        "out_cache_loc": ArrayView((5,), "int32", "cpu"),
    }
    return base | changes


@pytest.mark.parametrize("batch_size", [0, 1, 2, np.int64(2), np.int32(1), None])
def test_batch_sizes_within_the_lengths_pass(batch_size):
    assert assignment.first_failure(views(), batch_size) is None


@pytest.mark.parametrize(
    "batch_size,check,message",
    [
        (True, "batch_size", "batch_size must be an int, got bool"),
        (np.bool_(False), "batch_size", "batch_size must be an int, got bool"),
        (2.0, "batch_size", "batch_size must be an int, got float"),
        (np.array([2]), "batch_size", "batch_size must be an int, got ndarray"),
        ("2", "batch_size", "batch_size must be an int, got str"),
        (-1, "batch_size", "batch_size -1 is outside [0, 2]: len(req_pool_indices) is 2"),
        (3, "batch_size", "batch_size 3 is outside [0, 2]: len(req_pool_indices) is 2"),
    ],
)
def test_batch_size_errors(batch_size, check, message):
    name, error = assignment.first_failure(views(), batch_size)
    assert name == check and str(error) == f"{errors.ASSIGN_PREFIX} {message}"


def test_checks_run_in_order_with_the_scatters_templates_retitled():
    name, error = assignment.first_failure(views(out_cache_loc=NotAnArray("list"), req_to_token=ArrayView((4,), "int64")), 2)
    assert name == "array" and str(error) == f"{errors.ASSIGN_PREFIX} out_cache_loc must be an array, got list"
    name, error = assignment.first_failure(views(start_offset=ArrayView((2,), "int32", "meta")), 2)
    assert name == "storage" and str(error) == errors.NO_DATA.format(arg="start_offset").replace(errors.PREFIX, errors.ASSIGN_PREFIX)
    assert isinstance(error, errors.KvCanaryValueError) and error.template.startswith(errors.ASSIGN_PREFIX)
    name, _ = assignment.first_failure(views(end_offset=ArrayView((2,), "int64", "cuda:0")), 7)
    assert name == "batch_size"  # before the devices
    name, error = assignment.first_failure(views(req_to_token=ArrayView((4, 6), "int32", None), start_offset=ArrayView((2,), "int32", "cuda:0")), 2)
    assert name == "device" and "(req_to_token, host data, goes where they are)" in str(error)
    name, error = assignment.first_failure(views(req_to_token=ArrayView((4, 6), "int32", "cpu", write_problem="it is frozen")), 2)
    assert name == "writable" and str(error) == f"{errors.ASSIGN_PREFIX} req_to_token cannot be written in place: it is frozen"


def test_for_assignment_refuses_other_templates():
    with pytest.raises(ValueError):
        errors.for_assignment(errors.INCREMENTAL_TOO_MANY_TOKENS)
