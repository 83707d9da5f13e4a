"""Candidate formulations of the windowed kernels' per-request window, each beside the current one, in one run (GPU).

    python benchmarks/windowed_variants.py [--case 4096x512 ...] [--jax-variant ordered_cond ...] [--rounds 3]
        [--calls 3] [--seconds 150] [--no-torch] [--no-jax]
    python benchmarks/windowed_variants.py --smoke   # any machine: a tiny case, every variant checked, not timed

Every variant writes exactly the cells of ``shared_spec.reference.scatter_reference``; they differ only in the int64
scalar work a program does between its loads of the request's scalars and its first store, which is what the windowed
kernels pay over the unwindowed ones per request (the cost grows with the requests: 4096 x 512 is the worst case).

JAX (``pallas``, ``mosaic``): ``jax_variants()`` names functions of ``kv_canary_jax.windows.pool_window``'s contract on
a kernel's scalars; each is set as ``windows.kernel_window`` (the kernels' switch; ``jax.clear_caches()`` so that
they are traced again), then ``benchmarks/jax_windowed_kernel_times.py``'s ``measure`` checks the unwindowed, zeros
and append chains against the reference and gives their kernel durations on the profiler's clock; the row gives
the windowed ratios over the unwindowed kernel of the same rounds.

- ``spec``: ``pool_window`` itself, the current formulation: the spec's ``windowed_columns`` moved to pool columns,
  about 30 int64 ops and selects for every request.
- ``ordered_cond``: ``lax.cond`` on ``in_row`` (``0 <= start <= end <= N`` and ``0 <= s <= C``, every well-formed
  serving step's request), whose branch is ``(start - s, s, s + min(end - start, C - s))``: four int64 ops after
  the loads, fewer than the unwindowed ``written_columns``; any other request takes ``pool_window``.
- ``ordered_cond_unsigned``: ``ordered_cond`` with ``in_row`` as three unsigned compares (``in_row_unsigned``)
  instead of five signed ones.
- ``ordered_select``: the same two formulas, both computed, one selected (``jnp.where``): no branch, more ops
  (measured only when named: ``--jax-variant``; ``spec`` is then to be named too).

Torch (the Triton kernels, ``backend="triton"``'s launch plan, launched by ``kernel[grid]`` as
``launch.dispatch.launch`` launches them, every run the same way): the unwindowed launch, the windowed one as it is
(``IN_ROW=False``, the launcher's default) and with ``IN_ROW=True`` (``triton_kernel.in_row``: the short branch tests ``0 <= s <= C`` and
takes ``shift = s``, so its ``hi`` is as many dependent int64 steps after the loads as the unwindowed one's), each
with zeros and append columns; ``kv_canary.bench``'s ``flushed_us`` and ``chained_us`` (the runs taking turns),
every pool checked against the reference after its timing; the ratios over the unwindowed figure.

Every JAX measurement comes first, case by case in order; once ``--seconds`` have passed no new one starts (each
printed line says how long the run has taken), so a run stays within its time limit. Then every case's torch
figures (about 30 s in all): after the JAX ones, since torch's work in a process added 0.16-0.20 us to the device's
gap before each Mosaic GPU kernel (``kv_canary.bench.jax_in_own_process``; kernel durations were unchanged).
Without a GPU and without ``--smoke`` it says so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# The cases the bars were missed at, the worst first (the run stops starting new ones at --seconds); the last one
# (8M tokens) runs torch's tiled kernel.
CASES = ("4096x512", "256x2048", "64x8192", "256x8192r", "256x32768")
JAX_VARIANT_NAMES = ("spec", "ordered_cond", "ordered_cond_unsigned", "ordered_select")
# What a run measures without --jax-variant (ordered_select only on request: it answers whether the branch matters).
DEFAULT_JAX_VARIANTS = ("spec", "ordered_cond", "ordered_cond_unsigned")
TORCH_RUNS = ("unwindowed", "zeros", "append", "zeros_in_row", "append_in_row")
SMOKE_CASE = "4x16"
NO_GPU = "windowed_variants: no GPU here, nothing measured (--smoke checks every variant in the interpreters)"


def _times():
    """benchmarks/jax_windowed_kernel_times.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("jax_windowed_kernel_times", HERE / "jax_windowed_kernel_times.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the JAX candidates -----------------------------------------------------------------


def in_row(start, end, start_col, width: int, n_tokens: int):
    """Whether ``0 <= start <= end <= N`` and ``0 <= s <= C``: every request of a well-formed serving step."""
    return (start >= 0) & (start <= end) & (end <= n_tokens) & (start_col >= 0) & (start_col <= width)


def in_row_unsigned(start, end, start_col, width: int, n_tokens: int):
    """``in_row`` in three unsigned compares: ``u(start) <= u(end) <= N`` and ``u(s) <= C``, ``u`` the int64's bits
    as uint64 (``x`` for ``x >= 0``, ``x + 2**64 >= 2**63`` for ``x < 0``).

    Exact: ``u(s) <= C`` is ``0 <= s <= C`` (a negative ``s`` has ``u(s) >= 2**63 > C``). ``u(end) <= N`` is ``0 <=
    end <= N`` likewise; given it, ``u(start) <= u(end)`` is ``0 <= start <= end`` (``start >= 0``: ``u`` is the
    identity on both; ``start < 0``: ``u(start) >= 2**63 > end``, false, as is ``0 <= start``).
    """
    from jax import lax
    import jax.numpy as jnp

    def u(x):
        return lax.bitcast_convert_type(x, jnp.uint64)

    return (u(start) <= u(end)) & (u(end) <= jnp.uint64(n_tokens)) & (u(start_col) <= jnp.uint64(width))


def in_row_window(start, end, start_col, width: int, xp):
    """``(base, lo, hi)`` in pool columns of a request ``in_row``: ``(start - s, s, s + min(end - start, C - s))``.

    Exact, and equal to ``pool_window``'s there: with ``s`` in ``[0, C]``, ``windowed_columns`` has ``shift = s``
    and no ``past`` (``s`` is not negative), so it is ``written_columns(start, end, C - s, N)`` moved by ``s``. With
    ``0 <= start <= end <= N`` that is ``n = min(end - start, C - s)`` (``end - start`` in ``[0, N]``, no wrap),
    ``base = start`` (inside the clip ``[-(C - s), N]``), ``lo = 0`` and ``hi = n`` (``base <= N - n`` since ``start
    + n <= end <= N``); moved: ``(start - s, s, s + n)``. No step wraps: ``start - s`` lies in ``[-C, N]``, ``C - s``
    in ``[0, C]``, ``s + n`` in ``[s, C]``.
    """
    return start - start_col, start_col, start_col + xp.minimum(end - start, width - start_col)


def ordered_cond(start, end, start_col, width: int, n_tokens: int, xp=None, test=in_row):
    """``pool_window``'s window: ``in_row_window`` where ``test`` (``in_row``; a ``lax.cond``), else ``pool_window``."""
    import jax.numpy as jnp
    from jax import lax

    from kv_canary_jax.windows import pool_window

    return lax.cond(test(start, end, start_col, width, n_tokens),
                    lambda: tuple(jnp.asarray(v, jnp.int64) for v in in_row_window(start, end, start_col, width, jnp)),
                    lambda: tuple(jnp.asarray(v, jnp.int64) for v in pool_window(start, end, start_col, width, n_tokens, jnp)))


def ordered_select(start, end, start_col, width: int, n_tokens: int, xp=None):
    """``pool_window``'s window: both formulas computed, ``in_row_window``'s selected where ``in_row``."""
    import jax.numpy as jnp

    from kv_canary_jax.windows import pool_window

    ok = in_row(start, end, start_col, width, n_tokens)
    fast = in_row_window(start, end, start_col, width, jnp)
    return tuple(jnp.where(ok, f, g) for f, g in zip(fast, pool_window(start, end, start_col, width, n_tokens, jnp)))


def jax_variants() -> dict:
    """``{name: function}`` of ``JAX_VARIANT_NAMES``, ``spec`` the kernels' current ``pool_window``."""
    from kv_canary_jax.windows import pool_window

    def ordered_cond_unsigned(start, end, start_col, width, n_tokens, xp=None):
        return ordered_cond(start, end, start_col, width, n_tokens, xp, test=in_row_unsigned)

    return {"spec": pool_window, "ordered_cond": ordered_cond, "ordered_cond_unsigned": ordered_cond_unsigned,
            "ordered_select": ordered_select}


def use_jax_variant(function) -> None:
    """Set the kernels' windowed formulation and drop every traced program, so the next call traces with it."""
    import jax

    from kv_canary_jax import windows

    windows.kernel_window = function
    jax.clear_caches()


# -- the torch runs ---------------------------------------------------------------------


def torch_launcher(torch, flat_in, offsets, rows, pool_ref, start_cols, in_row_test: bool | None):
    """``(call, kernel)``: a call launching the kernel ``launch.plan`` picks (``kernel``: "tiled" or "lanes"), by
    ``kernel[grid]`` as ``dispatch.launch`` does, with ``IN_ROW=in_row_test`` where not None; ``pool_ref[0]`` is the
    pool it writes (swapped between rounds). On the CPU it runs in Triton's interpreter (the tests')."""
    from kv_canary_torch.launch import dispatch
    from kv_canary_torch.launch.plan import LANES_CONSTEXPRS, NOTHING, TILED_CONSTEXPRS

    module = dispatch.kernel_module()
    plan = dispatch.plan_of(flat_in, offsets, rows, pool_ref[0], start_cols)
    if plan is NOTHING:  # no cell can be written: nothing to launch
        return (lambda: None), "none"
    kernel, names = ((module.scatter_req_token_ids_tiled_kernel, TILED_CONSTEXPRS) if plan.tiled
                     else (module.scatter_req_token_ids_kernel, LANES_CONSTEXPRS))
    meta = dict(zip(names, plan.constexprs), num_warps=plan.warps)
    if in_row_test is not None:
        meta["IN_ROW"] = in_row_test
    window = (None, None) if start_cols is None else (start_cols, start_cols.stride(0))

    def call():
        kernel[plan.grid](flat_in, offsets, rows, pool_ref[0], *plan.ints, *window, **meta)

    return call, "tiled" if plan.tiled else "lanes"


def torch_case(torch, case: str, rounds: int, device: str = "cuda", timers=None) -> dict:
    """``{run: {"flushed": us, "chained": us}}`` and the kernel's name of one case, every pool checked."""
    from kv_canary import bench
    from kv_canary.bench_incremental import append_columns
    from shared_spec.reference import scatter_reference

    flushed, chained = timers or (bench.flushed_us, bench.chained_us)
    bs, seq, ragged, aligned = bench.parse_case(case)
    inputs = bench.make_inputs(bs, seq, ragged, aligned=aligned)
    flat_in, offsets, rows, pool = (torch.from_numpy(x).to(device) for x in inputs)
    columns = {"unwindowed": None, "zeros": np.zeros(bs, np.int64), "append": append_columns(inputs[1], pool.shape[1])}
    device_columns = {name: None if c is None else torch.from_numpy(c).to(device) for name, c in columns.items()}
    pools = {name: [pool.clone() for _ in range(rounds)] for name in TORCH_RUNS}
    refs = {name: [pools[name][0]] for name in TORCH_RUNS}
    runs, kinds = {}, set()
    for name in TORCH_RUNS:
        cols = name.removesuffix("_in_row")
        test = (name != cols) if cols != "unwindowed" else None
        runs[name], kind = torch_launcher(torch, flat_in, offsets, rows, refs[name], device_columns[cols], test)
        kinds.add(kind)

    def next_pool(k):
        for name in TORCH_RUNS:
            refs[name][0] = pools[name][k]

    figures = {name: {"flushed": us} for name, us in flushed(torch, runs, rounds=rounds, before_round=next_pool).items()}
    next_pool(0)
    for name, us in chained(torch, runs).items():
        figures[name]["chained"] = us
    for name in TORCH_RUNS:
        expected = scatter_reference(*inputs, columns[name.removesuffix("_in_row")])
        for k, written in enumerate(pools[name]):
            assert np.array_equal(written.cpu().numpy(), expected), f"torch {name} at {case}: pool {k} differs"
    return {"figures": figures, "kernel": "/".join(sorted(kinds))}


# -- the table --------------------------------------------------------------------------

HEADER = ("| case | what | variant | unwindowed | zeros | zeros ratio | zeros chain ratio | append | append ratio "
          "| append chain ratio | elapsed s |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")


def jax_row(case: str, implementation: str, variant: str, figures: dict, times, elapsed: float) -> str:
    kernel = {name: statistics.median(f["kernel"]) for name, f in figures.items()}
    cells = [case, f"jax {implementation} kernel us", variant, f"{kernel['unwindowed']:.2f}"]
    for name in ("zeros", "append"):
        cells += [f"{kernel[name]:.2f}", f"{times.ratios(figures, name, 'kernel'):.3f}",
                  f"{times.ratios(figures, name, 'chain'):.3f}"]
    return "| " + " | ".join(cells + [f"{elapsed:.0f}"]) + " |"


def torch_rows(case: str, result: dict, elapsed: float) -> list[str]:
    """Two rows per case: ``IN_ROW`` unset and set; flushed figure, its ratio, and the chained ratio."""
    f = result["figures"]
    lines = []
    for suffix, variant in (("", "current"), ("_in_row", "in_row")):
        cells = [case, f"torch {result['kernel']} flushed us", variant, f"{f['unwindowed']['flushed']:.2f}"]
        for name in ("zeros", "append"):
            run = f[name + suffix]
            cells += [f"{run['flushed']:.2f}", f"{run['flushed'] / f['unwindowed']['flushed']:.3f}",
                      f"{run['chained'] / f['unwindowed']['chained']:.3f}"]
        lines.append("| " + " | ".join(cells + [f"{elapsed:.0f}"]) + " |")
    return lines


def smoke() -> int:
    """Every JAX variant through both kernels in the Pallas interpreter on ``SMOKE_CASE``, checked; not timed."""
    import jax

    times = _times()
    failed = 0
    for variant, function in jax_variants().items():
        use_jax_variant(function)
        for implementation in times.IMPLEMENTATIONS:
            for name, (flat_in, offsets, rows, cols, pool, expected) in times.variant_inputs(SMOKE_CASE).items():
                apply = jax.jit(times.applier(implementation, cols is not None, interpret=True))
                got = np.asarray(apply(*times.device_args(flat_in, offsets, rows, cols), jax.device_put(pool)))
                agrees = np.array_equal(got, expected)
                failed += not agrees
                print(f"{SMOKE_CASE} {implementation} {variant} {name}: "
                      f"{'agrees with' if agrees else 'DISAGREES with'} the reference (interpreted, not timed)")
    use_jax_variant(jax_variants()["spec"])
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append")
    parser.add_argument("--jax-variant", action="append", choices=JAX_VARIANT_NAMES)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3, help="traced calls of each JAX chain per round")
    parser.add_argument("--seconds", type=float, default=150,
                        help="start no JAX measurement after this many seconds (torch's, about 30 s, run after them)")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-jax", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    # Torch and JAX share the GPU: JAX allocates as it goes instead of taking most of the memory at its start.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    jax.config.update("jax_enable_x64", True)
    if args.smoke:
        return smoke()
    if jax.devices()[0].platform != "gpu":
        print(NO_GPU, file=sys.stderr)
        return 0
    times = _times()
    variants = {name: f for name, f in jax_variants().items() if name in (args.jax_variant or DEFAULT_JAX_VARIANTS)}
    print(f"jax {jax.__version__} {jax.devices()[0].device_kind}; JAX: kernel durations on the profiler's clock, "
          f"median of {args.rounds} interleaved rounds of {args.calls} traced calls; torch: flushed_us and chained_us "
          f"over {args.rounds} rounds; ratios over the unwindowed figure", flush=True)
    print(HEADER, flush=True)
    began = time.monotonic()
    skipped = []

    def in_time(what: str) -> bool:
        if time.monotonic() - began < args.seconds:
            return True
        skipped.append(what)
        return False

    for case in [] if args.no_jax else args.case or CASES:
        inputs = times.variant_inputs(case)
        for implementation in times.IMPLEMENTATIONS:
            for variant, function in variants.items():
                if not in_time(f"{case} {implementation} {variant}"):
                    continue
                use_jax_variant(function)
                figures = times.measure(inputs, case, implementation, args.rounds, args.calls)
                print(jax_row(case, implementation, variant, figures, times, time.monotonic() - began), flush=True)
    use_jax_variant(jax_variants()["spec"])
    if not args.no_torch:  # after every JAX measurement: torch's work in the process moves Mosaic GPU's gaps
        import torch

        for case in args.case or CASES:
            result = torch_case(torch, case, args.rounds)
            for line in torch_rows(case, result, time.monotonic() - began):
                print(line, flush=True)
    if skipped:
        print(f"not measured (past --seconds {args.seconds:.0f}): {', '.join(skipped)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
