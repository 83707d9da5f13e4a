"""benchmarks/memcheck.py: its corpus covers what it says, and a smoke run on the CPU finds every kernel right."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import numpy as np

from tests.tools.frontends import needs_frontends

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "memcheck.py"
spec = importlib.util.spec_from_file_location("memcheck", SCRIPT)
memcheck = importlib.util.module_from_spec(spec)
spec.loader.exec_module(memcheck)


def test_32_batches_meet_every_geometry_and_layout_windowed_and_not():
    seen = {(memcheck.GEOMETRIES[(i // 2) % 4], memcheck.batch(i, 0, np.int64)[2], i % 2) for i in range(32)}
    assert len(seen) == 4 * len(memcheck.LAYOUTS) * 2


def test_the_assignment_takes_the_batch_in_its_index_dtype():
    for i in range(8):
        (flat_in, offsets, rows, pool, start_cols), (r, table, start, end, loc, bs), _ = memcheck.batch(i, 1, np.int32)
        assert end.dtype == start.dtype == np.int32 and 0 <= bs <= len(rows) and loc is flat_in and table is pool
        assert (start_cols is None) == (i % 2 == 0)


@needs_frontends
def test_a_smoke_run_on_the_cpu_passes():
    done = subprocess.run([sys.executable, str(SCRIPT), "--cases", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.rstrip().endswith("OK"), done.stdout + done.stderr[-3000:]
