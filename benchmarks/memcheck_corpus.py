"""A corpus of malformed-value cases through every kernel, pools compared with the reference.

    # on a GPU, under the memory checker (an out-of-bounds access fails the run):
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 XLA_PYTHON_CLIENT_ALLOCATOR=platform \\
      /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 \\
      python3 benchmarks/memcheck_corpus.py
    # anywhere (Triton and Pallas in their interpreters), a smoke run:
    python3 benchmarks/memcheck_corpus.py --cases 64

What it checks: every kernel writes exactly the cells ``shared_spec``'s
reference writes, for values no well-behaved caller passes, and touches no
memory outside its arguments. The two environment variables make each tensor
and each JAX buffer its own device allocation (no caching allocator, no
preallocated arena), so that compute-sanitizer sees an access one element past
an argument as out of bounds instead of landing in a neighbour's memory.

The corpus (deterministic, from ``--seed``): each *case* is one request whose
start, end and row are drawn from a kind of malformed value: offsets at the
int64 extremes (so that ``end - start`` wraps), decreasing and negative
offsets, offsets past ``len(flat_in)``, lengths past the pool width, rows
negative, past the pool and at the int64 extremes, rows repeated within a
launch, and well-formed requests among them. Token ids span the whole int64
range. Offsets chain (request r ends where r+1 starts), so cases alternate
with *bridge* requests that carry the offsets from one case's end to the next
case's start; a bridge's row is outside the pool (-1, R, INT64_MIN,
INT64_MAX), so the spec skips it, and a kernel that writes for it fails the
comparison. Many cases share one launch (memcheck makes every launch slow);
that keeps the check exact because a cell several requests write may hold any
of their values, and the comparison allows exactly that. Launches cycle over a
few pool geometries (one column; many rows; more columns than 32 Triton
tiles; one token) and, for the torch kernels, pool layouts (contiguous, a column
slice, every other row, every other column, transposed), each a view into a
larger buffer whose cells outside the view are checked unchanged. Half the
launches are windowed (``start_cols``): each request's first column is 0, an
append inside the row, the width, past it, negative, or at the int64 extremes,
or minus its start (columns that track the token indices).

Then, for the torch kernels, the arguments whose memory is not what they
read (``storage_cases``): each primes a valid signature twice (the second call
takes the remembered-call path where it is on), then passes a pool or
``flat_in`` whose storage was freed (``resize_(0)``) or shrunk under it, a zero
tensor, a ``torch.func.functionalize`` wrapper (whose data pointer reads null:
the torch path runs it), and an expanded ``flat_in`` of ``2**63 - 1`` tokens
read from column -3; each must be refused with the storage check's error and
launch nothing, or write exactly what the reference writes.

Kernels: ``torch/triton`` (the torch launcher, ``backend="triton"``), ``torch/assign``
(``assign_req_to_token_pool_func`` with ``backend="triton"`` on each launch's requests as an assignment,
``assignment_of``: negative lengths, int64 extremes, rows outside the table, windows past the width; its table compared
with the windowed scatter the spec makes of it, ``assignment_scatter``),
``jax/pallas`` and ``jax/mosaic`` (``scatter_req_token_ids``), ``jax/assign`` and ``jax/assign-16``
(``kv_canary_jax.assign_req_to_token_pool``, its default implementation, on each launch's assignment, whole or its first
16 requests: where Mosaic GPU runs, its kernel's own running sum in vectors and in scalars); on a machine
without a CUDA GPU, ``torch/triton`` runs in Triton's interpreter, the JAX
kernels with ``interpret=True``, and ``torch/torch`` and ``jax/xla`` can be
added. It prints ``cases run, mismatches, kernels`` and exits 1 on any
mismatch (or on a kernel raising), 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from kv_canary_arrays.frameworks import cuda_available  # noqa: E402

GPU = cuda_available()
if not GPU:  # read by Triton when the kernel is defined, i.e. before the first launch
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402

from shared_spec import assignment  # noqa: E402
from shared_spec.reference import scatter_reference, windowed_columns  # noqa: E402

INT64_MIN, INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
GPU_KERNELS = ("torch/triton", "torch/assign", "jax/pallas", "jax/mosaic", "jax/assign", "jax/assign-16")
CPU_KERNELS = ("torch/triton", "torch/assign", "torch/torch", "jax/xla", "jax/pallas", "jax/mosaic", "jax/assign",
               "jax/assign-16")
# The requests of a launch's assignment each assignment kernel writes (None: all): a launch's 128 take the Mosaic GPU
# kernel's running sum in vectors, its first 16 in scalars (kv_canary_jax.pallas_mosaic_gpu.takes_assignment).
ASSIGN_BATCHES = {"torch/assign": None, "jax/assign": None, "jax/assign-16": 16}
# (rows R, columns C, tokens N): one column; many rows, a launch of 64 cases (128
# requests with the bridges) spanning more than launch.plan.SMALL_CELLS cells, so
# that it takes the lanes kernel's LARGE shape; windows of more than 32 of its
# 1024-column tiles, over enough tokens (launch.plan.TILED_MIN_TOKENS) that such
# a launch fills 75% of its windows and takes the tiled kernel where the pool's
# columns are contiguous (launch.plan.tiled), the lanes kernel's tile loop (its
# 4096 / 128 = 32 lanes, not ONE) elsewhere; a single token.
GEOMETRIES = ((8, 1, 5), (24, 200, 800), (6, 33000, 2**22), (4, 7, 1))
LAYOUTS = ("contiguous", "column-slice", "every-other-row", "every-other-column", "transposed")
GUARD = -0x5A5A5A5A  # what the buffer around a pool view holds; a kernel never writes it
# Cases per kernel by default: 40 launches of 64, every geometry and layout pair windowed and not, which reach every
# Triton kernel variant both ways (a test pins it).
DEFAULT_CASES = 2560


# -- the corpus -----------------------------------------------------------------------


def _span(rng, kind: str, n_tokens: int, width: int) -> tuple[int, int]:
    """(start, end) of one case's segment, of the given kind of malformed value."""
    length = int(rng.integers(0, width + 4))
    if kind == "normal":
        start = int(rng.integers(0, max(n_tokens, 1)))
        return start, start + length
    if kind == "decreasing":
        start = int(rng.integers(0, n_tokens + width + 2))
        return start, start - int(rng.integers(1, width + 3))
    if kind == "negative":
        start = -int(rng.integers(1, width + 3))
        return start, start + length
    if kind == "past_end":
        start = n_tokens - int(rng.integers(-width - 2, 3))
        return start, start + length
    if kind == "tail":  # reads up to the last token, and writes up to the last column
        start = max(n_tokens - width - int(rng.integers(0, 3)), -2)
        return start, start + width + int(rng.integers(0, 3))
    extremes = {
        "min_start": (INT64_MIN, INT64_MIN + length),
        "min_to_max": (INT64_MIN, INT64_MAX),  # end - start wraps to -1
        "max_to_min": (INT64_MAX, INT64_MIN),  # end - start wraps to 1, but end < start
        "max_start": (INT64_MAX - length, INT64_MAX),
        "zero_to_max": (0, INT64_MAX),
        "min_to_zero": (INT64_MIN, 0),
        "near_min": (INT64_MIN + int(rng.integers(0, 3)), -int(rng.integers(0, 3))),
    }
    return extremes[kind]


