"""Host side of the Triton backend: each launch, and the call path that takes a remembered call whole.

Contract:

- ``launch(flat_in, offsets, req_pool_indices, pool_out, start_cols=None)``
  enqueues the kernel ``plan.plan`` names (with ``start_cols`` its
  ``WINDOWED`` variant) through Triton's own launch, on the current stream of
  ``pool_out``'s device, and returns at once. The arguments have passed the
  argument checks. It reads only shapes and strides (never data): no
  host-device sync, no allocation, so it is CUDA-graph capturable, and it
  launches nothing when no cell can be written.
- ``call_bound(backend, flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> True | bytes | None``:
  the native piece's ``call`` once it is configured (else None). True: the
  call was checked and launched. Otherwise nothing was launched and it gives
  the arguments' signature (None: they have none), which the launcher hands
  to ``remember_call`` after its checked path.
- ``remember_call(signature, backend, ...)``: after a checked launch with
  ``check_values=False``, lets ``call_bound`` take the later calls whose
  arguments have the same signature.
- ``device_copy() -> copy_to_device | None``: the native piece's asynchronous host-to-device copy (its contract in
  native.cpp) once the piece is loaded, else None (the caller copies through torch); ``int_stage() -> stage_ints |
  None`` likewise, a step's list of ints and two int64 arrays written to host memory (else the caller packs them).
- ``launch_assign(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size)``,
  ``assign_bound(backend, ..., batch_size) -> True | bytes | None`` and
  ``remember_assign(signature, backend, ..., batch_size)``: the same three for
  ``assign_req_to_token_pool_func`` (the native piece's ``assign``: the same
  reader, memo and launch, the assignment's op; one slot a signature).
- ``served() -> int | None``: the calls the native call path has served (None
  while it is off).
- ``use_rule(rule)``: plan every later launch, checked or remembered, under
  ``rule`` (a ``plan.Rule``; tests use small tiles), forgetting the
  signatures remembered under the rule before.

How a call runs:

1. A remembered signature (``call_bound``): one C++ call reads the four
   tensors' metadata, and ``start_cols``' where given, finds their signature
   in ``_memo``, tests ``len(offsets) == bs + 1`` (and ``len(start_cols) ==
   bs``), plans the launch from ``N`` and ``bs`` and launches that slot's
   kernel: no Python check, plan or frame. The signature is what stays fixed
   from one serving step to the next: dtypes, ranks, strides, devices, the
   pool's shape, the layout and the backend named; never ``N`` or ``bs``.
   Every argument check of the spec is a function of it and of that one
   relation, so the memo answers exactly what the checks would.
2. Otherwise the launcher's checks, then Triton's ``kernel[grid](...)``
   (``launch``), which compiles the variant the first time it occurs. Where
   the native piece is unavailable (no C++ compiler, no driver), every call
   runs this way.

Why 1 is exact: the kernels specialize nothing on their integer arguments
but their width (``do_not_specialize`` covers them all; an int is passed as
i32 when it fits, i64 otherwise) and each pointer on its 16-byte alignment,
and a variant fixes everything else Triton compiles in (device, kernel,
warps, constexprs). ``launch`` keeps the kernel Triton compiled for a
variant when the call had the i32, aligned specialization (``_compiled``),
``remember_call`` binds it (``native.bind``), and the native ``call`` takes
only calls that match it.

The native piece is built and loaded by the first ``remember_call`` that has
a compiled kernel to bind (on a GPU), synchronously, in the calling thread;
that call's signature is remembered, so the call path takes it from its
second call.

What is kept: a compiled and a bound kernel per variant (a handful), and per
signature a list of ``plan.SLOTS`` kernels (the assignment's: one); nothing per ``N`` or ``bs``. The
memo is emptied whole past ``SIGNATURES`` entries, so it cannot grow without
bound.
"""

from __future__ import annotations

import contextlib
import functools
import threading

import torch

