"""Host side of the Triton backend: each launch, and the call path that takes a remembered call whole.

Contract:

- ``launch(flat_in, offsets, req_pool_indices, pool_out, start_cols=None)``
  enqueues the kernel ``plan.plan`` names on the current stream of
  ``pool_out``'s device and returns at once; with ``start_cols`` the
  ``WINDOWED`` variant, through Triton's generic launch (2. below takes
  unwindowed calls alone), bound to the C launcher where ``start_cols`` has
  unit stride. The arguments have passed the argument checks. It
  reads only shapes and strides (never data): no host-device sync, no
  allocation, so it is CUDA-graph capturable, and it launches nothing when no
  cell can be written.
- ``call_bound(backend, flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> bool``:
  the C call path (``native.c``'s ``call``) once it is configured, else
  always False. True: the call was checked and launched. A windowed call's
  signature holds ``start_cols``' too (remembered with unit stride only).
- ``remember_call(backend, ...)``: after a checked launch with
  ``check_values=False``, lets ``call_bound`` take the later calls whose
  arguments have the same signature.

How a call runs, fastest first:

1. A remembered signature (``call_bound``): one C call reads the four
   tensors' metadata, and ``start_cols``' where given (the C++ reader,
   ``tensor_meta``), finds their signature in ``_memo``, tests ``len(offsets)
   == bs + 1`` (and ``len(start_cols) == bs``), plans the launch from ``N``
   and ``bs`` (``plan``'s twin) and launches that slot's kernel: no Python
   check, plan or frame. The signature is what stays fixed from one serving
   step to the next: dtypes, ranks, strides, devices, the pool's shape, the
   layout and the backend named; never ``N`` or ``bs``. Every argument check
   of the spec is a function of it and of that one relation, so the memo
   answers exactly what the checks would.
2. A bound variant (``_kernels``: the kernel Triton compiled for
   ``plan.variant``, bound once to the C launcher), with every int in int32,
   16-byte aligned pointers, the pool's device current and no Triton launch
   hook: the C launcher's ``launch``.
3. Otherwise Triton's generic ``kernel[grid](...)``, which compiles the
   variant the first time it occurs; its kernel is then bound (or declined:
   ``None``) once.

Why 2 and 1 are exact: the kernels specialize nothing on their integer
arguments but their width (``do_not_specialize`` covers them all; an int is
passed as i32 when it fits, i64 otherwise) and each pointer on its 16-byte
alignment, and a variant fixes everything else Triton compiles in (device,
kernel, launch shape, constexprs). The remembered kernels are the i32,
aligned specialization, and both paths take only calls that match it.

What is kept: a bound kernel per variant (a handful), and per signature a
list of ``plan.SLOTS`` kernels; nothing per ``N`` or ``bs``. The memo is
emptied whole past ``SIGNATURES`` entries, so it cannot grow without bound.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import threading

import torch

from kv_canary_torch.launch import native, plan as launch_plan
from kv_canary_torch.launch.plan import LANES_CONSTEXPRS, NOTHING, TILED, TILED_CONSTEXPRS, Plan

SIGNATURES = 4096
# Serializes interpreted launches: Triton's interpreter keeps the launch in progress in module globals, so two
# threads' launches would corrupt each other (kv_canary_torch.op's docstring).
INTERPRETER_LOCK = threading.Lock()

_module = None  # kv_canary_torch.triton_kernel, imported at first use
# plan variant -> the C launcher's binding of Triton's CompiledKernel (its i32, aligned specialization), or None
# where it declines: bound at the variant's first launch that may take it
_kernels: dict[tuple, object] = {}
_memo: dict[bytes, list] = {}  # argument signature -> its kernels, by plan slot (see the module docstring)
_c = None  # the C module, once a kernel is bound to it
_configured_rule: tuple | None = None  # plan.rule() as the C call path has it
_reader = None  # the C++ tensor reader's capsule, once loaded
_loading = threading.Lock()  # held while _load_call_path builds and loads


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


def plan_of(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> Plan:
    """``plan.plan`` for these tensors' shapes, strides and device (-1 on the CPU: the interpreter)."""
    n_rows, width = pool_out.shape
    stride_row, stride_col = pool_out.stride()
    return launch_plan.plan(
        req_pool_indices.shape[0], flat_in.shape[0], n_rows, width, stride_row, stride_col,
        flat_in.stride(0), offsets.stride(0), req_pool_indices.stride(0), pool_out.get_device(), start_cols is not None,
    )


