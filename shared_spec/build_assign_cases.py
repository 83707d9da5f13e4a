"""The conformance cases of ``assign_req_to_token_pool`` (``shared_spec.assignment``), for ``build_cases``.

Value cases carry the table of ``assign_oracle``: the assignment's running sum in Python integers (each length
``max(end - start, 0)``, exact, clipped to ``len(out_cache_loc)``), then the scatter's literal pseudo-code
(``build_cases.loop_oracle``) over those offsets:
independent of ``assignment.windows`` and of the vectorized reference. Error cases carry their messages
written out by hand. ``build_cases`` passes its ``loop_oracle`` and ``sentinel_pool`` in (``assign_cases``), so
that this module imports nothing of it.
"""

from __future__ import annotations

import numpy as np

from shared_spec.cases import ASSIGN, ArrayData, Case, PythonValue

P = "kv-canary: assign_req_to_token_pool"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
T, V = "KvCanaryTypeError", "KvCanaryValueError"


def assign_oracle(loop_oracle, rows, table, start, end, out_cache_loc, batch_size=None) -> np.ndarray:
    """The table after the assignment: pt_r the running sum of ``min(max(end - start, 0), N)`` in Python integers
    (``N = len(out_cache_loc)``), then ``loop_oracle``."""
    bs = len(rows) if batch_size is None else batch_size
    n_tokens = len(out_cache_loc)
    offsets, pt = [0], 0
    for r in range(bs):
        pt += min(max(int(end[r]) - int(start[r]), 0), n_tokens)
        offsets.append(pt)
    columns = [int(s) for s in start[:bs]]
    return loop_oracle(
        np.asarray(out_cache_loc, np.int64), np.asarray(offsets, np.int64), np.asarray(rows[:bs], np.int64), table,
        np.asarray(columns, np.int64),
    )


# build_cases' oracle and sentinel pools, set by assign_cases.
TOOLS: dict = {}


def table_of(n_rows: int, width: int) -> np.ndarray:
    return TOOLS["sentinel_pool"](n_rows, width)


def arrays(rows, table, start, end, out_cache_loc, batch_size, dtypes) -> dict:
    d = dict(zip(("req_pool_indices", "start_offset", "end_offset", "out_cache_loc"), dtypes))
    return {
        "req_pool_indices": ArrayData.of(np.asarray(rows, d["req_pool_indices"])),
        "req_to_token": ArrayData.of(table),
        "start_offset": ArrayData.of(np.asarray(start, d["start_offset"])),
        "end_offset": ArrayData.of(np.asarray(end, d["end_offset"])),
        "out_cache_loc": ArrayData.of(np.asarray(out_cache_loc, d["out_cache_loc"])),
        "batch_size": PythonValue(batch_size),
    }


def assign_case(name, rule, rows, table, start, end, out_cache_loc, batch_size="all", *, dtypes=("int64",) * 4, layout=None) -> Case:
    """A value case; ``batch_size`` "all" is ``len(rows)`` passed as an int (None passes None)."""
    bs = len(rows) if batch_size == "all" else batch_size
    expected = assign_oracle(TOOLS["loop_oracle"], rows, table, start, end, out_cache_loc, bs)
    return Case(
        name=name, rule=rule, args=arrays(rows, table, start, end, out_cache_loc, bs, dtypes),
        expected_pool=ArrayData.of(expected), layout=layout, op=ASSIGN,
    )


def assign_error(name, rule, error_class, message, *, requires=(), host=(), layout=None, **changes) -> Case:
    """An error case: a valid call (bs 2, table 4 x 6) with ``changes``."""
    args = arrays([1, 3], table_of(4, 6), [0, 2], [2, 5], [11, 12, 13, 14, 15], 2, ("int64",) * 4)
    args.update(changes)
    return Case(
        name=name, rule=rule, args=args, error_class=error_class, error_message=message,
        requires=tuple(requires), host=tuple(host), layout=layout, op=ASSIGN,
    )


def a(dtype, shape, data=None) -> ArrayData:
    size = int(np.prod(shape, dtype=np.int64))
    data = list(range(1, size + 1)) if data is None else list(data)
    return ArrayData(dtype, tuple(shape), tuple(data))


