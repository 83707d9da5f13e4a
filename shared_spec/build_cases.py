"""Writes ``data/conformance.json``: ``python -m shared_spec.build_cases``.

Independent of the library on purpose: value cases carry the pool of ``loop_oracle`` (the spec's pseudo-code run
literally on Python integers), error cases their messages written out by hand, and the modes' differences follow
two hand-written rules (``modes``). A test rebuilds the file and asserts the stored one is current.
"""

from __future__ import annotations

import json

import numpy as np

from shared_spec.cases import ASSIGN, CASES_FILE, ArrayData, Case, Expect, PythonValue

P = "kv-canary: scatter_req_token_ids"
PA = "kv-canary: assign_req_to_token_pool"
I64 = (-(2**63), 2**63 - 1)
I32 = (-(2**31), 2**31 - 1)
T, V = "KvCanaryTypeError", "KvCanaryValueError"
# The index arguments of each operation, in argument order.
SCATTER_INDEX = ("flat_in", "offsets", "req_pool_indices", "start_cols")
ASSIGN_INDEX = ("req_pool_indices", "start_offset", "end_offset", "out_cache_loc")


def loop_oracle(flat_in, offsets, rows, pool, start_cols=None) -> np.ndarray:
    """The spec's pseudo-code in Python integers; the ``j`` loop over the range where ``c`` and ``t`` can pass
    (the literal loop would run ``2**64`` times at the extremes)."""
    pool = np.asarray(pool)
    out = [[int(v) for v in row] for row in pool]
    n_tokens, (n_rows, width) = len(flat_in), pool.shape
    for r in range(len(rows)):
        start, end, row = int(offsets[r]), int(offsets[r + 1]), int(rows[r])
        s = 0 if start_cols is None else int(start_cols[r])
        if not 0 <= row < n_rows:
            continue
        for j in range(max(0, -s, -start), min(end - start, width - s, n_tokens - start)):
            c, t = s + j, start + j
            if 0 <= c < width and 0 <= t < n_tokens:
                low = int(flat_in[t]) & 0xFFFFFFFF
                out[row][c] = low - (1 << 32) if low >= 1 << 31 else low
    return np.asarray(out, dtype=np.int32).reshape(pool.shape)


def assign_oracle(rows, table, start, end, out_cache_loc, batch_size) -> np.ndarray:
    """The assignment's running sum of ``min(max(end - start, 0), N)`` in Python integers, then ``loop_oracle``."""
    offsets, pt, n = [0], 0, len(out_cache_loc)
    for r in range(batch_size):
        pt += min(max(int(end[r]) - int(start[r]), 0), n)
        offsets.append(pt)
    return loop_oracle(list(out_cache_loc), offsets, list(rows[:batch_size]), table, list(start[:batch_size]))


def sentinel_pool(n_rows: int, width: int) -> np.ndarray:
    """Distinct negative sentinels (never zeros)."""
    return (-1_000_000 - np.arange(n_rows * width, dtype=np.int64)).astype(np.int32).reshape(n_rows, width)


def a(dtype: str, shape, data=None) -> ArrayData:
    size = int(np.prod(shape, dtype=np.int64))
    return ArrayData(dtype, tuple(shape), tuple(range(1, size + 1)) if data is None else tuple(data))


def error(cls: str, message: str) -> Expect:
    return Expect(error_class=cls, error_message=message)


def modes(case: Case) -> Case:
    """The case with its modes' expectations, by two rules:

    - torch takes int64 index arrays only (the assignment's take int32 too): a value case with an int32 index
      array is, for torch, the dtype error of the first one in argument order;
    - JAX with x64 off narrows int64 host data to int32 where int32 holds every value, and refuses it naming the
      first value that does not fit, after the argument checks: where JAX's expectation is a pool or a value
      rule's error, such an array makes it that refusal.
    """
    by_mode = dict(case.by_mode)
    index = ASSIGN_INDEX if case.op == ASSIGN else SCATTER_INDEX
    arrays = [(n, case.args[n]) for n in index if isinstance(case.args.get(n), ArrayData)]
    if case.op != ASSIGN and case.expect.pool is not None and "torch" not in by_mode:
        narrow = next((n for n, arg in arrays if arg.dtype == "int32"), None)
        if narrow is not None:
            by_mode["torch"] = error(T, f"{P} {narrow} must be int64, got int32")
    jax = by_mode.get("jax", case.expect)
    if jax.pool is not None or case.check_values:
        prefix = PA if case.op == ASSIGN else P
        for name, arg in arrays:
            outside = [i for i, v in enumerate(arg.data) if arg.dtype == "int64" and not I32[0] <= v <= I32[1]]
            if outside:
                i = outside[0]
                by_mode["jax_x64_off"] = error(V, f"{prefix} {name}[{i}] = {arg.data[i]} does not fit int32, and JAX "
                                                  f"holds int64 only with x64 enabled; pass int32 values, or enable x64")
                break
    return Case(case.name, case.rule, case.args, case.expect, by_mode, case.check_values, case.requires, case.host,
                case.layout, case.op)