def launch(flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor, pool_out: torch.Tensor,
           start_cols: torch.Tensor | None = None) -> None:
    """Enqueue the kernel; see the module docstring."""
    plan = plan_of(flat_in, offsets, req_pool_indices, pool_out, start_cols)
    if plan is NOTHING:
        return
    device = pool_out.get_device()
    pointers = (flat_in.data_ptr(), offsets.data_ptr(), req_pool_indices.data_ptr(), pool_out.data_ptr())
    if start_cols is None:
        kernel = _kernels.get(plan.variant)
        if kernel is not None and plan.small_ints and _may_launch(pointers, device):
            if _c.launch(kernel, *plan.grid, _raw_stream(device), *pointers, *plan.ints):
                return
        window = (None, None)  # constexprs: the unwindowed kernel has neither parameter
    else:
        window = (start_cols, start_cols.stride(0))
    module = _module or kernel_module()
    args = (flat_in, offsets, req_pool_indices, pool_out, *plan.ints, *window)
    if plan.kernel == TILED:
        kernel, names = module.scatter_req_token_ids_tiled_kernel, TILED_CONSTEXPRS
    else:
        kernel, names = module.scatter_req_token_ids_kernel, LANES_CONSTEXPRS
    meta = dict(zip(names, plan.constexprs), num_warps=plan.shape[1])
    with INTERPRETER_LOCK if module.INTERPRETED else contextlib.nullcontext():
        if device < 0 or device == torch.cuda.current_device():
            compiled = kernel[plan.grid](*args, **meta)
        else:  # Triton launches on the current device: make it pool_out's
            with torch.cuda.device(device):
                compiled = kernel[plan.grid](*args, **meta)
    if start_cols is not None:  # a windowed kernel binds from a unit-stride start_cols (Triton compiles that stride in)
        pointers = (*pointers, start_cols.data_ptr()) if start_cols.stride(0) == 1 else None
    if (pointers is not None and device >= 0 and compiled is not None and plan.variant not in _kernels
            and plan.small_ints and _may_launch(pointers, device)):
        _bind(plan, compiled)  # now, so that this call's remember_call fills its slot


def _may_launch(pointers, device: int) -> bool:
    """Whether a remembered kernel may take these pointers on ``device``: aligned, no hook, the current device.

    ``native.c``'s ``plan_call`` is its twin on the call path.
    """
    if functools.reduce(operator.or_, pointers) & 15 or not _hooks_idle():
        return False
    return not _several_devices() or device == torch.cuda.current_device()


def _bind(plan: Plan, compiled) -> None:
    """Remember ``compiled`` bound to the C launcher (None where it declines) for ``plan``'s variant; loads the call path."""
    kernel = _kernels[plan.variant] = native.bind(compiled, len(plan.ints), int(plan.constexprs[-1]))  # WINDOWED: 1 pointer
    if kernel is not None and _c is None:
        _load_call_path()