SPAN_KINDS = ("normal", "normal", "normal", "tail", "tail", "decreasing", "negative", "negative", "past_end", "past_end",
              "min_start", "min_to_max", "max_to_min", "max_start", "zero_to_max", "min_to_zero", "near_min")
ROW_KINDS = ("in_range", "in_range", "in_range", "in_range", "last", "last", "repeated", "repeated",
             "minus_one", "rows", "int64_min", "int64_max", "far_negative")


def _row(rng, kind: str, n_rows: int, earlier: list[int]) -> int:
    if kind == "repeated" and earlier:
        return earlier[int(rng.integers(0, len(earlier)))]
    return {
        "minus_one": -1,
        "rows": n_rows,
        "int64_min": INT64_MIN,
        "int64_max": INT64_MAX,
        "far_negative": -int(rng.integers(2, 2**40)),
        "last": n_rows - 1,
    }.get(kind, int(rng.integers(0, n_rows)))


START_KINDS = ("zero", "append", "append", "append", "at_width", "past_width", "negative", "int64_min", "int64_max",
               "near_min", "near_max", "minus_start")


def _start_col(rng, kind: str, width: int, start: int) -> int:
    """A request's first pool column, of the given kind (windowed launches)."""
    return {
        "zero": 0,
        "at_width": width,
        "past_width": width + int(rng.integers(1, 2**40)),
        "negative": -int(rng.integers(1, width + 3)),
        "int64_min": INT64_MIN,
        "int64_max": INT64_MAX,
        "near_min": INT64_MIN + int(rng.integers(0, width + 3)),
        "near_max": INT64_MAX - int(rng.integers(0, width + 3)),
        "minus_start": int(np.int64(-start)) if start != INT64_MIN else INT64_MIN,  # columns that track the tokens
    }.get(kind, int(rng.integers(0, width + 1)))


