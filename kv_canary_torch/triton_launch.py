"""Host side of the Triton backend: the grid and the launch.

Contract: ``launch(flat_in, offsets, req_pool_indices, pool_out)`` enqueues the
kernel of ``triton_kernel`` on the current stream of ``pool_out``'s device and
returns at once. The arguments have passed the argument checks. It reads only
shapes and strides (never data): no host-device sync, no allocation, so it is
CUDA-graph capturable, and it launches nothing when no cell can be written
(``bs == 0``, ``N == 0``, ``R == 0`` or ``C == 0``).

Two kernels (``triton_kernel``), chosen from shapes and strides only:

- ``tiled`` (``scatter_req_token_ids_tiled_kernel``): where ``flat_in`` and
  the pool's columns are contiguous, the batch is large (the ``LARGE``
  shape's tiles, over ``TILED_WARPS`` warps), a window may span at least
  ``TILED_MIN_TILES`` tiles (``cdiv(min(C, N), BLOCK)``), its grid ``(bs,
  cdiv(min(C, N), BLOCK) + 1)`` has at most ``TILED_IDLE`` programs per tile
  of tokens (``cdiv(N, BLOCK) + bs``; a decode batch of one token per
  request on a wide pool does not pay a program per empty tile) and fits
  CUDA's axis 1 (65535): one program per aligned tile, no loop, unmasked
  16-byte stores inside windows;
- ``lanes`` (``scatter_req_token_ids_kernel``): everything else, any strides;
  compiled with ``UNIT`` (no stride multiply per element) where ``flat_in``
  and the pool's columns are contiguous.

How it launches (``_FastLaunch``): the first call of a shape compiles through
Triton's generic ``kernel[grid](...)``; from then on one ``cuLaunchKernel``
through the C launcher (``cuda_launch``), the shape's grid and ints bound once,
or, where that launcher is unavailable (no C compiler, ``KV_CANARY_C_LAUNCHER=0``),
Triton's own compiled launcher. Once a call's argument signature (each
argument's layout, dtype, shape, strides and device, and the backend named) has passed
the launcher's checks and launched through a bound launch, ``remember_call``
puts it in ``_memo``, and the launcher's next call with that signature is one
C call (``call_bound``, the C launcher's ``call``): no Python check, key or
plan at all. Every argument check of the spec and every launch choice is a
function of the signature, so the memo answers exactly what they would.

Requests go on axis 0, which CUDA allows up to 2**31 - 1 (axes 1 and 2 stop
at 65535), so there is no cap on ``bs`` below that. In the ``lanes`` kernel
each request's columns are shared by ``lanes`` programs that stride through
them tile by tile, so any width is covered by any lane count and the lane
count is a pure speed choice, from shapes only:

- a request never writes more than ``min(C, N)`` cells, so more than
  ``cdiv(min(C, N), BLOCK)`` lanes would only add programs with nothing to do
  (decode steps, one token per request, get one lane);
- with many requests, ``cdiv(TARGET_PROGRAMS, bs)`` lanes per request keep the
  programs that exit at once (short requests) from outnumbering the work, while
  one long request alone still gets up to ``TARGET_PROGRAMS`` lanes.
"""

from __future__ import annotations

import contextlib
import functools
from typing import NamedTuple

import torch

from shared_spec.reference import longest_window

