"""The torch launcher's cold start (GPU): what a fresh process's first calls cost, and when the call path is on.

    python benchmarks/cold_start.py            # one H200: under a minute
    python benchmarks/cold_start.py --json     # the figures as JSON
    TRITON_INTERPRET=1 python benchmarks/cold_start.py --calls 12 --early 3 6 --settled 8 12 --a-seconds 0.5
                                               # no GPU: it runs and reports; its times mean nothing

Each case starts from a machine on which nothing was compiled: an empty
folder holding the launcher's cache (``$KV_CANARY_CACHE_DIR``) and Triton's
(``$TRITON_CACHE_DIR``), shared by that case's processes:

- ``after_short_process``: process A makes its first call, runs the launcher
  for ``--a-seconds`` more and exits; then process B, fresh, makes ``--calls``
  calls;
- ``after_killed_process``: process A is killed (SIGKILL) ``--a-seconds``
  after its first call starts, in that call's build on a GPU (only A itself:
  its compiler runs on, as a supervisor's kill leaves it); then process B;
- ``never_run``: process B alone.

A process's calls follow ``bench_host``'s ``new_n`` pattern (a new
``len(flat_in)`` every call, ``bs`` 64, pool 300 x 8193, the inputs made
before the first call), each timed by ``time.perf_counter_ns`` with no sync
between calls (a sync every ``SYNC_EVERY`` calls, untimed, so that the launch
queue never fills). Per process: the first call's time (on a machine that
never ran this, it holds the native piece's build), the median of the calls
``--early`` (3 to 50, counted from 1), the settled figure (the median of the
calls ``--settled``, 1000 to 2000), how many calls the call path served, why
it is off if it is; per case, the partial builds left in the cache folder
after each process.

The bars (H200), on ``after_short_process``'s B: the early median within 2x
of the settled figure, the settled figure at most 10 us, no partial build
left. Exit status 0, also when a bar is missed (the figures say so).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kv_canary import bench_host  # noqa: E402

SYNC_EVERY = 256
CHILD = "--child"
STARTED = "first call starts"  # a child's line on stderr, just before its first call
BARS = {"early_over_settled": 2.0, "settled_us": 10.0}


def child(calls: int, seconds: float) -> dict:
    """This process's calls (module docstring): ``calls`` of them, then more until ``seconds`` past the first call."""
    import torch

    from kv_canary_torch import launch_scatter_req_token_ids_kernel
    from kv_canary_torch.launch import dispatch, native

    device = "cuda" if torch.cuda.is_available() else "cpu"
    host = bench_host.steps("new_n", calls)
    buffer = torch.randint(0, 2**31 - 1, (max(n for n, _, _ in host),), dtype=torch.int64, device=device)
    inputs = [(buffer[:n], torch.from_numpy(o).to(device), torch.from_numpy(r).to(device)) for n, o, r in host]
    pool = torch.full(bench_host.POOL, -7, dtype=torch.int32, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    clock, times = time.perf_counter_ns, []
    print(STARTED, file=sys.stderr, flush=True)
    for index, (flat_in, offsets, rows) in enumerate(inputs):
        start = clock()
        launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool)
        times.append(clock() - start)
        if index == 0:
            first_returned = time.perf_counter()
        if index % SYNC_EVERY == SYNC_EVERY - 1:
            sync()
    more = 0
    while time.perf_counter() - first_returned < seconds:
        flat_in, offsets, rows = inputs[more % len(inputs)]
        launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool)
        more += 1
        if more % SYNC_EVERY == 0:
            sync()
    sync()
    c = native.module() if device == "cuda" else None
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "times_ns": times, "calls_after": more,
        "call_path_on": dispatch._c is not None,
        "call_path_calls": c.served() if c is not None else 0,
        "why_off": native.unavailable_reason() if device == "cuda"
                   else "no CUDA device (the kernel interpreted)",
    }


def spawn(env: dict, calls: int, seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, CHILD, str(calls), str(seconds)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> dict:
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"a cold-start process failed (exit {process.returncode}): {err[-3000:]}")
    return json.loads(out)