def value_case(name, rule, flat_in, offsets, rows, pool, *, start_cols=None, check_values=False, layout=None,
               dtype="int64", dtypes=None) -> Case:
    """A scatter case whose pool ``loop_oracle`` computes; index arrays of ``dtype`` (or ``dtypes``, one each)."""
    dtypes = dtypes or (dtype,) * 4
    args = {"flat_in": flat_in, "offsets": offsets, "req_pool_indices": rows}
    args = {n: ArrayData.of(np.asarray(list(v), dt)) for (n, v), dt in zip(args.items(), dtypes)}
    args["pool_out"] = ArrayData.of(pool)
    if isinstance(start_cols, PythonValue):
        args["start_cols"], start_cols = start_cols, None
    elif start_cols is not None:
        args["start_cols"] = ArrayData.of(np.asarray(start_cols, dtypes[3]))
    expected = loop_oracle(list(flat_in), list(offsets), list(rows), pool, start_cols)
    return Case(name, rule, args, Expect(pool=ArrayData.of(expected)), check_values=check_values, layout=layout)


def good_args() -> dict:
    """A valid call to perturb: bs 2, N 5, pool 4 x 6."""
    return {"flat_in": a("int64", (5,), [11, 12, 13, 14, 15]), "offsets": a("int64", (3,), [0, 2, 5]),
            "req_pool_indices": a("int64", (2,), [1, 3]), "pool_out": ArrayData.of(sentinel_pool(4, 6))}


def error_case(name, rule, cls, message, *, jax=None, requires=(), host=(), layout=None, **changes) -> Case:
    """A call of ``good_args`` with ``changes``; ``jax``: JAX's own message (both modes), where it differs."""
    by_mode = {} if jax is None else {"jax": error(cls, jax), "jax_x64_off": error(cls, jax)}
    return Case(name, rule, {**good_args(), **changes}, error(cls, message), by_mode, requires=tuple(requires),
                host=tuple(host), layout=layout)


def dtype_case(name, arg: str, got: str, **changes) -> Case:
    """A dtype error: torch takes int64, JAX int32 or int64 (the pool: int32 on both)."""
    wanted = ("int32", "int32") if arg == "pool_out" else ("int64", "int32 or int64")
    jax = None if arg == "pool_out" else f"{P} {arg} must be {wanted[1]}, got {got}"
    return error_case(name, "dtype", T, f"{P} {arg} must be {wanted[0]}, got {got}", jax=jax, **changes)


def checked_error(name, message, flat_in, offsets, rows, pool_shape=(4, 6), start_cols=None, dtype="int64") -> Case:
    args = {"flat_in": ArrayData.of(np.asarray(list(flat_in), dtype)), "offsets": ArrayData.of(np.asarray(offsets, dtype)),
            "req_pool_indices": ArrayData.of(np.asarray(rows, dtype)), "pool_out": ArrayData.of(sentinel_pool(*pool_shape))}
    if start_cols is not None:
        args["start_cols"] = ArrayData.of(np.asarray(start_cols, dtype))
    expect = error(V, message)
    by_mode = {"torch": error(T, f"{P} flat_in must be int64, got int32")} if dtype == "int32" else {}
    return Case(name, "check_values", args, expect, by_mode, check_values=True)


