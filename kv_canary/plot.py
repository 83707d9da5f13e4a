"""``kv-canary plot``: one bar chart of ``performance.json``'s device-time ratios (ours over sglang's design).

Contract: ``run(args) -> (exit code, payload, text)`` (``kv_canary.cli``): a file that is not what ``kv-canary bench
--write`` writes is a usage error; without matplotlib, or without device-time rows, nothing is drawn (exit 3).
"""

from __future__ import annotations

import json
import pathlib

from kv_canary.cli import EXIT_OK, nothing_ran, usage_error


def run(args):
    source = pathlib.Path(args.bench_json)
    try:
        parts = json.loads(source.read_text())["parts"]
        assert isinstance(parts, dict)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as error:
        raise usage_error(f"{source} is not what kv-canary bench --write writes ({type(error).__name__}: {error})")
    rows = parts.get("device", {}).get("rows")
    if not rows:
        raise nothing_ran(f"{source} holds no device-time rows (kv-canary bench --device --write measures them)")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise nothing_ran("matplotlib is not installed; pip install 'kv-canary[plot]' installs it") from None
    out = pathlib.Path(args.out) if args.out else source.with_suffix(".png")
    figure, axes = plt.subplots(figsize=(max(8, 0.45 * len(rows)), 4.5))
    x = range(len(rows))
    for shift, suffix, name in ((-0.2, "", "flushed"), (0.2, "_chained", "chained (CUDA graph)")):
        axes.bar([i + shift for i in x], [r[f"ours{suffix}_us"] / r[f"sglang{suffix}_us"] for r in rows], 0.4, label=name)
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_xticks(list(x), [r["workload"] for r in rows], rotation=60, ha="right", fontsize=8)
    axes.set_ylabel("device time, ours / sglang's design")
    measured = parts["device"].get("measured", {})
    axes.set_title(f"kv-canary scatter, {measured.get('gpu', 'GPU')}, {measured.get('date', '')} (under 1: ours ahead)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    return EXIT_OK, {"written": [str(out)]}, str(out)
