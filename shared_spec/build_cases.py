"""Writes ``data/conformance.json``: ``python -m shared_spec.build_cases``.

Error cases carry their expected message written out by hand, so a wrong
template in ``errors.py`` fails them. Value cases carry the pool computed by
``loop_oracle`` below: the spec's pseudo-code run literally on Python integers,
independent of the vectorized reference in ``reference.py``. A test rebuilds
this file and asserts the stored one is current.
"""

from __future__ import annotations

import json

import numpy as np

from shared_spec.build_assign_cases import assign_cases
from shared_spec.cases import CASES_FILE, ArrayData, Case, PythonValue

P = "kv-canary: scatter_req_token_ids"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def loop_oracle(flat_in, offsets, rows, pool, start_cols=None) -> np.ndarray:
    """The spec's pseudo-code, line by line, in Python integers.

    With ``start_cols``, request ``r`` writes ``c, t = s + j, start + j`` for the ``j`` of ``range(end - start)``
    with ``0 <= c < C`` and ``0 <= t < N``: exactly ``max(0, -s, -start) <= j < min(end - start, C - s, N -
    start)``, enumerated over that range (the literal ``j`` loop would run ``2**64`` times at the int64 extremes).
    """
    out = [list(map(int, r)) for r in np.asarray(pool)]
    n_tokens, (n_rows, width) = len(flat_in), np.asarray(pool).shape
    for r in range(len(rows)):
        start, end, row = int(offsets[r]), int(offsets[r + 1]), int(rows[r])
        if row < 0 or row >= n_rows:
            continue
        if start_cols is None:
            columns = ((j, j) for j in range(min(max(end - start, 0), width)))
        else:
            s = int(start_cols[r])
            columns = ((s + j, j) for j in range(max(0, -s, -start), min(end - start, width - s, n_tokens - start)))
        for c, j in columns:
            t = start + j
            if 0 <= c < width and 0 <= t < n_tokens:
                low = int(flat_in[t]) & 0xFFFFFFFF
                out[row][c] = low - (1 << 32) if low >= 1 << 31 else low
    return np.asarray(out, dtype=np.int32).reshape(np.asarray(pool).shape)


def sentinel_pool(n_rows: int, width: int) -> np.ndarray:
    """A pool whose every cell holds a distinct negative sentinel (never zeros)."""
    return (-1_000_000 - np.arange(n_rows * width, dtype=np.int64)).astype(np.int32).reshape(n_rows, width)


def i64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def a(dtype: str, shape, data=None) -> ArrayData:
    size = int(np.prod(shape, dtype=np.int64))
    data = list(range(1, size + 1)) if data is None else list(data)
    return ArrayData(dtype, tuple(shape), tuple(int(x) if dtype != "float32" else float(x) for x in data))


def value_case(name, rule, flat_in, offsets, rows, pool, *, start_cols=None, check_values=False, layout=None) -> Case:
    flat_in, offsets, rows = i64(flat_in), i64(offsets), i64(rows)
    # start_cols=PythonValue(None): the call passes start_cols=None, the unwindowed op.
    given = isinstance(start_cols, PythonValue) or start_cols is not None
    if isinstance(start_cols, PythonValue):
        start_cols, passed = start_cols.value, start_cols
    else:
        start_cols = None if start_cols is None else i64(start_cols)
        passed = None if start_cols is None else ArrayData.of(start_cols)
    expected = loop_oracle(flat_in, offsets, rows, pool, start_cols)
    args = {
        "flat_in": ArrayData.of(flat_in),
        "offsets": ArrayData.of(offsets),
        "req_pool_indices": ArrayData.of(rows),
        "pool_out": ArrayData.of(pool),
    }
    if given:  # the key only where the call passes start_cols: every other case calls as before
        args["start_cols"] = passed
    return Case(
        name=name,
        rule=rule,
        args=args,
        check_values=check_values,
        expected_pool=ArrayData.of(expected),
        layout=layout,
    )


# A valid call to perturb: bs = 2, N = 5, pool 4 x 6.
def good_args() -> dict:
    return {
        "flat_in": a("int64", (5,), [11, 12, 13, 14, 15]),
        "offsets": a("int64", (3,), [0, 2, 5]),
        "req_pool_indices": a("int64", (2,), [1, 3]),
        "pool_out": ArrayData.of(sentinel_pool(4, 6)),
    }