def build_launch(index: int, cases: int, seed: int):
    """One launch: ``(flat_in, offsets, rows, pool, layout, start_cols)`` (numpy) holding ``cases`` cases.

    Launches 4 to 7 of every 8 are windowed: each request's first column drawn from ``START_KINDS`` (``start_cols``
    None in the others).
    """
    rng = np.random.default_rng([seed, index])
    n_rows, width, n_tokens = GEOMETRIES[index % len(GEOMETRIES)]
    bridges = (-1, n_rows, INT64_MIN, INT64_MAX)
    offsets, rows, in_range = [], [], []
    position = 0
    for case in range(cases):
        start, end = _span(rng, SPAN_KINDS[int(rng.integers(0, len(SPAN_KINDS)))], n_tokens, width)
        offsets += [position, start]  # the bridge from the previous end to this start
        rows.append(bridges[case % len(bridges)])
        row = _row(rng, ROW_KINDS[int(rng.integers(0, len(ROW_KINDS)))], n_rows, in_range)
        rows.append(row)
        if 0 <= row < n_rows:
            in_range.append(row)
        position = end
    offsets.append(position)
    # offsets[0] is 0 and every case starts at an odd index: requests 2k are bridges, 2k+1 cases.
    flat_in = rng.integers(INT64_MIN, INT64_MAX, size=n_tokens, dtype=np.int64, endpoint=True)
    pool = rng.integers(-(2**31), 2**31, size=(n_rows, width), dtype=np.int64).astype(np.int32)
    layout = LAYOUTS[index % len(LAYOUTS)]  # 5 layouts, 4 geometries: every pair within 20 launches
    start_cols = None
    if index % (2 * len(GEOMETRIES)) >= len(GEOMETRIES):  # launches 4-7, 12-15, ...: every geometry and layout pair in 40
        start_cols = np.array(
            [_start_col(rng, START_KINDS[int(rng.integers(0, len(START_KINDS)))], width, int(s)) for s in offsets[:-1]],
            dtype=np.int64,
        )
    return flat_in, np.array(offsets, dtype=np.int64), np.array(rows, dtype=np.int64), pool, layout, start_cols


def corpus(total: int, per_launch: int, seed: int):
    """Launches holding ``total`` cases in all, ``per_launch`` at most each."""
    index = 0
    while total > 0:
        cases = min(per_launch, total)
        yield build_launch(index, cases, seed)
        total -= cases
        index += 1


# -- the comparison -------------------------------------------------------------------