def value_cases() -> list[Case]:
    big = [2**31, -(2**31) - 1, 2**40 + 5, I64[0], I64[1], -1, 2**32 - 7]
    S = sentinel_pool
    return [
        value_case("mixed_batch", "semantics", range(101, 111), [0, 3, 3, 7, 10], [2, 0, 4, 1], S(5, 6)),
        value_case("empty_batch", "semantics", [], [0], [], S(3, 4)),
        value_case("empty_batch_with_tokens", "semantics", [5, 6, 7], [0], [], S(3, 4)),
        value_case("no_tokens", "semantics", [], [0, 0, 0], [0, 2], S(3, 4)),
        value_case("one_request", "semantics", [7, 8, 9], [0, 3], [1], S(2, 5)),
        value_case("truncate_at_width", "truncation", range(1, 13), [0, 9, 12], [0, 2], S(3, 4)),
        value_case("segment_ends_at_flat_end", "semantics", range(50, 58), [2, 5, 8], [1, 0], S(2, 3)),
        value_case("row_negative_is_skipped", "rows", range(1, 7), [0, 2, 4, 6], [-1, 0, -3], S(3, 4)),
        value_case("row_past_pool_is_skipped", "rows", range(1, 7), [0, 2, 4, 6], [3, 2, 9], S(3, 4)),
        value_case("row_int64_extremes_skipped", "rows", [1, 2], [0, 1, 2], list(I64), S(2, 2)),
        value_case("last_row_of_pool", "rows", range(1, 9), [0, 8], [4], S(5, 8)),
        value_case("decreasing_segment_writes_nothing", "offsets", range(1, 9), [0, 5, 2, 8], [0, 1, 2], S(3, 6)),
        value_case("negative_start_skips_leading_cells", "offsets", range(1, 9), [-3, 4], [1], S(2, 8)),
        value_case("offsets_past_flat_in", "offsets", range(1, 6), [3, 9, 40], [0, 1], S(2, 8)),
        value_case("values_wrap_to_int32", "values", big, [0, len(big)], [0], S(1, 8)),
        value_case("offsets_difference_overflows", "offsets", range(1, 6), [-5, I64[1]], [0], S(1, 12)),
        value_case("offsets_full_int64_span", "offsets", range(1, 6), [I64[0], I64[1], I64[0]], [0, 1], S(2, 4)),
        value_case("start_near_int64_max", "offsets", range(1, 6), [I64[1] - 2, I64[1]], [0], S(1, 4)),
        value_case("same_row_same_values", "rows", range(1, 5), [0, 4, 0, 4], [1, 1, 1], S(2, 4)),
        value_case("width_one", "truncation", range(1, 5), [0, 2, 4], [1, 0], S(2, 1)),
        value_case("width_zero", "truncation", range(1, 5), [0, 2, 4], [1, 0], S(2, 0)),
        value_case("column_slice_pool", "layout", range(21, 33), [0, 5, 12], [2, 0], S(3, 7), layout="column_slice"),
        value_case("checked_valid_batch", "check_values", range(1, 11), [0, 4, 4, 10], [3, 0, 1], S(4, 5), check_values=True),
        value_case("checked_empty_batch", "check_values", [], [0], [], S(2, 2), check_values=True),
    ]


def windowed_value_cases() -> list[Case]:
    w, S = "windowed", sentinel_pool
    return [
        value_case("windowed_appends", w, [101, 102, 103], [0, 1, 2, 3], [2, 0, 1], S(3, 8), start_cols=[5, 0, 3]),
        value_case("windowed_chunks", w, range(1, 10), [0, 4, 9], [1, 0], S(2, 12), start_cols=[3, 7]),
        value_case("windowed_from_zero_is_unwindowed", w, range(101, 111), [0, 3, 3, 7, 10], [2, 0, 4, 1], S(5, 6),
                   start_cols=[0, 0, 0, 0]),
        value_case("windowed_none_is_unwindowed", w, range(1, 8), [0, 3, 7], [1, 0], S(2, 5), start_cols=PythonValue(None)),
        value_case("windowed_clipped_at_width", w, range(1, 13), [0, 5, 12], [0, 1], S(2, 6), start_cols=[4, 5]),
        value_case("windowed_at_and_past_width", w, range(1, 10), [0, 3, 6, 9], [0, 1, 2], S(3, 6), start_cols=[6, 7, 2**40]),
        value_case("windowed_clipped_at_column_zero", w, range(1, 13), [0, 5, 12], [1, 0], S(2, 6), start_cols=[-2, -6]),
        value_case("windowed_behind_the_whole_segment", w, range(1, 7), [0, 3, 6], [0, 1], S(2, 5), start_cols=[-3, -40]),
        value_case("windowed_empty_windows", w, range(1, 7), [0, 0, 4, 2, 6], [0, 1, 2, 3], S(4, 5), start_cols=[1, 0, 3, 4]),
        value_case("windowed_empty_batch", w, [5, 6], [0], [], S(2, 3), start_cols=[]),
        value_case("windowed_width_zero", w, range(1, 5), [0, 2, 4], [1, 0], S(2, 0), start_cols=[0, 1]),
        value_case("windowed_repeated_row_disjoint_windows", w, range(1, 8), [0, 2, 5, 7], [1, 1, 1], S(2, 8),
                   start_cols=[0, 2, 6]),
        value_case("windowed_rows_outside_skipped", w, range(1, 7), [0, 2, 4, 6], [-1, 0, 3], S(3, 6), start_cols=[1, 2, 0]),
        value_case("windowed_negative_token_start", w, range(1, 9), [-3, 4, 8], [0, 1], S(2, 8), start_cols=[2, -2]),
        value_case("windowed_offsets_past_flat_in", w, range(1, 6), [3, 9, 40], [0, 1], S(2, 8), start_cols=[1, 0]),
        value_case("windowed_overlapping_segments", w, range(1, 9), [0, 6, 2, 8], [0, 1, 2], S(3, 6), start_cols=[3, -1, 2]),
        value_case("windowed_int64_extremes", w, range(1, 6), [I64[0], I64[1], I64[0], I64[1], I64[1] - 1, I64[1]],
                   [0, 1, 2, 3, 4], S(5, 4), start_cols=[I64[0], I64[0], I64[0] + 2, -5, I64[0]]),
        value_case("windowed_start_col_int64_max", w, range(1, 6), [0, 3, 5], [0, 1], S(2, 4), start_cols=[I64[1], I64[1] - 1]),
        value_case("windowed_start_near_int64_max", w, range(1, 6), [I64[1] - 2, I64[1], I64[1]], [0, 1], S(2, 4),
                   start_cols=[-1, I64[0]]),
        value_case("windowed_column_slice_pool", w, range(21, 33), [0, 5, 12], [2, 0], S(3, 7), start_cols=[4, -1],
                   layout="column_slice"),
        value_case("checked_windowed_past_width", "check_values", range(1, 8), [0, 3, 7], [1, 0], S(2, 5),
                   start_cols=[5, 3], check_values=True),
    ]