def error_case(name, rule, error_class, message, *, check_values=False, requires=(), host=(), layout=None, **changes):
    args = good_args()
    for key, value in changes.items():
        args[key] = value
    return Case(
        name=name,
        rule=rule,
        args=args,
        check_values=check_values,
        error_class=error_class,
        error_message=message,
        requires=tuple(requires),
        host=tuple(host),
        layout=layout,
    )


def checked_error(name, message, flat_in, offsets, rows, pool_shape=(4, 6), start_cols=None) -> Case:
    args = {
        "flat_in": ArrayData.of(i64(flat_in)),
        "offsets": ArrayData.of(i64(offsets)),
        "req_pool_indices": ArrayData.of(i64(rows)),
        "pool_out": ArrayData.of(sentinel_pool(*pool_shape)),
    }
    if start_cols is not None:
        args["start_cols"] = ArrayData.of(i64(start_cols))
    return Case(
        name=name,
        rule="check_values",
        args=args,
        check_values=True,
        error_class="KvCanaryValueError",
        error_message=message,
    )


def value_cases() -> list[Case]:
    big = [2**31, -(2**31) - 1, 2**40 + 5, INT64_MIN, INT64_MAX, -1, 2**32 - 7]
    return [
        value_case("mixed_batch", "semantics", range(101, 111), [0, 3, 3, 7, 10], [2, 0, 4, 1], sentinel_pool(5, 6)),
        value_case("empty_batch", "semantics", [], [0], [], sentinel_pool(3, 4)),
        value_case("empty_batch_with_tokens", "semantics", [5, 6, 7], [0], [], sentinel_pool(3, 4)),
        value_case("no_tokens", "semantics", [], [0, 0, 0], [0, 2], sentinel_pool(3, 4)),
        value_case("one_request", "semantics", [7, 8, 9], [0, 3], [1], sentinel_pool(2, 5)),
        value_case("truncate_at_width", "truncation", range(1, 13), [0, 9, 12], [0, 2], sentinel_pool(3, 4)),
        value_case("segment_ends_at_flat_end", "semantics", range(50, 58), [2, 5, 8], [1, 0], sentinel_pool(2, 3)),
        value_case("row_negative_is_skipped", "rows", range(1, 7), [0, 2, 4, 6], [-1, 0, -3], sentinel_pool(3, 4)),
        value_case("row_past_pool_is_skipped", "rows", range(1, 7), [0, 2, 4, 6], [3, 2, 9], sentinel_pool(3, 4)),
        value_case("row_int64_extremes_skipped", "rows", [1, 2], [0, 1, 2], [INT64_MIN, INT64_MAX], sentinel_pool(2, 2)),
        value_case("last_row_of_pool", "rows", range(1, 9), [0, 8], [4], sentinel_pool(5, 8)),
        value_case("decreasing_segment_writes_nothing", "offsets", range(1, 9), [0, 5, 2, 8], [0, 1, 2], sentinel_pool(3, 6)),
        value_case("negative_start_skips_leading_cells", "offsets", range(1, 9), [-3, 4], [1], sentinel_pool(2, 8)),
        value_case("offsets_past_flat_in", "offsets", range(1, 6), [3, 9, 40], [0, 1], sentinel_pool(2, 8)),
        value_case("values_wrap_to_int32", "values", big, [0, len(big)], [0], sentinel_pool(1, 8)),
        value_case("offsets_difference_overflows", "offsets", range(1, 6), [-5, INT64_MAX], [0], sentinel_pool(1, 12)),
        value_case("offsets_full_int64_span", "offsets", range(1, 6), [INT64_MIN, INT64_MAX, INT64_MIN], [0, 1], sentinel_pool(2, 4)),
        value_case("start_near_int64_max", "offsets", range(1, 6), [INT64_MAX - 2, INT64_MAX], [0], sentinel_pool(1, 4)),
        value_case("same_row_same_values", "rows", range(1, 5), [0, 4, 0, 4], [1, 1, 1], sentinel_pool(2, 4)),
        value_case("width_one", "truncation", range(1, 5), [0, 2, 4], [1, 0], sentinel_pool(2, 1)),
        value_case("width_zero", "truncation", range(1, 5), [0, 2, 4], [1, 0], sentinel_pool(2, 0)),
        value_case("column_slice_pool", "layout", range(21, 33), [0, 5, 12], [2, 0], sentinel_pool(3, 7), layout="column_slice"),
        value_case("checked_valid_batch", "check_values", range(1, 11), [0, 4, 4, 10], [3, 0, 1], sentinel_pool(4, 5), check_values=True),
        value_case("checked_empty_batch", "check_values", [], [0], [], sentinel_pool(2, 2), check_values=True),
    ]


