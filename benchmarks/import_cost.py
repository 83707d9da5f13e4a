"""What importing a frontend costs a fresh process, over importing its framework alone.

    python benchmarks/import_cost.py            # 7 rounds: about a minute and a half on the CPU machine
    python benchmarks/import_cost.py --rounds 3 --json

A serving runtime starts many worker processes, and each pays its imports. Per round, one fresh interpreter per
statement below, in turns (the order the same every round, so a slow minute of the machine falls on every statement
alike); per statement the median wall time of its rounds, and the two differences that matter: ``import
kv_canary_torch`` less ``import torch``, ``import kv_canary_jax`` less ``import jax``. Whether a frontend's import
leaves ``torch._dynamo`` out of the process (an eager worker never traces, and Dynamo is most of a second of a start)
is reported as a yes or no, from one more child after the rounds. A framework that is not installed is skipped and
said so.
Exit status 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATEMENTS = {
    "torch": "import torch",
    "kv_canary_torch": "import kv_canary_torch",
    "jax": "import jax",
    "kv_canary_jax": "import kv_canary_jax",
}
FRAMEWORK = {"torch": "torch", "kv_canary_torch": "torch", "jax": "jax", "kv_canary_jax": "jax"}
NO_DYNAMO = "import sys, kv_canary_torch; print('torch._dynamo' not in sys.modules)"


def fresh(statement: str) -> str:
    """What a fresh interpreter that runs ``statement`` prints (this repository first on its path)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-c", statement], env=env, cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()


def fresh_seconds(statement: str) -> float:
    """Wall seconds of ``fresh(statement)``."""
    began = time.perf_counter()
    fresh(statement)
    return time.perf_counter() - began


def measure(rounds: int) -> dict:
    """The module docstring's figures: per statement the median and the range of its seconds, the two differences,
    whether Dynamo stays out, and what was skipped."""
    present = {name: importlib.util.find_spec(FRAMEWORK[name]) is not None for name in STATEMENTS}
    times = {name: [] for name in STATEMENTS if present[name]}
    for _ in range(rounds):
        for name in times:
            times[name].append(fresh_seconds(STATEMENTS[name]))
    figures = {name: {"median_s": statistics.median(t), "min_s": min(t), "max_s": max(t)} for name, t in times.items()}
    out = {"rounds": rounds, "python": sys.version.split()[0], "seconds": figures,
           "skipped": sorted(name for name, ok in present.items() if not ok)}
    for frontend, framework in (("kv_canary_torch", "torch"), ("kv_canary_jax", "jax")):
        if frontend in figures:
            out[f"{frontend}_over_{framework}_s"] = figures[frontend]["median_s"] - figures[framework]["median_s"]
    if "kv_canary_torch" in figures:
        out["kv_canary_torch_leaves_dynamo_out"] = fresh(NO_DYNAMO) == "True"
    return out


def render(figures: dict) -> str:
    lines = [f"fresh-process imports, medians of {figures['rounds']} rounds in turns (Python {figures['python']}):"]
    for name, f in figures["seconds"].items():
        lines.append(f"  {STATEMENTS[name]:26s} {f['median_s']:.3f} s  ({f['min_s']:.3f}-{f['max_s']:.3f})")
    for key in ("kv_canary_torch_over_torch_s", "kv_canary_jax_over_jax_s"):
        if key in figures:
            lines.append(f"  {key}: {figures[key]:+.3f} s")
    if "kv_canary_torch_leaves_dynamo_out" in figures:
        lines.append(f"  torch._dynamo left out by import kv_canary_torch: {figures['kv_canary_torch_leaves_dynamo_out']}")
    if figures["skipped"]:
        lines.append(f"  skipped (framework not installed): {', '.join(figures['skipped'])}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="the figures as one JSON object")
    args = parser.parse_args(argv)
    figures = measure(args.rounds)
    print(json.dumps(figures, indent=1) if args.json else render(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
