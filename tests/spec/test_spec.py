"""The spec itself: the reference against the literal pseudo-code, the check order,
the checked mode's rules, the fast predicate, and the data file being current."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared_spec import build_cases, errors
from shared_spec.arguments import ARGUMENTS, ARGUMENT_NAMES, START_COLS
from shared_spec.cases import CASES_FILE, ArrayData, load_cases
from shared_spec.checks import CHECK_ORDER, MASKED, ArrayView, Dialect, NotAnArray, cells_overlap, compile_fast_check, first_error, first_failure
from shared_spec.reference import longest_window, scatter_reference, windowed_columns, written_columns
from shared_spec.values import raise_first_value_error
from tests.profiles import property_settings
from tests.strategies import INT64_MAX, INT64_MIN, batches, extreme_windowed_batches, start_col_values, windowed_batches


def test_conformance_file_is_current():
    assert CASES_FILE.read_text() == build_cases.render(), "run: python -m shared_spec.build_cases"


def test_stored_pools_match_the_vectorized_reference():
    for case in load_cases():
        if case.expected_pool is None:
            continue
        args = [case.args[name].numpy() for name in ARGUMENT_NAMES]
        window = case.args.get(START_COLS.name)
        start_cols = window.numpy() if isinstance(window, ArrayData) else None
        np.testing.assert_array_equal(scatter_reference(*args, start_cols), case.expected_pool.numpy(), err_msg=case.name)


def test_windowed_cases_pass_start_cols_and_the_others_do_not():
    cases = load_cases()
    windowed = {case.name for case in cases if START_COLS.name in case.args}
    assert {case.name for case in cases if case.rule == "windowed"} <= windowed
    assert all(case.name.startswith(("windowed_", "start_cols_", "checked_", "offsets_length_before")) for case in cases if case.name in windowed)
    # Every case that existed before start_cols calls with the four arguments.
    assert {"mixed_batch", "truncate_at_width", "flat_in_on_host", "checked_rows_repeat"}.isdisjoint(windowed)


def test_every_rule_has_cases():
    rules = {case.rule for case in load_cases()}
    assert {"semantics", "truncation", "rows", "offsets", "values", "layout", "check_values", "windowed"} <= rules
    assert {"array", "rank", "dtype", "length", "order", "device", "writable"} <= rules


@property_settings(100, health_checks=True)
@given(batch=batches(max_rows=6, max_width=12, max_bs=10, max_tokens=40))
def test_reference_is_the_literal_pseudo_code(batch):
    np.testing.assert_array_equal(scatter_reference(*batch), build_cases.loop_oracle(*batch))


@property_settings(100, health_checks=True)
@given(
    starts=st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=1, max_size=4),
    ends=st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=4, max_size=4),
)
def test_reference_is_exact_at_int64_extremes(starts, ends):
    offsets = np.asarray(starts[:1] + ends[: len(starts)], dtype=np.int64)
    rows = np.arange(len(starts), dtype=np.int64)
    flat_in = np.arange(1, 9, dtype=np.int64)
    pool = np.full((len(starts), 5), -9, dtype=np.int32)
    np.testing.assert_array_equal(
        scatter_reference(flat_in, offsets, rows, pool), build_cases.loop_oracle(flat_in, offsets, rows, pool)
    )


@property_settings(100, health_checks=True)
@given(batch=windowed_batches(max_rows=6, max_width=12, max_bs=10, max_tokens=40))
def test_windowed_reference_is_the_literal_pseudo_code(batch):
    np.testing.assert_array_equal(scatter_reference(*batch), build_cases.loop_oracle(*batch))


@property_settings(200, health_checks=True)
@given(batch=extreme_windowed_batches())
def test_windowed_reference_is_exact_at_int64_extremes(batch):
    np.testing.assert_array_equal(scatter_reference(*batch), build_cases.loop_oracle(*batch))


@property_settings(500, health_checks=True)
@given(
    start=st.one_of(st.integers(-30, 30), st.integers(INT64_MIN, INT64_MAX)),
    end=st.one_of(st.integers(-30, 30), st.integers(INT64_MIN, INT64_MAX)),
    start_col=st.one_of(st.integers(-30, 30), start_col_values),
    width=st.integers(0, 12),
    n_tokens=st.integers(0, 20),
)
def test_windowed_columns_are_exactly_the_spec_cells(start, end, start_col, width, n_tokens):
    with np.errstate(over="ignore"):
        base, lo, hi, shift = windowed_columns(np.int64(start), np.int64(end), np.int64(start_col), width, n_tokens)
    lo_j, hi_j = max(0, -start_col, -start), min(end - start, width - start_col, n_tokens - start)
    cells = [(start_col + j, start + j) for j in range(lo_j, max(lo_j, hi_j))]  # (column, token), the spec's j loop
    assert [(int(shift) + j, int(base) + j) for j in range(int(lo), int(hi))] == cells
    assert 0 <= int(shift) <= width and int(shift) + max(int(hi), 0) <= width
    assert len(cells) <= longest_window(width, n_tokens)


def naive_first_value_error(offsets, rows, n_tokens, n_rows, start_cols=None):
    """The checked-mode rules as plain loops, to hold the vectorized ones to."""
    offsets, rows = [int(x) for x in offsets], [int(x) for x in rows]
    if offsets[0] < 0:
        return errors.OFFSETS_START.format(value=offsets[0])
    for i in range(len(rows)):
        if offsets[i] > offsets[i + 1]:
            return errors.OFFSETS_DECREASING.format(i=i, a=offsets[i], j=i + 1, b=offsets[i + 1])
    if offsets[-1] > n_tokens:
        return errors.OFFSETS_END.format(n=n_tokens, value=offsets[-1])
    for i, row in enumerate(rows):
        if not 0 <= row < n_rows:
            return errors.ROW_OUT_OF_RANGE.format(i=i, row=row, rows=n_rows)
    for j, row in enumerate(rows):
        if row in rows[:j]:
            return errors.ROW_REPEATED.format(j=j, row=row, i=rows.index(row))
    for i, col in enumerate([] if start_cols is None else [int(x) for x in start_cols]):
        if col < 0:
            return errors.START_COLS_NEGATIVE.format(i=i, value=col)
    return None


@property_settings(200, health_checks=True)
@given(
    offsets=st.lists(st.integers(-3, 12), min_size=1, max_size=8),
    rows=st.lists(st.integers(-2, 6), max_size=7),
    n_tokens=st.integers(0, 12),
)
def test_checked_mode_reports_the_first_violation(offsets, rows, n_tokens):
    rows = rows[: len(offsets) - 1]
    offsets = offsets[: len(rows) + 1]
    expected = naive_first_value_error(offsets, rows, n_tokens, n_rows=5)
    try:
        raise_first_value_error(np.asarray(offsets, np.int64), np.asarray(rows, np.int64), n_tokens, 5)
    except errors.KvCanaryValueError as error:
        assert str(error) == expected
    else:
        assert expected is None


@property_settings(200, health_checks=True)
@given(
    offsets=st.lists(st.integers(-3, 12), min_size=1, max_size=8),
    rows=st.lists(st.integers(-2, 6), max_size=7),
    cols=st.lists(st.one_of(st.integers(-3, 8), start_col_values), min_size=7, max_size=7),
    n_tokens=st.integers(0, 12),
)
def test_checked_mode_reports_the_first_violation_with_start_cols(offsets, rows, cols, n_tokens):
    rows = rows[: len(offsets) - 1]
    offsets = offsets[: len(rows) + 1]
    cols = np.asarray(cols[: len(rows)], np.int64)
    expected = naive_first_value_error(offsets, rows, n_tokens, 5, cols)
    try:
        raise_first_value_error(np.asarray(offsets, np.int64), np.asarray(rows, np.int64), n_tokens, 5, cols)
    except errors.KvCanaryValueError as error:
        assert str(error) == expected
    else:
        assert expected is None


def test_cells_overlap_matches_brute_force():
    for n_rows in range(0, 4):
        for width in range(0, 4):
            for s0 in range(0, 7):
                for s1 in range(0, 7):
                    cells = [r * s0 + c * s1 for r in range(n_rows) for c in range(width)]
                    assert cells_overlap((n_rows, width), (s0, s1)) == (len(set(cells)) != len(cells)), (
                        n_rows, width, s0, s1,
                    )


# A dialect over numpy arrays, to test the generated predicate against first_error.
NUMPY_DIALECT = Dialect(
    is_array="isinstance({x}, np.ndarray)",
    storage="True",
    has_data=None,
    rank="{x}.ndim",
    dtype_is="{x}.dtype == {dtype}",
    length="{x}.shape[0]",
    same_device="True",
    writable="not cells_overlap({x}.shape, tuple(s // {x}.itemsize for s in {x}.strides))",
    dtype_object=np.dtype,
    namespace={"np": np, "cells_overlap": cells_overlap},
)


def numpy_view(x):
    if not isinstance(x, np.ndarray):
        return NotAnArray(type(x).__name__)
    problem = None
    if x.ndim == 2 and cells_overlap(x.shape, tuple(s // x.itemsize for s in x.strides)):
        problem = errors.WRITE_OVERLAP.format(strides=tuple(s // x.itemsize for s in x.strides))
    return ArrayView(tuple(x.shape), x.dtype.name, "cpu", problem)


@st.composite
def argument_sets(draw, windowed=False):
    """The four arguments, some malformed; with ``windowed``, a ``start_cols`` too (well-formed or not)."""
    args = {}
    for arg in ARGUMENTS:
        kind = draw(st.sampled_from(["good"] * 6 + ["rank", "dtype", "list", "none"]))
        rank = arg.rank if kind != "rank" else draw(st.integers(0, 3).filter(lambda r, a=arg: r != a.rank))
        dtype = arg.dtype if kind != "dtype" else draw(st.sampled_from(["int32", "int64", "float32", "bool", "uint8"]))
        shape = tuple(draw(st.integers(0, 4)) for _ in range(rank))
        args[arg.name] = {"list": [1, 2], "none": None}.get(kind, np.zeros(shape, dtype=dtype) + 3)
    pool = args["pool_out"]
    if draw(st.booleans()) and isinstance(pool, np.ndarray) and pool.ndim == 2 and pool.shape[0] > 0:
        args["pool_out"] = np.broadcast_to(pool[:1], (max(pool.shape[0], 2), pool.shape[1]))
    if windowed:
        kind = draw(st.sampled_from(["good"] * 4 + ["length", "rank", "dtype", "list"]))
        rows = args["req_pool_indices"]
        bs = rows.shape[0] if isinstance(rows, np.ndarray) and rows.ndim == 1 else draw(st.integers(0, 4))
        if kind == "good":
            args["start_cols"] = np.zeros(bs, dtype=np.int64)
        elif kind == "length":
            args["start_cols"] = np.zeros(draw(st.integers(0, 5).filter(lambda n: n != bs)), dtype=np.int64)
        elif kind == "rank":
            args["start_cols"] = np.zeros((bs,) * draw(st.sampled_from([0, 2])), dtype=np.int64)
        elif kind == "dtype":
            args["start_cols"] = np.zeros(bs, dtype=draw(st.sampled_from(["int32", "float32", "bool", "uint8"])))
        else:
            args["start_cols"] = [0] * bs
    return args


FAST_NUMPY_CHECK = compile_fast_check(NUMPY_DIALECT)


@property_settings(200, health_checks=True)
@given(args=argument_sets())
def test_fast_predicate_agrees_with_the_ordered_checks(args):
    error = first_error({name: numpy_view(value) for name, value in args.items()})
    assert FAST_NUMPY_CHECK(**args) == (error is None), (error, FAST_NUMPY_CHECK.source)


@property_settings(200, health_checks=True)
@given(args=argument_sets())
def test_the_first_failure_names_its_check_and_raises_the_first_error(args):
    views = {name: numpy_view(value) for name, value in args.items()}
    failure, error = first_failure(views), first_error(views)
    if failure is None:
        assert error is None
    else:
        check, raised = failure
        assert check in CHECK_ORDER and type(raised) is type(error) and str(raised) == str(error)


@property_settings(200, health_checks=True)
@given(args=argument_sets(windowed=True))
def test_fast_predicate_agrees_with_the_ordered_checks_with_start_cols(args):
    error = first_error({name: numpy_view(value) for name, value in args.items()})
    assert FAST_NUMPY_CHECK(**args) == (error is None), (error, FAST_NUMPY_CHECK.source)


def naive_first_error(args) -> str | None:
    """The check order for numpy arguments, restated as loops: each check over the four, then start_cols."""
    names = [arg.name for arg in ARGUMENTS] + ([START_COLS.name] if START_COLS.name in args else [])
    table = {arg.name: arg for arg in (*ARGUMENTS, START_COLS)}
    for name in names:
        if not isinstance(args[name], np.ndarray):
            return errors.NOT_AN_ARRAY.format(arg=name, type_name=type(args[name]).__name__)
    for name in names:
        if args[name].ndim != table[name].rank:
            return errors.WRONG_RANK.format(arg=name, rank=table[name].rank, shape=tuple(args[name].shape))
    for name in names:
        if args[name].dtype.name != table[name].dtype:
            return errors.WRONG_DTYPE.format(arg=name, dtype=table[name].dtype, got=args[name].dtype.name)
    bs = len(args["req_pool_indices"])
    if len(args["offsets"]) != bs + 1:
        return errors.OFFSETS_LENGTH.format(length=len(args["offsets"]), expected=bs + 1)
    if START_COLS.name in args and len(args[START_COLS.name]) != bs:
        return errors.START_COLS_LENGTH.format(length=len(args[START_COLS.name]), bs=bs)
    pool = args["pool_out"]
    strides = tuple(x // pool.itemsize for x in pool.strides)
    if cells_overlap(pool.shape, strides):
        return errors.NOT_WRITABLE.format(reason=errors.WRITE_OVERLAP.format(strides=strides))
    return None


@property_settings(200, health_checks=True)
@given(args=argument_sets(windowed=True))
def test_the_first_failure_with_start_cols_walks_it_after_the_four(args):
    error = first_error({name: numpy_view(value) for name, value in args.items()})
    assert (None if error is None else str(error)) == naive_first_error(args)


def test_a_type_error_of_the_storage_check_is_not_named_a_dtype_one():
    # What the JAX frontend's x64 note hangs on: masked arrays and wrong dtypes both raise TypeError.
    views = {arg.name: ArrayView((1,) * arg.rank, arg.dtype) for arg in ARGUMENTS}
    views["offsets"] = ArrayView((2,), "int64")
    masked = dict(views, flat_in=ArrayView((1,), "int32", storage_problem=MASKED))
    wrong_dtype = dict(views, flat_in=ArrayView((1,), "int32"))
    assert first_failure(views) is None
    assert [first_failure(v)[0] for v in (masked, wrong_dtype)] == ["storage", "dtype"]
    assert all(isinstance(first_failure(v)[1], errors.KvCanaryTypeError) for v in (masked, wrong_dtype))


def test_fast_predicate_source_follows_the_argument_table():
    source = FAST_NUMPY_CHECK.source
    assert source.index("flat_in.ndim == 1") < source.index("pool_out.ndim == 2") < source.index("flat_in.dtype")
    assert "offsets.shape[0] == req_pool_indices.shape[0] + 1" in source


def test_spec_imports_no_framework():
    code = (
        "import sys, shared_spec, shared_spec.cases, shared_spec.conformance, shared_spec.build_cases;"
        "bad = [m for m in ('torch', 'jax', 'triton') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("shape, text", [((2, 3), "(2, 3)"), ((5,), "(5,)"), ((), "()")])
def test_shapes_are_written_as_python_tuples(shape, text):
    error = first_error(
        {
            "flat_in": ArrayView(shape, "int64"),
            "offsets": ArrayView((1,), "int64"),
            "req_pool_indices": ArrayView((0,), "int64"),
            "pool_out": ArrayView((1, 1), "int32"),
        }
    )
    if len(shape) == 1:
        assert error is None
    else:
        assert str(error) == f"kv-canary: scatter_req_token_ids flat_in must be 1-D, got shape {text}"


@property_settings(500, health_checks=True)
@given(
    start=st.one_of(st.integers(-30, 30), st.integers(INT64_MIN, INT64_MAX)),
    end=st.one_of(st.integers(-30, 30), st.integers(INT64_MIN, INT64_MAX)),
    width=st.integers(1, 12),
    n_tokens=st.integers(0, 20),
)
def test_written_columns_are_exactly_the_spec_cells(start, end, width, n_tokens):
    with np.errstate(over="ignore"):
        base, lo, hi = written_columns(np.int64(start), np.int64(end), width, n_tokens)
    n = min(max(end - start, 0), width)
    cells = [j for j in range(n) if 0 <= start + j < n_tokens]
    assert list(range(int(lo), int(hi))) == cells
    assert all(int(base) + j == start + j for j in cells)
    assert 0 <= int(lo) <= width and int(hi) <= width and len(cells) <= longest_window(width, n_tokens)


def test_the_specs_exceptions_keep_their_template_and_fields_and_format_them_with_format_message():
    reason = errors.Message(errors.WRITE_OVERLAP, {"strides": (np.int64(2), 1)})
    error = errors.value_error(errors.NOT_WRITABLE, reason=reason)
    assert str(reason) == "strides (2, 1) make several cells share memory"
    assert str(error) == errors.NOT_WRITABLE.format(reason=str(reason))
    assert (error.template, error.fields) == (errors.NOT_WRITABLE, {"reason": reason})
    assert errors.format_message(error.template, error.fields) == str(error)
    shape = errors.type_error(errors.WRONG_RANK, arg="pool_out", rank=2, shape=(np.int64(5),))
    assert str(shape).endswith("pool_out must be 2-D, got shape (5,)")