def windowed_value_cases() -> list[Case]:
    """``start_cols``: each request's first pool column (rule "windowed"); the window clips at column 0 and at C."""
    w = "windowed"
    return [
        # A decode step: each request appends its one new token at its current length.
        value_case("windowed_appends", w, [101, 102, 103], [0, 1, 2, 3], [2, 0, 1], sentinel_pool(3, 8), start_cols=[5, 0, 3]),
        # A later prefill chunk: several tokens each, from each request's length.
        value_case("windowed_chunks", w, range(1, 10), [0, 4, 9], [1, 0], sentinel_pool(2, 12), start_cols=[3, 7]),
        value_case("windowed_from_zero_is_unwindowed", w, range(101, 111), [0, 3, 3, 7, 10], [2, 0, 4, 1], sentinel_pool(5, 6), start_cols=[0, 0, 0, 0]),
        value_case("windowed_none_is_unwindowed", w, range(1, 8), [0, 3, 7], [1, 0], sentinel_pool(2, 5), start_cols=PythonValue(None)),
        value_case("windowed_clipped_at_width", w, range(1, 13), [0, 5, 12], [0, 1], sentinel_pool(2, 6), start_cols=[4, 5]),
        value_case("windowed_at_and_past_width", w, range(1, 10), [0, 3, 6, 9], [0, 1, 2], sentinel_pool(3, 6), start_cols=[6, 7, 2**40]),
        value_case("windowed_clipped_at_column_zero", w, range(1, 13), [0, 5, 12], [1, 0], sentinel_pool(2, 6), start_cols=[-2, -6]),
        value_case("windowed_behind_the_whole_segment", w, range(1, 7), [0, 3, 6], [0, 1], sentinel_pool(2, 5), start_cols=[-3, -40]),
        value_case("windowed_empty_windows", w, range(1, 7), [0, 0, 4, 2, 6], [0, 1, 2, 3], sentinel_pool(4, 5), start_cols=[1, 0, 3, 4]),
        value_case("windowed_empty_batch", w, [5, 6], [0], [], sentinel_pool(2, 3), start_cols=[]),
        value_case("windowed_width_zero", w, range(1, 5), [0, 2, 4], [1, 0], sentinel_pool(2, 0), start_cols=[0, 1]),
        value_case("windowed_repeated_row_disjoint_windows", w, range(1, 8), [0, 2, 5, 7], [1, 1, 1], sentinel_pool(2, 8), start_cols=[0, 2, 6]),
        value_case("windowed_rows_outside_skipped", w, range(1, 7), [0, 2, 4, 6], [-1, 0, 3], sentinel_pool(3, 6), start_cols=[1, 2, 0]),
        value_case("windowed_negative_token_start", w, range(1, 9), [-3, 4, 8], [0, 1], sentinel_pool(2, 8), start_cols=[2, -2]),
        value_case("windowed_offsets_past_flat_in", w, range(1, 6), [3, 9, 40], [0, 1], sentinel_pool(2, 8), start_cols=[1, 0]),
        value_case("windowed_overlapping_segments", w, range(1, 9), [0, 6, 2, 8], [0, 1, 2], sentinel_pool(3, 6), start_cols=[3, -1, 2]),
        # int64 extremes of s, start and end together: s = start = INT64_MIN writes from token 0 at column 0,
        # s = INT64_MIN + 2 from token 0 at column 2; s < 0 with start - s past 2**63 - 1 writes nothing.
        value_case(
            "windowed_int64_extremes", w, range(1, 6),
            [INT64_MIN, INT64_MAX, INT64_MIN, INT64_MAX, INT64_MAX - 1, INT64_MAX],
            [0, 1, 2, 3, 4], sentinel_pool(5, 4), start_cols=[INT64_MIN, INT64_MIN, INT64_MIN + 2, -5, INT64_MIN],
        ),
        value_case(
            "windowed_start_col_int64_max", w, range(1, 6), [0, 3, 5], [0, 1], sentinel_pool(2, 4),
            start_cols=[INT64_MAX, INT64_MAX - 1],
        ),
        value_case(
            "windowed_start_near_int64_max", w, range(1, 6), [INT64_MAX - 2, INT64_MAX, INT64_MAX], [0, 1], sentinel_pool(2, 4),
            start_cols=[-1, INT64_MIN],
        ),
        value_case(
            "windowed_column_slice_pool", w, range(21, 33), [0, 5, 12], [2, 0], sentinel_pool(3, 7),
            start_cols=[4, -1], layout="column_slice",
        ),
        # A window at or past the width is truncation, not malformed: the checked mode lets it pass.
        value_case(
            "checked_windowed_past_width", "check_values", range(1, 8), [0, 3, 7], [1, 0], sentinel_pool(2, 5),
            start_cols=[5, 3], check_values=True,
        ),
    ]


