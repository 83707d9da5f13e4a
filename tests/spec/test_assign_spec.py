"""The assignment's spec (``shared_spec.assignment``): its reference, its windows, its cases and its checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from shared_spec import assignment, errors
from shared_spec.build_assign_cases import assign_oracle
from shared_spec.build_cases import loop_oracle
from shared_spec.cases import ASSIGN, SCATTER, load_cases
from shared_spec.checks import ArrayView, Dialect, NotAnArray
from tests.assign_support import EXTREME_WINDOWS, INT64_MAX, INT64_MIN, anything, assignments, literal_assignment
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


def test_a_negative_length_leaves_the_running_sum():
    offsets, start_cols = assignment.windows(np.array([0, 5, 1]), np.array([3, 2, 4]), 3, 7)
    assert offsets.tolist() == [0, 3, 3, 6] and start_cols.tolist() == [0, 5, 1]


def test_lengths_are_clipped_to_the_tokens():
    offsets, _ = assignment.windows(np.array([0, 2, 0]), np.array([9, 4, 1]), 3, 5)
    assert offsets.tolist() == [0, 5, 7, 8]


def test_windows_are_exact_at_int64_extremes_and_widen_int32():
    offsets, _ = assignment.windows(np.array([INT64_MIN, 0], np.int64), np.array([INT64_MAX, 2], np.int64), 2, 7)
    assert offsets.dtype == np.int64 and offsets.tolist() == [0, 7, 9]  # 2**64 - 1 slots, clipped to 7
    offsets, _ = assignment.windows(np.array([INT64_MAX, 0], np.int64), np.array([INT64_MIN, 2], np.int64), 2, 7)
    assert offsets.tolist() == [0, 0, 2]  # end - start wraps to 1, but end < start: no slot
    offsets, _ = assignment.windows(np.array([0, 0], np.int64), np.array([-1, INT64_MIN], np.int64), 2, 7)
    assert offsets.tolist() == [0, 0, 0]  # -1, then -2**63: no slot either, and the sum never wraps
    n = 2**62 - 1  # the largest len(out_cache_loc) the "slots" check lets 2 requests have: their sum 2**63 - 2
    offsets, _ = assignment.windows(np.array([0, INT64_MIN], np.int64), np.array([INT64_MAX, INT64_MAX], np.int64), 2, n)
    assert offsets.tolist() == [0, n, 2 * n]
    offsets, start_cols = assignment.windows(np.array([-(2**31)], np.int32), np.array([2**31 - 1], np.int32), 1, 2**40)
    assert offsets.tolist() == [0, 2**32 - 1] and start_cols.dtype == np.int64
    offsets, _ = assignment.windows(np.array([-(2**31)], np.int32), np.array([2**31 - 1], np.int32), 1, 5)
    assert offsets.tolist() == [0, 5]


int64s = st.integers(INT64_MIN, INT64_MAX)


@property_settings(200, health_checks=True)
@given(pairs=st.lists(st.tuples(int64s, int64s), max_size=8), n_tokens=st.integers(0, 2**40))
def test_offsets_are_the_exact_clipped_sums_and_never_decrease(pairs, n_tokens):
    """Any int64 windows: ``offsets`` are the running sums of ``min(max(end - start, 0), N)`` in Python integers, in
    numpy and in torch; so they never decrease and stay within ``[0, bs * N]``."""
    torch = pytest.importorskip("torch")
    start, end = (np.array([p[i] for p in pairs], np.int64) for i in (0, 1))
    expected = [0]
    for s, e in pairs:
        expected.append(expected[-1] + min(max(e - s, 0), n_tokens))
    with np.errstate(over="ignore"):
        offsets, _ = assignment.windows(start, end, len(pairs), n_tokens)
    assert offsets.tolist() == expected
    offsets_torch, _ = assignment.windows(torch.from_numpy(start), torch.from_numpy(end), len(pairs), n_tokens, torch)
    assert offsets_torch.tolist() == expected
    assert all(a <= b for a, b in zip(expected, expected[1:])) and expected[-1] <= len(pairs) * n_tokens


def test_windows_in_torch_and_jax_are_numpys():
    torch = pytest.importorskip("torch")
    cases = [  # (start, end, batch_size): int32 with int64, the entry past batch_size unread; int64 extremes
        (np.array([0, 5, 1, 7], np.int32), np.array([3, 2, 4, 9], np.int64), 3),
        (np.array([INT64_MIN, INT64_MAX, 0, 1]), np.array([INT64_MAX, INT64_MIN, INT64_MIN, 4]), 4),
    ]
    jnp = pytest.importorskip("jax.numpy")
    import jax

    for start, end, bs in cases:
        with np.errstate(over="ignore"):
            expected = [x.tolist() for x in assignment.windows(start, end, bs, 6)]
        got = assignment.windows(torch.from_numpy(start), torch.from_numpy(end), bs, 6, torch)
        assert [x.tolist() for x in got] == expected and all(x.dtype == torch.int64 for x in got)
        if jax.config.read("jax_enable_x64"):
            got = jax.jit(lambda a, b: assignment.windows(a, b, bs, 6, jnp))(jnp.asarray(start), jnp.asarray(end))
            assert [np.asarray(x).tolist() for x in got] == expected
    assert expected[0] == [0, 6, 6, 6, 9]  # 2**64 - 1 slots clipped to 6; two negative lengths; 3 past the tokens


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


def test_the_slots_check_holds_batch_size_times_the_tokens_below_2_to_the_63():
    many = ArrayView((2**62,), "int64", "cpu")  # 2 requests of 2**62 slots: a running sum of 2**63
    name, error = assignment.first_failure(views(out_cache_loc=many), 2)
    assert name == "slots" and isinstance(error, errors.KvCanaryValueError)
    assert str(error) == (f"{errors.ASSIGN_PREFIX} batch_size 2 times len(out_cache_loc) {2**62} is 2**63 or more: "
                          "the running sum of the lengths must fit int64")
    assert assignment.first_failure(views(out_cache_loc=ArrayView((2**62 - 1,), "int64", "cpu")), 2) is None
    assert assignment.first_failure(views(out_cache_loc=many), 1) is None
    assert assignment.first_failure(views(out_cache_loc=ArrayView((2**63 - 1,), "int64", "cpu")), 0) is None
    assert assignment.first_failure(views(out_cache_loc=many), None)[0] == "slots"  # None: len(req_pool_indices)


def test_the_slots_check_comes_after_the_request_limit_and_before_the_devices():
    assert assignment.CHECK_ORDER.index("slots") == assignment.CHECK_ORDER.index("requests") + 1
    many = ArrayView((2**62,), "int64", "cpu")
    name, _ = assignment.first_failure(views(out_cache_loc=many), 3)
    assert name == "batch_size"
    huge = {name: ArrayView((2**31,), "int64", "cpu") for name in assignment.PER_REQUEST}
    name, _ = assignment.first_failure(views(**huge, out_cache_loc=ArrayView((2**32,), "int64", "cpu")), 2**31)
    assert name == "requests"
    name, _ = assignment.first_failure(views(out_cache_loc=ArrayView((2**62,), "int64", "cuda:0")), 2)
    assert name == "slots"


def numpy_view(x):
    return ArrayView(tuple(x.shape), x.dtype.name, "cpu") if isinstance(x, np.ndarray) else NotAnArray(type(x).__name__)


NUMPY_DIALECT = Dialect(
    is_array="isinstance({x}, np.ndarray)", storage="True", has_data=None, rank="{x}.ndim",
    dtype_is="{x}.dtype == {dtype}", length="{x}.shape[0]", same_device="True", writable=None,
    dtype_object=np.dtype, namespace={"np": np},
)


@pytest.mark.parametrize("n_tokens,batch_size", [(2**60, 8), (2**60 - 1, 8), (2**60, 7), (2**60, 0), (2**60, None), (5, 8)])
def test_the_generated_predicate_has_the_slots_term(n_tokens, batch_size):
    """numpy arrays (an int32 out_cache_loc of 2**60 entries, one in memory): the predicate is the checks."""
    fast_check = assignment.compile_fast_check(NUMPY_DIALECT)
    index = np.zeros(8, np.int64)
    values = (index, np.zeros((4, 6), np.int32), index, index, np.broadcast_to(np.int32(0), (n_tokens,)))
    views_of = {name: numpy_view(value) for name, value in zip(assignment.ARGUMENT_NAMES, values)}
    passes = assignment.first_error(views_of, batch_size) is None
    assert fast_check(*values, batch_size) == passes
    assert passes == ((8 if batch_size is None else batch_size) * n_tokens < 2**63)
