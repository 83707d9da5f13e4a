"""The one source of inputs: named workloads (benchmarks), shapes (property tests) and hostile batches (tests, probes).

- ``WORKLOADS``: sglang's benchmark grid, larger, ragged and row-aligned cases, and sglang's skewed workloads, by
  name (``"256x8192"``, ``"64x32768r"`` ragged, ``"256x32768a"`` rows a multiple of 128 wide, or a skewed name);
  tags say where each is used (``"primary"``: the bench's default set; ``"small"``: the grid's cases below 256K
  tokens, ``bench --quick``'s set).
  ``make_batch(name)`` builds one as numpy arrays, as sglang's benchmark does.
- ``decode_step``: the serving pattern: every request appends new tokens at its current length (``start_cols``).
- ``PROPERTY_SHAPES``: the few shapes property tests of compiled backends draw from, as fractions of their maxima.
- ``hostile_batch``: a batch whose every value may be malformed: offsets, rows and first columns at the extremes of
  the index dtype, decreasing and overlapping segments, rows outside the pool.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

MEDIUM = 64  # the tokens of each request of sglang's "many_medium" workload
# sglang's skewed workloads: (bs, {position: length}) over requests of 0-3 tokens; None: every request MEDIUM tokens.
SKEWED = {
    "one_long_among_short_bs256": (256, {128: 32768}),
    "one_long_among_short_bs64": (64, {32: 32768}),
    "few_long_among_short_bs256": (256, {i: 16384 for i in range(0, 256, 64)}),
    "many_medium_bs256": (256, None),
}


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    bs: int
    seq: int  # the longest request; the pool is seq + 1 columns wide (sglang's), or seq where aligned
    kind: str = "full"  # "full", "ragged" (lengths uniform in [1, seq]), "aligned", or a SKEWED name
    tags: tuple[str, ...] = ()

    @property
    def tokens(self) -> int:
        """At most this many tokens (the exact count of a full or aligned batch)."""
        return self.bs * self.seq


def _workload(bs: int, seq: int, kind: str = "full") -> Workload:
    suffix = {"full": "", "ragged": "r", "aligned": "a"}[kind]
    tags = ("primary",) + (("small",) if bs * seq < 2**18 else ())
    return Workload(f"{bs}x{seq}{suffix}", bs, seq, kind, tags)


WORKLOADS: tuple[Workload, ...] = (
    *(_workload(bs, seq) for bs in (1, 8, 64, 256) for seq in (128, 512, 2048, 8192)),
    _workload(256, 32768), _workload(1024, 2048), _workload(4096, 512),
    _workload(256, 8192, "ragged"), _workload(64, 32768, "ragged"),
    _workload(256, 32768, "aligned"), _workload(4096, 4096, "aligned"),
    *(Workload(name, bs, max(long.values()) if long else MEDIUM, name, ("primary", "skewed"))
      for name, (bs, long) in SKEWED.items()),
)
FORMS = "BSxSEQ with an optional suffix r (ragged) or a (rows SEQ wide), such as 256x8192 or 64x32768r, or " + ", ".join(SKEWED)


def workload(name: str) -> Workload:
    """The workload of that name, or one of that form; ValueError naming the forms otherwise."""
    for w in WORKLOADS:
        if w.name == name:
            return w
    match = re.fullmatch(r"([1-9][0-9]*)x([1-9][0-9]*)([ra]?)", name)
    if match is None:
        raise ValueError(f"{name!r} is not a workload: {FORMS}")
    return _workload(int(match[1]), int(match[2]), {"": "full", "r": "ragged", "a": "aligned"}[match[3]])


def make_batch(w: Workload | str, seed: int = 0, dtype=np.int64):
    """numpy ``(flat_in, offsets, req_pool_indices, pool_out)`` as sglang's benchmark builds them; index arrays of
    ``dtype``, rows ``1..bs`` of a pool of ``bs + 1`` rows (at least 4)."""
    w = workload(w) if isinstance(w, str) else w
    rng = np.random.default_rng(seed)
    if w.kind in SKEWED:
        _, long = SKEWED[w.kind]
        lengths = rng.integers(0, 3, size=w.bs, endpoint=True) if long else np.full(w.bs, MEDIUM)
        for position, length in (long or {}).items():
            lengths[position] = length
    elif w.kind == "ragged":
        lengths = rng.integers(1, w.seq, size=w.bs, endpoint=True)
    else:
        lengths = np.full(w.bs, w.seq)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(dtype)
    flat_in = rng.integers(0, 2**31 - 1, size=int(offsets[-1]), dtype=dtype)
    rows = np.arange(1, w.bs + 1, dtype=dtype)
    pool = np.full((max(w.bs + 1, 4), w.seq if w.kind == "aligned" else w.seq + 1), -7, dtype=np.int32)
    return flat_in, offsets, rows, pool


def decode_step(bs: int, context: int, new_tokens: int = 1, seed: int = 0, dtype=np.int64):
    """The serving pattern: ``(flat_in, offsets, req_pool_indices, pool_out, start_cols)`` where each of ``bs``
    requests appends ``new_tokens`` at a length drawn below ``context`` (the pool ``context`` wide)."""
    rng = np.random.default_rng(seed)
    offsets = (np.arange(bs + 1) * new_tokens).astype(dtype)
    flat_in = rng.integers(0, 2**31 - 1, size=bs * new_tokens, dtype=dtype)
    rows = rng.permutation(bs + 1)[:bs].astype(dtype)
    start_cols = rng.integers(0, context - new_tokens, size=bs, endpoint=True).astype(dtype)
    return flat_in, offsets, rows, np.full((bs + 1, context), -7, dtype=np.int32), start_cols


# (n_rows, width, bs, n_tokens) as fractions of a property's maxima, rounded up: a backend that compiles per shape
# (JAX, the interpreted Pallas kernels) compiles a handful of programs, and every value is drawn anew.
PROPERTY_SHAPES = ((1, 1, 1, 1), (1 / 4, 1 / 4, 1, 1), (1, 1, 1 / 2, 1 / 8), (1 / 2, 1, 1 / 4, 1 / 2))


def property_shape(index: int, maxima) -> tuple[int, ...]:
    """``PROPERTY_SHAPES[index]`` scaled to ``maxima`` (every size at least 1)."""
    return tuple(max(1, math.ceil(f * m)) for f, m in zip(PROPERTY_SHAPES[index], maxima))


def hostile_batch(rng: np.random.Generator, n_rows: int, width: int, bs: int, n_tokens: int, dtype=np.int64,
                  windowed: bool = False):
    """``(flat_in, offsets, req_pool_indices, pool_out, start_cols)`` of these sizes, index arrays of ``dtype``
    (``start_cols`` None unless ``windowed``), mixing well-formed requests with malformed values.

    Segments are mostly consecutive and in range; some have negative length, start below 0 or end past
    ``flat_in``; an offset now and then sits at the dtype's extremes. Rows are distinct rows of the pool (so that
    the expected pool is unique: repeated rows are conformance cases), some negative, past it or at the extremes.
    First columns are mostly appends inside the row,
    some at the edges, some anywhere in the dtype. Tokens span the dtype; the pool holds distinct sentinels.
    """
    info = np.iinfo(dtype)
    extremes = np.array([info.min, info.min + 1, -1, info.max - 1, info.max], dtype=np.int64)

    def sometimes(values, p, choices):
        hit = rng.random(values.shape) < p
        return np.where(hit, rng.choice(choices, size=values.shape), values)

    lengths = rng.integers(-3, width + 4, size=bs)
    offsets = np.concatenate([[rng.integers(-4, 7) * (rng.random() < 0.3)], np.cumsum(lengths)]).astype(np.int64)
    offsets = sometimes(offsets, 0.05, extremes)
    outside = np.concatenate([extremes, [n_rows, n_rows + 1]])  # rows the spec skips
    rows = np.concatenate([rng.permutation(n_rows), rng.choice(outside, size=max(bs - n_rows, 0))])[:bs]
    rows = sometimes(rows, 0.15, outside)
    flat_in = sometimes(rng.integers(0, 200_000, size=n_tokens), 0.3, extremes)
    start_cols = None
    if windowed:
        start_cols = rng.integers(0, width + 1, size=bs)
        start_cols = sometimes(start_cols, 0.2, np.concatenate([extremes, [-width - 1, -1, width, width + 1]]))
        start_cols = start_cols.astype(dtype)
    pool = (-1_000_000 - rng.permutation(n_rows * width)).astype(np.int32).reshape(n_rows, width)
    return flat_in.astype(dtype), offsets.astype(dtype), rows.astype(dtype), pool, start_cols