from kv_canary_torch.launch import native, plan as launch_plan
from kv_canary_torch.launch.plan import LANES_CONSTEXPRS, NOTHING, TILED_CONSTEXPRS, Plan

SIGNATURES = 4096
# Serializes interpreted launches: Triton's interpreter keeps the launch in progress in module globals, so two
# threads' launches would corrupt each other (kv_canary_torch.op's docstring).
INTERPRETER_LOCK = threading.Lock()

_module = None  # kv_canary_torch.triton_kernel, imported at first use
_rule = launch_plan.RULE  # what every plan is made under (use_rule)
# plan variant -> (Triton's CompiledKernel of its i32, aligned specialization, its int count, windowed), kept by
# launch until remember_call binds it
_compiled: dict[tuple, tuple] = {}
# plan variant -> the native piece's binding of its compiled kernel, or None where it declines
_kernels: dict[tuple, object] = {}
_memo: dict[bytes, list] = {}  # argument signature -> its kernels, by plan slot (see the module docstring)
ASSIGN = "assign"  # the assignment kernel's variants' name (assign_variant)
_c = None  # the native piece, once loaded and configured
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
    """``plan.plan`` under the rule in use for these tensors' shapes, strides and device (-1 on the CPU: the interpreter)."""
    n_rows, width = pool_out.shape
    stride_row, stride_col = pool_out.stride()
    return launch_plan.plan(
        req_pool_indices.shape[0], flat_in.shape[0], n_rows, width, stride_row, stride_col,
        flat_in.stride(0), offsets.stride(0), req_pool_indices.stride(0), pool_out.get_device(), start_cols is not None,
        _rule,
    )


def launch(flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor, pool_out: torch.Tensor,
           start_cols: torch.Tensor | None = None) -> None:
    """Enqueue the kernel through Triton's launch; see the module docstring."""
    plan = plan_of(flat_in, offsets, req_pool_indices, pool_out, start_cols)
    if plan is NOTHING:
        return
    device = pool_out.get_device()
    window = (None, None) if start_cols is None else (start_cols, start_cols.stride(0))  # None: no parameter
    module = _module or kernel_module()
    args = (flat_in, offsets, req_pool_indices, pool_out, *plan.ints, *window)
    if plan.tiled:
        kernel, names = module.scatter_req_token_ids_tiled_kernel, TILED_CONSTEXPRS
    else:
        kernel, names = module.scatter_req_token_ids_kernel, LANES_CONSTEXPRS
    meta = dict(zip(names, plan.constexprs), num_warps=plan.warps)
    compiled = _triton_launch(device, lambda: kernel[plan.grid](*args, **meta))
    # Kept where Triton compiled the specialization the call path launches: i32 ints, 16-byte aligned pointers and,
    # windowed, start_cols' unit stride (compiled in).
    if (device >= 0 and compiled is not None and plan.small_ints and plan.variant not in _compiled
            and (start_cols is None or start_cols.stride(0) == 1)):
        tensors = (flat_in, offsets, req_pool_indices, pool_out) + (() if start_cols is None else (start_cols,))
        if not any(t.data_ptr() & 15 for t in tensors):
            _compiled[plan.variant] = (compiled, len(plan.ints), int(start_cols is not None), native.POINTERS)


def _triton_launch(device: int, launch_kernel):
    """``launch_kernel()``'s result (Triton's launch), under ``INTERPRETER_LOCK`` where the kernels are interpreted and
    with ``device`` current (-1: the CPU), since Triton launches on the current device."""
    with INTERPRETER_LOCK if interpreted() else contextlib.nullcontext():
        if device < 0 or device == torch.cuda.current_device():
            return launch_kernel()
        with torch.cuda.device(device):
            return launch_kernel()


def assign_variant(device: int, req_pool_indices, start_offset, end_offset, out_cache_loc) -> tuple:
    """The assignment kernel's variant for tensors on ``device``: one compiled kernel per dtype of its four index
    arguments (its ints are never specialized, its launch constants fixed), a signature's one slot."""
    return (ASSIGN, device, tuple(str(t.dtype) for t in (req_pool_indices, start_offset, end_offset, out_cache_loc)))