def assign_value_cases() -> list[Case]:
    s = "assign"
    i32 = ("int32",) * 4
    return [
        # Decode: one new slot per request, at its current length.
        assign_case("assign_decode", s, [2, 0, 1], table_of(3, 8), [5, 0, 3], [6, 1, 4], [101, 102, 103]),
        # Extend (prefill): a chunk per request, after its cached prefix.
        assign_case("assign_extend", s, [1, 0], table_of(2, 10), [0, 3], [4, 8], range(201, 210)),
        assign_case("assign_empty_requests", s, [0, 1, 2], table_of(3, 6), [2, 4, 0], [2, 6, 0], [7, 8]),
        assign_case("assign_empty_batch", s, [], table_of(2, 3), [], [], []),
        assign_case("assign_batch_size_none", s, [1, 0], table_of(2, 6), [0, 1], [2, 4], range(1, 6), batch_size=None),
        # batch_size below the tensors' lengths: the entries past it are not read.
        assign_case("assign_batch_size_smaller", s, [1, 0, 9, -4], table_of(2, 6), [0, 2, -50, 3], [3, 4, 90, 1], range(1, 9), batch_size=2),
        assign_case("assign_batch_size_zero", s, [1, 0], table_of(2, 4), [0, 1], [2, 3], range(1, 5), batch_size=0),
        # Windows clipped to the table: past its width, at or past it, before column 0.
        assign_case("assign_clipped_at_width", s, [0, 1], table_of(2, 6), [4, 0], [9, 8], range(1, 14)),
        assign_case("assign_window_past_width", s, [0, 1, 2], table_of(3, 5), [5, 7, 2**40], [7, 9, 2**40 + 2], range(1, 7)),
        assign_case("assign_window_before_column_zero", s, [0, 1], table_of(2, 6), [-2, -9], [3, -5], range(1, 10)),
        # Rows outside the table are skipped; their slots still count in the running sum.
        assign_case("assign_rows_outside_skipped", s, [-1, 0, 3, INT64_MAX, 2], table_of(3, 5), [0, 1, 0, 0, 2], [2, 3, 1, 2, 4], range(1, 10)),
        # end < start: the request writes nothing and leaves the running sum where it is: the next reads on from it.
        assign_case("assign_negative_length", s, [0, 1, 2], table_of(3, 6), [0, 5, 1], [3, 2, 4], range(1, 7)),
        # A negative length first: the running sum stays at 0, so the next request reads from out_cache_loc[0] (a sum
        # that went down by 4 would make its segment [-4, -1), and the third one's [-1, 1)).
        assign_case("assign_negative_length_leaves_the_running_sum", s, [1, 0, 1], table_of(2, 5), [5, 0, 0], [1, 3, 2], range(1, 7)),
        # More slots asked than out_cache_loc holds: never read past its end.
        assign_case("assign_out_cache_loc_short", s, [0, 1], table_of(2, 8), [0, 1], [4, 7], range(1, 7)),
        assign_case("assign_int32_inputs", s, [1, 0], table_of(2, 8), [2, 0], [5, 4], range(31, 38), dtypes=i32),
        assign_case("assign_mixed_dtypes", s, [1, 0], table_of(2, 8), [2, 0], [5, 4], range(31, 38), dtypes=("int32", "int64", "int32", "int64")),
        assign_case("assign_int32_extremes", s, [0, 1], table_of(2, 4), [-(2**31), 2**31 - 3], [2**31 - 1, 2**31 - 1], range(1, 6), dtypes=i32),
        assign_case("assign_values_wrap_to_int32", s, [0], table_of(1, 6), [0], [6], [2**31, -(2**31) - 1, 2**40 + 5, INT64_MIN, INT64_MAX, -1]),
        # int64 extremes: lengths are exact, clipped to len(out_cache_loc): the first request's 2**64 - 1 slots take
        # all 6 (written nowhere: its columns start at -2**63), so the later requests read nothing.
        assign_case(
            "assign_int64_extremes", s, [0, 1, 2, 3], table_of(4, 4),
            [INT64_MIN, 0, INT64_MAX - 1, -3], [INT64_MAX, 2, INT64_MAX, 2], range(1, 7),
        ),
        # The same windows, the widest last: the others read on from exact lengths (5, then 1 past the width, then 2).
        assign_case(
            "assign_int64_extremes_widest_last", s, [3, 2, 1, 0], table_of(4, 4),
            [-3, INT64_MAX - 1, 0, INT64_MIN], [2, INT64_MAX, 2, INT64_MAX], range(1, 10),
        ),
        # end - start wraps to 1 in int64, but end < start: the request writes nothing and the sum stays at 0.
        assign_case("assign_int64_difference_wraps_positive", s, [0, 1], table_of(2, 4), [INT64_MAX, 0], [INT64_MIN, 2], [1, 2, 3]),
        # Negative lengths down to -2**63 (a wrapping sum would make the second segment [-1, 2**63 - 1]): nothing written.
        assign_case("assign_negative_lengths_at_int64_min_write_nothing", s, [0, 1], table_of(2, 4), [0, 0], [-1, INT64_MIN], range(1, 6)),
        assign_case("assign_repeated_row_disjoint_windows", s, [1, 1], table_of(2, 8), [0, 3], [3, 6], range(1, 7)),
        assign_case("assign_column_slice_table", s, [2, 0], table_of(3, 7), [1, 0], [5, 7], range(21, 32), layout="column_slice"),
    ]


