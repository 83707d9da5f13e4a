"""Inputs of ``assign_req_to_token_pool`` for the tests: random batches (hypothesis) and the literal loop.

``assignments()`` draws ``(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
batch_size)`` as numpy arrays of int32 or int64 (the table int32, filled with distinct negative sentinels):
half the draws are what sglang's callers pass (distinct rows in the table, ``0 <= start <= end <= C``, as many
slots as the lengths sum to), half anything (negative lengths, windows past the width or before column 0, rows
outside the table, too few slots, int64 extremes, ``batch_size`` below the lengths).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st

from shared_spec.build_cases import sentinel_pool
from shared_spec.cases import ASSIGN, load_cases
from tests.contract import INTERPRETED_CASE_EVERY, sampled_cases

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INDEX_DTYPES = ("int32", "int64")


def conformance_sweeps(names, interpreted) -> list:
    """``(name, cases)`` parameters of a backend's assignment conformance test: every case where the backend
    compiles once; where it is ``interpreted`` (a compile per case), ``tests.contract.sampled_cases`` by default
    and every case under ``-m slow``."""
    cases = load_cases(op=ASSIGN)
    params = []
    for name in names:
        if name in interpreted:
            params.append(pytest.param(name, sampled_cases(cases, INTERPRETED_CASE_EVERY), id=f"{name}-sampled"))
            params.append(pytest.param(name, cases, id=f"{name}-every-case", marks=pytest.mark.slow))
        else:
            params.append(pytest.param(name, cases, id=name))
    return params


def literal_assignment(rows, table, start, end, out_cache_loc, batch_size=None) -> np.ndarray:
    """sglang's loop in Python integers with the spec's clipping: each length ``max(end - start, 0)``, exact, clipped
    to ``len(out_cache_loc)``."""
    out = np.array(table, copy=True)
    n_rows, width = out.shape
    bs = len(rows) if batch_size is None else batch_size
    pt = 0
    for r in range(bs):
        s, e, row = int(start[r]), int(end[r]), int(rows[r])
        for j in range(max(0, -s, -pt), max(0, min(e - s, width - s, len(out_cache_loc) - pt))):
            if 0 <= row < n_rows:
                out[row, s + j] = np.int64(out_cache_loc[pt + j]).astype(np.int32)
        pt += min(max(e - s, 0), len(out_cache_loc))
    return out


@st.composite
def well_formed(draw, max_rows=8, max_width=24, max_bs=8, dtypes=None):
    n_rows = draw(st.integers(1, max_rows))
    width = draw(st.integers(1, max_width))
    bs = draw(st.integers(0, n_rows))
    rows = np.asarray(draw(st.permutations(range(n_rows)))[:bs])
    start = np.asarray([draw(st.integers(0, width)) for _ in range(bs)])
    end = np.asarray([draw(st.integers(int(s), width)) for s in start])
    total = int((end - start).sum())
    out_cache_loc = np.asarray(draw(st.lists(st.integers(0, 2**31 - 1), min_size=total, max_size=total)))
    return _typed(draw, rows, sentinel_pool(n_rows, width), start, end, out_cache_loc, bs, dtypes)


@st.composite
def anything(draw, max_rows=6, max_width=12, max_bs=8, dtypes=None):
    n_rows = draw(st.integers(0, max_rows))
    width = draw(st.integers(0, max_width))
    length = draw(st.integers(0, max_bs))
    small = st.integers(-4, max_width + 4)
    rows = np.asarray([draw(st.integers(-2, n_rows + 1)) for _ in range(length)])
    start = np.asarray([draw(small) for _ in range(length)])
    end = np.asarray([draw(small) for _ in range(length)])
    out_cache_loc = np.asarray(draw(st.lists(st.integers(INT64_MIN, INT64_MAX), max_size=3 * max_width)))
    bs = draw(st.integers(0, length))
    return _typed(draw, rows, sentinel_pool(n_rows, width), start, end, out_cache_loc, bs, dtypes, wide_values=True)


def _typed(draw, rows, table, start, end, out_cache_loc, bs, dtypes, wide_values=False):
    chosen = dtypes or [draw(st.sampled_from(INDEX_DTYPES)) for _ in range(4)]
    if not wide_values or chosen[3] == "int32":
        out_cache_loc = out_cache_loc.astype(np.int64).astype(np.int32).astype(chosen[3])
    return (
        rows.astype(chosen[0]), table, start.astype(chosen[1]), end.astype(chosen[2]), out_cache_loc.astype(chosen[3]), bs,
    )


def assignments(max_rows=6, max_width=12, max_bs=8, dtypes=None):
    """Well-formed or malformed batches, half each (see the module docstring)."""
    return st.one_of(well_formed(max_rows, max_width, max_bs, dtypes), anything(max_rows, max_width, max_bs, dtypes))


# int64 extremes: (start, end) pairs whose int64 differences and their sums wrap; the spec's lengths are exact and
# clipped to len(out_cache_loc), so its running sum does neither.
EXTREME_WINDOWS = (
    ([INT64_MIN, 0, INT64_MAX - 1, -3], [INT64_MAX, 2, INT64_MAX, 2]),
    ([-3, INT64_MAX - 1, 0, INT64_MIN], [2, INT64_MAX, 2, INT64_MAX]),  # the widest last: the others write first
    ([0, INT64_MAX, 1], [INT64_MAX, INT64_MIN, 3]),
    ([INT64_MAX, 0], [INT64_MIN, 2]),  # end - start wraps to 1, but end < start: nothing, and the sum stays at 0
    ([INT64_MIN, INT64_MIN], [INT64_MIN + 3, INT64_MAX]),
    # Negative lengths down to -2**63 (a wrapping sum would make the second segment [-1, 2**63 - 1]): nothing written.
    ([0, 0], [-1, INT64_MIN]),
)
