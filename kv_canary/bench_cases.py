"""The cases ``kv-canary bench`` times and their inputs, as sglang's benchmark builds them (numpy only).

``CASES``: sglang's grid, the larger and ragged cases, two pools whose rows are a multiple of 128 wide, and
sglang's skewed workloads (``SKEWED``); ``parse_case`` reads a ``--case``; ``make_inputs`` builds one case's
arrays; ``SGLANG_B_US`` and the bytes per token are what the figures are compared with.
"""

from __future__ import annotations

import re

import numpy as np


# sglang's skewed workloads (its benchmark file for this kernel, ``benchmark_skewed``), by name: (bs, the
# requests' lengths other than 0-3 tokens drawn uniformly, by position, or None: every request MEDIUM tokens).
# In every one the pool is bs + 1 rows by the longest length plus 1.
SKEWED = {
    "one_long_among_short_bs256": (256, {128: 32768}),
    "one_long_among_short_bs64": (64, {32: 32768}),
    "few_long_among_short_bs256": (256, {i: 16384 for i in range(0, 256, 64)}),
    "many_medium_bs256": (256, None),
}
MEDIUM = 64
# (bs, seq, ragged, aligned): sglang's grid, then the larger and ragged cases, all
# with rows seq + 1 wide as in sglang's benchmark; then two pools whose rows are
# seq wide, a multiple of 128 (every row starts 16-byte aligned); then sglang's
# skewed workloads, ``ragged`` naming one of SKEWED and ``seq`` its longest length.
CASES = (
    [(bs, seq, False, False) for bs in (1, 8, 64, 256) for seq in (128, 512, 2048, 8192)]
    + [(256, 32768, False, False), (1024, 2048, False, False), (4096, 512, False, False)]
    + [(256, 8192, True, False), (64, 32768, True, False)]
    + [(256, 32768, False, True), (4096, 4096, False, True)]
    + [(bs, max(long.values()) if long else MEDIUM, name, False) for name, (bs, long) in SKEWED.items()]
)
# sglang's later kernel (per request x 1024-column tile), device us on one H200,
# from the perf anchors measured 2026-11-30 (torch 2.11, triton 3.6).
SGLANG_B_US = {
    (1, 128, False): 5.09, (1, 512, False): 5.22, (1, 2048, False): 4.77, (1, 8192, False): 5.06,
    (8, 128, False): 5.34, (8, 512, False): 10.82, (8, 2048, False): 7.68, (8, 8192, False): 5.89,
    (64, 128, False): 5.15, (64, 512, False): 4.80, (64, 2048, False): 4.93, (64, 8192, False): 6.85,
    (256, 128, False): 5.02, (256, 512, False): 5.86, (256, 2048, False): 7.62, (256, 8192, False): 13.18,
    (256, 32768, False): 33.44, (1024, 2048, False): 13.22, (4096, 512, False): 13.50,
    (256, 8192, True): 8.70, (64, 32768, True): 9.02,
}
BYTES_PER_TOKEN = 12
# On a TPU, per token: XLA's int64 -> int32 conversion reads 8 and writes 4,
# the kernel's DMAs read 4 and write 4 (kv_canary_jax/pallas_mosaic_tpu.py).
TPU_BYTES_PER_TOKEN = 20
CASE_FORMS = ("BSxSEQ, optionally suffixed r (ragged lengths) and a (rows SEQ wide), such as 256x8192 or 64x32768r, "
              "or a skewed workload: " + ", ".join(SKEWED))


def parse_case(text: str) -> tuple:
    """``"256x8192"`` -> ``(bs, seq, ragged, aligned)``: suffix ``r`` ragged lengths, ``a`` rows ``seq`` wide instead of ``seq + 1``;
    a name of ``SKEWED`` -> that workload's case. Anything else (or a size of 0) raises ValueError naming ``CASE_FORMS``."""
    if text in SKEWED:
        return next(case for case in CASES if case[2] == text)
    match = re.fullmatch(r"([1-9][0-9]*)x([1-9][0-9]*)(r?)(a?)", text)
    if match is None:
        raise ValueError(f"{text!r} is not a case: {CASE_FORMS}")
    return int(match[1]), int(match[2]), bool(match[3]), bool(match[4])


def selected_cases(args) -> list[tuple]:
    """``CASES`` (or with ``--case`` those cases, in that order), with ``--quick`` only those of at most 2M tokens."""
    cases = [parse_case(text) for text in args.case] if args.case else CASES
    return [c for c in cases if not args.quick or c[0] * c[1] <= 2**21]


def make_inputs(bs: int, seq: int, ragged, seed: int = 0, aligned: bool = False):
    """numpy ``(flat_in, offsets, req_pool_indices, pool_out)`` as in sglang's benchmark.

    The pool is ``seq + 1`` columns wide as in sglang's benchmark, or ``seq``
    wide with ``aligned`` (rows whose width is a multiple of 128 for the
    benchmark's sizes: every row starts 16-byte aligned). ``ragged``: False,
    True (lengths uniform in ``[1, seq]``) or a name of ``SKEWED``."""
    rng = np.random.default_rng(seed)
    if isinstance(ragged, str):
        _, long = SKEWED[ragged]
        lengths = rng.integers(0, 3, size=bs, endpoint=True) if long else np.full(bs, MEDIUM)
        for position, length in (long or {}).items():
            lengths[position] = length
    else:
        lengths = rng.integers(1, seq, size=bs, endpoint=True) if ragged else np.full(bs, seq)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat_in = rng.integers(0, 2**31 - 1, size=int(offsets[-1]), dtype=np.int64)
    rows = np.arange(1, bs + 1, dtype=np.int64)
    pool = np.full((max(bs + 1, 4), seq if aligned else seq + 1), -7, dtype=np.int32)
    return flat_in, offsets, rows, pool
