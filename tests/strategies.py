"""Hypothesis strategies shared by every backend's tests: random batches and bad arguments.

Batches mix well-formed requests with malformed values: rows negative or past
the pool (and the last row), segments of negative length, starts below zero,
ends past ``flat_in``, token ids over the whole int64 range. In-range rows are
distinct, so the expected pool is unique. Pools are filled with random
distinct sentinels, never zeros.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

token_ids = st.one_of(
    st.integers(0, 200_000),  # realistic vocabularies
    st.integers(INT64_MIN, INT64_MAX),  # anything an int64 holds: the kernel keeps the low 32 bits
)


# The shapes of a property on a backend that compiles a program per shape (JAX's, and the Pallas kernels its
# interpreters run): (n_rows, width, bs, n_tokens) as fractions of the strategy's maxima, rounded up. A new shape
# costs such a backend a trace, a lowering and a compile (0.1-0.3 s an example on the CPU machine), a new value
# nothing, so its examples share these few programs and differ in every value: rows, lengths, offsets, first
# columns, token ids. Each shape puts a different bound first: the pool's rows, its width, the tokens. The edges of
# shapes (one row, one column, an empty batch, no tokens) are conformance cases, which every backend runs.
FEW_SHAPES = ((1, 1, 1, 1), (1 / 4, 1 / 4, 1, 1), (1, 1, 1 / 2, 1 / 8), (1 / 2, 1, 1 / 4, 1 / 2))


def draw_shape(draw, maxima, few_shapes: bool, least=(1, 1, 0, 0)) -> tuple:
    """``(n_rows, width, bs, n_tokens)``: each from ``least`` to ``maxima`` independently, or one of ``FEW_SHAPES``
    (every size then at least 1)."""
    if not few_shapes:
        return tuple(draw(st.integers(lo, hi)) for lo, hi in zip(least, maxima))
    fractions = draw(st.sampled_from(FEW_SHAPES))
    return tuple(max(1, math.ceil(f * hi)) for f, hi in zip(fractions, maxima))


@st.composite
def batches(draw, max_rows=8, max_width=24, max_bs=8, max_tokens=64, few_shapes=False):
    """``(flat_in, offsets, req_pool_indices, pool_out)`` as numpy arrays; shapes from ``FEW_SHAPES`` if ``few_shapes``."""
    n_rows, width, bs, n_tokens = draw_shape(draw, (max_rows, max_width, max_bs, max_tokens), few_shapes)
    flat_in = np.asarray(draw(st.lists(token_ids, min_size=n_tokens, max_size=n_tokens)), dtype=np.int64)

    free = list(draw(st.permutations(range(n_rows))))
    rows = []
    for _ in range(bs):
        kind = draw(st.sampled_from(["free", "free", "free", "last", "negative", "past"]))
        if kind == "last" and n_rows - 1 in free:
            free.remove(n_rows - 1)
            rows.append(n_rows - 1)
        elif kind in ("free", "last") and free:
            rows.append(free.pop())
        elif kind == "negative":
            rows.append(draw(st.one_of(st.just(-1), st.integers(INT64_MIN, -1))))
        else:
            rows.append(draw(st.one_of(st.just(n_rows), st.integers(n_rows, INT64_MAX))))

    start = draw(st.one_of(st.just(0), st.just(0), st.integers(-4, 6)))
    lengths = draw(st.lists(st.integers(-3, width + 4), min_size=bs, max_size=bs))
    offsets = np.concatenate([[start], start + np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)

    base = draw(st.integers(-(2**31), 2**31 - 1 - n_rows * width))
    pool = (base + np.arange(n_rows * width, dtype=np.int64)).astype(np.int32).reshape(n_rows, width)
    return flat_in, offsets, np.asarray(rows, dtype=np.int64), pool


def sentinel_pool(n_rows: int, width: int, seed: int = 0) -> np.ndarray:
    """A pool of distinct random-looking sentinels (never zeros) for hand-made tests."""
    rng = np.random.default_rng(seed)
    base = int(rng.integers(-(2**30), 2**30))
    return (base - np.arange(n_rows * width, dtype=np.int64)).astype(np.int32).reshape(n_rows, width)


def large_batch(bs: int, width: int, seed: int = 0):
    """A well-formed batch of ``bs`` requests over a pool of ``bs + 1`` rows, rows shuffled."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, width + 3, size=bs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat_in = rng.integers(INT64_MIN, INT64_MAX, size=int(offsets[-1]), dtype=np.int64, endpoint=True)
    rows = rng.permutation(bs + 1)[:bs].astype(np.int64)
    return flat_in, offsets, rows, sentinel_pool(bs + 1, width, seed)