def argument_error_cases() -> list[Case]:
    T, V = "KvCanaryTypeError", "KvCanaryValueError"
    return [
        error_case("flat_in_2d", "rank", V, f"{P} flat_in must be 1-D, got shape (2, 3)", flat_in=a("int64", (2, 3))),
        error_case("flat_in_0d", "rank", V, f"{P} flat_in must be 1-D, got shape ()", flat_in=a("int64", ())),
        error_case("offsets_2d", "rank", V, f"{P} offsets must be 1-D, got shape (3, 1)", offsets=a("int64", (3, 1), [0, 2, 5])),
        error_case("rows_0d", "rank", V, f"{P} req_pool_indices must be 1-D, got shape ()", req_pool_indices=a("int64", (), [1])),
        error_case("pool_1d", "rank", V, f"{P} pool_out must be 2-D, got shape (5,)", pool_out=a("int32", (5,))),
        error_case("pool_3d", "rank", V, f"{P} pool_out must be 2-D, got shape (2, 2, 2)", pool_out=a("int32", (2, 2, 2))),
        error_case(
            "rank_before_dtype", "order", V, f"{P} offsets must be 1-D, got shape (1, 3)",
            flat_in=a("float32", (5,)), offsets=a("int64", (1, 3), [0, 2, 5]),
        ),
        error_case(
            "first_rank_error_wins", "order", V, f"{P} req_pool_indices must be 1-D, got shape (1, 2)",
            req_pool_indices=a("int64", (1, 2), [1, 3]), pool_out=a("int32", (24,)),
        ),
        error_case("flat_in_int32", "dtype", T, f"{P} flat_in must be int64, got int32", flat_in=a("int32", (5,))),
        error_case("flat_in_float32", "dtype", T, f"{P} flat_in must be int64, got float32", flat_in=a("float32", (5,))),
        error_case("flat_in_bfloat16", "dtype", T, f"{P} flat_in must be int64, got bfloat16", flat_in=a("bfloat16", (5,))),
        error_case("offsets_bool", "dtype", T, f"{P} offsets must be int64, got bool", offsets=a("bool", (3,), [0, 1, 1])),
        error_case("rows_int32", "dtype", T, f"{P} req_pool_indices must be int64, got int32", req_pool_indices=a("int32", (2,), [1, 3])),
        error_case("pool_int64", "dtype", T, f"{P} pool_out must be int32, got int64", pool_out=a("int64", (4, 6))),
        error_case("pool_uint8", "dtype", T, f"{P} pool_out must be int32, got uint8", pool_out=a("uint8", (4, 6))),
        error_case("pool_float16", "dtype", T, f"{P} pool_out must be int32, got float16", pool_out=a("float16", (4, 6))),
        error_case(
            "dtype_before_length", "order", T, f"{P} pool_out must be int32, got float32",
            offsets=a("int64", (7,)), pool_out=a("float32", (4, 6)),
        ),
        error_case("offsets_too_long", "length", V, f"{P} offsets length 4 != bs+1 (3)", offsets=a("int64", (4,), [0, 1, 2, 5])),
        error_case("offsets_too_short", "length", V, f"{P} offsets length 2 != bs+1 (3)", offsets=a("int64", (2,), [0, 5])),
        error_case(
            "offsets_empty_for_empty_batch", "length", V, f"{P} offsets length 0 != bs+1 (1)",
            offsets=a("int64", (0,)), req_pool_indices=a("int64", (0,)),
        ),
        error_case("flat_in_list", "array", T, f"{P} flat_in must be an array, got list", flat_in=PythonValue([11, 12, 13, 14, 15])),
        error_case("offsets_int", "array", T, f"{P} offsets must be an array, got int", offsets=PythonValue(3)),
        error_case("pool_none", "array", T, f"{P} pool_out must be an array, got NoneType", pool_out=PythonValue(None)),
        error_case(
            "not_array_before_rank", "order", T, f"{P} req_pool_indices must be an array, got str",
            flat_in=a("int64", (2, 3)), req_pool_indices=PythonValue("1, 3"),
        ),
        error_case(
            "flat_in_on_host", "device", V,
            f"{P} flat_in is on cpu but pool_out is on {{accelerator}}; all arrays must be on one device",
            requires=("accelerator",), host=("flat_in",),
        ),
        error_case(
            "rows_on_host", "device", V,
            f"{P} req_pool_indices is on cpu but pool_out is on {{accelerator}}; all arrays must be on one device",
            requires=("accelerator",), host=("req_pool_indices",),
        ),
        error_case(
            "pool_on_host", "device", V,
            f"{P} flat_in is on {{accelerator}} but pool_out is on cpu; all arrays must be on one device",
            requires=("accelerator",), host=("pool_out",),
        ),
        error_case(
            "start_cols_on_host", "device", V,
            f"{P} start_cols is on cpu but pool_out is on {{accelerator}}; all arrays must be on one device",
            requires=("accelerator",), host=("start_cols",), start_cols=a("int64", (2,), [0, 1]),
        ),
        error_case(
            "pool_rows_share_memory", "writable", V,
            f"{P} pool_out cannot be written in place: strides (0, 1) make several cells share memory",
            requires=("in_place",), layout="broadcast_rows",
        ),
    ]


