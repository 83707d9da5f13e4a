"""``kv-canary bench``'s JAX figures of each case, measured in a child process that imports no torch.

``python -m kv_canary.bench_jax --jax-cases CASES_JSON`` is the child (``jax_in_own_process`` starts it).
"""

from __future__ import annotations

import json
import subprocess
import sys

from kv_canary.bench_cases import make_inputs
from kv_canary.bench_method import CHAIN, DEVICE_CLOCK_IMPLEMENTATIONS, WALL_CALLS, jax_chained, jax_device_chained_us, wall_s
from kv_canary.bench_report import progress


def bench_jax(inputs, expected, measures: dict, implementations):
    import jax

    from kv_canary_jax import scatter_req_token_ids

    flat_in, offsets, rows, pool = (jax.device_put(x) for x in inputs)
    floor = jax.jit(lambda f, o, r, p: p, donate_argnums=3)
    measures["jax_dispatch_floor_wall_us"] = wall_s(floor, (flat_in, offsets, rows, jax.device_put(inputs[3])), WALL_CALLS) * 1e6
    for impl in implementations:
        per, fns = jax_chained(
            lambda f, o, r, p, impl=impl: scatter_req_token_ids(f, o, r, p, implementation=impl),
            (flat_in, offsets, rows), inputs[3], expected, f"jax/{impl}",
        )
        measures[f"jax_{impl}_us"] = per * 1e6
        measures[f"jax_{impl}_wall_us"] = wall_s(fns[1], (flat_in, offsets, rows, jax.device_put(inputs[3])), WALL_CALLS) * 1e6
        if impl in DEVICE_CLOCK_IMPLEMENTATIONS:
            device_us = jax_device_chained_us(fns[CHAIN], (flat_in, offsets, rows), inputs[3])
            if device_us is not None:
                measures[f"jax_{impl}_device_us"] = device_us


def jax_in_own_process(cases) -> dict[tuple, dict]:
    """Every case's JAX figures (``bench_jax``), measured in a child process that never imports torch.

    Why a process of its own: on the H200 (jax 0.11.2, torch 2.11), running
    torch's measurements of a case just before its JAX ones in one process
    added 0.16-0.20 us to the device-clock gap before every Mosaic GPU kernel
    of the chain, at every case timed (kernel durations, and the
    Triton-lowered kernel's gaps, unchanged; ``benchmarks/jax_kernel_times.py
    --torch work``). A JAX serving process runs no torch. The child's progress
    and any traceback go to this process's stderr; a failure raises
    RuntimeError.
    """
    command = [sys.executable, "-m", "kv_canary.bench_jax", JAX_CHILD, json.dumps([list(c) for c in cases])]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the JAX measurements failed (exit {done.returncode}); their output is above")
    return {tuple(case): measures for case, measures in json.loads(done.stdout)}


JAX_CHILD = "--jax-cases"


def jax_child(cases) -> None:
    """The child of ``jax_in_own_process``: ``[[case, measures], ...]`` as JSON on stdout."""
    out = []
    for case, _, measures in jax_cases(cases, ("pallas", "mosaic", "xla")):
        out.append([list(case), measures])
        progress("jax bs={} seq={} ragged={} aligned={}".format(*case), measures)
    print(json.dumps(out))


def jax_cases(cases, candidates):
    """``(case, inputs, measures)`` per case, lazily: ``bench_jax`` of the ``candidates`` that run here, in this process.

    Enables x64 for this process first, at once (the command's choice; the
    library never sets it).
    """
    import jax

    jax.config.update("jax_enable_x64", True)
    from kv_canary_jax import available_implementations

    impls = [i for i in candidates if i in available_implementations()]
    return (_jax_case(case, impls) for case in cases)


def _jax_case(case, impls):
    from shared_spec.reference import scatter_reference

    bs, seq, ragged, aligned = case
    inputs = make_inputs(bs, seq, ragged, aligned=aligned)
    measures: dict = {}
    bench_jax(inputs, scatter_reference(*inputs), measures, impls)
    return (bs, seq, ragged, aligned), inputs, measures


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == JAX_CHILD:
    jax_child([tuple(c) for c in json.loads(sys.argv[2])])