@st.composite
def tile_batches(draw, block: int):
    """``batches`` sized to span a few tiles of ``block`` columns, the pool optionally widened to a multiple of ``block``.

    The widened pool (fresh distinct sentinels) is the aligned layout, where
    every row starts on a tile; widths as drawn cover ``seq + 1`` and every
    other misalignment. The batch's rows, bad ones included, stay valid or
    invalid as drawn: the row count does not change.
    """
    flat_in, offsets, rows, pool = draw(batches(max_rows=6, max_width=4 * block + 3, max_bs=6, max_tokens=10 * block))
    if draw(st.booleans()):
        width = -(-pool.shape[1] // block) * block
        pool = sentinel_pool(pool.shape[0], width, seed=draw(st.integers(0, 2**16)))
    return flat_in, offsets, rows, pool


start_col_values = st.one_of(
    st.integers(INT64_MIN, INT64_MAX),  # anything an int64 holds: windows behind column 0, past the width, wrapping
    st.sampled_from([INT64_MIN, INT64_MIN + 1, -1, INT64_MAX - 1, INT64_MAX]),
)


def start_cols_for(draw, offsets, width: int) -> np.ndarray:
    """A first column per request: mostly appends inside the row (``0 .. C``), some just outside, some anywhere."""
    bs = len(offsets) - 1
    kinds = st.sampled_from(["inside", "inside", "inside", "edge", "edge", "any"])
    cols = []
    for _ in range(bs):
        kind = draw(kinds)
        if kind == "inside":
            cols.append(draw(st.integers(0, width)))
        elif kind == "edge":
            cols.append(draw(st.integers(-width - 4, width + 4)))
        else:
            cols.append(draw(start_col_values))
    return np.asarray(cols, dtype=np.int64)


@st.composite
def windowed_batches(draw, max_rows=8, max_width=24, max_bs=8, max_tokens=64, few_shapes=False):
    """``batches`` with ``start_cols``: ``(flat_in, offsets, req_pool_indices, pool_out, start_cols)``.

    Offsets sometimes take int64 extremes too, so that a negative first column moves a start past ``2**63 - 1``.
    """
    flat_in, offsets, rows, pool = draw(batches(max_rows, max_width, max_bs, max_tokens, few_shapes))
    if draw(st.integers(0, 5)) == 0 and offsets.shape[0] > 1:
        offsets = offsets.copy()
        offsets[draw(st.integers(0, offsets.shape[0] - 1))] = draw(st.sampled_from([INT64_MIN, INT64_MAX, INT64_MAX - 3, 2**62]))
    return flat_in, offsets, rows, pool, start_cols_for(draw, offsets, pool.shape[1])


@st.composite
def extreme_windowed_batches(draw, max_bs=4, width=5, n_tokens=8):
    """Offsets and start_cols anywhere in int64 (non-monotone, wrapping differences), distinct rows, a small pool."""
    bs = draw(st.integers(1, max_bs))
    edges = st.one_of(st.integers(-30, 30), st.integers(INT64_MIN, INT64_MAX), st.sampled_from([INT64_MIN, INT64_MAX]))
    offsets = np.asarray(draw(st.lists(edges, min_size=bs + 1, max_size=bs + 1)), dtype=np.int64)
    cols = np.asarray(draw(st.lists(st.one_of(st.integers(-12, 12), start_col_values), min_size=bs, max_size=bs)), dtype=np.int64)
    flat_in = np.arange(1, n_tokens + 1, dtype=np.int64)
    return flat_in, offsets, np.arange(bs, dtype=np.int64), sentinel_pool(bs, width, draw(st.integers(0, 99))), cols