# Launch shapes, from benchmarks/tune_triton.py on the H200 (interleaved
# rounds against the same-run per-request-tile baseline): (BLOCK, num_warps,
# TARGET_PROGRAMS, STREAM). A batch whose requests together span at most
# SMALL_CELLS columns is latency-bound: 256-column tiles (2 tokens a thread)
# finish soonest. Everything larger streams best from 1024-column tiles over
# 4 warps (8 tokens a thread), at most ~4096 programs. Across the grid these
# measured 0.87x to 1.02x the baseline's device time (ratios of medians).
SMALL_CELLS = 16384
SMALL = (256, 4, 4096, False)
LARGE = (1024, 4, 4096, False)
# The tiled kernel runs LARGE's 1024-cell tiles over 2 warps (16 tokens a
# thread, twice the loads in flight per thread). tune_triton.py, one H200, 5
# interleaved rounds (third session), ratio to the baseline at the 8 cases of
# 1M tokens or more, 2 warps / 4 warps: worst 0.98 / 1.06, mean 0.93 / 0.96;
# 2 warps faster at 6 of the 8 cases.
TILED_WARPS = 2
# The tiled kernel only where a window may span this many tiles or more. On
# shorter windows (sglang's 513- and 2049-column rows) the lanes kernel matched
# it with the L2 flushed before each call and beat it chained in a CUDA graph,
# inputs warm: tune_triton.py on one H200 (eighth session), ratio to the
# same-run baseline, tiled / lanes, medians of three flushed runs, then chained:
# 4096 x 512 0.96 / 0.98, 1.34 / 1.14; 1024 x 2048 1.00 / 1.00, 1.11 / 1.03;
# 256 x 2048 0.98 / 0.90, 1.21 / 1.06; 64 x 2048 1.01 / 0.96, 1.04 / 0.99.
# From 8193 columns on the tiled kernel was ahead flushed (256 x 8192 0.94 /
# 1.01, ragged 0.97 / 1.00 and 0.94 / 0.99). With the lanes kernel's UNIT
# specialization since, two flushed runs and one chained: 4096 x 512 0.90, 0.98 /
# 0.98, 1.03, chained 1.31 / 1.01; 1024 x 2048 0.95, 1.01 / 1.22 (an outlier),
# 1.04, chained 1.15 / 1.03; 256 x 32768 0.94, 0.96 / 1.02, 1.02, chained 0.96 / 1.04.
TILED_MIN_TILES = 4
# The tiled kernel's grid may hold at most this many programs per tile of tokens
# (cdiv(N, BLOCK) + bs: each request's first tile may be partial); past that
# most of its programs would find nothing to copy and the lanes kernel, whose
# grid follows the tokens, is launched instead.
TILED_IDLE = 4
# CUDA's grid axis 1 (the tiled kernel's tiles per request) stops here.
GRID_AXIS_1 = 65535
TILED, LANES = "tiled", "lanes"
# Each kernel's constexpr parameters, in the order of a plan's ``constexprs``.
TILED_CONSTEXPRS = ("BLOCK",)
LANES_CONSTEXPRS = ("BLOCK", "WIDE", "STREAM", "UNIT")


def launch_shape(bs: int, width: int, n_tokens: int) -> tuple[int, int, int, bool]:
    """(BLOCK, num_warps, TARGET_PROGRAMS, STREAM) for one launch, from shapes only."""
    return SMALL if bs * longest_window(width, n_tokens) <= SMALL_CELLS else LARGE


def tiled(shape, flat_stride: int, stride_col: int, bs: int, tiles: int, token_tiles: int) -> bool:
    """Whether the tiled kernel runs (module docstring): contiguous, large, long windows, not too idle, within grid axis 1.

    ``tiles`` is its grid's axis 1, ``cdiv(min(C, N), BLOCK) + 1``; ``token_tiles`` is ``cdiv(N, BLOCK) + bs``.
    """
    return (
        flat_stride == 1 and stride_col == 1 and shape == LARGE and tiles - 1 >= TILED_MIN_TILES
        and bs * tiles <= TILED_IDLE * token_tiles and tiles <= GRID_AXIS_1
    )


_module = None  # kv_canary_torch.triton_kernel, imported at first use


def kernel_module():
    """The kernel module, imported on first use (Triton reads TRITON_INTERPRET then)."""
    global _module
    if _module is None:
        from kv_canary_torch import triton_kernel

        _module = triton_kernel
    return _module


def interpreted() -> bool:
    """True when the kernel runs in Triton's interpreter (defines the kernel if needed)."""
    return kernel_module().INTERPRETED