def launch_assign(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size: int) -> None:
    """Enqueue the assignment kernel through Triton's launch (``assign_kernel.launch``) on the current stream of the
    table's device, over checked tensors; no host sync. Keeps its compiled kernel for ``remember_assign`` where the
    call had the specialization the call path launches (int32 ints, 16-byte aligned pointers)."""
    from kv_canary_torch import assign_kernel

    tensors = (req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc)
    device = req_to_token.get_device()
    compiled = _triton_launch(device, lambda: assign_kernel.launch(*tensors, batch_size))
    if device < 0 or compiled is None:
        return
    variant = assign_variant(device, req_pool_indices, start_offset, end_offset, out_cache_loc)
    ints = (batch_size, out_cache_loc.shape[0], *req_to_token.shape, *(t.stride(0) for t in tensors), req_to_token.stride(1))
    if variant not in _compiled and max(ints) < launch_plan.INT32_END and not any(t.data_ptr() & 15 for t in tensors):
        _compiled[variant] = (compiled, launch_plan.ASSIGN_INTS, 0, len(tensors))


def _no_call(backend, flat_in, offsets, req_pool_indices, pool_out, start_cols=None):
    """``call_bound`` while the call path is off: nothing is launched, no signature read."""
    return None


def _no_assign(backend, req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size):
    """``assign_bound`` while the call path is off."""
    return None


# assign_bound(backend, req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size) -> True |
# bytes | None: the native piece's assign (the same call path, the assignment's op) while it is on, else _no_assign.
assign_bound = _no_assign


# call_bound(backend, flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> True | bytes | None: the
# native piece's call itself (no Python frame) while the call path is on, else _no_call.
call_bound = _no_call
_paused = 0  # without_call_path's depth


