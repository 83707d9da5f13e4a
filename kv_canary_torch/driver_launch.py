"""The lean host path: a compiled Triton kernel launched by one CUDA driver call (``cuLaunchKernel``).

Contract: ``prepare(compiled, grid, ints)`` returns a ``DriverLaunch`` for one
compiled kernel of ``triton_kernel`` and one launch plan (grid and integer
arguments, fixed per shape), or None when this path cannot launch it exactly
as Triton's own launcher would (no CUDA driver library, a driver without
``cuFuncGetParamInfo``, a kernel whose parameters are not the expected four
pointers and eight int32 plus Triton's trailing scratch pointers, or one that
needs scratch memory, clusters, cooperative or programmatic-dependent launch).
``DriverLaunch.launch(pointers, stream)`` enqueues the kernel on ``stream``
with the four tensor addresses and returns True, or returns False having
launched nothing (the driver refused: no current context on this thread, a
sticky error), for the caller to take Triton's launcher, which raises.

Why: Triton's compiled launcher (``CompiledKernel.run``) parses about twenty
Python arguments and asks the driver about every pointer argument
(``cuPointerGetAttribute``) on each call: 5.5 us of the 11.7 us a launch cost
on the H200 host, where one eager torch op costs 7.2 us. The launcher's
arguments here are checked once per shape instead: the pointers are the data
of CUDA tensors that passed the spec's checks on one device, and the integers
are the plan's. What is left per call is four stores into a parameter buffer
and the driver call.

The parameter buffer is per launch plan and guarded by a lock: ctypes releases
the GIL during the driver call, and two threads launching the same shape must
not see each other's pointers. A launch on a capturing stream is captured like
any other (CUDA graphs).
"""

from __future__ import annotations

import ctypes
import threading

POINTERS = 4  # flat_in, offsets, req_pool_indices, pool_out
INTS = 8  # n_tokens, n_rows, width, flat_stride, offsets_stride, rows_stride, stride_row, stride_col
# Triton appends scratch pointers after the kernel's own parameters (global
# scratch from 3.3, profile scratch from 3.5): null when the kernel needs none.
MAX_TRAILING = 2
CUDA_SUCCESS = 0

_driver = None  # the loaded libcuda functions, or False where there are none


def _functions():
    """``(cuLaunchKernel, cuFuncGetParamInfo)`` from the CUDA driver library, or None."""
    global _driver
    if _driver is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            launch, param_info = lib.cuLaunchKernel, lib.cuFuncGetParamInfo
        except (OSError, AttributeError):  # no driver, or one older than CUDA 12.4
            _driver = False
        else:
            launch.restype = param_info.restype = ctypes.c_int
            u32, ptr = ctypes.c_uint, ctypes.c_void_p
            launch.argtypes = [ptr, u32, u32, u32, u32, u32, u32, u32, ptr, ptr, ptr]
            param_info.argtypes = [ptr, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
            _driver = (launch, param_info)
    return _driver or None


def parameter_sizes(function: int, param_info, limit: int = 64) -> list[int]:
    """The byte sizes of a CUfunction's parameters, in order (``cuFuncGetParamInfo`` until it refuses an index)."""
    sizes, offset, size = [], ctypes.c_size_t(), ctypes.c_size_t()
    while len(sizes) < limit and param_info(function, len(sizes), ctypes.byref(offset), ctypes.byref(size)) == CUDA_SUCCESS:
        sizes.append(size.value)
    return sizes


def expected_layout(sizes: list[int]) -> bool:
    """True for four 8-byte pointers, eight 4-byte ints, then at most ``MAX_TRAILING`` 8-byte scratch pointers."""
    head = [8] * POINTERS + [4] * INTS
    tail = sizes[len(head):]
    return sizes[: len(head)] == head and len(tail) <= MAX_TRAILING and all(s == 8 for s in tail)


def _plain_launch(metadata) -> bool:
    """True when Triton's launcher would make a plain launch: no scratch, one CTA per cluster, no special modes."""
    scratch = getattr(metadata, "global_scratch_size", 0) or getattr(metadata, "profile_scratch_size", 0)
    cluster = tuple(getattr(metadata, "cluster_dims", (1, 1, 1)) or (1, 1, 1))
    special = getattr(metadata, "launch_cooperative_grid", False) or getattr(metadata, "launch_pdl", False)
    return not scratch and getattr(metadata, "num_ctas", 1) == 1 and all(c == 1 for c in cluster) and not special


class DriverLaunch:
    """One compiled kernel and one launch plan, launched by ``cuLaunchKernel`` (see the module docstring)."""

    __slots__ = ("_launch", "_function", "_grid", "_threads", "_shared", "_pointers", "_params", "_lock", "_args")

    def __init__(self, launch_fn, function: int, grid: tuple[int, int], threads: int, shared: int, ints, n_params: int):
        self._launch = launch_fn
        self._function = ctypes.c_void_p(function)
        self._grid = grid
        self._threads = threads
        self._shared = shared
        # Storage for every parameter: the pointers (rewritten per call), the ints, null scratch pointers.
        self._pointers = (ctypes.c_uint64 * POINTERS)()
        self._args = (ctypes.c_int32 * INTS)(*ints), (ctypes.c_uint64 * (n_params - POINTERS - INTS))()
        addresses = [ctypes.addressof(self._pointers) + 8 * i for i in range(POINTERS)]
        addresses += [ctypes.addressof(self._args[0]) + 4 * i for i in range(INTS)]
        addresses += [ctypes.addressof(self._args[1]) + 8 * i for i in range(n_params - POINTERS - INTS)]
        self._params = (ctypes.c_void_p * n_params)(*addresses)
        self._lock = threading.Lock()

    def launch(self, pointers, stream: int) -> bool:
        """Enqueue the kernel on ``stream`` (a raw CUstream) with these four addresses; False if the driver refused."""
        grid0, grid1 = self._grid
        with self._lock:
            self._pointers[0], self._pointers[1], self._pointers[2], self._pointers[3] = pointers
            status = self._launch(
                self._function, grid0, grid1, 1, self._threads, 1, 1, self._shared, stream, self._params, None,
            )
        return status == CUDA_SUCCESS


def prepare(compiled, grid: tuple[int, int], ints: tuple[int, ...], functions=None) -> DriverLaunch | None:
    """A ``DriverLaunch`` for this compiled kernel and plan, or None (see the module docstring).

    ``functions`` replaces the driver's ``(cuLaunchKernel, cuFuncGetParamInfo)``
    (tests, without a GPU). ``ints`` must all fit int32 (the caller's plan says so).
    """
    functions = functions or _functions()
    function = getattr(compiled, "function", None)
    metadata = getattr(compiled, "metadata", None)
    if functions is None or not isinstance(function, int) or metadata is None or len(ints) != INTS:
        return None
    if not _plain_launch(metadata) or not all(-(2**31) <= i < 2**31 for i in ints):
        return None
    launch_fn, param_info = functions
    sizes = parameter_sizes(function, param_info)
    if not expected_layout(sizes):
        return None
    threads = 32 * int(getattr(metadata, "num_warps", 0))
    shared = int(getattr(metadata, "shared", 0) or 0)
    if not threads:
        return None
    return DriverLaunch(launch_fn, function, grid, threads, shared, ints, len(sizes))