def int32_cases() -> list[Case]:
    """JAX's own index width: every rule at int32's extremes, where the column arithmetic would wrap in int32."""
    r, S = "int32", sentinel_pool
    lo, hi = I32
    return [
        value_case("i32_mixed_batch", r, range(101, 111), [0, 3, 3, 7, 10], [2, 0, 4, 1], S(5, 6), dtype="int32"),
        value_case("i32_tokens_at_extremes", r, [lo, hi, -1, 0, lo + 1], [0, 5], [0], S(1, 6), dtype="int32"),
        value_case("i32_rows_at_extremes", r, [1, 2, 3], [0, 1, 2, 3], [lo, hi, 1], S(2, 3), dtype="int32"),
        value_case("i32_offsets_full_span", r, range(1, 6), [lo, hi, lo], [0, 1], S(2, 4), dtype="int32"),
        value_case("i32_offsets_difference_wraps", r, range(1, 6), [-5, hi, hi - 2, hi], [0, 1, 2], S(3, 12), dtype="int32"),
        value_case("i32_start_near_int32_max", r, range(1, 6), [hi - 2, hi], [0], S(1, 4), dtype="int32"),
        value_case("i32_windowed_appends", r, [101, 102, 103], [0, 1, 2, 3], [2, 0, 1], S(3, 8), start_cols=[5, 0, 3],
                   dtype="int32"),
        value_case("i32_windowed_extremes", r, range(1, 6), [lo, hi, lo, hi, hi - 1, hi], [0, 1, 2, 3, 4], S(5, 4),
                   start_cols=[lo, lo, lo + 2, -5, lo], dtype="int32"),
        # start - s wraps in int32 both ways: a start near one end, a first column near the other.
        value_case("i32_window_difference_wraps", r, range(1, 9), [hi - 1, hi, lo, lo + 3, 0, 4], [0, 1, 2, 3, 4],
                   S(5, 6), start_cols=[lo, hi, hi - 1, lo + 1, hi], dtype="int32"),
        value_case("i32_start_col_near_limits", r, range(1, 6), [0, 3, 5], [0, 1], S(2, 4), start_cols=[hi, lo], dtype="int32"),
        value_case("i32_negative_start_col_reaches_tokens", r, range(1, 9), [-3, 5, 8], [0, 1], S(2, 6), start_cols=[-6, -1],
                   dtype="int32"),
        # Mixed widths: JAX (x64 on) promotes to the widest; torch refuses the int32 arrays.
        value_case("mixed_widths", r, range(1, 8), [0, 3, 7], [1, 0], S(2, 6), start_cols=[2, 0],
                   dtypes=("int32", "int64", "int32", "int64")),
        checked_error("i32_checked_start_cols_int32_min", f"{P} start_cols[0] must be >= 0, got {lo}", range(5),
                      [0, 2, 5], [0, 1], start_cols=[lo, -7], dtype="int32"),
        checked_error("i32_checked_rows_repeat", f"{P} req_pool_indices[3]=2 repeats req_pool_indices[1]", range(8),
                      [0, 2, 4, 6, 8, 8], [3, 2, 0, 2, 3], dtype="int32"),
        checked_error("i32_checked_offsets_past_flat_in", f"{P} offsets[bs] must be <= len(flat_in) (5), got {hi}",
                      range(5), [0, 2, hi], [0, 1], dtype="int32"),
    ]