def killed_after(env: dict, calls: int, seconds: float) -> dict:
    """A process killed ``seconds`` after its first call starts: what it was doing then."""
    process = spawn(env, calls, 3600.0)
    for line in process.stderr:
        if line.strip() == STARTED:
            break
    time.sleep(seconds)
    if process.poll() is not None:
        raise RuntimeError(f"a cold-start process ended before its kill (exit {process.returncode}): "
                           f"{process.communicate()[1][-3000:]}")
    process.kill()  # the process alone, as a supervisor's SIGKILL: a compiler it started runs on
    process.communicate()
    return {"killed": True}


def summary(run: dict, early: tuple[int, int], settled: tuple[int, int]) -> dict:
    """One process's figures (us); calls counted from 1, both ends included."""
    times = run.pop("times_ns")
    median = lambda lo, hi: statistics.median(times[lo - 1:hi]) / 1e3  # noqa: E731
    run |= {"first_call_us": times[0] / 1e3, "early_median_us": median(*early), "settled_us": median(*settled)}
    run["early_over_settled"] = run["early_median_us"] / run["settled_us"]
    return run


def partials(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.glob("*.partial"))


def case(name: str, args) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"kv-canary-cold-{name}-"))
    cache = root / "kv-canary"
    env = dict(os.environ, KV_CANARY_CACHE_DIR=str(cache), TRITON_CACHE_DIR=str(root / "triton"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    found = {}
    if name == "after_short_process":
        a = summary(finish(spawn(env, 1, args.a_seconds)), (1, 1), (1, 1))
        found["a"] = {k: a[k] for k in ("first_call_us", "calls_after", "call_path_on", "why_off")}
    elif name == "after_killed_process":
        found["a"] = killed_after(env, args.calls, args.a_seconds)
    if "a" in found:
        found["a"]["partials_left"] = partials(cache)
    found["b"] = summary(finish(spawn(env, args.calls, 0.0)), tuple(args.early), tuple(args.settled))
    found["b"]["partials_left"] = partials(cache)
    shutil.rmtree(root, ignore_errors=True)
    return found


def bars(b: dict) -> dict:
    return {"early_within_2x": b["early_over_settled"] <= BARS["early_over_settled"],
            "settled_at_most_10us": b["settled_us"] <= BARS["settled_us"], "no_partial": not b["partials_left"]}


def render(results: dict, early, settled) -> str:
    lines = [f"| case | process | first call (us) | calls {early[0]}-{early[1]} median | calls {settled[0]}-{settled[1]} median "
             "| ratio | call path | partials left |",
             "|---|---|---|---|---|---|---|---|"]
    for name, found in results["cases"].items():
        a = found.get("a")
        if a is not None:
            first = f"{a['first_call_us']:.0f}" if "first_call_us" in a else "killed"
            lines.append(f"| {name} | A | {first} | | | | {a.get('call_path_on', '')} | {len(a['partials_left'])} |")
        b = found["b"]
        path = "on" if b["call_path_on"] else f"off: {b['why_off']}"
        lines.append(f"| {name} | B | {b['first_call_us']:.0f} | {b['early_median_us']:.2f} | {b['settled_us']:.2f} | "
                     f"{b['early_over_settled']:.2f} | {path} ({b['call_path_calls']} calls) | {len(b['partials_left'])} |")
    lines.append(f"\nBars on after_short_process's B: {results['bars']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="process B's calls (default 2000)")
    parser.add_argument("--early", type=int, nargs=2, default=(3, 50), metavar=("FIRST", "LAST"))
    parser.add_argument("--settled", type=int, nargs=2, default=(1000, 2000), metavar=("FIRST", "LAST"))
    parser.add_argument("--a-seconds", type=float, default=3.0, help="how long process A runs (default 3)")
    parser.add_argument("--case", action="append", choices=("after_short_process", "after_killed_process", "never_run"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if max(args.early[1], args.settled[1]) > args.calls:
        parser.error("--early and --settled must name calls up to --calls")
    names = args.case or ["after_short_process", "after_killed_process", "never_run"]
    results = {"cases": {name: case(name, args) for name in names}}
    short = results["cases"].get("after_short_process")
    results["bars"] = bars(short["b"]) if short else None
    print(json.dumps(results, indent=1) if args.json else render(results, args.early, args.settled))
    return 0


if __name__ == "__main__" and sys.argv[1:2] == [CHILD]:
    print(json.dumps(child(int(sys.argv[2]), float(sys.argv[3]))))
elif __name__ == "__main__":
    sys.exit(main())