def remember_call(signature, backend, flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> None:
    """After a checked launch with ``check_values=False``: let ``call_bound`` take the next calls with these arguments'
    signature (``signature``, as ``call_bound`` gave it; None: read it here).

    A windowed call (``start_cols``) is remembered where ``start_cols`` has unit stride (every serving step's),
    the stride its bound kernels compiled in; its signature is one of its own.

    Arguments that are not exactly ``torch.Tensor``, or that the reader
    declines, have no signature. Every slot whose variant has a bound kernel
    (compiled for this call or any earlier one, of any signature) is filled
    (``plan.slot_variants``), so a later call of the signature takes the
    checked path only for a variant no call of the process has launched yet
    (once each, at most ``plan.SLOTS`` per device and layout), or after the
    memo was emptied whole past ``SIGNATURES`` signatures.
    """
    if start_cols is not None and start_cols.stride(0) != 1:
        return
    if _c is None and (_tried or not _compiled or not _load_call_path()):  # loaded once there is a kernel to bind
        return
    if signature is None:
        signature = _c.signature(backend, flat_in, offsets, req_pool_indices, pool_out, start_cols)
        if signature is None:
            return
    family = _family(signature, launch_plan.SLOTS)
    if None in family:
        variants = launch_plan.slot_variants(
            pool_out.stride(1), flat_in.stride(0), offsets.stride(0), req_pool_indices.stride(0), pool_out.get_device(),
            start_cols is not None, _rule,
        )
        family[:] = [kernel if kernel is not None else _bound(variant) for kernel, variant in zip(family, variants)]


def remember_assign(signature, backend, req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                    batch_size) -> None:
    """After a checked Triton launch of the assignment (``launch_assign``): let ``assign_bound`` take the next calls
    with these arguments' signature (``signature``, as ``assign_bound`` gave it; None: read it here), as
    ``remember_call`` does for the scatter. Its family has one slot: the kernel of ``assign_variant``."""
    if _c is None and (_tried or not _compiled or not _load_call_path()):
        return
    arguments = (req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc)
    if signature is None:
        signature = _c.assign_signature(backend, *arguments, batch_size)
        if signature is None:
            return
    family = _family(signature, 1)
    if family[0] is None:
        family[0] = _bound(assign_variant(req_to_token.get_device(), req_pool_indices, start_offset, end_offset,
                                          out_cache_loc))


def _family(signature: bytes, slots: int) -> list:
    """The memo's family of ``signature``, a new one of ``slots`` empty slots where it has none (the memo emptied
    whole first when it holds ``SIGNATURES``)."""
    family = _memo.get(signature)
    if family is None:
        if len(_memo) >= SIGNATURES:
            _memo.clear()
        family = _memo[signature] = [None] * slots
    return family


def _bound(variant: tuple):
    """The bound kernel of ``variant``: bound now from its compiled kernel where a launch kept one; None if none."""
    if variant not in _kernels and variant in _compiled:
        compiled, n_ints, n_window, n_pointers = _compiled[variant]
        _kernels[variant] = native.bind(_c, compiled, n_ints, n_window, n_pointers)
    return _kernels.get(variant)


_tried = False


def _load_call_path() -> bool:
    """Load the native piece, building it first where the cache lacks it, and configure the call path; tried once.

    Runs in the calling thread (the first ``remember_call`` with a compiled
    kernel to bind) and returns when the piece is loaded or has failed (its
    reason in ``native.unavailable_reason()``, never tried again). The build's
    one-time cost is in docs/performance-notes.md, "The call path".
    """
    global _tried
    with _loading:  # another thread's first call waits here rather than loading twice
        if not _tried:
            c = native.module()
            if c is not None:
                _configure(c)
            _tried = True
    return _c is not None


def _configure(c) -> None:
    """Point the call path at ``c`` over an empty memo, the rule in use and this module's hook, stream and device readers."""
    global _c, call_bound, assign_bound
    current_device = (getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device) if _several_devices() else None
    _memo.clear()
    c.configure(memo=_memo, tensor_type=torch.Tensor, hooks=_hook_holder(), raw_stream=_raw_stream,
                current_device=current_device, rule=launch_plan.native_config(_rule))
    _c = c
    call_bound, assign_bound = (_no_call, _no_assign) if _paused else (c.call, c.assign)


def device_copy():
    """The loaded native piece's ``copy_to_device`` (module docstring), else None."""
    return None if _c is None else _c.copy_to_device


def int_stage():
    """The loaded native piece's ``stage_ints`` (a step's list of ints and two int64 arrays into host memory), else None."""
    return None if _c is None else _c.stage_ints


def use_rule(rule: launch_plan.Rule) -> None:
    """Plan every later launch under ``rule`` (checked first: ``Rule.checked``); see the module docstring."""
    global _rule
    _rule = rule.checked()
    if _c is not None:
        _configure(_c)  # forgets the families planned under the rule before
    else:
        _memo.clear()


def served() -> int | None:
    """How many calls the native call path has served in this process (scatter and assignment), None while it is off."""
    return None if _c is None else _c.served()


@contextlib.contextmanager
def without_call_path():
    """Inside, every launcher call takes the checked path (for benchmarks: what a signature's first call costs)."""
    global _paused, call_bound, assign_bound
    _paused += 1
    call_bound, assign_bound = _no_call, _no_assign
    try:
        yield
    finally:
        _paused -= 1
        if not _paused and _c is not None:
            call_bound, assign_bound = _c.call, _c.assign


@functools.cache
def _hook_holder():
    """Where Triton keeps its launch hooks: ``triton.knobs.runtime`` (Triton >= 3.4), else ``CompiledKernel``."""
    import triton  # imported already: the kernel module was defined before any launch

    knobs = getattr(triton, "knobs", None)
    return knobs.runtime if knobs is not None else triton.compiler.CompiledKernel


@functools.cache
def _several_devices() -> bool:
    return torch.cuda.device_count() > 1


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda device: torch.cuda.current_stream(device).cuda_stream
)