def argument_error_cases() -> list[Case]:
    E, D = error_case, dtype_case
    return [
        E("flat_in_2d", "rank", V, f"{P} flat_in must be 1-D, got shape (2, 3)", flat_in=a("int64", (2, 3))),
        E("flat_in_0d", "rank", V, f"{P} flat_in must be 1-D, got shape ()", flat_in=a("int64", ())),
        E("offsets_2d", "rank", V, f"{P} offsets must be 1-D, got shape (3, 1)", offsets=a("int64", (3, 1), [0, 2, 5])),
        E("rows_0d", "rank", V, f"{P} req_pool_indices must be 1-D, got shape ()", req_pool_indices=a("int64", (), [1])),
        E("pool_1d", "rank", V, f"{P} pool_out must be 2-D, got shape (5,)", pool_out=a("int32", (5,))),
        E("pool_3d", "rank", V, f"{P} pool_out must be 2-D, got shape (2, 2, 2)", pool_out=a("int32", (2, 2, 2))),
        E("rank_before_dtype", "order", V, f"{P} offsets must be 1-D, got shape (1, 3)",
          flat_in=a("float32", (5,)), offsets=a("int64", (1, 3), [0, 2, 5])),
        E("first_rank_error_wins", "order", V, f"{P} req_pool_indices must be 1-D, got shape (1, 2)",
          req_pool_indices=a("int64", (1, 2), [1, 3]), pool_out=a("int32", (24,))),
        D("flat_in_float32", "flat_in", "float32", flat_in=a("float32", (5,))),
        D("flat_in_bfloat16", "flat_in", "bfloat16", flat_in=a("bfloat16", (5,))),
        D("flat_in_uint32", "flat_in", "uint32", flat_in=a("uint32", (5,))),
        D("offsets_bool", "offsets", "bool", offsets=a("bool", (3,), [0, 1, 1])),
        D("rows_int16", "req_pool_indices", "int16", req_pool_indices=a("int16", (2,), [1, 3])),
        D("pool_int64", "pool_out", "int64", pool_out=a("int64", (4, 6))),
        D("pool_uint8", "pool_out", "uint8", pool_out=a("uint8", (4, 6))),
        D("pool_float16", "pool_out", "float16", pool_out=a("float16", (4, 6))),
        D("dtype_before_length", "pool_out", "float32", offsets=a("int64", (7,)), pool_out=a("float32", (4, 6))),
        E("offsets_too_long", "length", V, f"{P} offsets length 4 != bs+1 (3)", offsets=a("int64", (4,), [0, 1, 2, 5])),
        E("offsets_too_short", "length", V, f"{P} offsets length 2 != bs+1 (3)", offsets=a("int64", (2,), [0, 5])),
        E("offsets_empty_for_empty_batch", "length", V, f"{P} offsets length 0 != bs+1 (1)",
          offsets=a("int64", (0,)), req_pool_indices=a("int64", (0,))),
        E("flat_in_list", "array", T, f"{P} flat_in must be an array, got list", flat_in=PythonValue([11, 12, 13, 14, 15])),
        E("offsets_int", "array", T, f"{P} offsets must be an array, got int", offsets=PythonValue(3)),
        E("pool_none", "array", T, f"{P} pool_out must be an array, got NoneType", pool_out=PythonValue(None)),
        E("not_array_before_rank", "order", T, f"{P} req_pool_indices must be an array, got str",
          flat_in=a("int64", (2, 3)), req_pool_indices=PythonValue("1, 3")),
        *(E(f"{arg}_on_host" if arg != "pool_out" else "pool_on_host", "device", V,
            f"{P} {arg} is on cpu but pool_out is on {{accelerator}}; all arrays must be on one device"
            if arg != "pool_out" else f"{P} flat_in is on {{accelerator}} but pool_out is on cpu; all arrays must be on one device",
            requires=("accelerator",), host=(arg,)) for arg in ("flat_in", "req_pool_indices", "pool_out")),
        E("start_cols_on_host", "device", V, f"{P} start_cols is on cpu but pool_out is on {{accelerator}}; all arrays must "
          "be on one device", requires=("accelerator",), host=("start_cols",), start_cols=a("int64", (2,), [0, 1])),
        E("pool_rows_share_memory", "writable", V,
          f"{P} pool_out cannot be written in place: strides (0, 1) make several cells share memory",
          requires=("in_place",), layout="broadcast_rows"),
        # start_cols, when given, is checked after the four, in each check.
        D("start_cols_float32", "start_cols", "float32", start_cols=a("float32", (2,), [0, 1])),
        E("start_cols_2d", "rank", V, f"{P} start_cols must be 1-D, got shape (2, 1)", start_cols=a("int64", (2, 1), [0, 1])),
        E("start_cols_0d", "rank", V, f"{P} start_cols must be 1-D, got shape ()", start_cols=a("int64", (), [0])),
        E("start_cols_too_long", "length", V, f"{P} start_cols length 3 != bs (2)", start_cols=a("int64", (3,), [0, 1, 2])),
        E("start_cols_too_short", "length", V, f"{P} start_cols length 1 != bs (2)", start_cols=a("int64", (1,), [0])),
        E("start_cols_for_empty_batch", "length", V, f"{P} start_cols length 1 != bs (0)",
          offsets=a("int64", (1,), [0]), req_pool_indices=a("int64", (0,)), start_cols=a("int64", (1,), [0])),
        E("start_cols_list", "array", T, f"{P} start_cols must be an array, got list", start_cols=PythonValue([0, 1])),
        E("start_cols_int", "array", T, f"{P} start_cols must be an array, got int", start_cols=PythonValue(0)),
        E("start_cols_array_after_the_four", "order", T, f"{P} pool_out must be an array, got list",
          pool_out=PythonValue([[0]]), start_cols=PythonValue([0, 1])),
        E("start_cols_array_before_rank", "order", T, f"{P} start_cols must be an array, got list",
          flat_in=a("int64", (2, 3)), start_cols=PythonValue([0, 1])),
        E("start_cols_rank_after_the_four", "order", V, f"{P} pool_out must be 2-D, got shape (24,)",
          pool_out=a("int32", (24,)), start_cols=a("int64", (1, 2), [0, 1])),
        E("start_cols_rank_before_dtype", "order", V, f"{P} start_cols must be 1-D, got shape (1, 2)",
          flat_in=a("float32", (5,)), start_cols=a("int64", (1, 2), [0, 1])),
        D("start_cols_dtype_after_the_four", "offsets", "uint8", offsets=a("uint8", (3,), [0, 2, 5]),
          start_cols=a("float32", (2,), [0, 1])),
        D("start_cols_dtype_before_length", "start_cols", "bool", offsets=a("int64", (4,), [0, 1, 2, 5]),
          start_cols=a("bool", (2,), [0, 1])),
        E("offsets_length_before_start_cols_length", "order", V, f"{P} offsets length 4 != bs+1 (3)",
          offsets=a("int64", (4,), [0, 1, 2, 5]), start_cols=a("int64", (3,), [0, 1, 2])),
    ]