def windowed_argument_error_cases() -> list[Case]:
    """``start_cols``, when given: the checks walk it after the four arguments; its length is bs."""
    T, V = "KvCanaryTypeError", "KvCanaryValueError"
    return [
        error_case("start_cols_int32", "dtype", T, f"{P} start_cols must be int64, got int32", start_cols=a("int32", (2,), [0, 1])),
        error_case("start_cols_float32", "dtype", T, f"{P} start_cols must be int64, got float32", start_cols=a("float32", (2,), [0, 1])),
        error_case("start_cols_2d", "rank", V, f"{P} start_cols must be 1-D, got shape (2, 1)", start_cols=a("int64", (2, 1), [0, 1])),
        error_case("start_cols_0d", "rank", V, f"{P} start_cols must be 1-D, got shape ()", start_cols=a("int64", (), [0])),
        error_case("start_cols_too_long", "length", V, f"{P} start_cols length 3 != bs (2)", start_cols=a("int64", (3,), [0, 1, 2])),
        error_case("start_cols_too_short", "length", V, f"{P} start_cols length 1 != bs (2)", start_cols=a("int64", (1,), [0])),
        error_case(
            "start_cols_for_empty_batch", "length", V, f"{P} start_cols length 1 != bs (0)",
            offsets=a("int64", (1,), [0]), req_pool_indices=a("int64", (0,)), start_cols=a("int64", (1,), [0]),
        ),
        error_case("start_cols_list", "array", T, f"{P} start_cols must be an array, got list", start_cols=PythonValue([0, 1])),
        error_case("start_cols_int", "array", T, f"{P} start_cols must be an array, got int", start_cols=PythonValue(0)),
        error_case(
            "start_cols_array_after_the_four", "order", T, f"{P} pool_out must be an array, got list",
            pool_out=PythonValue([[0]]), start_cols=PythonValue([0, 1]),
        ),
        error_case(
            "start_cols_array_before_rank", "order", T, f"{P} start_cols must be an array, got list",
            flat_in=a("int64", (2, 3)), start_cols=PythonValue([0, 1]),
        ),
        error_case(
            "start_cols_rank_after_the_four", "order", V, f"{P} pool_out must be 2-D, got shape (24,)",
            pool_out=a("int32", (24,)), start_cols=a("int64", (1, 2), [0, 1]),
        ),
        error_case(
            "start_cols_rank_before_dtype", "order", V, f"{P} start_cols must be 1-D, got shape (1, 2)",
            flat_in=a("int32", (5,)), start_cols=a("int64", (1, 2), [0, 1]),
        ),
        error_case(
            "start_cols_dtype_after_the_four", "order", T, f"{P} offsets must be int64, got int32",
            offsets=a("int32", (3,), [0, 2, 5]), start_cols=a("int32", (2,), [0, 1]),
        ),
        error_case(
            "start_cols_dtype_before_length", "order", T, f"{P} start_cols must be int64, got bool",
            offsets=a("int64", (4,), [0, 1, 2, 5]), start_cols=a("bool", (2,), [0, 1]),
        ),
        error_case(
            "offsets_length_before_start_cols_length", "order", V, f"{P} offsets length 4 != bs+1 (3)",
            offsets=a("int64", (4,), [0, 1, 2, 5]), start_cols=a("int64", (3,), [0, 1, 2]),
        ),
    ]