def assign_error_cases() -> list[Case]:
    r = "assign"
    return [
        assign_error("assign_rows_float32", "dtype", T, f"{P} req_pool_indices must be int32 or int64, got float32", req_pool_indices=a("float32", (2,), [1, 3])),
        assign_error("assign_table_int64", "dtype", T, f"{P} req_to_token must be int32, got int64", req_to_token=a("int64", (4, 6))),
        assign_error("assign_start_offset_bool", "dtype", T, f"{P} start_offset must be int32 or int64, got bool", start_offset=a("bool", (2,), [0, 1])),
        assign_error("assign_out_cache_loc_uint8", "dtype", T, f"{P} out_cache_loc must be int32 or int64, got uint8", out_cache_loc=a("uint8", (5,))),
        assign_error("assign_table_1d", "rank", V, f"{P} req_to_token must be 2-D, got shape (6,)", req_to_token=a("int32", (6,))),
        assign_error("assign_end_offset_2d", "rank", V, f"{P} end_offset must be 1-D, got shape (2, 1)", end_offset=a("int64", (2, 1), [2, 5])),
        assign_error("assign_out_cache_loc_list", "array", T, f"{P} out_cache_loc must be an array, got list", out_cache_loc=PythonValue([11, 12])),
        assign_error(
            "assign_rank_before_dtype", "order", V, f"{P} end_offset must be 1-D, got shape (1, 2)",
            req_pool_indices=a("float32", (2,), [1, 3]), end_offset=a("int64", (1, 2), [2, 5]),
        ),
        assign_error(
            "assign_dtype_before_batch_size", "order", T, f"{P} out_cache_loc must be int32 or int64, got float32",
            out_cache_loc=a("float32", (5,)), batch_size=PythonValue(-1),
        ),
        assign_error("assign_batch_size_float", r, T, f"{P} batch_size must be an int, got float", batch_size=PythonValue(2.0)),
        assign_error("assign_batch_size_bool", r, T, f"{P} batch_size must be an int, got bool", batch_size=PythonValue(True)),
        assign_error("assign_batch_size_negative", r, V, f"{P} batch_size -1 is outside [0, 2]: len(req_pool_indices) is 2", batch_size=PythonValue(-1)),
        assign_error("assign_batch_size_past_rows", r, V, f"{P} batch_size 3 is outside [0, 2]: len(req_pool_indices) is 2", batch_size=PythonValue(3)),
        assign_error(
            "assign_batch_size_past_end_offset", r, V, f"{P} batch_size 2 is outside [0, 1]: len(end_offset) is 1",
            end_offset=a("int64", (1,), [2]),
        ),
        assign_error(
            "assign_out_cache_loc_on_host", "device", V,
            f"{P} out_cache_loc is on cpu but req_to_token is on {{accelerator}}; all arrays must be on one device",
            requires=("accelerator",), host=("out_cache_loc",),
        ),
        assign_error(
            "assign_table_on_host", "device", V,
            f"{P} req_pool_indices is on {{accelerator}} but req_to_token is on cpu; all arrays must be on one device",
            requires=("accelerator",), host=("req_to_token",),
        ),
        assign_error(
            "assign_table_rows_share_memory", "writable", V,
            f"{P} req_to_token cannot be written in place: strides (0, 1) make several cells share memory",
            requires=("in_place",), layout="broadcast_rows",
        ),
    ]


def assign_cases(loop_oracle, sentinel_pool) -> list[Case]:
    """Every case of the assignment, its tables by ``loop_oracle`` (the scatter's), its tables filled by ``sentinel_pool``."""
    TOOLS.update(loop_oracle=loop_oracle, sentinel_pool=sentinel_pool)
    return assign_value_cases() + assign_error_cases()
