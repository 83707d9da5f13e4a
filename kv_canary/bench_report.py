"""What ``kv-canary bench`` reports: a case's row, the ratios the targets are stated in, the machine and
versions, the tables (``kv_canary.bench_markdown`` writes the page), progress on stderr and the output."""

from __future__ import annotations

import dataclasses
import json
import platform
import subprocess
import sys

from kv_canary import bench_markdown
from kv_canary.bench_method import DEVICE_CLOCK_IMPLEMENTATIONS


@dataclasses.dataclass
class Row:
    bs: int
    seq: int
    ragged: bool | str  # a name of SKEWED for sglang's skewed workloads
    width: int  # the pool's columns: seq + 1, or seq for an aligned case
    tokens: int
    floor_us: float
    results: dict  # measure name -> microseconds (or percent for *_pct)


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("torch", "triton", "jax", "jaxlib"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            pass
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        out["gpu"], out["driver"] = (s.strip() for s in smi.splitlines()[0].split(","))
    except (OSError, subprocess.CalledProcessError, ValueError):
        pass
    return out


# Every figure the page shows, (key in a row's results, column title): the tables' columns (kv_canary.bench_markdown).
COLUMNS = tuple(column for _, _, columns in bench_markdown.TABLES for column in columns)


def derived(measures: dict, empty_us: float) -> dict:
    """The ratios the targets are stated in, from one case's measures (same run).

    The empty kernel is the case's own (``measures["empty_kernel_us"]``,
    interleaved with the kernel) where there is one, else ``empty_us``.
    """
    out = {}
    triton = measures.get("torch_triton_us")
    for key, (kernel, base) in {
        "triton_over_copy": ("torch_triton_us", "same_bytes_copy_us"),
        "triton_over_baseline": ("torch_triton_us", "per_request_tile_us"),
        "triton_over_baseline_chained": ("torch_triton_chained_us", "per_request_tile_chained_us"),
    }.items():
        if measures.get(kernel) and measures.get(base):
            out[key] = measures[kernel] / measures[base]
    if triton:
        out["triton_over_empty_us"] = triton - measures.get("empty_kernel_us", empty_us)
    for suffix in ("", "_device"):
        pallas, mosaic = measures.get(f"jax_pallas{suffix}_us"), measures.get(f"jax_mosaic{suffix}_us")
        if pallas and mosaic:
            out[f"mosaic_over_pallas{suffix}"] = mosaic / pallas
            out[f"mosaic_minus_pallas{suffix}_us"] = mosaic - pallas
    for impl in DEVICE_CLOCK_IMPLEMENTATIONS:  # chained wall clock minus device clock: host work per application
        chained, device = measures.get(f"jax_{impl}_us"), measures.get(f"jax_{impl}_device_us")
        if chained is not None and device is not None:
            out[f"{impl}_host_us"] = chained - device
    return out


def table_lines(rows: list[Row], columns) -> list[str]:
    """A markdown table of the rows: the case, its floor, then each of ``columns`` some row has."""
    present = [(k, title) for k, title in columns if any(k in r.results for r in rows)]
    head = "| bs | seq | ragged | width | tokens | floor us | " + " | ".join(t for _, t in present) + " |"
    lines = [head, "|" + "---|" * (6 + len(present))]
    for r in rows:
        cells = [f"{r.results[k]:.2f}" if k in r.results else "" for k, _ in present]
        lines.append(
            f"| {r.bs} | {r.seq} | {ragged_label(r.ragged)} | {r.width} | {r.tokens} | {r.floor_us:.2f} | "
            + " | ".join(cells) + " |"
        )
    return lines


def ragged_label(ragged) -> str:
    """A case's ``ragged`` as the tables print it: yes, no, or the skewed workload's name."""
    return ragged if isinstance(ragged, str) else ("yes" if ragged else "no")


def render(rows: list[Row], meta: dict) -> str:
    """docs/performance.md for this run: a table per question (``kv_canary.bench_markdown.document``)."""
    return bench_markdown.document(meta, [dataclasses.asdict(r) for r in rows])


def progress(label: str, measures: dict) -> None:
    """One status line per case on stderr: stdout carries only the table, the JSON or the child's result."""
    print(f"{label}: " + ", ".join(f"{k}={v:.2f}" for k, v in measures.items()), file=sys.stderr, flush=True)


def output(args, rows: list[Row], meta: dict, table: str, header: str) -> int:
    """The table (or with ``--json`` the rows) on stdout; with ``--write`` the table under ``header`` to a file."""
    if args.json:
        print(json.dumps({"meta": meta, "rows": [dataclasses.asdict(r) for r in rows]}, indent=1))
    else:
        print(table)
    if args.write:  # the step section of the page there is kept: kv-canary bench --step measures it
        bench_markdown.write(args.write, header + table.rstrip("\n") + "\n")
    return 0