def launch(flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor, pool_out: torch.Tensor) -> None:
    """Enqueue the kernel; see the module docstring."""
    key = launch_key(flat_in, offsets, req_pool_indices, pool_out)
    device = key[-1]
    pointers = (flat_in.data_ptr(), offsets.data_ptr(), req_pool_indices.data_ptr(), pool_out.data_ptr())
    bound = _bound.get(key)  # the C launcher, bound to this shape (_FastLaunch)
    if bound is not None and _fast.may_launch(pointers, device) and _fast.c_launch(bound, _raw_stream(device), *pointers):
        return
    plan = _plans.get(key) or _plan(key)
    if plan is _NOTHING:
        return
    compiled = _fast.compiled.get(plan.variant)
    if compiled is not None and _fast.launch(compiled, plan, pointers, device):
        _fast.bind(key, compiled, plan)
        return
    module = _module or kernel_module()
    args = (flat_in, offsets, req_pool_indices, pool_out, *plan.ints)
    if plan.kernel == TILED:
        kernel, names = module.scatter_req_token_ids_tiled_kernel, TILED_CONSTEXPRS
    else:
        kernel, names = module.scatter_req_token_ids_kernel, LANES_CONSTEXPRS
    meta = dict(zip(names, plan.constexprs), num_warps=plan.shape[1])
    if device < 0 or device == torch.cuda.current_device():
        compiled = kernel[plan.grid](*args, **meta)
    else:  # Triton launches on the current device: make it pool_out's
        with torch.cuda.device(device):
            compiled = kernel[plan.grid](*args, **meta)
    if device >= 0:
        _fast.remember(key, compiled, plan, pointers)


def launch_key(flat_in, offsets, req_pool_indices, pool_out) -> tuple:
    """``(bs, N, R, C, stride_row, stride_col, flat_stride, offsets_stride, rows_stride, device)``: what a plan depends on."""
    n_rows, width = pool_out.shape
    stride_row, stride_col = pool_out.stride()
    return (
        req_pool_indices.shape[0], flat_in.shape[0], n_rows, width, stride_row, stride_col,
        flat_in.stride(0), offsets.stride(0), req_pool_indices.stride(0),
        pool_out.get_device(),  # -1 on the CPU (the interpreter)
    )


def _no_call(backend, flat_in, offsets, req_pool_indices, pool_out) -> bool:
    """``call_bound`` before the C launcher has loaded: nothing is launched."""
    return False


# call_bound(backend, flat_in, offsets, req_pool_indices, pool_out) -> bool: the C
# launcher's call (True: launched) once it has loaded, else _no_call.
call_bound = _no_call
_memo: dict[tuple, object] = {}  # argument signature -> bound launch (see the module docstring)
_signature = None  # the C launcher's signature(), once loaded


def remember_call(backend, flat_in, offsets, req_pool_indices, pool_out) -> None:
    """After a checked launch with ``check_values=False``: let ``call_bound`` take the next call with these arguments' signature.

    Only a signature whose launch key is bound to the C launcher is kept;
    arguments that are not exactly ``torch.Tensor`` have no signature.
    """
    if _signature is None:
        return
    signature = _signature(backend, flat_in, offsets, req_pool_indices, pool_out)
    if signature is None or signature in _memo:
        return
    bound = _bound.get(launch_key(flat_in, offsets, req_pool_indices, pool_out))
    if bound is not None:
        if len(_memo) >= PLAN_CACHE:
            _memo.clear()
        _memo[signature] = bound


@contextlib.contextmanager
def without_call_path():
    """Inside, every launcher call takes the checked path (for benchmarks: what a signature's first call costs)."""
    global call_bound, _signature
    saved = call_bound, _signature
    call_bound, _signature = _no_call, None
    try:
        yield
    finally:
        call_bound, _signature = saved


def forget() -> None:
    """Drop every cached plan, remembered kernel, bound launch and remembered signature (tests that change the launch constants)."""
    _plans.clear()
    _fast.compiled.clear()
    _fast.c_declined.clear()
    _bound.clear()
    _memo.clear()


class _Plan(NamedTuple):
    """Everything about one launch that follows from shapes and strides alone."""

    grid: tuple[int, int]
    ints: tuple[int, ...]  # the kernel's integer arguments, in order
    shape: tuple[int, int, int, bool]  # (BLOCK, num_warps, TARGET_PROGRAMS, STREAM)
    constexprs: tuple  # the kernel's constexprs (LANES_CONSTEXPRS or TILED_CONSTEXPRS), appended to the launcher's arguments
    variant: tuple  # (device, kernel, shape, constexprs): one compiled kernel each
    small_ints: bool  # every int fits int32 (the fast path's specialization)
    kernel: str = LANES  # TILED or LANES