def mismatches(flat_in, offsets, rows, pool, got, start_cols=None) -> int:
    """Cells of ``got`` the spec does not allow: not the reference's, nor (where several requests write) one of theirs."""
    expected = scatter_reference(flat_in, offsets, rows, pool, start_cols)
    wrong = np.argwhere(got != expected)
    if not len(wrong):
        return 0
    n_rows, width = pool.shape
    with np.errstate(over="ignore"):
        base, lo, hi, shift = windowed_columns(offsets[:-1], offsets[1:], start_cols, width, flat_in.shape[0])
    bad = 0
    for row, column in wrong:
        j = column - shift  # the window's index of this column, per request
        writers = np.flatnonzero((rows == row) & (lo <= j) & (j < hi))
        allowed = {int(np.int64(flat_in[base[r] + j[r]]).astype(np.int32)) for r in writers}
        bad += int(got[row, column]) not in allowed
    return bad


# -- the kernels ----------------------------------------------------------------------


def _torch_pool(pool: np.ndarray, layout: str, device):
    """``(buffer, view)``: the pool as a view of ``layout`` into a larger guard-filled buffer."""
    import torch

    n_rows, width = pool.shape
    values = torch.from_numpy(pool).to(device)
    if layout == "transposed":
        buffer = torch.full((width + 2, n_rows + 3), GUARD, dtype=torch.int32, device=device)
        view = buffer[1 : 1 + width, 2 : 2 + n_rows].T
    elif layout == "column-slice":
        buffer = torch.full((n_rows, width + 5), GUARD, dtype=torch.int32, device=device)
        view = buffer[:, 3 : 3 + width]
    elif layout == "every-other-row":
        buffer = torch.full((2 * n_rows + 1, width), GUARD, dtype=torch.int32, device=device)
        view = buffer[1::2]
    elif layout == "every-other-column":
        buffer = torch.full((n_rows, 2 * width + 1), GUARD, dtype=torch.int32, device=device)
        view = buffer[:, 1::2]
    else:
        buffer = torch.full((n_rows, width), GUARD, dtype=torch.int32, device=device)
        view = buffer
    view.copy_(values)
    return buffer, view


def run_torch(backend: str, launch) -> tuple[np.ndarray, int]:
    """(pool after the call, guard cells changed)."""
    import torch

    from kv_canary_torch import launch_scatter_req_token_ids_kernel

    flat_in, offsets, rows, pool, layout, start_cols = launch
    device = "cuda" if GPU else "cpu"
    buffer, view = _torch_pool(pool, layout, device)
    mask = torch.ones_like(buffer, dtype=torch.bool)
    view_mask = mask.as_strided(view.shape, view.stride(), view.storage_offset())
    view_mask.fill_(False)
    args = [torch.from_numpy(a).to(device) for a in (flat_in, offsets, rows)]
    window = {} if start_cols is None else {"start_cols": torch.from_numpy(start_cols).to(device)}
    launch_scatter_req_token_ids_kernel(
        flat_in=args[0], offsets=args[1], req_pool_indices=args[2], pool_out=view, backend=backend, **window
    )
    guards = int((buffer[mask] != GUARD).sum())
    return view.cpu().numpy(), guards


