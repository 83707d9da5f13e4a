"""``kv-canary bench``: device and host time of every backend over sglang's grid (needs a GPU).

Inputs are built as in sglang's benchmark: a pool of ``max(bs + 1, 4)`` rows by
``seq + 1`` columns, rows ``1..bs``, random token ids; ragged batches draw each
length uniformly from ``[1, seq]``. The scatter moves 12 bytes per token (8
read, 4 written), so the floor is ``12 * tokens / copy bandwidth``, with the
copy bandwidth measured in the same run.

Methods (one GPU, nothing else running):
- torch device time, flushed (``flushed_us``): one launcher call between CUDA
  events, the L2 flushed just before it as ``triton.testing.do_bench`` flushes
  it; the Triton kernel, the per-request-tile baseline, a copy of the same
  bytes and an empty Triton kernel take turns call by call, so that a drift of
  the machine hits all four alike, over ``ROUNDS`` rounds; the two kernels
  write the same pool in a round and a fresh one each round, so that where a
  pool lies in memory favours neither (``KernelRuns``); each figure is the
  median over all its calls. The torch-vectorized backend is one ``do_bench``
  run.
- torch host time: ``kv_canary.bench_host``, the launcher called as a
  serving runtime calls it (a new ``len(flat_in)`` every call, ``bs`` and
  ``N`` changing, a repeated shape), beside one eager torch op and sglang's
  way of launching: the first table.
- JAX chained time: one jitted function that applies the op ``CHAIN`` times
  in a row (unrolled, so no loop overhead), minus the same with one
  application, divided by ``CHAIN - 1``; median over repeats. Host wall time:
  it holds whatever the host does per application inside one call.
- JAX device time (the Pallas kernels): the same ``CHAIN``-application
  function under ``jax.profiler``, on the device clock: per call, the end of
  the last kernel minus the end of the first, over ``CHAIN - 1``; median over
  5 calls (``kv_canary.device_trace``). The two lowerings differ in host work
  per kernel (XLA runs the Mosaic GPU custom call's prepare and initialize
  stages on the host at every call, about 2 us per kernel on jax 0.11.2), so
  this figure, not the chained one, compares their device time like for like;
  'mosaic / pallas' is its ratio, 'mosaic / pallas chained' the wall one's;
  'pallas host us/app' and 'mosaic host us/app' are the chained figure minus
  this one: the host's work per application that the device clock does not see.
- JAX figures come from a child process that imports no torch
  (``jax_in_own_process``), run before the torch ones.
- JAX wall time: per call of a jitted, pool-donating function, median of 5
  rounds of back-to-back calls (``WALL_CALLS`` in all), next to the same for a
  jitted function that only returns the donated pool (the dispatch floor).
- torch chained time (``chained_us``), of the Triton kernel and of the
  per-request-tile baseline: ``CHAIN`` launches captured in one CUDA graph,
  replayed, minus one launch, over ``CHAIN - 1``, each replay timed by CUDA
  events, the two kernels' replays taking turns: the same method as the JAX
  figure (no flush between launches), so Pallas and Triton compare like for
  like, and the regime of a captured serving step (inputs warm in L2 where
  they fit), beside the flushed one.

On a TPU (JAX's default platform; ``run_tpu``) there is no torch or Triton to
time: the JAX device and wall times of ``mosaic_tpu`` and ``xla`` over the same
cases, with the same methods, against a floor of ``TPU_BYTES_PER_TOKEN`` bytes
per token at the chip's HBM bandwidth (``tpu_bandwidth``).

The parts, one purpose each: the cases and their inputs (``kv_canary.bench_cases``), the timing methods
(``kv_canary.bench_method``), the torch and JAX figures of a case (``kv_canary.bench_torch``,
``kv_canary.bench_jax``: a child process), the TPU run (``kv_canary.bench_tpu``), the ratios, tables and output
(``kv_canary.bench_report``); this module runs the GPU mode (``run``) and ``--host`` (``run_host``). Their public
names are importable from here too, as callers of ``kv_canary.bench`` import them.
"""

from __future__ import annotations

from kv_canary.bench_cases import (  # noqa: F401  (importable from kv_canary.bench)
    BYTES_PER_TOKEN, CASE_FORMS, CASES, MEDIUM, SGLANG_B_US, SKEWED, TPU_BYTES_PER_TOKEN, make_inputs, parse_case,
    selected_cases,
)
from kv_canary.bench_jax import JAX_CHILD, bench_jax, jax_cases, jax_child, jax_in_own_process  # noqa: F401
from kv_canary.bench_method import (  # noqa: F401
    CHAIN, CHAINED_REPLAYS, DEVICE_CLOCK_IMPLEMENTATIONS, FLUSH_BYTES, FLUSHED_CALLS, FLUSHED_WARMUP, KERNEL_MARKER,
    ROUNDS, WALL_CALLS, chained_us, chained_wall_s, copy_bandwidth, empty_kernel_us, event_timed, flushed_us,
    interleaved, interleaved_samples, jax_chain, jax_chained, jax_device_chained_us, same_bytes_copy,
)
from kv_canary.bench_report import COLUMNS, Row, derived, output, progress, ragged_label, render, table_lines, versions  # noqa: F401
from kv_canary.bench_torch import KernelRuns, bench_torch  # noqa: F401
from kv_canary.bench_tpu import TPU_COLUMNS, TPU_IMPLEMENTATIONS, TPU_PERFORMANCE_HEADER, run_tpu, tpu_available, tpu_bandwidth  # noqa: F401


def run(args) -> int:
    import torch
    import triton

    if not torch.cuda.is_available():
        print("kv-canary bench needs a CUDA GPU")
        return 2
    from shared_spec.reference import scatter_reference

    from kv_canary import bench_host

    if args.host:
        return run_host(args)
    selected = selected_cases(args)
    host = None if args.case else bench_host.measure()  # --case: the device-time rows of those cases alone
    jax_rows = {} if args.no_jax else jax_in_own_process(selected)
    bw = copy_bandwidth(torch, triton)
    meta = versions() | {"copy_bw_tbs": bw / 1e12, "empty_kernel_us": empty_kernel_us(torch, triton)}
    if host is not None:
        meta["host"] = host
    rows = []
    for case in selected:
        bs, seq, ragged, aligned = case
        inputs = make_inputs(bs, seq, ragged, aligned=aligned)
        expected = scatter_reference(*inputs)
        tokens = int(inputs[0].shape[0])
        measures: dict = {}
        bench_torch(inputs, expected, measures)
        measures |= jax_rows.get(case, {})
        measures["triton_bw_pct"] = 100 * BYTES_PER_TOKEN * tokens / (measures["torch_triton_us"] * 1e-6) / bw
        if not aligned and (bs, seq, ragged) in SGLANG_B_US:
            measures["sglang_b_us"] = SGLANG_B_US[(bs, seq, ragged)]
        width = inputs[3].shape[1]
        measures |= derived(measures, meta["empty_kernel_us"])
        rows.append(Row(bs, seq, ragged, width, tokens, BYTES_PER_TOKEN * tokens / bw * 1e6, measures))
        progress(f"bs={bs} seq={seq} ragged={ragged} width={width} tokens={tokens}", measures)
    return output(args, rows, meta, render(rows, meta), "")


def run_host(args) -> int:
    """``kv-canary bench --host``: the serving-pattern host figures alone (``kv_canary.bench_host``)."""
    from kv_canary import bench_host

    host = bench_host.measure()
    meta = versions() | {"host": host}
    return output(args, [], meta, f"{bench_host.HEADER}\n{bench_host.render(host)}", "# Host time in the serving pattern\n\n")