def _no_call(backend, flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> bool:
    """``call_bound`` before the call path is configured: nothing is launched."""
    return False


# call_bound(backend, flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> bool: the C
# call path once configured, else _no_call.
call_bound = _no_call
_signature = None  # the C module's signature(), once the call path is configured


def remember_call(backend, flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> None:
    """After a checked launch with ``check_values=False``: let ``call_bound`` take the next calls with these arguments' signature.

    A windowed call (``start_cols``) is remembered where ``start_cols`` has unit stride (every serving step's),
    the stride its bound kernels compiled in; its signature is one of its own.

    Arguments that are not exactly ``torch.Tensor``, or that the reader
    declines, have no signature. Every slot whose variant the C launcher has
    bound already (for this call or any earlier one, of any signature) is
    filled (``plan.slot_variants``), so a later call of the signature takes
    the checked path only for a variant no call of the process has launched
    yet (once each, at most ``plan.SLOTS`` per device and layout), or after
    the memo was emptied whole past ``SIGNATURES`` signatures.
    """
    if _signature is None or (start_cols is not None and start_cols.stride(0) != 1):
        return
    signature = _signature(backend, flat_in, offsets, req_pool_indices, pool_out, start_cols)
    if signature is None:
        return
    if launch_plan.rule() != _configured_rule:  # the rule's numbers changed (tests): plans of old families would differ
        _configure(_c, _reader)
    family = _memo.get(signature)
    if family is None:
        if len(_memo) >= SIGNATURES:
            _memo.clear()
        family = _memo[signature] = [None] * launch_plan.SLOTS
    if None in family:
        variants = launch_plan.slot_variants(
            pool_out.stride(1), flat_in.stride(0), offsets.stride(0), req_pool_indices.stride(0), pool_out.get_device(),
            start_cols is not None,
        )
        family[:] = [kernel if kernel is not None else _kernels.get(variant) for kernel, variant in zip(family, variants)]


def _load_call_path() -> None:
    """Load the C module and the C++ tensor reader, building each first where the cache lacks it; configure the call path.

    Runs in the launching thread at the process's first bound kernel (so the
    C module has loaded: ``native.bind`` needs it), and returns when both are
    loaded or one failed (its reason recorded, never tried again): that call's
    ``remember_call`` then remembers its signature, so the call path takes
    that signature from its second call. The build's one-time cost is in
    ``tensor_meta``'s docstring.
    """
    global _c, _reader
    from kv_canary_torch.launch import tensor_meta

    with _loading:  # another thread's first launch waits here rather than loading twice
        if _c is not None:
            return
        _c = native.module()
        _reader = tensor_meta.load()
        if _reader is not None:
            _configure(_c, _reader)


def _configure(c, reader) -> None:
    """Point ``call_bound`` at ``c``'s ``call`` over an empty memo and this module's hook, stream and device readers."""
    global call_bound, _signature, _configured_rule
    current_device = (getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device) if _several_devices() else None
    _memo.clear()
    _configured_rule = launch_plan.rule()
    c.configure(_memo, torch.Tensor, _hook_holder(), _raw_stream, current_device, reader, _configured_rule)
    _signature, call_bound = c.signature, c.call


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
    """Drop every remembered kernel and signature (tests that change the launch constants)."""
    _kernels.clear()
    _memo.clear()
    if _reader is not None:  # the C call path's last family too
        _configure(_c, _reader)


@functools.cache
def _hook_holder():
    """Where Triton keeps its launch hooks: ``triton.knobs.runtime`` (Triton >= 3.4), else ``CompiledKernel``."""
    import triton  # imported already: the kernel module was defined before any launch

    knobs = getattr(triton, "knobs", None)
    return knobs.runtime if knobs is not None else triton.compiler.CompiledKernel


def _hooks_idle() -> bool:
    """True when no Triton launch hook is installed (profilers install them); ``native.c``'s ``hooks_idle`` is its twin."""
    holder = _hook_holder()
    enter = getattr(holder, "launch_enter_hook", None)
    exit_ = getattr(holder, "launch_exit_hook", None)
    return (enter is None or not getattr(enter, "calls", True)) and (exit_ is None or not getattr(exit_, "calls", True))


@functools.cache
def _several_devices() -> bool:
    return torch.cuda.device_count() > 1


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda device: torch.cuda.current_stream(device).cuda_stream
)