def checked_error_cases() -> list[Case]:
    C = checked_error
    return [
        C("checked_negative_first_offset", f"{P} offsets[0] must be >= 0, got -2", range(5), [-2, 2, 5], [0, 1]),
        C("checked_decreasing_offsets", f"{P} offsets must be non-decreasing, got offsets[1]=4 > offsets[2]=3",
          range(6), [0, 4, 3, 2, 6], [0, 1, 2, 3]),
        C("checked_offsets_past_flat_in", f"{P} offsets[bs] must be <= len(flat_in) (5), got 6", range(5), [0, 2, 6], [0, 1]),
        C("checked_row_negative", f"{P} req_pool_indices[1]=-1 is outside [0, 4)", range(5), [0, 2, 5], [0, -1]),
        C("checked_row_past_pool", f"{P} req_pool_indices[0]=4 is outside [0, 4)", range(5), [0, 2, 5], [4, 9]),
        C("checked_rows_repeat", f"{P} req_pool_indices[3]=2 repeats req_pool_indices[1]", range(8), [0, 2, 4, 6, 8, 8],
          [3, 2, 0, 2, 3]),
        C("checked_first_rule_wins", f"{P} offsets[0] must be >= 0, got -1", range(5), [-1, 7, 6], [9, 9]),
        C("checked_start_cols_negative", f"{P} start_cols[1] must be >= 0, got -1", range(5), [0, 2, 5], [0, 1],
          start_cols=[3, -1]),
        C("checked_start_cols_int64_min", f"{P} start_cols[0] must be >= 0, got {I64[0]}", range(5), [0, 2, 5], [0, 1],
          start_cols=[I64[0], -7]),
        C("checked_rows_before_start_cols", f"{P} req_pool_indices[1]=0 repeats req_pool_indices[0]", range(5),
          [0, 2, 5], [0, 0], start_cols=[-1, -1]),
        C("checked_start_cols_after_offsets", f"{P} offsets[bs] must be <= len(flat_in) (5), got 6", range(5),
          [0, 2, 6], [0, 1], start_cols=[0, -2]),
    ]


