"""docs/performance.md from one ``kv-canary bench`` run: a table per question, each with the columns that answer it.

Contract: ``document(meta, rows)`` is the markdown of a run's figures as
``kv-canary bench --json`` prints them (``meta``: the machine and versions,
``copy_bw_tbs``, ``empty_kernel_us``, optionally ``host`` from
``kv_canary.bench_host.measure``, ``date`` and ``commit``; ``rows``: the
``bench.Row`` fields as dicts). A run that lacks a figure leaves its cell
empty and a table whose columns are all empty out. ``write(path, text)``
writes it, keeping from the file already at ``path`` the step section
(``STEP_TITLE``: ``kv-canary bench --step`` measures it, the bench does not).
``python -m kv_canary.bench_markdown BENCH.json`` prints the document of a
saved run. ``prose(text)`` and ``number(value, digits=2)`` are the paragraph
and the table cell the other bench modes' tables use too.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import subprocess
import sys
import textwrap

STEP_TITLE = "## JAX: what the scatter adds to a jitted step"

# (section title, what it answers, columns: (key in a row's results, title)); the case and its tokens come first.
TABLES = (
    ("## torch: device time against the baseline",
     "The Triton kernel against a same-run kernel of sglang's per-request-tile design (`kv_canary/baseline_kernels.py`), "
     "us, median. *Flushed*: the L2 flushed before each call as `triton.testing.do_bench` flushes it, CUDA events "
     "around each call, the runs of a case taking turns call by call. *Chained*: 16 launches back to back in one CUDA "
     "graph, no flush (a captured serving step). A ratio under 1 is ours ahead.",
     (("torch_triton_us", "triton"), ("per_request_tile_us", "baseline"), ("triton_over_baseline", "ratio"),
      ("torch_triton_chained_us", "triton chained"), ("per_request_tile_chained_us", "baseline chained"),
      ("triton_over_baseline_chained", "ratio chained"))),
    ("## torch: device time against the floor",
     "The same flushed Triton figure beside what no kernel goes below: the bytes' floor (12 bytes a token at the copy "
     "bandwidth of the run), a copy of the same bytes and an empty Triton kernel (the flushed method's own floor); "
     "the torch-vectorized backend; sglang's later kernel as measured on 2026-11-30 (`bench.SGLANG_B_US`, not this run).",
     (("triton_bw_pct", "% copy BW"), ("same_bytes_copy_us", "same-bytes copy"), ("triton_over_copy", "triton / copy"),
      ("empty_kernel_us", "empty kernel"), ("triton_over_empty_us", "triton - empty"),
      ("torch_torch_us", "torch-vec"), ("sglang_b_us", "sglang anchor"))),
    ("## JAX: the implementations on the device",
     "Us per application in a jitted chain of 16 (minus one, over 15). *Device*: profiler kernel timestamps, the "
     "device clock, for the two Pallas kernels (Triton lowering `pallas`, Mosaic GPU `mosaic`). *Chained*: host "
     "wall clock of the same chain, which also holds the host work XLA does per kernel (*host*: chained minus device). "
     "Measured first, in a process that imports no torch.",
     (("jax_pallas_device_us", "pallas device"), ("jax_mosaic_device_us", "mosaic device"),
      ("mosaic_over_pallas_device", "mosaic / pallas"), ("jax_pallas_us", "pallas chained"),
      ("jax_mosaic_us", "mosaic chained"), ("jax_xla_us", "XLA chained"),
      ("pallas_host_us", "pallas host"), ("mosaic_host_us", "mosaic host"))),
    ("## JAX: wall time of one jitted call",
     "Us per call of a jitted, pool-donating function (median of 5 rounds of back-to-back calls), beside a jitted "
     "function that only returns the donated pool (the dispatch floor).",
     (("jax_pallas_wall_us", "pallas"), ("jax_mosaic_wall_us", "mosaic"), ("jax_xla_wall_us", "XLA"),
      ("jax_dispatch_floor_wall_us", "jit floor"))),
)


def case_label(row: dict) -> str:
    """``256 x 8192``, ``ragged 64 x 32768``, ``256 x 32768, rows seq wide`` or a skewed workload's name."""
    if isinstance(row["ragged"], str):
        return row["ragged"].replace("_", " ")
    label = ("ragged " if row["ragged"] else "") + f"{row['bs']} x {row['seq']}"
    return label + (", rows seq wide" if row["width"] == row["seq"] else "")