def assignment_of(launch) -> tuple:
    """The launch's requests as ``assign_req_to_token_pool``'s arguments ``(rows, start, end, out_cache_loc)``.

    ``start`` is each request's first column (its ``start_cols``, 0 unwindowed: in windowed launches past the width,
    negative and at the int64 extremes). A case keeps its segment's length, ``end = start + length`` wrapping in int64
    (lengths past the width, negative ones, the int64 extremes' lengths, and ends that wrap past the other extreme,
    where the spec's exact length differs from the wrapped one); a bridge (its row outside the table) gets a length of
    0, -1 or -2, a negative one leaving the running sum where it is. The spec clips each length to
    ``len(out_cache_loc)``, so a length past every window's (more than the width plus 4: an int64 extreme's) reads
    every slot left: those requests go last, in their order, so that every other one reads slots of its own.
    ``out_cache_loc`` is ``flat_in`` repeated to the others' total plus half the width and one: the first of the last
    requests reads up to its end and past it (clipped).
    """
    flat_in, offsets, rows, pool, _, start_cols = launch
    width = pool.shape[1]
    start = np.zeros(rows.shape[0], np.int64) if start_cols is None else start_cols
    lengths = offsets[1:] - offsets[:-1]  # wrapping, as the launch's segments are
    bridge = np.arange(rows.shape[0]) % 2 == 0  # requests 2k are bridges (build_launch)
    lengths = np.where(bridge, -(np.arange(rows.shape[0]) // 2 % 3), lengths)
    with np.errstate(over="ignore"):
        end = start + lengths
    exact = assignment.lengths(start, end, 2**62)  # exact, clipped far past any window
    long = exact > width + 4
    order = np.argsort(long, kind="stable")
    n_tokens = int(exact[~long].sum()) + width // 2 + 1
    return rows[order], start[order], end[order], np.resize(flat_in, n_tokens)


def assignment_scatter(launch, batch_size=None) -> tuple:
    """``assignment_of(launch)``'s first ``batch_size`` requests (None: all) as the windowed scatter the spec defines
    it to be: ``(flat_in, offsets, rows, start_cols)`` (``assignment.windows``), which ``mismatches`` compares the
    table with."""
    rows, start, end, loc = assignment_of(launch)
    bs = rows.shape[0] if batch_size is None else min(batch_size, rows.shape[0])
    offsets, start_cols = assignment.windows(start, end, bs, loc.shape[0])
    return loc, offsets, rows[:bs], start_cols


def run_assign(launch) -> tuple[np.ndarray, int]:
    """(table after ``assign_req_to_token_pool_func`` on the launch's ``assignment_of``, guard cells changed)."""
    import torch

    from kv_canary_torch import assign_req_to_token_pool_func

    pool, layout = launch[3], launch[4]
    device = "cuda" if GPU else "cpu"
    buffer, view = _torch_pool(pool, layout, device)
    mask = torch.ones_like(buffer, dtype=torch.bool)
    mask.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(False)
    rows, start, end, loc = (torch.from_numpy(a).to(device) for a in assignment_of(launch))
    assign_req_to_token_pool_func(rows, view, start, end, loc, rows.shape[0], backend="triton")  # interpreted off a GPU
    return view.cpu().numpy(), int((buffer[mask] != GUARD).sum())


def run_jax(implementation: str, launch) -> tuple[np.ndarray, int]:
    import jax

    from kv_canary_jax import scatter_req_token_ids

    flat_in, offsets, rows, pool, _, start_cols = launch
    device = jax.devices("gpu")[0] if GPU else jax.devices("cpu")[0]
    args = [jax.device_put(a, device) for a in (flat_in, offsets, rows, pool)]
    window = {} if start_cols is None else {"start_cols": jax.device_put(start_cols, device)}
    out = scatter_req_token_ids(*args, implementation=implementation, interpret=not GPU, **window)
    return np.asarray(out), 0


def run_jax_assign(launch, batch_size=None) -> tuple[np.ndarray, int]:
    """(table after ``kv_canary_jax.assign_req_to_token_pool`` on the first ``batch_size`` requests (None: all) of
    the launch's ``assignment_of``, 0)."""
    import jax

    from kv_canary_jax import assign_req_to_token_pool

    device = jax.devices("gpu")[0] if GPU else jax.devices("cpu")[0]
    rows, start, end, loc = (jax.device_put(a, device) for a in assignment_of(launch))
    bs = rows.shape[0] if batch_size is None else min(batch_size, rows.shape[0])
    table = jax.device_put(launch[3], device)
    implementation = None if GPU else "mosaic"  # interpreted off a GPU
    return np.asarray(assign_req_to_token_pool(rows, table, start, end, loc, batch_size=bs,
                                               implementation=implementation, interpret=not GPU)), 0


def storage_cases(backend: str) -> tuple[int, int]:
    """(cases run, cases wrong) of the arguments whose memory is not what they read (module docstring)."""
    import torch

    from kv_canary_torch import launch_scatter_req_token_ids_kernel
    from shared_spec import errors

    device = "cuda" if GPU else "cpu"
    flat_np, offsets_np, rows_np = np.arange(100, 112), np.array([0, 3, 10, 12]), np.array([2, 0, 3])
    flat, offsets, rows = (torch.from_numpy(a).to(device) for a in (flat_np, offsets_np, rows_np))
    fresh = lambda: torch.full((4, 5), GUARD, dtype=torch.int32, device=device)  # noqa: E731
    expected = scatter_reference(flat_np, offsets_np, rows_np, np.full((4, 5), GUARD, np.int32))

    def call(pool, flat_in=flat, offsets=offsets, rows=rows):
        launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend=backend)
        return pool

    def freed(tensor):
        tensor.untyped_storage().resize_(0)
        return tensor

    def shrunk(tensor):
        buffer = torch.zeros(tensor.numel() + 1, dtype=tensor.dtype, device=device)
        view = buffer[1:].view(tensor.shape)
        buffer.untyped_storage().resize_(tensor.numel() * tensor.element_size())
        return view

    refused = {
        "pool_out freed": (lambda: call(freed(fresh())), "pool_out"),
        "pool_out shrunk": (lambda: call(shrunk(fresh())), "pool_out"),
        "pool_out a zero tensor": (lambda: call(torch._efficientzerotensor((4, 5), dtype=torch.int32, device=device)), "pool_out"),
        "flat_in freed": (lambda: call(fresh(), flat_in=freed(flat.clone())), "flat_in"),
        "flat_in shrunk": (lambda: call(fresh(), flat_in=shrunk(flat)), "flat_in"),
    }
    cases = wrong = 0
    for name, (bad_call, argument) in refused.items():
        for _ in range(2):
            call(fresh())
        cases += 1
        try:
            bad_call()
        except errors.KvCanaryValueError as error:
            if str(error) == errors.NO_MEMORY.format(arg=argument):
                continue
            print(f"torch/{backend} {name}: {error}", file=sys.stderr)
        else:
            print(f"torch/{backend} {name}: not refused", file=sys.stderr)
        wrong += 1
    written = {
        "functionalize": lambda: torch.func.functionalize(call)(fresh()),
        "functionalize, nothing to write": lambda: torch.func.functionalize(
            lambda pool: call(pool, flat_in=flat[:0], offsets=torch.zeros_like(offsets)))(fresh()),
    }
    wanted = {"functionalize": expected, "functionalize, nothing to write": np.full((4, 5), GUARD, np.int32)}
    for name, good_call in written.items():
        call(fresh())
        cases += 1
        try:
            got = good_call().cpu().numpy()
            bad = int((got != wanted[name]).sum())
        except errors.KvCanaryValueError as error:  # backend="triton" under a transform: the spec's refusal is right
            bad = 0 if str(error).endswith(errors.TORCH_FUNC_TRANSFORMED) else 1
        if bad:
            print(f"torch/{backend} {name}: {bad} wrong cells", file=sys.stderr)
        wrong += bool(bad)
    cases += 1  # the window from column -3 over 2**63 - 1 expanded tokens writes columns 3..7
    pool = torch.full((1, 8), GUARD, dtype=torch.int32, device=device)
    for _ in range(2):
        call(pool, flat_in=torch.tensor([7], device=device).expand(2**63 - 1), offsets=torch.tensor([-3, 5], device=device),
             rows=torch.tensor([0], device=device))
    want = np.full((1, 8), GUARD, np.int32)
    want[0, 3:] = 7
    if (pool[:1].cpu().numpy() != want).any():
        print(f"torch/{backend} int64-end window: {pool.cpu().numpy()}", file=sys.stderr)
        wrong += 1
    return cases, wrong


def runner(kernel: str):
    frontend, name = kernel.split("/")
    if kernel == "torch/assign":
        return run_assign
    if kernel in ASSIGN_BATCHES:
        return lambda launch: run_jax_assign(launch, ASSIGN_BATCHES[kernel])
    if frontend == "torch":
        return lambda launch: run_torch(name, launch)
    return lambda launch: run_jax(name, launch)


def unavailable(kernel: str) -> str | None:
    """Why ``kernel`` cannot run here (None: it can)."""
    frontend, name = kernel.split("/")
    if kernel == "torch/assign":  # its Triton kernel, interpreted off a GPU, as the launcher's
        name = "triton"
    if frontend == "torch":
        import torch

        from kv_canary_torch import backends

        try:
            backends.resolve(name, torch.empty((0, 0), dtype=torch.int32, device="cuda" if GPU else "cpu"))
        except ValueError as error:
            return str(error)
        return None
    from kv_canary_jax import implementations, platforms

    if kernel in ASSIGN_BATCHES:  # the default implementation on a GPU, Mosaic GPU interpreted off one
        return None if GPU else implementations.unavailable_reason("mosaic", platforms.CPU, True)
    return implementations.unavailable_reason(name, platforms.CUDA if GPU else platforms.CPU, not GPU)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES, help=f"malformed-value cases per kernel (default {DEFAULT_CASES})")
    parser.add_argument("--per-launch", type=int, default=64, help="cases per kernel launch (default 64)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1,
                        help="run (and check) every launch this many times: with 2 the torch launcher's second call of "
                             "each shape takes the call path (kv_canary_torch.launch.native), its kernel bound at the first")
    parser.add_argument("--kernels", nargs="+", choices=sorted(set(CPU_KERNELS)),
                        default=list(GPU_KERNELS if GPU else CPU_KERNELS))
    args = parser.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)  # this process's choice: int64 arguments need it

    kernels, skipped = [], []
    for kernel in args.kernels:
        reason = unavailable(kernel)
        (skipped.append(f"{kernel} ({reason})") if reason else kernels.append(kernel))
    launches = list(corpus(args.cases, args.per_launch, args.seed))
    cases = bad = 0
    for kernel in kernels:
        run = runner(kernel)
        for launch in [launch for launch in launches for _ in range(args.repeat)]:
            n_cases = (launch[2].shape[0]) // 2
            try:
                got, guards = run(launch)
                if kernel in ASSIGN_BATCHES:
                    flat_in, offsets, rows, start_cols = assignment_scatter(launch, ASSIGN_BATCHES[kernel])
                    wrong = mismatches(flat_in, offsets, rows, launch[3], got, start_cols) + guards
                else:
                    wrong = mismatches(*launch[:4], got, launch[5]) + guards
            except Exception as error:  # a kernel that raises on any value fails the corpus
                print(f"{kernel}: raised {type(error).__name__}: {error}", file=sys.stderr)
                wrong = n_cases
            if wrong:
                print(f"{kernel}: {wrong} wrong cells, launch geometry {launch[3].shape} layout {launch[4]}", file=sys.stderr)
            cases += n_cases
            bad += wrong
    storage_run = 0
    for kernel in kernels:
        frontend, name = kernel.split("/")
        if frontend == "torch" and kernel != "torch/assign":
            run_cases, wrong = storage_cases(name)
            storage_run, bad = storage_run + run_cases, bad + wrong
    print(f"cases run: {cases} ({args.cases} per kernel, {len(launches)} launches each, each run {args.repeat}x), "
          f"storage cases: {storage_run}, mismatches: {bad}, kernels: {', '.join(kernels) or 'none'}")
    for line in skipped:
        print(f"skipped: {line}")
    return 1 if bad or not kernels else 0


if __name__ == "__main__":
    sys.exit(main())
