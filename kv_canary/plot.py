"""``kv-canary plot BENCH.json --out DIR`` (or ``python -m kv_canary.plot``): the pictures of a ``kv-canary bench`` run.

Contract: ``main(argv) -> int`` reads the JSON ``kv-canary bench --json``
prints (``meta``, ``rows``; docs/performance.json is the last run's) and
writes, into ``--out`` (default: the current folder), the PNGs it has figures
for, returning 0; an unreadable file or one with nothing to draw is exit 2
with the reason on stderr. Both pictures are drawn from the figures alone, on
any machine (no GPU):

- ``GRID_PNG``: the Triton kernel over the same-run per-request-tile
  baseline at every case, flushed and chained (a ratio under 1: ours ahead);
- ``HOST_PNG``: the torch launcher's host time per call in the serving
  pattern (median, 90th percentile as a whisker) beside one eager torch op,
  sglang's launch and the launcher with each piece of its machinery off.

Needs matplotlib: the ``plot`` extra (``pip install 'kv-canary[plot]'``).
Importing this module without it raises ImportError with that hint.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

try:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
except ImportError as error:  # the optional extra is not installed
    raise ImportError(
        "kv_canary.plot needs matplotlib: pip install 'kv-canary[plot]' (or pip install matplotlib)"
    ) from error

from kv_canary import bench_host
from kv_canary.bench_markdown import case_label, stamp

GRID_PNG = "performance-grid.png"
HOST_PNG = "performance-host.png"
# (key in a row's results, legend) of the grid picture.
RATIOS = (("triton_over_baseline", "flushed (L2 flushed before each call)"),
          ("triton_over_baseline_chained", "chained (16 launches in one CUDA graph)"))


def grid_figure(meta: dict, rows: list[dict]):
    """Ours over the baseline per case (None where no row has either ratio)."""
    rows = [r for r in rows if any(key in r["results"] for key, _ in RATIOS)]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(11, 5.5), layout="constrained")
    width = 0.4
    for i, (key, label) in enumerate(RATIOS):
        xs = [k + (i - 0.5) * width for k in range(len(rows))]
        ax.bar(xs, [r["results"].get(key, float("nan")) for r in rows], width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), [f"{case_label(r)} ({_tokens(r['tokens'])})" for r in rows], rotation=60, ha="right",
                  fontsize=8)
    ax.set_ylabel("Triton kernel / sglang-design baseline (device time)")
    ax.set_ylim(0.5, max(1.1, max(r["results"].get(k, 0) for r in rows for k, _ in RATIOS) + 0.05))
    ax.set_title("torch: ours against the baseline over the grid (under 1: ours ahead)\n" + _run(meta), fontsize=9)
    ax.legend(loc="lower left", fontsize=8)
    return fig


def host_figure(meta: dict):
    """The serving-pattern host times (None where the run has no host figures)."""
    host = meta.get("host")
    if not host:
        return None
    fig, ax = plt.subplots(figsize=(11, 5), layout="constrained")
    columns = [(key, title) for key, title in bench_host.COLUMNS
               if any(f"{p}/{key}" in host["patterns"] for p in bench_host.PATTERNS)]
    width = 0.8 / len(columns)
    for i, (key, title) in enumerate(columns):
        found = [host["patterns"].get(f"{p}/{key}") for p in bench_host.PATTERNS]
        medians = [f["median_us"] if f else float("nan") for f in found]
        whiskers = [[0] * len(found), [f["p90_us"] - f["median_us"] if f else 0 for f in found]]
        xs = [k + (i - (len(columns) - 1) / 2) * width for k in range(len(found))]
        ax.bar(xs, medians, width, yerr=whiskers, capsize=2, label=title)
    ax.set_xticks(range(len(bench_host.PATTERNS)), [bench_host.PATTERN_TITLES[p] for p in bench_host.PATTERNS])
    ax.set_yscale("log")
    ticks = [t for t in (1, 2, 5, 10, 20, 50, 100, 200, 500) if t <= 2 * max(f["p90_us"] for f in host["patterns"].values())]
    ax.set_yticks(ticks, [str(t) for t in ticks])
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylabel("host us per call (log scale; median,\nwhisker to the 90th percentile)")
    ax.set_title("torch: the launcher's host time in the serving pattern\n" + _run(meta), fontsize=9)
    ax.legend(fontsize=8, ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    return fig


def _tokens(n: int) -> str:
    return f"{n / 2**20:.1f}M" if n >= 2**20 else f"{n / 2**10:.0f}K" if n >= 2**10 else str(n)


def _run(meta: dict) -> str:
    """The run's date, commit and machine, in a figure's title."""
    return stamp({k: v for k, v in meta.items() if k in ("date", "commit", "gpu", "torch", "triton", "jax")})


def write(saved: dict, out: pathlib.Path) -> list[pathlib.Path]:
    """Draw every picture ``saved`` (a bench JSON object) has figures for into ``out``; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fig in ((GRID_PNG, grid_figure(saved["meta"], saved["rows"])), (HOST_PNG, host_figure(saved["meta"]))):
        if fig is not None:
            fig.savefig(out / name, dpi=110, metadata={"Software": None})  # no version stamp: same figures, same file
            plt.close(fig)
            written.append(out / name)
    return written


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kv-canary plot", description=__doc__.splitlines()[0])
    ap.add_argument("bench_json", metavar="BENCH.json", help="what kv-canary bench --json printed (docs/performance.json)")
    ap.add_argument("--out", default=".", metavar="DIR", help="the folder to write the PNGs into (default: here)")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        saved = json.loads(pathlib.Path(args.bench_json).read_text())
        saved["meta"], saved["rows"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"kv-canary plot: {args.bench_json} is not the JSON of kv-canary bench --json ({error})", file=sys.stderr)
        return 2
    written = write(saved, pathlib.Path(args.out))
    if not written:
        print(f"kv-canary plot: {args.bench_json} has no figures to draw", file=sys.stderr)
        return 2
    print("\n".join(str(path) for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