def table(rows: list[dict], columns) -> list[str]:
    """The markdown lines of one table: the case, its tokens, then each column some row has (none: no lines)."""
    present = [(key, title) for key, title in columns if any(key in r["results"] for r in rows)]
    if not present:
        return []
    lines = ["| case | tokens | " + " | ".join(title for _, title in present) + " |", "|---|---:|" + "---:|" * len(present)]
    for r in rows:
        cells = [f"{r['results'][key]:.2f}" if key in r["results"] else "" for key, _ in present]
        lines.append(f"| {case_label(r)} | {r['tokens']} | " + " | ".join(cells) + " |")
    return lines


def stamp(meta: dict) -> str:
    """When, at which commit and on what the run was measured (the date and commit: now and HEAD where meta has none)."""
    date = meta.get("date") or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    commit = meta.get("commit") or _head()
    skip = ("copy_bw_tbs", "empty_kernel_us", "host", "date", "commit")
    machine = ", ".join(f"{k} {v}" for k, v in meta.items() if k not in skip)
    return f"Measured {date} at commit {commit}; {machine}."


def _head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=pathlib.Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


HEADER = """# Performance

The last `kv-canary bench` run on a GPU, a table per question (method: `kv_canary/bench.py`'s docstring;
`kv-canary bench --write docs/performance.md` writes this page again, `kv-canary bench --json` the figures it comes from;
`kv-canary plot BENCH.json --out docs/` draws the pictures). Times are medians in microseconds.
Cases: sglang's grid (`bs x seq`, rows `seq + 1` wide), larger and ragged batches, two pools whose rows are a multiple
of 128 wide (*rows seq wide*) and sglang's four skewed workloads. What was tried and why: [performance-notes.md](performance-notes.md).
"""


def prose(text: str) -> str:
    """A paragraph in lines of at most ``WIDTH`` characters."""
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False)


WIDTH = 120


def number(value, digits: int = 2) -> str:
    """A table cell: ``value`` with ``digits`` decimals, empty for None (a figure a run could not give)."""
    return "" if value is None else f"{value:.{digits}f}"


def document(meta: dict, rows: list[dict]) -> str:
    """The whole page for one run (see the module docstring)."""
    from kv_canary import bench_host

    run = stamp(meta)
    if "copy_bw_tbs" in meta:
        run += (f" Copy bandwidth in this run: {meta['copy_bw_tbs']:.2f} TB/s; an empty Triton kernel: "
                f"{meta['empty_kernel_us']:.2f} us flushed.")
    parts = [HEADER.strip(), prose(run)]
    if rows:
        parts.append("![ours against the baseline over the grid](performance-grid.png)")
    for title, what, columns in TABLES:
        lines = table(rows, columns)
        if lines:
            parts += [title, prose(what), "\n".join(lines)]
    if "host" in meta:
        parts += ["## torch: host time in the serving pattern",
                  prose("The launcher called as a serving runtime calls it (shapes that change every call; "
                        "`kv_canary/bench_host.py`), beside one eager torch op, sglang's launch and the launcher with a piece "
                        "of its machinery off. " + " ".join(bench_host.HEADER.split())
                        + (f" Measured {meta['host']['measured']}." if "measured" in meta["host"] else "")),
                  "![host time per call in the serving pattern](performance-host.png)",
                  bench_host.render(meta["host"])]
    return "\n\n".join(parts) + "\n"


def write(path, text: str) -> None:
    """Write ``text`` to ``path``, keeping the file's sections from the step section on (if any) where ``text`` has
    none: the step section and the ones after it (the incremental step, the windowed kernels, the assignment) come from
    other commands than the page's run."""
    path = pathlib.Path(path)
    old = path.read_text() if path.exists() else ""
    if STEP_TITLE in old and STEP_TITLE not in text:
        text = text.rstrip("\n") + "\n\n" + old[old.index(STEP_TITLE):].rstrip("\n") + "\n"
    path.write_text(text)


if __name__ == "__main__":
    saved = json.loads(pathlib.Path(sys.argv[1]).read_text())
    sys.stdout.write(document(saved["meta"], saved["rows"]))
