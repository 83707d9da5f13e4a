"""The Triton backend's one launch path: the plan from shapes and strides, a compiled kernel per variant, the launch.

``scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols=None)`` and ``assign(req_pool_indices,
req_to_token, start_offset, end_offset, out_cache_loc, batch_size)`` enqueue their kernel over checked tensors on
the current stream of the output's device and return: no host sync, no allocation, CUDA-graph capturable; nothing
is launched where no cell can be written.

A variant is ``(kernel, constexprs, pointer dtypes, device)`` (the kernel by its ``id``). The kernels pin every
integer parameter to int64 (an annotation, never specialized) and every pointer to no alignment specialization (but
the tiled kernel's pool, which it is handed 16-byte aligned only), so the variant determines Triton's specialization
of a launch completely: its first launch goes through ``kernel[grid](...)``, which compiles it, and the
``CompiledKernel`` that returns launches every later call of the variant itself (``CompiledKernel.run``, the stream
by its raw id, each pointer as the address the checks vouched for: an int, which Triton's launcher takes as it is).
A launch on another device than the current goes through ``kernel[grid](...)`` under that device. Interpreted
(``TRITON_INTERPRET=1``: CPU tensors), every launch is ``kernel[grid](...)`` under one process-wide lock, since
Triton's interpreter keeps the launch in progress (grid indices, its patches of ``triton.language``) in module
globals.

Launch shape of the scatter, a pure function of ``bs``, ``N``, ``C`` and the strides: ``BLOCK`` 256 columns where
the batch spans at most ``SMALL_CELLS`` cells ``bs * min(C, N)`` (latency-bound: short tiles finish soonest), else
1024; 4 warps; ``lanes = min(cdiv(min(C, N), BLOCK), cdiv(TARGET_PROGRAMS, bs))`` programs a request, so a long
request alone gets up to ``TARGET_PROGRAMS`` lanes and many short ones do not flood the GPU with idle programs;
``UNIT`` where tokens and pool columns are contiguous (no stride multiply a cell). The tiled kernel instead where
``tiled`` says (large, full, unwindowed batches of long windows over contiguous, aligned memory): a program per
1024-cell tile of a window (``cdiv(min(C, N), 1024) + 1`` a request), 2 warps.
"""

from __future__ import annotations

import threading

import torch

SMALL_CELLS = 16384
SMALL_BLOCK, LARGE_BLOCK = 256, 1024
WARPS = 4
TARGET_PROGRAMS = 4096
# The tiled kernel (2 warps: 16 tokens a thread) where its aligned 16-byte stores pay: large, full batches of long
# windows (docs/design.md, "The Triton kernels").
TILED_WARPS = 2
TILED_MIN_TOKENS = 2**22
TILED_MIN_TILES = 4
TILED_FILL = 75
# The assignment's grid: cdiv(bs, GROUP) groups, each split in enough programs to fill the GPU when groups are
# few, at most ASSIGN_MAX_SPLIT (grid axis 1 stops at 65535).
ASSIGN_TARGET_PROGRAMS = 256
ASSIGN_MAX_SPLIT = 64

INTERPRETER_LOCK = threading.Lock()
# (id(kernel), constexprs, dtypes, device) -> (Triton's CompiledKernel, its run). The kernels are module globals,
# alive as long as the process, so their id names them; hashing a JITFunction runs Triton's Python __hash__.
_compiled: dict = {}
_module = None  # (scatter_kernel, assign_kernel), imported at the first Triton launch
_hooks = None  # triton.knobs.runtime, where Triton keeps its launch hooks: set by the first CUDA launch
_several = False  # more than one CUDA device: set by the first CUDA launch


def kernels():
    """``(scatter_kernel, assign_kernel)``, the modules, imported on first use (Triton reads TRITON_INTERPRET then)."""
    global _module
    if _module is None:
        from kv_canary_torch import assign_kernel, scatter_kernel

        _module = (scatter_kernel, assign_kernel)
    return _module


def interpreted() -> bool:
    """Whether the kernels run in Triton's interpreter (defines them if needed)."""
    return kernels()[0].INTERPRETED


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> None:
    """Enqueue the scatter (the module docstring's launch shape)."""
    bs, n_tokens = req_pool_indices.shape[0], flat_in.shape[0]
    n_rows, width = pool_out.shape
    cells = min(width, n_tokens)
    if bs == 0 or cells == 0 or n_rows == 0:
        return
    stride_row, stride_col = pool_out.stride()
    flat_stride = flat_in.stride()[0]
    module = (_module or kernels())[0]
    if start_cols is None and tiled(bs, n_tokens, cells, flat_stride, stride_col, pool_out):
        _launch(module.scatter_tiled_kernel, (bs, cdiv(cells, LARGE_BLOCK) + 1), pool_out,
                (flat_in, offsets, req_pool_indices, pool_out),
                (n_tokens, n_rows, width, offsets.stride()[0], req_pool_indices.stride()[0], stride_row),
                ("BLOCK",), (LARGE_BLOCK,), None, TILED_WARPS)
        return
    block = SMALL_BLOCK if bs * cells <= SMALL_CELLS else LARGE_BLOCK
    lanes = min(cdiv(cells, block), cdiv(TARGET_PROGRAMS, bs))
    windowed = start_cols is not None
    _launch(module.scatter_kernel, (bs, lanes), pool_out, (flat_in, offsets, req_pool_indices, pool_out, start_cols),
            (n_tokens, n_rows, width, flat_stride, offsets.stride()[0], req_pool_indices.stride()[0],
             start_cols.stride()[0] if windowed else 1, stride_row, stride_col),
            module.CONSTEXPRS, (block, lanes * block >= cells, windowed, flat_stride == 1 and stride_col == 1), None)