def assign_case(name, rows, table, start, end, loc, batch_size="all", *, dtypes=("int64",) * 4, layout=None) -> Case:
    """An assignment case whose table ``assign_oracle`` computes; ``batch_size`` "all" passes ``len(rows)``."""
    bs = len(rows) if batch_size == "all" else batch_size
    arrays = dict(zip(("req_pool_indices", "start_offset", "end_offset", "out_cache_loc"), (rows, start, end, loc)))
    args = {n: ArrayData.of(np.asarray(list(v), dt)) for (n, v), dt in zip(arrays.items(), dtypes)}
    args = {"req_pool_indices": args["req_pool_indices"], "req_to_token": ArrayData.of(table), **args,
            "batch_size": PythonValue(bs)}
    expected = assign_oracle(list(rows), table, list(start), list(end), list(loc), len(rows) if bs is None else bs)
    return Case(name, "assign", args, Expect(pool=ArrayData.of(expected)), layout=layout, op=ASSIGN)


def assign_error(name, rule, cls, message, *, requires=(), host=(), layout=None, **changes) -> Case:
    """A valid assignment (bs 2, table 4 x 6) with ``changes``."""
    args = {"req_pool_indices": a("int64", (2,), [1, 3]), "req_to_token": ArrayData.of(sentinel_pool(4, 6)),
            "start_offset": a("int64", (2,), [0, 2]), "end_offset": a("int64", (2,), [2, 5]),
            "out_cache_loc": a("int64", (5,), [11, 12, 13, 14, 15]), "batch_size": PythonValue(2), **changes}
    return Case(name, rule, args, error(cls, message), requires=tuple(requires), host=tuple(host), layout=layout, op=ASSIGN)


