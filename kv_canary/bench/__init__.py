"""``kv-canary bench``: the parts selected by flags (all by default), on one CUDA GPU.

Contract: ``run(args) -> (exit code, payload, text)`` (``kv_canary.cli``). Without a visible GPU it raises ``nothing
ran`` before importing any framework; a part whose frameworks are not installed is skipped and named (all skipped:
``nothing ran``, the missing frameworks named once). The JAX figures come first, from a child process that imports no
torch (``jax_step``), so that the two frameworks never hold the GPU's memory at once; then the torch parts
(``torch_parts``, ``incremental``, ``first_call``). A part that raises (a pool that differs from the reference, a
crash) is a failure, reported beside the parts that finished. ``payload``: ``{"parts": {name: figures}, "failures",
"skipped"}``; ``text``: the markdown of the parts measured; ``--write DIR`` merges each part into ``DIR/performance.*``
as it ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback

from kv_canary.cli import EXIT_FAILED, EXIT_OK, gpu_visible, nothing_ran
from kv_canary.bench import report
from kv_canary_arrays.frameworks import installed
from shared_spec import arg_specs, errors

PARTS = ("device", "host", "first_call", "incremental", "step", "assign")
TORCH, JAX = ("torch", "triton"), ("jax", "jaxlib")
NEEDS = {"device": TORCH, "host": TORCH, "first_call": TORCH, "incremental": TORCH, "step": JAX, "assign": TORCH}
NO_GPU = "no CUDA GPU is visible here; kv-canary bench times compiled kernels on one (kv-canary check runs anywhere)"


def jax_child(kinds: list[str], quiet: bool) -> dict:
    """``jax_step.measure(kinds)`` in a child process (its progress on stderr unless quiet)."""
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    done = subprocess.run([sys.executable, "-m", "kv_canary.bench.jax_step", *kinds], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL if quiet else None)
    try:
        return json.loads(done.stdout)
    except ValueError:
        return {"error": f"the JAX child process failed (exit {done.returncode})"}


def run(args):
    parts = [p for p in PARTS if getattr(args, p)] or list(PARTS)
    if not gpu_visible():
        raise nothing_ran(NO_GPU)
    say = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    missing = {p: [m for m in NEEDS[p] if not installed(m)] for p in parts}
    skipped = {p: errors.not_installed(m) for p, m in missing.items() if m}
    parts = [p for p in parts if not missing[p]]
    if not parts:
        raise nothing_ran(errors.not_installed(dict.fromkeys(m for ms in missing.values() for m in ms)),
                          {"skipped": skipped})
    measured, failures = {}, []

    def keep(name, figures, seconds):  # written as each part ends, so that a run cut short keeps what it finished
        measured[name] = {"measured": report.stamp(name, args.quick, seconds)} | figures
        if args.write:
            say("kv-canary bench: wrote " + ", ".join(report.write(args.write, {name: measured[name]})))

    def part(name, measure):
        say(f"kv-canary bench: {name} ...")
        begin = time.perf_counter()
        try:
            keep(name, measure(), time.perf_counter() - begin + jax_figures.get("seconds", {}).get(name, 0))
        except Exception as error:  # a mismatch or a crash: this part failed, the others go on
            traceback.print_exc()
            failures.append(f"{name}: {type(error).__name__}: {error}")

    kinds = [k for k, p in (("scatter", "step"), ("assign", "assign")) if p in parts and all(map(installed, JAX))]
    jax_figures = jax_child(kinds, args.quiet) if kinds else {}
    if "error" in jax_figures:
        failures.append(f"JAX step: {jax_figures['error']}")
    if "unavailable" in jax_figures:
        skipped |= {label: jax_figures["unavailable"] for p, label in (("step", "step"), ("assign", "assign's JAX step"))
                    if p in parts}
    failures += jax_figures.get("failures", [])
    if "step" in parts and "step" in jax_figures:
        keep("step", {"rows": jax_figures["step"], "meta": jax_figures["meta"]}, jax_figures["seconds"]["step"])
    torch_names = [p for p in parts if p != "step"]
    if torch_names:
        import torch

        if not torch.cuda.is_available():
            if not measured:
                raise nothing_ran(f"torch sees no CUDA GPU ({torch.__version__})")
            skipped |= {p: f"torch sees no CUDA GPU ({torch.__version__})" for p in torch_names}
            torch_names = []
    from kv_canary.bench import first_call, incremental, torch_parts as tp

    workloads = [w for w in arg_specs.WORKLOADS if ("small" if args.quick else "primary") in w.tags]
    measures = {
        "device": lambda: {"rows": (rows := tp.device(torch, workloads, say)),
                           "summary": {"flushed": report.ratio_summary(rows),
                                       "chained": report.ratio_summary(rows, "_chained")}},
        "host": lambda: {"patterns": tp.host(torch, say)},
        "first_call": lambda: {"launchers": first_call.first_call(say)},
        "incremental": lambda: {"rows": incremental.incremental(torch, say)},
        "assign": lambda: {"device": tp.assign_device(torch, say), "host": tp.assign_host(torch, say)}
                          | ({"step": jax_figures["assign_step"]} if "assign_step" in jax_figures else {}),
    }
    for name in torch_names:
        part(name, measures[name])
    if not measured and not failures:
        raise nothing_ran("; ".join(f"{p}: {why}" for p, why in skipped.items()), {"skipped": skipped})
    code = EXIT_FAILED if failures else EXIT_OK
    payload = {"parts": measured, "failures": failures, "skipped": skipped}
    text = report.render(measured)
    for line in failures:
        say(f"FAILED {line}")
    return code, payload, text