def tiled(bs: int, n_tokens: int, cells: int, flat_stride: int, stride_col: int, pool) -> bool:
    """Whether an unwindowed launch takes the tiled kernel: at least ``TILED_MIN_TOKENS`` tokens in windows of
    ``TILED_MIN_TILES`` tiles or more, a batch that fills ``TILED_FILL`` percent of its grid, within grid axis 1,
    contiguous tokens and pool columns, and a 16-byte aligned ``pool`` (its address read last: most launches are
    decided by their sizes)."""
    tiles = cdiv(cells, LARGE_BLOCK)
    return (n_tokens >= TILED_MIN_TOKENS and tiles >= TILED_MIN_TILES and 100 * n_tokens >= TILED_FILL * bs * cells
            and tiles < 65535 and flat_stride == 1 and stride_col == 1 and pool.data_ptr() % 16 == 0)


def assign(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size: int) -> None:
    """Enqueue the assignment of the first ``batch_size`` requests (one variant per combination of index dtypes)."""
    n_rows, width = req_to_token.shape
    n_slots = out_cache_loc.shape[0]
    if batch_size == 0 or n_rows == 0 or width == 0 or n_slots == 0:
        return
    module = (_module or kernels())[1]
    groups = cdiv(batch_size, module.GROUP)
    split = max(1, min(ASSIGN_MAX_SPLIT, cdiv(ASSIGN_TARGET_PROGRAMS, groups)))
    stride_row, stride_col = req_to_token.stride()
    _launch(module.assign_kernel, (groups, split), req_to_token,
            (req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc),
            (batch_size, n_slots, n_rows, width, req_pool_indices.stride(0), start_offset.stride(0),
             end_offset.stride(0), out_cache_loc.stride(0), stride_row, stride_col),
            module.NAMES, module.VALUES,
            (req_pool_indices.dtype, start_offset.dtype, end_offset.dtype, out_cache_loc.dtype))


def _launch(kernel, grid, output, arrays: tuple, ints: tuple, names: tuple, constexprs: tuple, dtypes,
            warps: int = WARPS) -> None:
    """Launch ``kernel`` on ``grid``: its pointer parameters ``arrays`` (None: a null pointer), then ``ints``, then
    the constexprs ``names`` = ``constexprs``. The compiled kernel gets each pointer as its address, an int."""
    device = output.get_device()
    if device < 0 or _module[0].INTERPRETED:  # the backend choice sends CPU tensors here only when interpreted
        with INTERPRETER_LOCK:
            kernel[grid](*arrays, *ints, **dict(zip(names, constexprs)), num_warps=warps)
        return
    key = (id(kernel), constexprs, dtypes, device)
    entry = _compiled.get(key)
    if entry is None or (_several and device != _current_device()):
        _launch_first(kernel, grid, device, arrays, ints, names, constexprs, key, warps)
        return
    compiled, run = entry
    stream = _raw_stream(device)
    enter, leave = _hooks.launch_enter_hook, _hooks.launch_exit_hook
    # A hook or a HookChain (Triton >= 3.5) holding some (a profiler's): Triton's launch metadata for them.
    if getattr(enter, "calls", enter) or getattr(leave, "calls", leave):
        metadata = compiled.launch_metadata(grid, stream, *arrays, *ints, *constexprs)
    else:
        metadata = enter = leave = None
    run(grid[0], grid[1], 1, stream, compiled.function, compiled.packed_metadata, metadata, enter, leave,
        *[a if a is None else a.data_ptr() for a in arrays], *ints, *constexprs)


def _launch_first(kernel, grid, device, arrays, ints, names, constexprs, key, warps) -> None:
    """A launch through Triton's ``kernel[grid]``, on ``device`` made current: the variant's first, which compiles
    it (or finds it in Triton's cache) and keeps the ``CompiledKernel`` under ``key``, or one on another device than
    the current."""
    global _hooks, _several
    if _hooks is None:
        import triton

        _hooks, _several = triton.knobs.runtime, torch.cuda.device_count() > 1
    with torch.cuda.device(device):  # Triton launches on the current device
        compiled = kernel[grid](*arrays, *ints, **dict(zip(names, constexprs)), num_warps=warps)
    _compiled.setdefault(key, (compiled, compiled.run))


_current_device = torch._C._cuda_getDevice if hasattr(torch._C, "_cuda_getDevice") else torch.cuda.current_device
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda device: torch.cuda.current_stream(device).cuda_stream)