def assign_cases() -> list[Case]:
    A, E, S = assign_case, assign_error, sentinel_pool
    i32 = ("int32",) * 4
    return [
        A("assign_decode", [2, 0, 1], S(3, 8), [5, 0, 3], [6, 1, 4], [101, 102, 103]),
        A("assign_extend", [1, 0], S(2, 10), [0, 3], [4, 8], range(201, 210)),
        A("assign_empty_requests", [0, 1, 2], S(3, 6), [2, 4, 0], [2, 6, 0], [7, 8]),
        A("assign_empty_batch", [], S(2, 3), [], [], []),
        A("assign_batch_size_none", [1, 0], S(2, 6), [0, 1], [2, 4], range(1, 6), batch_size=None),
        A("assign_batch_size_smaller", [1, 0, 9, -4], S(2, 6), [0, 2, -50, 3], [3, 4, 90, 1], range(1, 9), batch_size=2),
        A("assign_batch_size_zero", [1, 0], S(2, 4), [0, 1], [2, 3], range(1, 5), batch_size=0),
        A("assign_clipped_at_width", [0, 1], S(2, 6), [4, 0], [9, 8], range(1, 14)),
        A("assign_window_past_width", [0, 1, 2], S(3, 5), [5, 7, 2**40], [7, 9, 2**40 + 2], range(1, 7)),
        A("assign_window_before_column_zero", [0, 1], S(2, 6), [-2, -9], [3, -5], range(1, 10)),
        A("assign_rows_outside_skipped", [-1, 0, 3, I64[1], 2], S(3, 5), [0, 1, 0, 0, 2], [2, 3, 1, 2, 4], range(1, 10)),
        A("assign_negative_length", [0, 1, 2], S(3, 6), [0, 5, 1], [3, 2, 4], range(1, 7)),
        A("assign_negative_length_leaves_the_running_sum", [1, 0, 1], S(2, 5), [5, 0, 0], [1, 3, 2], range(1, 7)),
        A("assign_out_cache_loc_short", [0, 1], S(2, 8), [0, 1], [4, 7], range(1, 7)),
        A("assign_int32_inputs", [1, 0], S(2, 8), [2, 0], [5, 4], range(31, 38), dtypes=i32),
        A("assign_mixed_dtypes", [1, 0], S(2, 8), [2, 0], [5, 4], range(31, 38), dtypes=("int32", "int64", "int32", "int64")),
        A("assign_int32_extremes", [0, 1], S(2, 4), [I32[0], I32[1] - 2], [I32[1], I32[1]], range(1, 6), dtypes=i32),
        # int32 lengths whose running sum passes 2**31: saturated at len(out_cache_loc), nothing read past it.
        A("assign_int32_running_sum_saturates", [0, 1, 2], S(3, 4), [I32[0], 0, 1], [I32[1], I32[1], 3], range(1, 6),
          dtypes=i32),
        A("assign_values_wrap_to_int32", [0], S(1, 6), [0], [6], [2**31, -(2**31) - 1, 2**40 + 5, I64[0], I64[1], -1]),
        A("assign_int64_extremes", [0, 1, 2, 3], S(4, 4), [I64[0], 0, I64[1] - 1, -3], [I64[1], 2, I64[1], 2], range(1, 7)),
        A("assign_int64_extremes_widest_last", [3, 2, 1, 0], S(4, 4), [-3, I64[1] - 1, 0, I64[0]], [2, I64[1], 2, I64[1]],
          range(1, 10)),
        A("assign_int64_difference_wraps_positive", [0, 1], S(2, 4), [I64[1], 0], [I64[0], 2], [1, 2, 3]),
        A("assign_negative_lengths_at_int64_min_write_nothing", [0, 1], S(2, 4), [0, 0], [-1, I64[0]], range(1, 6)),
        A("assign_repeated_row_disjoint_windows", [1, 1], S(2, 8), [0, 3], [3, 6], range(1, 7)),
        A("assign_column_slice_table", [2, 0], S(3, 7), [1, 0], [5, 7], range(21, 32), layout="column_slice"),
        E("assign_rows_float32", "dtype", T, f"{PA} req_pool_indices must be int32 or int64, got float32",
          req_pool_indices=a("float32", (2,), [1, 3])),
        E("assign_table_int64", "dtype", T, f"{PA} req_to_token must be int32, got int64", req_to_token=a("int64", (4, 6))),
        E("assign_start_offset_bool", "dtype", T, f"{PA} start_offset must be int32 or int64, got bool",
          start_offset=a("bool", (2,), [0, 1])),
        E("assign_out_cache_loc_uint8", "dtype", T, f"{PA} out_cache_loc must be int32 or int64, got uint8",
          out_cache_loc=a("uint8", (5,))),
        E("assign_table_1d", "rank", V, f"{PA} req_to_token must be 2-D, got shape (6,)", req_to_token=a("int32", (6,))),
        E("assign_end_offset_2d", "rank", V, f"{PA} end_offset must be 1-D, got shape (2, 1)", end_offset=a("int64", (2, 1), [2, 5])),
        E("assign_out_cache_loc_list", "array", T, f"{PA} out_cache_loc must be an array, got list",
          out_cache_loc=PythonValue([11, 12])),
        E("assign_rank_before_dtype", "order", V, f"{PA} end_offset must be 1-D, got shape (1, 2)",
          req_pool_indices=a("float32", (2,), [1, 3]), end_offset=a("int64", (1, 2), [2, 5])),
        E("assign_dtype_before_batch_size", "order", T, f"{PA} out_cache_loc must be int32 or int64, got float32",
          out_cache_loc=a("float32", (5,)), batch_size=PythonValue(-1)),
        E("assign_batch_size_float", "assign", T, f"{PA} batch_size must be an int, got float", batch_size=PythonValue(2.0)),
        E("assign_batch_size_bool", "assign", T, f"{PA} batch_size must be an int, got bool", batch_size=PythonValue(True)),
        E("assign_batch_size_negative", "assign", V, f"{PA} batch_size -1 is outside [0, 2]: len(req_pool_indices) is 2",
          batch_size=PythonValue(-1)),
        E("assign_batch_size_past_rows", "assign", V, f"{PA} batch_size 3 is outside [0, 2]: len(req_pool_indices) is 2",
          batch_size=PythonValue(3)),
        E("assign_batch_size_past_end_offset", "assign", V, f"{PA} batch_size 2 is outside [0, 1]: len(end_offset) is 1",
          end_offset=a("int64", (1,), [2])),
        E("assign_out_cache_loc_on_host", "device", V, f"{PA} out_cache_loc is on cpu but req_to_token is on "
          "{accelerator}; all arrays must be on one device", requires=("accelerator",), host=("out_cache_loc",)),
        E("assign_table_on_host", "device", V, f"{PA} req_pool_indices is on {{accelerator}} but req_to_token is on cpu; "
          "all arrays must be on one device", requires=("accelerator",), host=("req_to_token",)),
        E("assign_table_rows_share_memory", "writable", V,
          f"{PA} req_to_token cannot be written in place: strides (0, 1) make several cells share memory",
          requires=("in_place",), layout="broadcast_rows"),
    ]


def all_cases() -> list[Case]:
    cases = (value_cases() + windowed_value_cases() + int32_cases() + argument_error_cases() + checked_error_cases()
             + assign_cases())
    return [modes(case) for case in cases]


def render() -> str:
    return '{"cases": [\n' + ",\n".join(json.dumps(c.to_json()) for c in all_cases()) + "\n]}\n"  # a case a line


if __name__ == "__main__":
    CASES_FILE.write_text(render())
    print(f"wrote {len(all_cases())} cases to {CASES_FILE}")
