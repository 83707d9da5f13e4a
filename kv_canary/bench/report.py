"""What ``kv-canary bench`` reports: the ratio summary, the markdown page, ``docs/performance.{md,json}``.

Contract: ``stamp(part, quick, seconds)``: when, on what, by which command and how long a part was measured;
``ratio_summary(rows, suffix)``: the device bar's figures; ``render(parts) -> str``: the page for ``{part: figures}`` (each part's figures
carry their ``measured`` stamp; absent parts are left out); ``write(directory, parts) -> [paths]``: ``parts`` merged
into ``directory/performance.json`` (the parts measured replace theirs, the others stay), ``performance.md`` rendered
again from the merged figures.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import pathlib
import platform
import statistics
import subprocess

from kv_canary.bench import incremental, jax_step, timing
from kv_canary.bench.torch_parts import HOST_POOL

LARGE_TOKENS = 2**18
FLAGS = {"device": "--device", "host": "--host", "first_call": "--first-call", "incremental": "--incremental",
         "step": "--step", "assign": "--assign"}


def stamp(part: str, quick: bool = False, seconds: float = 0.0) -> dict:
    found = {"date": datetime.date.today().isoformat(), "python": platform.python_version(), "seconds": round(seconds),
             "command": f"kv-canary bench {FLAGS[part]}{' --quick' * quick} --write"}
    for name in ("torch", "triton", "jax", "jaxlib"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True, timeout=30).stdout
        found["gpu"], found["driver"] = (s.strip() for s in smi.splitlines()[0].split(","))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        pass
    return found


def ratio_summary(rows: list[dict], suffix: str = "") -> dict:
    """At ``LARGE_TOKENS`` tokens and more: the worst and mean ratio ours / sglang's; below: the worst difference."""
    out = {}
    large = [r for r in rows if r["tokens"] >= LARGE_TOKENS]
    small = [r for r in rows if r["tokens"] < LARGE_TOKENS]
    if large:
        ratios = {r["workload"]: r[f"ours{suffix}_us"] / r[f"sglang{suffix}_us"] for r in large}
        worst = max(ratios, key=ratios.get)
        out["large"] = {"workloads": len(large), "worst_ratio": ratios[worst], "worst": worst,
                        "mean_ratio": statistics.fmean(ratios.values())}
    if small:
        diffs = {r["workload"]: r[f"ours{suffix}_us"] - r[f"sglang{suffix}_us"] for r in small}
        worst = max(diffs, key=diffs.get)
        out["small"] = {"workloads": len(small), "worst_diff_us": diffs[worst], "worst": worst}
    return out


