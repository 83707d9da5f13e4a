"""The Triton backend's one launch path: the plan from shapes and strides, a compiled kernel per variant, the launch.

``scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols=None)`` and ``assign(req_pool_indices,
req_to_token, start_offset, end_offset, out_cache_loc, batch_size)`` enqueue their kernel over checked tensors on
the current stream of the output's device and return: no host sync, no allocation, CUDA-graph capturable; nothing
is launched where no cell can be written.

A variant is ``(kernel, constexprs, pointer dtypes, device)``. The kernels pin every integer parameter to int64 (an
annotation, never specialized) and every pointer to no alignment specialization (but the tiled kernel's pool,
which it is handed 16-byte aligned only), so the variant determines
Triton's specialization of a launch completely: its first launch goes through ``kernel[grid](...)``, which
compiles it, and the ``CompiledKernel`` that returns launches every later call of the variant itself
(``CompiledKernel.run``, the stream by its raw id). Interpreted (``TRITON_INTERPRET=1``: CPU tensors), every
launch is ``kernel[grid](...)`` under one process-wide lock, since Triton's interpreter keeps the launch in
progress (grid indices, its patches of ``triton.language``) in module globals.

Launch shape of the scatter, a pure function of ``bs``, ``N``, ``C`` and the strides: ``BLOCK`` 256 columns where
the batch spans at most ``SMALL_CELLS`` cells ``bs * min(C, N)`` (latency-bound: short tiles finish soonest), else
1024; 4 warps; ``lanes = min(cdiv(min(C, N), BLOCK), cdiv(TARGET_PROGRAMS, bs))`` programs a request, so a long
request alone gets up to ``TARGET_PROGRAMS`` lanes and many short ones do not flood the GPU with idle programs.
The tiled kernel instead where ``tiled`` says (large, full, unwindowed batches of long windows over contiguous,
aligned memory): a program per 1024-cell tile of a window (``cdiv(min(C, N), 1024) + 1`` a request), 2 warps.
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
_compiled: dict = {}  # variant -> Triton's CompiledKernel
_module = None  # (scatter_kernel, assign_kernel), imported at the first Triton launch
_state: dict = {}  # what the first CUDA launch learns once: hooks holder, several devices


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
    flat_stride, offsets_stride, rows_stride = flat_in.stride()[0], offsets.stride()[0], req_pool_indices.stride()[0]
    module = (_module or kernels())[0]
    if start_cols is None and tiled(bs, n_tokens, cells, flat_stride, stride_col, pool_out):
        _launch(module.scatter_tiled_kernel, (bs, cdiv(cells, LARGE_BLOCK) + 1), pool_out,
                (flat_in, offsets, req_pool_indices, pool_out, n_tokens, n_rows, width, offsets_stride, rows_stride,
                 stride_row), ("BLOCK",), (LARGE_BLOCK,), None, TILED_WARPS)
        return
    block = SMALL_BLOCK if bs * cells <= SMALL_CELLS else LARGE_BLOCK
    lanes = min(cdiv(cells, block), cdiv(TARGET_PROGRAMS, bs))
    windowed = start_cols is not None
    start_cols_stride = start_cols.stride()[0] if windowed else 1
    _launch(module.scatter_kernel, (bs, lanes), pool_out,
            (flat_in, offsets, req_pool_indices, pool_out, start_cols, n_tokens, n_rows, width, flat_stride,
             offsets_stride, rows_stride, start_cols_stride, stride_row, stride_col),
            module.CONSTEXPRS, (block, lanes * block >= cells, windowed), None)


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
    if batch_size == 0 or n_rows == 0 or width == 0 or out_cache_loc.shape[0] == 0:
        return
    module = (_module or kernels())[1]
    groups = cdiv(batch_size, module.GROUP)
    split = max(1, min(ASSIGN_MAX_SPLIT, cdiv(ASSIGN_TARGET_PROGRAMS, groups)))
    stride_row, stride_col = req_to_token.stride()
    dtypes = (req_pool_indices.dtype, start_offset.dtype, end_offset.dtype, out_cache_loc.dtype)
    _launch(module.assign_kernel, (groups, split), req_to_token,
            (req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size,
             out_cache_loc.shape[0], n_rows, width, req_pool_indices.stride(0), start_offset.stride(0),
             end_offset.stride(0), out_cache_loc.stride(0), stride_row, stride_col),
            tuple(module.CONSTEXPRS), tuple(module.CONSTEXPRS.values()), dtypes)


def _launch(kernel, grid, output, args: tuple, names: tuple, constexprs: tuple, dtypes, warps: int = WARPS) -> None:
    """Launch ``kernel`` on ``grid`` over ``args`` (every parameter before the constexprs, in order)."""
    device = output.get_device()
    if device < 0 or _module[0].INTERPRETED:  # the backend choice sends CPU tensors here only when interpreted
        with INTERPRETER_LOCK:
            kernel[grid](*args, **dict(zip(names, constexprs)), num_warps=warps)
        return
    variant = (kernel, constexprs, dtypes, device)
    compiled = _compiled.get(variant)
    if not _state:
        _learn()
    if _state["several"] and device != torch._C._cuda_getDevice():
        with torch.cuda.device(device):  # Triton launches on the current device
            _run(kernel, grid, device, args, names, constexprs, variant, compiled, warps)
    else:
        _run(kernel, grid, device, args, names, constexprs, variant, compiled, warps)


def _run(kernel, grid, device, args, names, constexprs, variant, compiled, warps) -> None:
    """The launch on the current device: through Triton the first time, then the kept ``CompiledKernel``'s own."""
    if compiled is None:  # the variant's first launch: Triton compiles it (or finds it in its cache)
        _compiled[variant] = kernel[grid](*args, **dict(zip(names, constexprs)), num_warps=warps)
        return
    stream = _raw_stream(device)
    enter, leave = _state["hooks"].launch_enter_hook, _state["hooks"].launch_exit_hook
    # A hook or a HookChain (Triton >= 3.5) holding some (a profiler's): Triton's launch metadata for them.
    if getattr(enter, "calls", enter) or getattr(leave, "calls", leave):
        metadata = compiled.launch_metadata(grid, stream, *args, *constexprs)
    else:
        metadata = enter = leave = None
    compiled.run(grid[0], grid[1], 1, stream, compiled.function, compiled.packed_metadata, metadata, enter, leave,
                 *args, *constexprs)


def _learn() -> None:
    """What the first CUDA launch learns for every later one: where Triton keeps its hooks, how many devices."""
    import triton

    _state["hooks"] = triton.knobs.runtime
    _state["several"] = torch.cuda.device_count() > 1


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda device: torch.cuda.current_stream(device).cuda_stream)