def checked_error_cases() -> list[Case]:
    return [
        checked_error("checked_negative_first_offset", f"{P} offsets[0] must be >= 0, got -2", range(5), [-2, 2, 5], [0, 1]),
        checked_error(
            "checked_decreasing_offsets", f"{P} offsets must be non-decreasing, got offsets[1]=4 > offsets[2]=3",
            range(6), [0, 4, 3, 2, 6], [0, 1, 2, 3],
        ),
        checked_error("checked_offsets_past_flat_in", f"{P} offsets[bs] must be <= len(flat_in) (5), got 6", range(5), [0, 2, 6], [0, 1]),
        checked_error("checked_row_negative", f"{P} req_pool_indices[1]=-1 is outside [0, 4)", range(5), [0, 2, 5], [0, -1]),
        checked_error("checked_row_past_pool", f"{P} req_pool_indices[0]=4 is outside [0, 4)", range(5), [0, 2, 5], [4, 9]),
        checked_error(
            "checked_rows_repeat", f"{P} req_pool_indices[3]=2 repeats req_pool_indices[1]",
            range(8), [0, 2, 4, 6, 8, 8], [3, 2, 0, 2, 3],
        ),
        checked_error(
            "checked_first_rule_wins", f"{P} offsets[0] must be >= 0, got -1",
            range(5), [-1, 7, 6], [9, 9],
        ),
        checked_error(
            "checked_start_cols_negative", f"{P} start_cols[1] must be >= 0, got -1",
            range(5), [0, 2, 5], [0, 1], start_cols=[3, -1],
        ),
        checked_error(
            "checked_start_cols_int64_min", f"{P} start_cols[0] must be >= 0, got {INT64_MIN}",
            range(5), [0, 2, 5], [0, 1], start_cols=[INT64_MIN, -7],
        ),
        checked_error(
            "checked_rows_before_start_cols", f"{P} req_pool_indices[1]=0 repeats req_pool_indices[0]",
            range(5), [0, 2, 5], [0, 0], start_cols=[-1, -1],
        ),
        checked_error(
            "checked_start_cols_after_offsets", f"{P} offsets[bs] must be <= len(flat_in) (5), got 6",
            range(5), [0, 2, 6], [0, 1], start_cols=[0, -2],
        ),
    ]


def all_cases() -> list[Case]:
    return (
        value_cases() + windowed_value_cases() + argument_error_cases() + windowed_argument_error_cases()
        + checked_error_cases() + assign_cases(loop_oracle, sentinel_pool)
    )


def render() -> str:
    # One case a line: diffs of the data file stay readable.
    lines = ",\n".join(json.dumps(c.to_json()) for c in all_cases())
    return '{"cases": [\n' + lines + "\n]}\n"


if __name__ == "__main__":
    CASES_FILE.write_text(render())
    print(f"wrote {len(all_cases())} cases to {CASES_FILE}")