_NOTHING = _Plan((0, 0), (), (0, 0, 0, False), (), (), False)  # bs, N, R or C is 0
# Plans by (bs, N, R, C, strides..., device). Serving steps repeat a few shapes;
# the cache is dropped whole past PLAN_CACHE entries so it cannot grow without bound.
_plans: dict[tuple, _Plan] = {}
PLAN_CACHE = 4096


def _plan(key: tuple) -> _Plan:
    bs, n_tokens, n_rows, width, stride_row, stride_col, flat_stride, offsets_stride, rows_stride, device = key
    if bs == 0 or n_tokens == 0 or n_rows == 0 or width == 0:
        plan = _NOTHING
    else:
        shape = launch_shape(bs, width, n_tokens)
        block, _, target, stream = shape
        tiles = -(-longest_window(width, n_tokens) // block) + 1  # aligned tiles a window can meet
        if tiled(shape, flat_stride, stride_col, bs, tiles, -(-n_tokens // block) + bs):
            shape = (block, TILED_WARPS, target, stream)
            ints = (n_tokens, n_rows, width, offsets_stride, rows_stride, stride_row)
            plan = _Plan((bs, tiles), ints, shape, (block,), (device, TILED, shape, (block,)), max(ints) < 2**31, TILED)
        else:
            lanes = min(-(-longest_window(width, n_tokens) // block), -(-target // bs))
            wide = width * max(stride_col, flat_stride, 1) >= 2**31 or width + lanes * block >= 2**31
            ints = (n_tokens, n_rows, width, flat_stride, offsets_stride, rows_stride, stride_row, stride_col)
            constexprs = (block, wide, stream, flat_stride == 1 and stride_col == 1)
            plan = _Plan((bs, lanes), ints, shape, constexprs, (device, LANES, shape, constexprs), max(ints) < 2**31)
    if len(_plans) >= PLAN_CACHE:
        _plans.clear()
        _bound.clear()
        _memo.clear()
    _plans[key] = plan
    return plan


class _FastLaunch:
    """Launches the already-compiled kernel without Triton's generic dispatcher.

    Triton's ``kernel[grid](...)`` binds arguments, computes a specialization key
    and looks up its cache on every call: about 17 us of host time per launch on
    the H200 machine, more than the kernel itself at every size up to millions
    of tokens. Here the key is known in advance for the common case, and the
    kernel is launched one of two ways:

    - the C launcher (``cuda_launch``): one ``cuLaunchKernel`` with the launch
      key's grid and ints bound once (``_bound``, by launch key), bound when
      the key is first launched by either of the other paths;
    - the compiled kernel's own launcher (``CompiledKernel.run``) where the C
      launcher is unavailable or declines the kernel, and for the first call of
      a new key whose variant is compiled already.

    Why that is exact: the kernel specializes nothing on its integer arguments
    but their width (``do_not_specialize`` covers them all; an int is passed as
    i32 when it fits, i64 otherwise) and each pointer on its 16-byte alignment.
    The fast path runs only when every integer fits in int32 and every pointer is
    16-byte aligned -- one specialization per (device, launch shape), compiled by
    the generic path the first time it occurs and remembered -- on the current
    device, and when no Triton launch hook (a profiler) is installed. Anything
    else takes the generic path.
    """

    def __init__(self):
        self.compiled: dict[tuple, object] = {}
        self.disabled = False
        self.c_launch = None  # cuda_launch.launcher(), looked up at the first bind
        self.c_declined: set[tuple] = set()  # plan variants the C launcher cannot launch

    def remember(self, key: tuple, compiled, plan: _Plan, pointers) -> None:
        """After a generic launch: keep ``compiled`` for its variant, and bind ``key`` to the C launcher."""
        aligned = not (pointers[0] | pointers[1] | pointers[2] | pointers[3]) & 15
        if compiled is not None and not self.disabled and plan.small_ints and aligned and _hooks_idle():
            self.compiled[plan.variant] = compiled
            self.bind(key, compiled, plan)

    @staticmethod
    def may_launch(pointers, device: int) -> bool:
        """Whether a remembered kernel may take these pointers on ``device``: aligned, no hook, the current device."""
        if (pointers[0] | pointers[1] | pointers[2] | pointers[3]) & 15 or not _hooks_idle():
            return False
        return not _several_devices() or device == torch.cuda.current_device()

    def launch(self, compiled, plan: _Plan, pointers, device: int) -> bool:
        """Launch through ``compiled``'s own launcher and return True, or return False for the generic path to launch."""
        if not plan.small_ints or not self.may_launch(pointers, device):
            return False
        grid0, grid1 = plan.grid
        try:
            compiled.run(
                grid0, grid1, 1, _raw_stream(device), compiled.function, compiled.packed_metadata,
                None, None, None, *pointers, *plan.ints, *plan.constexprs,
            )
        except (TypeError, AttributeError):  # a Triton whose launcher differs: never try again
            self.disabled = True
            self.compiled.clear()
            return False
        return True

    def bind(self, key: tuple, compiled, plan: _Plan) -> None:
        """Bind ``key``'s launch to the C launcher, where it can stand in for ``compiled``'s (``cuda_launch.bind``)."""
        if plan.variant in self.c_declined or key in _bound:
            return
        from kv_canary_torch import cuda_launch

        bound = cuda_launch.bind(compiled, plan.grid, plan.ints)
        if bound is None:  # the launcher is unavailable, or this kernel is not a plain launch: it stays so
            self.c_declined.add(plan.variant)
            return
        if self.c_launch is None:
            self.c_launch = cuda_launch.launcher()
            _configure_call_path(cuda_launch.module())
        _bound[key] = bound


def _configure_call_path(c) -> None:
    """Point ``call_bound`` at the C launcher's ``call``, over ``_memo`` and this module's hook, stream and device readers.

    It reads the arguments through torch's Python getters until the C++
    tensor reader (``tensor_meta``) has loaded in the background, then
    through the reader; the memo is emptied at the switch, since the two
    spell signatures differently (each remembered signature is re-learnt at
    its next call).
    """
    global call_bound, _signature, _reader_loading
    from kv_canary_torch import tensor_meta

    current_device = (getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device) if _several_devices() else None
    readers = (_memo, torch.Tensor, _hooks_idle, _raw_stream, current_device)
    c.configure(*readers)
    _signature, call_bound = c.signature, c.call

    def use(reader) -> None:
        _memo.clear()
        c.configure(*readers, reader)

    _reader_loading = tensor_meta.when_ready(use)


_reader_loading = None  # the thread loading the tensor reader (tensor_meta.when_ready), once started


def settle(timeout: float = 120.0) -> None:
    """Wait until the C++ tensor reader has loaded or failed to: the steady state of a long-lived process (benchmarks, tests)."""
    if _reader_loading is not None:
        _reader_loading.join(timeout)


_runtime_knobs = None  # triton.knobs.runtime (Triton >= 3.4), looked up once


def _hooks_idle() -> bool:
    """True when no Triton launch hook is installed (profilers install them)."""
    global _runtime_knobs
    if _runtime_knobs is None:
        import triton  # imported already: the kernel module was defined before any launch

        knobs = getattr(triton, "knobs", None)
        _runtime_knobs = knobs.runtime if knobs is not None else triton.compiler.CompiledKernel
    enter = getattr(_runtime_knobs, "launch_enter_hook", None)
    exit_ = getattr(_runtime_knobs, "launch_exit_hook", None)
    return (enter is None or not getattr(enter, "calls", True)) and (exit_ is None or not getattr(exit_, "calls", True))


@functools.cache
def _several_devices() -> bool:
    return torch.cuda.device_count() > 1


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda device: torch.cuda.current_stream(device).cuda_stream
)
_fast = _FastLaunch()
_bound: dict[tuple, object] = {}  # launch key -> the C launcher's bound launch (_FastLaunch)