def table(head: list[str], rows: list[list]) -> str:
    cells = [[f"{c:.2f}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in cells])


def _stamp_line(m: dict) -> str:
    machine = f"{m.get('gpu', 'unknown GPU')} (driver {m.get('driver', '?')})"
    versions = ", ".join(f"{k} {m[k]}" for k in ("python", "torch", "triton", "jax", "jaxlib") if k in m)
    return f"*`{m['command']}` ({m.get('seconds', '?')} s), {m['date']}, {machine}; {versions}.*"


def _ratio(a, b) -> str:
    return f"{a / b:.2f}" if b else ""


def _mp(f: dict) -> str:
    return f"{f['median']:.2f} / {f['p90']:.2f}"


def device_md(p: dict) -> str:
    s = ratio_summary(p["rows"]), ratio_summary(p["rows"], "_chained")
    lines = []
    for label, found in zip(("flushed", "chained"), s):
        if large := found.get("large"):
            lines.append(f"- {label}, at 256K tokens and more ({large['workloads']} workloads): ratio worst "
                         f"{large['worst_ratio']:.3f} ({large['worst']}), mean {large['mean_ratio']:.3f}")
        if small := found.get("small"):
            lines.append(f"- {label}, below 256K tokens ({small['workloads']} workloads): ours at most "
                         f"{small['worst_diff_us']:+.2f} us over sglang's design ({small['worst']})")
    rows = [[r["workload"], r["tokens"], r["ours_us"], r["sglang_us"], _ratio(r["ours_us"], r["sglang_us"]),
             r["ours_chained_us"], r["sglang_chained_us"], _ratio(r["ours_chained_us"], r["sglang_chained_us"])]
            for r in p["rows"]]
    return ("The launcher's Triton kernel against a same-run kernel of sglang's design (`kv_canary/baseline.py`) over "
            "`shared_spec.arg_specs`' workloads; us, median. *Flushed*: the L2 flushed before each call, CUDA events "
            f"around it, the two taking turns call by call. *Chained*: {timing.CHAIN} calls back to back in one CUDA "
            "graph, no flush. A ratio under 1 is ours ahead.\n\n" + "\n".join(lines) + "\n\n"
            + table(["workload", "tokens", "ours", "sglang's design", "ratio", "ours chained", "sglang's chained",
                     "ratio chained"], rows))


def host_md(p: dict) -> str:
    rows = [[pattern, _mp(f["ours"]), _mp(f["ours_start_cols"]), _mp(f["sglang"]), _mp(f["torch_op"]),
             _ratio(f["ours"]["median"], f["sglang"]["median"])] for pattern, f in p["patterns"].items()]
    return ("The launcher called as a server calls it, each call's inputs made beforehand: *new_n* a new "
            "`len(flat_in)` every call (64 requests), *new_bs_n* bs (32-95) and N new every call, *repeat* the same "
            f"tensors; pool {HOST_POOL[0]} x {HOST_POOL[1]}; {timing.HOST_ROUNDS} rounds of {timing.HOST_CALLS} calls "
            "with no sync between calls, the runs taking turns round by round; host us per call, median / 90th "
            "percentile.\n\n"
            + table(["pattern", "ours", "ours with start_cols", "sglang's launcher", "one torch op (pool.add_(0))",
                     "ours / sglang"], rows))


def first_call_md(p: dict) -> str:
    rows = [[name, f["import_s"], f["first_call_s"], f["early_us"], f["settled_us"], _ratio(f["early_us"], f["settled_us"])]
            for name, f in p["launchers"].items()]
    return ("A fresh process per launcher with empty Triton and Inductor caches; calls of a new "
            "`len(flat_in)` each (the host pattern *new_n*), host time, no sync between calls.\n\n"
            + table(["launcher", "import s", "first call s", "calls 3-50 us", "settled us (calls 501-1000)",
                     "early / settled"], rows))


def incremental_md(p: dict) -> str:
    rows = [[f"{r['requests']} x {r['context']}",
             f"{r['full_pinned']['wall_us']:.1f} / {r['full_pinned']['host_us']:.1f} ({r['full_pinned']['snapshot_us']:.1f})",
             f"{r['incremental']['wall_us']:.1f} / {r['incremental']['host_us']:.1f}",
             f"{r['incremental_eager']['wall_us']:.1f} / {r['incremental_eager']['host_us']:.1f}",
             f"{r['pinned_over_incremental']:.1f}x", r["timer_us"]] for r in p["rows"]]
    return ("One decode step (a new token per request): sglang's full-snapshot step (every request's token ids "
            "concatenated into a pinned buffer, copied, scattered from column 0) against `IncrementalWriter.step` (the "
            f"new tokens alone at each request's length). Us per step, median over {incremental.ROUNDS} interleaved "
            f"rounds of {incremental.CALLS} steps: "
            "*wall* until the device's synchronize returns after the step, *host* until the step returns, *snapshot* "
            "the concatenation alone; *timer*: an empty step's wall.\n\n"
            + table(["requests x context", "full pinned wall / host (snapshot)", "incremental wall / host",
                     "without graphs wall / host", "full / incremental", "timer"], rows))


def step_md(rows: list[dict], what: str, plain: str) -> str:
    names = list(dict.fromkeys(n for r in rows for n in r["marginal_us"]))
    body = []
    for r in rows:
        cells = []
        for n in names:
            m, vs = r["marginal_us"].get(n), r["vs_plain"].get(n)
            cells.append("" if m is None else f"{m['median']:.1f}" + (f" ({vs:.2f}x)" if vs is not None and n != "plain" else ""))
        body.append([r["case"], r.get("tokens", r.get("slots")), f"{r['step_us']:.0f}", f"{r['noise_us']:.1f}", *cells])
    return (f"What {what} adds to a jitted step of {jax_step.MATMULS} bf16 {jax_step.SIZE} x {jax_step.SIZE} matmuls "
            "(the pool donated, synced every step), with JAX's defaults (x64 off, int32 indices); us, the median over "
            f"{jax_step.ROUNDS} interleaved rounds of the per-round difference to the same step without it, and in "
            f"brackets over *plain*, {plain} a JAX user writes by hand (`jnp.repeat` and one "
            "`.at[].set(mode=\"drop\")`). *noise*: the range of the step's round medians.\n\n"
            + table(["case", "tokens" if "tokens" in rows[0] else "slots", "step us", "noise us", *names], body))


def assign_md(p: dict) -> str:
    parts = []
    if "device" in p:
        rows = [[r["case"], r["slots"], r["ours_us"], r["sglang_us"], _ratio(r["ours_us"], r["sglang_us"]),
                 r["ours_chained_us"], r["sglang_chained_us"], _ratio(r["ours_chained_us"], r["sglang_chained_us"])]
                for r in p["device"]]
        parts.append("`assign_req_to_token_pool_func`'s Triton kernel against a same-run kernel of sglang's design "
                     "(`kv_canary/baseline.py`), flushed and chained as for the scatter; us, median.\n\n"
                     + table(["case", "slots", "ours", "sglang's design", "ratio", "ours chained", "sglang's chained",
                              "ratio chained"], rows))
    if "host" in p:
        rows = [[pattern, _mp(f["ours"]), _mp(f["sglang"]), _mp(f["torch_op"]),
                 _ratio(f["ours"]["median"], f["sglang"]["median"])] for pattern, f in p["host"].items()]
        parts.append("Host us per call, median / 90th percentile, bs (32-95) and lengths new every call (*decode*: one "
                     "token each), timed as the scatter's host table.\n\n"
                     + table(["pattern", "ours", "sglang's launch", "one torch op", "ours / sglang"], rows))
    if p.get("step"):
        parts.append(step_md(p["step"], "`assign_req_to_token_pool`", "the assignment"))
    return "\n\n".join(parts)


SECTIONS = (("device", "torch: device time against sglang's design", device_md),
            ("host", "torch: host time per call in the serving pattern", host_md),
            ("first_call", "torch: the first calls of a fresh process", first_call_md),
            ("incremental", "torch: the incremental step against sglang's full snapshot", incremental_md),
            ("step", "JAX: the scatter's marginal cost in a jitted step",
             lambda p: step_md(p["rows"], "the scatter", "the scatter")),
            ("assign", "assign_req_to_token_pool against sglang's design", assign_md))


def render(parts: dict) -> str:
    out = ["# Performance", "",
           "The figures of `kv-canary bench` on one GPU (method: `kv-canary bench --help` and `kv_canary/bench/`); each "
           "section names the command that measured it, when, on what machine and with which versions. "
           "[performance.json](performance.json) holds the same figures. Medians; a ratio under 1 is ours ahead."]
    for name, title, render_part in SECTIONS:
        if name in parts:
            out += ["", f"## {title}", "", _stamp_line(parts[name]["measured"]), "", render_part(parts[name])]
    return "\n".join(out) + "\n"


def write(directory, parts: dict) -> list[str]:
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / "performance.json", directory / "performance.md"
    merged = {}
    try:
        merged = json.loads(json_path.read_text())["parts"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    merged |= parts
    json_path.write_text(json.dumps({"parts": merged}, indent=1) + "\n")
    md_path.write_text(render(merged))
    return [str(md_path), str(json_path)]
