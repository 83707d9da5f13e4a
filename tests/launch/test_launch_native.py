"""The launcher's native piece (``kv_canary_torch.launch.native``): its refusals, its signature, its call path.

Runs on a CPU machine: the piece is built, and its ``call`` launches through a
stand-in driver (``FAKE_DRIVER``, loaded with ``load_driver``) that records
each launch, so that the parameters, grid, stream and every decline are
checked without a GPU; the kernels' PTX entries come from compiling them for
sm_90. What only a GPU can show (the launch itself, graphs, threads) is in
test_torch_gpu.py; the native rule against the Python rule is in
test_launch_plan.py; how the piece is built and loaded, in test_native_build.py.
"""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import sys
import warnings
from types import SimpleNamespace

import pytest
import torch

from kv_canary.platform import cuda_available
from kv_canary_torch.launch import native, plan as launch_plan
from tests.torch_support import SM90_RUN, SM90_SCRIPTS, compiled_for_sm90, native_module, shared_native_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def c_module(tmp_path_factory):
    return native_module(tmp_path_factory)


def kernel(c, n_ints=8, n_scratch=2, function=0x1234, threads=64, n_window=0, n_pointers=4):
    return c.bind(function, threads, 0, n_ints, n_scratch, "owner", n_window, n_pointers)


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda c: kernel(c, n_ints=11), ValueError),
        (lambda c: kernel(c, n_pointers=0), ValueError),
        (lambda c: kernel(c, n_pointers=5, n_window=1), ValueError),  # six pointers
        (lambda c: kernel(c, n_scratch=3), ValueError),
        (lambda c: kernel(c, n_ints=-1), ValueError),
        (lambda c: kernel(c, function=0), ValueError),
        (lambda c: kernel(c, threads=0), ValueError),
        (lambda c: kernel(c, threads=1025), ValueError),
    ],
)
def test_what_does_not_fit_is_refused(c_module, call, error):
    with pytest.raises(error):
        call(c_module)


def test_unavailable_means_triton_keeps_launching(monkeypatch):
    for name, value in (("_tried", False), ("_module", None), ("_reason", None)):
        monkeypatch.setattr(native, name, value)
    monkeypatch.setenv(native.DISABLE, "0")
    assert native.module() is None and native.unavailable_reason() == "KV_CANARY_C_LAUNCHER=0"


def test_a_kernel_that_needs_more_than_a_plain_launch_is_not_bound(c_module):
    assert native.bind(c_module, SimpleNamespace(metadata=SimpleNamespace(**{**vars(PLAIN), "num_ctas": 2})), 2) is None
    assert native.bind(c_module, SimpleNamespace(metadata=PLAIN, asm={}), 2) is None  # no PTX to read


PLAIN = SimpleNamespace(name="k", num_warps=4, shared=0, global_scratch_size=0, profile_scratch_size=0, num_ctas=1,
                        launch_pdl=False, launch_cooperative_grid=False)


@pytest.mark.parametrize(
    "change, plain",
    [
        ({}, True),
        ({"global_scratch_size": 8}, False),
        ({"profile_scratch_size": 8}, False),
        ({"num_ctas": 2}, False),
        ({"cluster_dims": (2, 1, 1)}, False),
        ({"cluster_dims": (1, 1, 1)}, True),
        ({"launch_pdl": True}, False),
        ({"launch_cooperative_grid": True}, False),
        ({"shared": 48 * 1024 + 1}, False),
    ],
)
def test_only_a_plain_launch_is_taken(change, plain):
    assert native.plain_launch(SimpleNamespace(**{**vars(PLAIN), **change})) is plain


def test_entry_params_reads_scalars_and_refuses_arrays():
    ptx = (
        ".visible .entry other(\n\t.param .u32 other_param_0\n)\n"
        ".visible .entry k(\n\t.param .u64 .ptr .global .align 1 k_param_0,\n\t.param .u32 k_param_1,\n"
        "\t.param .s64 k_param_2\n)\n.reqntid 128\n{"
    )
    assert native.entry_params(ptx, "k") == (8, 4, 8)
    assert native.entry_params(ptx, "other") == (4,)
    assert native.entry_params(ptx, "missing") is None
    assert native.entry_params(".entry k(\n\t.param .align 64 .b8 k_param_0[128]\n)", "k") is None


@pytest.mark.parametrize(
    "sizes, n_ints, scratch",
    [
        ((8, 8, 8, 8, 4, 4), 2, 0),
        ((8, 8, 8, 8, 4, 4, 8), 2, 1),
        ((8, 8, 8, 8, 4, 4, 8, 8), 2, 2),
        ((8, 8, 8, 8, 4, 4, 8, 8, 8), 2, None),  # three trailing pointers: not Triton's scratch
        ((8, 8, 8, 8, 4, 8, 8, 8), 2, None),  # an int of 8 bytes: the kernel was specialized otherwise
        ((8, 8, 8, 8, 4), 2, None),  # an int missing (specialized to a constant)
        ((8, 8, 8, 4, 4, 4), 2, None),
        (None, 2, None),
    ],
)
def test_the_layout_must_be_four_pointers_the_ints_and_scratch(sizes, n_ints, scratch):
    assert native.layout(sizes, n_ints) == scratch


# Both kernels compiled for sm_90 as the launcher's plans launch them (i32 ints, 16-byte aligned pointers), and the
# assignment kernel as dispatch.launch_assign keeps it: the native piece takes each of them, with the plan's ints. A fresh process: this one may run Triton interpreted.
KERNELS_BIND = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kv_canary_torch import triton_kernel as k
from kv_canary_torch.launch import native, plan as launch_plan
aligned = {(i,): [["tt.divisibility", 16]] for i in range(4)}
pointers = dict(flat_in_ptr="*i64", offsets_ptr="*i64", rows_ptr="*i64", pool_ptr="*i32")
for bs, width, n_tokens, flat_stride, kind in ((1024, 4097, 1024 * 4096, 1, launch_plan.TILED),
                                               (1024, 4097, 1024 * 4096, 2, launch_plan.LANES), (4, 33, 100, 1, launch_plan.LANES)):
    plan = launch_plan.plan(bs, n_tokens, bs + 1, width, width, 1, flat_stride, 1, 1, 0)
    assert plan.tiled is (kind == launch_plan.TILED) and plan.small_ints
    fn = k.scatter_req_token_ids_tiled_kernel if plan.tiled else k.scatter_req_token_ids_kernel
    constexpr_names = launch_plan.TILED_CONSTEXPRS if plan.tiled else launch_plan.LANES_CONSTEXPRS
    window = ("start_cols_ptr", "start_cols_stride")  # None unwindowed: constants Triton folds away, no parameter
    names = [n for n in fn.arg_names if n not in pointers and n not in constexpr_names and n not in window]
    constexprs = dict(zip(constexpr_names, plan.constexprs), **dict.fromkeys(window))
    signature = dict(pointers, **{n: "i32" for n in names}, **{n: "constexpr" for n in constexprs})
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=aligned)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": plan.warps})
    assert len(names) == len(plan.ints), (names, plan.ints)
    sizes = native.entry_params(compiled.asm["ptx"], compiled.metadata.name)
    assert native.plain_launch(compiled.metadata), compiled.metadata
    assert native.layout(sizes, len(plan.ints)) is not None, sizes
    assert f".reqntid {32 * plan.warps}" in compiled.asm["ptx"]  # the threads the launcher gives it
from kv_canary_torch import assign_kernel as a
assign_pointers = ("rows_ptr", "table_ptr", "start_ptr", "end_ptr", "loc_ptr")
assign_constexprs = a.CONSTEXPRS
ints = [n for n in a.assign_kernel.arg_names if n not in assign_pointers and n not in assign_constexprs]
assert ints == ["bs", "n_tokens", "n_rows", "width", "rows_stride", "start_stride", "end_stride", "loc_stride",
                "stride_row", "stride_col"]  # the order native.cpp's assign_plan passes them in
for index in ("*i64", "*i32"):
    signature = dict(rows_ptr=index, table_ptr="*i32", start_ptr=index, end_ptr=index, loc_ptr=index,
                     **{n: "i32" for n in ints}, **{n: "constexpr" for n in assign_constexprs})
    source = ASTSource(fn=a.assign_kernel, signature=signature, constexprs=assign_constexprs,
                       attrs={(i,): [["tt.divisibility", 16]] for i in range(5)})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    sizes = native.entry_params(compiled.asm["ptx"], compiled.metadata.name)
    assert native.plain_launch(compiled.metadata), compiled.metadata
    assert native.layout(sizes, launch_plan.ASSIGN_INTS, 0, 5) is not None, sizes
print("bindable")
"""
SM90_SCRIPTS["bindable"] = KERNELS_BIND


@pytest.mark.skipif(cuda_available(), reason="on a GPU test_torch_gpu.py binds the compiled kernels themselves")
@SM90_RUN.ahead
def test_both_kernels_compiled_for_sm90_are_plain_launches():
    assert compiled_for_sm90("bindable") == "bindable"


# The call path: a whole launcher call in C++ for a remembered argument signature, launched through a stand-in driver.

STREAM = 0x5000
# The three driver functions the piece looks up, recording each launch: the function, grid, block, shared bytes,
# stream and the first `record` parameters (8 bytes each: the piece's parameter slots). `result` is what
# cuLaunchKernel returns; `context` 0 makes the thread have no current context.
FAKE_DRIVER = r"""
#include <stdint.h>
#include <string.h>
int result = 0, context = 1, launches = 0, record = 0;
void *function, *stream;
unsigned grid[3], block[3], shared;
uint64_t params[16];
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned sh, void *s, void **p, void **extra) {
    function = f; stream = s; shared = sh;
    grid[0] = gx; grid[1] = gy; grid[2] = gz; block[0] = bx; block[1] = by; block[2] = bz;
    for (int i = 0; i < record; ++i) memcpy(&params[i], p[i], 8);
    ++launches;
    return result;
}
int cuCtxGetCurrent(void **c) { *c = context ? (void *)16 : (void *)0; return 0; }
int cuGetErrorName(int r, const char **name) { *name = "CUDA_ERROR_FAKE"; return 0; }
int copies = 0, copy_result = 0;
uint64_t copy_dst, copy_bytes;
const void *copy_src;
void *copy_stream;
int cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, void *s) {
    copy_dst = dst; copy_src = src; copy_bytes = n; copy_stream = s; ++copies;
    return copy_result;
}
"""


@pytest.fixture(scope="module")
def driver(c_module, tmp_path_factory):
    """The stand-in driver, loaded into the piece (ctypes' handle on its globals)."""
    cc = native.find_compiler("CC", ("cc", "gcc", "clang"))
    if cc is None or cuda_available():
        pytest.skip("needs a C compiler, and no CUDA driver (which a GPU process has loaded)")
    folder = tmp_path_factory.mktemp("driver")
    (folder / "driver.c").write_text(FAKE_DRIVER)
    subprocess.run([cc, "-shared", "-fPIC", str(folder / "driver.c"), "-o", str(folder / "libfake.so")], check=True)
    c_module.load_driver(str(folder / "libfake.so"))
    return Driver(ctypes.CDLL(str(folder / "libfake.so")))


class Driver:
    """The stand-in driver's int globals (``result``, ``context``, ``launches``, ``record``) as attributes; the
    library itself as ``library``."""

    def __init__(self, library):
        object.__setattr__(self, "library", library)

    def __getattr__(self, name):
        return ctypes.c_int.in_dll(self.library, name).value

    def __setattr__(self, name, value):
        ctypes.c_int.in_dll(self.library, name).value = value


NO_HOOKS = SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)


def configure(c, memo, hooks=NO_HOOKS, current_device=None, rule=launch_plan.RULE):
    c.configure(memo=memo, tensor_type=torch.Tensor, hooks=hooks, raw_stream=lambda device: STREAM,
                current_device=current_device, rule=launch_plan.native_config(rule))


@pytest.fixture
def call_path(c_module, driver):
    """The piece's call path over a fresh memo, hooks idle, one device, the stand-in driver loaded."""
    memo = {}
    configure(c_module, memo)
    driver.result = 0
    driver.context = 1
    return c_module, memo


def launched(c, driver, *arguments, record=12):
    """``(call's answer, the launch it made or None)``: ``(function, grid, threads, stream, parameter words)``, the
    first ``record`` parameters read (no more than the kernel takes; the rest of the words 0)."""
    before = driver.launches
    driver.record = record
    (ctypes.c_uint64 * 16).in_dll(driver.library, "params")[:] = [0] * 16
    answer = c.call(*arguments)
    if driver.launches == before:
        return answer, None
    library = driver.library
    params = (ctypes.c_uint64 * 16).in_dll(library, "params")
    grid = (ctypes.c_uint * 3).in_dll(library, "grid")
    block = (ctypes.c_uint * 3).in_dll(library, "block")
    function = ctypes.c_void_p.in_dll(library, "function").value
    stream = ctypes.c_void_p.in_dll(library, "stream").value
    return answer, (function, (grid[0], grid[1], grid[2]), block[0], stream, tuple(params))


def cpu_arguments(width=100, n_tokens=1000, bs=8):
    return (
        torch.zeros(n_tokens, dtype=torch.int64), torch.zeros(bs + 1, dtype=torch.int64),
        torch.zeros(bs, dtype=torch.int64), torch.zeros(10, width, dtype=torch.int32),
    )


def family(c, n_window=0, **kinds):
    """A kernel per slot, slot i's function handle 0x1000 + i, with its kernel's int count (bound without scratch)."""
    return [kernel(c, n_ints=6 if slot == launch_plan.TILED_SLOT else 8, n_scratch=0, function=0x1000 + slot,
                   threads=32 * (slot + 1), n_window=n_window) for slot in range(launch_plan.SLOTS)]


def int_word(value):
    return struct.unpack("<Q", struct.pack("<iI", value, 0))[0]  # a 4-byte int in its 8-byte slot's first bytes


META_WORDS = 10  # the signature's meta: dtype, device type, device index, ndim, sizes[2], strides[2], flags, data
SCATTER_TAG, ASSIGN_TAG = 0, 1  # the signature's first word: its op


def test_the_signature_is_what_stays_fixed_from_step_to_step(call_path):
    c, _ = call_path
    args = cpu_arguments()
    sig = c.signature("auto", *args)
    size = 4 * META_WORDS * 8
    assert sig[:8] == struct.pack("<q", SCATTER_TAG)
    words = struct.unpack(f"<{4 * META_WORDS}q", sig[8:8 + size])
    assert sig[8 + size:] == b"auto"
    for i, a in enumerate(args):
        sizes, strides = (list(a.shape) + [0, 0])[:2], (list(a.stride()) + [0, 0])[:2]
        if i < 3:
            sizes[0] = 0  # N, bs + 1 and bs: what changes every serving step
        assert words[META_WORDS * i + 1:META_WORDS * (i + 1)] == (0, -1, a.dim(), *sizes, *strides, 0, 0)  # CPU, data 0
    assert sig == c.signature("auto", *(a.clone() for a in args))  # the data does not count
    assert sig == c.signature("auto", *cpu_arguments(n_tokens=17, bs=3))  # nor N, nor bs


@pytest.mark.parametrize(
    "change",
    [
        lambda a: (a[0].to(torch.int32), *a[1:]),  # a dtype
        lambda a: (a[0][::2], *a[1:]),  # a stride
        lambda a: (*a[:3], a[3][:, :99]),  # the pool's width
        lambda a: (*a[:3], a[3][:9]),  # the pool's rows
        lambda a: (*a[:3], a[3].t().contiguous().t()),  # a pool's layout
        lambda a: (a[0].unsqueeze(0), *a[1:]),  # a rank
        lambda a: (a[0], a[1].to("meta"), *a[2:]),  # a device
    ],
)
def test_any_difference_in_what_the_checks_read_is_another_signature(call_path, change):
    c, _ = call_path
    args = cpu_arguments()
    assert c.signature("auto", *change(args)) != c.signature("auto", *args)


def test_only_exact_readable_tensors_and_a_str_backend_have_a_signature(call_path):
    c, _ = call_path
    args = cpu_arguments()
    assert c.signature("triton", *args) != c.signature("auto", *args)
    assert c.signature(["auto"], *args) is None and c.signature(b"auto", *args) is None
    assert c.signature("a\udc80", *args) is None  # a backend with no UTF-8
    assert c.signature("auto", args[0].numpy(), *args[1:]) is None
    assert c.signature("auto", *args[:3], torch.nn.Parameter(args[3], requires_grad=False)) is None
    assert c.signature("auto", *args[:3], args[3].unsqueeze(0)) is None  # rank 3: the reader declines it
    assert c.signature("auto", args[0].to_sparse(), *args[1:]) is None  # not strided
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Sparse CSR tensor support is in beta state"
        csr = torch.zeros(10, 100, dtype=torch.int32).to_sparse_csr()
    assert type(csr) is torch.Tensor and c.signature("auto", *args[:3], csr) is None
    with pytest.raises(TypeError):
        c.signature("auto", *args[:3])


def test_a_lazily_negated_view_has_no_signature(call_path):
    # Its memory holds the negation of what it reads: the checked path decides every such call.
    c, _ = call_path
    args = cpu_arguments()
    assert c.signature("auto", torch._neg_view(args[0]), *args[1:]) is None
    assert c.signature("auto", *args[:3], torch._neg_view(args[3])) is None


def freed(tensor):
    """``tensor`` with its storage freed under it, as FSDP frees a parameter's."""
    tensor.untyped_storage().resize_(0)
    return tensor


def shrunk(tensor):
    """A copy of ``tensor`` one element into its storage, which then ends one element before the copy's last."""
    buffer = torch.zeros(tensor.numel() + 1, dtype=tensor.dtype)
    view = buffer[1:].view(tensor.shape)
    buffer.untyped_storage().resize_(tensor.numel() * tensor.element_size())
    return view


@pytest.mark.parametrize(
    "make",
    [
        freed,
        shrunk,
        lambda a: torch._efficientzerotensor(a.shape, dtype=a.dtype),
    ],
    ids=["freed", "shrunk", "zero tensor"],
)
@pytest.mark.parametrize("position", range(4))
def test_a_tensor_without_memory_has_no_signature(call_path, make, position):
    # Its elements are not all in memory: the checked path refuses every such call with the storage check's error.
    c, _ = call_path
    args = list(cpu_arguments())
    assert c.signature("auto", *args) is not None
    args[position] = make(args[position])
    assert c.signature("auto", *args) is None


def test_a_transforms_wrapper_has_no_signature(call_path):
    # functionalize's wrappers are plain torch.Tensors reading a null data pointer: the checked path runs them.
    c, _ = call_path
    args = cpu_arguments()
    seen = []

    def step(pool):
        seen.append(c.signature("auto", *args[:3], pool))
        return pool

    torch.func.functionalize(step)(args[3].clone())
    torch.func.vmap(step)(args[3].clone().unsqueeze(0).expand(2, -1, -1).contiguous())
    assert seen == [None, None]


def test_an_inference_pool_outside_inference_mode_is_a_signature_of_its_own(call_path):
    c, _ = call_path
    args = cpu_arguments()
    with torch.inference_mode():
        pool = torch.zeros(10, 100, dtype=torch.int32)
        inside = c.signature("auto", *args[:3], pool)
    assert inside == c.signature("auto", *args)  # inside the mode, as any tensor
    assert c.signature("auto", *args[:3], pool) != inside  # outside it, one the checks refuse and never remembered


def test_a_remembered_signature_launches_every_shape_as_planned(call_path, driver):
    c, memo = call_path
    args = cpu_arguments()
    signature = c.signature("auto", *args)
    assert launched(c, driver, "auto", *args) == (signature, None)  # nothing remembered: its signature back
    kernels = memo[signature] = family(c)
    for n_tokens, bs, width in ((1000, 8, 100), (17, 3, 100), (5000, 64, 100), (9000, 1, 100)):
        fresh = cpu_arguments(width, n_tokens, bs)  # other tensors and shapes, the same signature
        plan = launch_plan.plan(bs, n_tokens, 10, width, width, 1, 1, 1, 1, -1)
        served = c.served()
        answer, launch = launched(c, driver, "auto", *fresh)
        assert answer is True and c.served() == served + 1
        function, grid, threads, stream, words = launch
        assert (function, grid, threads, stream) == (0x1000 + plan.slot, (*plan.grid, 1), 32 * (plan.slot + 1), STREAM)
        assert words[:4] == tuple(a.data_ptr() for a in fresh)
        assert words[4:12] == tuple(int_word(v) for v in plan.ints)
    assert launched(c, driver, "triton", *args)[1] is None  # another backend named: not remembered
    assert launched(c, driver, "auto", *cpu_arguments(width=101))[1] is None


def test_the_tiled_kernel_takes_six_ints_and_a_scratch_pointer_is_null(call_path, driver):
    c, memo = call_path
    rule = launch_plan.RULE._replace(large_block=16, small_cells=-1, tiled_fill=0, tiled_min_tiles=0, tiled_min_tokens=0)
    configure(c, memo, rule=rule)
    args = cpu_arguments(width=100, n_tokens=800, bs=8)
    memo[c.signature("auto", *args)] = [kernel(c, n_ints=6, n_scratch=2, function=0x77)] * launch_plan.SLOTS
    plan = launch_plan.plan(8, 800, 10, 100, 100, 1, 1, 1, 1, -1, rule=rule)
    assert plan.tiled
    answer, (function, grid, _, _, words) = launched(c, driver, "auto", *args, record=12)
    assert answer is True and function == 0x77 and grid == (*plan.grid, 1)
    assert words[4:10] == tuple(int_word(v) for v in plan.ints) and words[10:12] == (0, 0)


def test_a_windowed_signature_holds_start_cols_and_launches_windowed_kernels(call_path, driver):
    c, memo = call_path
    args = cpu_arguments()
    start_cols = torch.zeros(8, dtype=torch.int64)
    sig = c.signature("auto", *args, start_cols)
    assert len(sig) == 8 + 5 * META_WORDS * 8 + len(b"auto") and sig != c.signature("auto", *args)
    assert c.signature("auto", *args, None) == c.signature("auto", *args)  # None: the unwindowed call
    fresh = cpu_arguments(n_tokens=17, bs=3)
    assert c.signature("auto", *fresh, torch.ones(3, dtype=torch.int64)) == sig  # its length and data do not count
    assert c.signature("auto", *args, torch.zeros(16, dtype=torch.int64)[::2]) != sig  # its stride does
    assert c.signature("auto", *args, torch.zeros(8, dtype=torch.int32)) != sig
    memo[sig] = family(c, n_window=1)
    start = torch.zeros(3, dtype=torch.int64)
    plan = launch_plan.plan(3, 17, 10, 100, 100, 1, 1, 1, 1, -1, True)
    answer, (function, grid, _, _, words) = launched(c, driver, "auto", *fresh, start, record=13)
    assert answer is True and function == 0x1000 + plan.slot and grid == (*plan.grid, 1)
    assert words[:4] == tuple(a.data_ptr() for a in fresh) and words[12] == start.data_ptr()  # after the 8 ints
    assert launched(c, driver, "auto", *fresh, torch.zeros(4, dtype=torch.int64)) == (sig, None)  # length not bs
    assert launched(c, driver, "auto", *fresh)[1] is None  # the unwindowed signature is not remembered
    memo[sig] = family(c)
    configure(c, memo)
    assert launched(c, driver, "auto", *fresh, start) == (sig, None)  # an unwindowed kernel in a windowed family


def test_no_cell_to_write_is_served_without_a_kernel(call_path, driver):
    c, memo = call_path
    memo[c.signature("auto", *cpu_arguments())] = [None] * launch_plan.SLOTS
    for args in (cpu_arguments(n_tokens=0), cpu_arguments(bs=0)):
        served = c.served()
        assert launched(c, driver, "auto", *args) == (True, None) and c.served() == served + 1


def test_what_the_call_path_declines(call_path, driver):
    c, memo = call_path
    args = cpu_arguments()
    sig = c.signature("auto", *args)
    memo[sig] = [kernel(c, n_scratch=0)] + [None] * (launch_plan.SLOTS - 1)
    assert launched(c, driver, "auto", *args)[0] is True
    offsets_short = (args[0], args[1][:-1], *args[2:])  # len(offsets) != bs + 1: the checks' error, not a launch
    assert launched(c, driver, "auto", *offsets_short) == (sig, None)
    large = cpu_arguments(n_tokens=5000, bs=200)
    assert launched(c, driver, "auto", *large) == (sig, None)  # LARGE: its slot holds no kernel
    shifted = torch.zeros(1001, dtype=torch.int64)[1:]  # 8 bytes past a 16-byte boundary
    assert shifted.data_ptr() % 16 == 8 and launched(c, driver, "auto", shifted, *args[1:]) == (sig, None)
    driver.context = 0  # a thread with no current CUDA context
    assert launched(c, driver, "auto", *args) == (sig, None)
    driver.context = 1
    configure(c, memo, hooks=SimpleNamespace(launch_enter_hook=None, launch_exit_hook=print))  # a hook
    assert launched(c, driver, "auto", *args) == (sig, None)
    configure(c, memo, current_device=lambda: 1)  # device 1; the pool's is none
    assert launched(c, driver, "auto", *args) == (sig, None)
    configure(c, memo, current_device=lambda: -1)
    assert launched(c, driver, "auto", *args)[0] is True
    memo[sig] = memo[sig][:-1]  # not a family of SLOTS
    configure(c, memo)  # (which forgets the family found last)
    assert launched(c, driver, "auto", *args) == (sig, None)
    memo[sig] = [kernel(c, n_scratch=0)] * launch_plan.SLOTS
    driver.result = 700  # the driver refuses the launch
    with pytest.raises(RuntimeError, match="CUDA_ERROR_FAKE"):
        c.call("auto", *args)
    driver.result = 0
    with pytest.raises(TypeError):
        c.call("auto", *args[:3])


class Chain:  # Triton's HookChain: a hook is installed while its calls list is not empty
    def __init__(self, *calls):
        self.calls = list(calls)


class Broken:
    @property
    def calls(self):
        raise RuntimeError("unreadable")


@pytest.mark.parametrize(
    "enter, exit_, idle",
    [(None, None, True), (Chain(), Chain(), True), (Chain(print), Chain(), False), (Chain(), Chain(print), False),
     (print, None, False), (None, print, False), (Broken(), None, False), ("absent", "absent", True),
     ("absent", Chain(print), False)],
)
def test_an_installed_launch_hook_sends_the_call_to_tritons_launch(call_path, driver, enter, exit_, idle):
    c, memo = call_path
    hooks = SimpleNamespace(**{name: hook for name, hook in (("launch_enter_hook", enter), ("launch_exit_hook", exit_))
                               if hook != "absent"})
    args = cpu_arguments()
    memo[c.signature("auto", *args)] = [kernel(c, n_scratch=0)] + [None] * (launch_plan.SLOTS - 1)
    configure(c, memo, hooks=hooks)
    assert (launched(c, driver, "auto", *args)[0] is True) is idle


def test_the_last_family_found_is_kept_until_configure(call_path, driver):
    c, memo = call_path
    args, other = cpu_arguments(), cpu_arguments(width=50)
    kernels = [kernel(c, n_scratch=0)] + [None] * (launch_plan.SLOTS - 1)
    memo[c.signature("auto", *args)] = kernels
    memo[c.signature("auto", *other)] = list(kernels)
    for _ in range(2):  # alternating signatures: each finds its own
        assert launched(c, driver, "auto", *args)[0] is True and launched(c, driver, "auto", *other)[0] is True
    assert launched(c, driver, "triton", *other)[1] is None  # the same tensors, another backend: not the kept family
    memo.clear()
    assert launched(c, driver, "auto", *other)[0] is True  # kept: what the checks answered for it stays true
    assert launched(c, driver, "auto", *args)[1] is None
    configure(c, memo)
    assert launched(c, driver, "auto", *other)[1] is None


def test_an_int_past_int32_is_declined(call_path, driver):
    c, memo = call_path
    wide = torch.zeros(1, dtype=torch.int64).expand(2**31)  # N = 2**31 tokens, no memory: the ints take i64
    args = cpu_arguments()
    sig = c.signature("auto", wide, *args[1:])
    memo[sig] = [kernel(c, n_scratch=0)] * launch_plan.SLOTS
    assert launched(c, driver, "auto", wide, *args[1:]) == (sig, None)
    assert launched(c, driver, "auto", wide[: 2**31 - 1], *args[1:])[0] is True


# ---- the assignment's op: (req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size) ----


def assign_arguments(bs=8, length=None, n_tokens=1000, width=100, dtypes=(torch.int64,) * 4):
    """CPU arguments of ``assign``: per-request arrays of ``length`` (default ``bs``) entries, a 10-row table."""
    length = bs if length is None else length
    rows, start, end, loc = (torch.zeros(n, dtype=dtype) for n, dtype in zip((length, length, length, n_tokens), dtypes))
    return rows, torch.zeros(10, width, dtype=torch.int32), start, end, loc


def assign_kernel(c, n_scratch=0, function=0x4444):
    """A bound kernel with the assignment kernel's layout: five pointers, its ten ints."""
    return kernel(c, n_ints=launch_plan.ASSIGN_INTS, n_scratch=n_scratch, function=function, threads=128, n_pointers=5)


def _launched_with(entry, driver, *arguments, record=15):
    """``launched`` for ``entry`` (the piece's ``assign``): the first ``record`` parameters (no more than the kernel takes)."""
    before = driver.launches
    driver.record = record
    library = driver.library
    (ctypes.c_uint64 * 16).in_dll(library, "params")[:] = [0] * 16
    answer = entry(*arguments)
    if driver.launches == before:
        return answer, None
    params = (ctypes.c_uint64 * 16).in_dll(library, "params")
    grid = (ctypes.c_uint * 3).in_dll(library, "grid")
    function = ctypes.c_void_p.in_dll(library, "function").value
    stream = ctypes.c_void_p.in_dll(library, "stream").value
    return answer, (function, (grid[0], grid[1], grid[2]), stream, tuple(params))


def assign_ints(bs, rows, table, start, end, loc):
    """The assignment kernel's ints, in its order (``assign_kernel.launch``'s)."""
    return (bs, loc.shape[0], *table.shape, rows.stride(0), start.stride(0), end.stride(0), loc.stride(0), *table.stride())


def test_the_assignments_signature_is_its_own_and_what_stays_fixed(call_path):
    c, _ = call_path
    args = assign_arguments()
    sig = c.assign_signature("auto", *args, 8)
    assert sig[:8] == struct.pack("<q", ASSIGN_TAG) and len(sig) == 8 + 5 * META_WORDS * 8 + len(b"auto")
    words = struct.unpack(f"<{5 * META_WORDS}q", sig[8:8 + 5 * META_WORDS * 8])
    for i, a in enumerate(args):
        sizes, strides = (list(a.shape) + [0, 0])[:2], (list(a.stride()) + [0, 0])[:2]
        if i != 1:
            sizes[0] = 0  # bs-long (or longer) per-request arrays and N: what changes every serving step
        assert words[META_WORDS * i + 1:META_WORDS * (i + 1)] == (0, -1, a.dim(), *sizes, *strides, 0, 0)
    assert sig == c.assign_signature("auto", *assign_arguments(bs=3, length=40, n_tokens=17), None)  # nor bs, N, lengths
    assert sig == c.assign_signature("auto", *(a.clone() for a in args), 2)  # nor the data, nor batch_size
    for position in (0, 2, 3, 4):  # each index argument's dtype is its own
        dtypes = tuple(torch.int32 if i == position else torch.int64 for i in (0, 2, 3, 4))
        assert c.assign_signature("auto", *assign_arguments(dtypes=dtypes), 8) != sig
    assert c.assign_signature("auto", *assign_arguments(width=99), 8) != sig  # the table's shape
    assert c.assign_signature("triton", *args, 8) != sig
    scatter_like = (args[4], args[2], args[0], args[1], args[3])  # five tensors: never a scatter's signature
    assert c.signature("auto", *scatter_like[:4]) != sig and c.signature("auto", *scatter_like[:4], args[3]) != sig
    assert c.assign_signature("auto", args[0].numpy(), *args[1:], 8) is None
    assert c.assign_signature("auto", *args[:1], torch.nn.Parameter(args[1], requires_grad=False), *args[2:], 8) is None
    assert c.assign_signature("auto", *args[:4], torch._neg_view(args[4]), 8) is None
    assert c.assign_signature("auto", *args[:1], freed(args[1]), *args[2:], 8) is None
    assert c.assign_signature("auto", *args[:1], torch._efficientzerotensor((10, 100), dtype=torch.int32), *args[2:], 8) is None
    with pytest.raises(TypeError):
        c.assign_signature("auto", *args)  # no batch_size
    with pytest.raises(TypeError):
        c.assign("auto", *args, 8, 8)


def test_a_remembered_assignment_launches_every_batch_size_with_its_ints(call_path, driver):
    c, memo = call_path
    args = assign_arguments()
    sig = c.assign_signature("auto", *args, 8)
    assert _launched_with(c.assign, driver, "auto", *args, 8) == (sig, None)  # nothing remembered: its signature back
    memo[sig] = [assign_kernel(c, n_scratch=1)]
    for bs, length, n_tokens, batch_size in ((8, 8, 1000, 8), (3, 40, 17, 3), (1, 1, 0, None), (300, 300, 5000, 300),
                                             (17, 20000, 9000, 17), (20000, 20000, 20000, None), (5, 64, 3, 2)):
        fresh = assign_arguments(bs=bs, length=length, n_tokens=n_tokens)
        served = c.served()
        answer, launch = _launched_with(c.assign, driver, "auto", *fresh, batch_size, record=16)
        assert answer is True and c.served() == served + 1
        function, grid, stream, words = launch
        bs_launched = length if batch_size is None else batch_size  # None: len(req_pool_indices)
        assert (function, grid, stream) == (0x4444, (*launch_plan.assign_grid(bs_launched), 1), STREAM)
        assert words[:5] == tuple(a.data_ptr() for a in fresh)
        assert words[5:15] == tuple(int_word(v) for v in assign_ints(bs_launched, *fresh)) and words[15] == 0  # scratch
    strided = (args[0], torch.zeros(20, 300, dtype=torch.int32)[::2, ::3], *args[2:])  # the table's strides are ints
    memo[c.assign_signature("auto", *strided, 8)] = [assign_kernel(c)]
    answer, (_, _, _, words) = _launched_with(c.assign, driver, "auto", *strided, 8)
    assert answer is True and words[5:15] == tuple(int_word(v) for v in assign_ints(8, *strided))


def test_no_request_to_assign_is_served_without_a_kernel(call_path, driver):
    c, memo = call_path
    memo[c.assign_signature("auto", *assign_arguments(), 8)] = [None]
    for args, batch_size in ((assign_arguments(), 0), (assign_arguments(bs=0), None), (assign_arguments(bs=0), 0)):
        served = c.served()
        assert _launched_with(c.assign, driver, "auto", *args, batch_size) == (True, None) and c.served() == served + 1
    assert _launched_with(c.assign, driver, "auto", *assign_arguments(), 8)[1] is None  # bs 8: the slot holds none


def test_what_the_assignment_call_path_declines(call_path, driver):
    c, memo = call_path
    args = assign_arguments()
    sig = c.assign_signature("auto", *args, 8)
    memo[sig] = [assign_kernel(c)]
    declined = lambda *arguments: _launched_with(c.assign, driver, "auto", *arguments) == (sig, None)  # noqa: E731
    assert _launched_with(c.assign, driver, "auto", *args, 8)[0] is True
    for batch_size in (9, -1, True, 8.0, torch.tensor(8), 2**70, "8"):  # past a length, negative, no exact int
        assert declined(*args, batch_size), batch_size
    rows, table, start, end, loc = args
    for short in ((rows[:7], table, start, end, loc), (rows, table, start[:7], end, loc), (rows, table, start, end[:7], loc)):
        assert declined(*short, 8) and _launched_with(c.assign, driver, "auto", *short, 7)[0] is True
    shifted = torch.zeros(1001, dtype=torch.int64)[1:]  # 8 bytes past a 16-byte boundary
    assert declined(rows, table, start, end, shifted, 8)
    driver.context = 0
    assert declined(*args, 8)
    driver.context = 1
    configure(c, memo, hooks=SimpleNamespace(launch_enter_hook=print, launch_exit_hook=None))
    assert declined(*args, 8)
    configure(c, memo, current_device=lambda: 1)  # the table's device is none
    assert declined(*args, 8)
    configure(c, memo)
    memo[sig] = [kernel(c, n_scratch=0)]  # a scatter kernel (four pointers, eight ints) in the assignment's family
    assert declined(*args, 8)
    memo[sig] = [kernel(c, n_ints=launch_plan.ASSIGN_INTS, n_scratch=0, n_pointers=4, n_window=1)]  # 4 + 1 pointers
    assert declined(*args, 8)
    memo[sig] = [assign_kernel(c)] * 2  # not a family of one slot
    configure(c, memo)
    assert declined(*args, 8)
    memo[sig] = [assign_kernel(c)]
    assert _launched_with(c.assign, driver, "auto", *args, 8)[0] is True
    assert _launched_with(c.assign, driver, "triton", *args, 8)[1] is None  # another backend: another signature


def test_max_requests_and_int32_bound_the_assignment(call_path, driver):
    c, memo = call_path
    huge = torch.zeros(1, dtype=torch.int64).expand(2**31)  # no memory behind its repeats: a length past int32
    args = (huge, torch.zeros(10, 100, dtype=torch.int32), huge, huge, torch.zeros(4, dtype=torch.int64))
    sig = c.assign_signature("auto", *args, 1)
    memo[sig] = [assign_kernel(c)]
    assert _launched_with(c.assign, driver, "auto", *args, 2**31)[1] is None  # past MAX_REQUESTS (and int32)
    answer, launch = _launched_with(c.assign, driver, "auto", *args, 2**31 - 1)  # MAX_REQUESTS itself
    assert answer is True and launch[1] == (*launch_plan.assign_grid(2**31 - 1), 1)
    assert _launched_with(c.assign, driver, "auto", *args, None)[1] is None  # None: bs = 2**31
    wide = torch.zeros(1, dtype=torch.int64).expand(2**31)  # N past int32: the kernel's ints would take i64
    memo[c.assign_signature("auto", *assign_arguments()[:4], wide, 8)] = [assign_kernel(c)]
    assert _launched_with(c.assign, driver, "auto", *assign_arguments()[:4], wide, 8)[1] is None


def test_a_running_sum_that_could_reach_2_to_the_63_is_declined_before_its_family_is_looked_up(call_path, driver):
    """bs * len(out_cache_loc) >= 2**63 fails the spec's "slots" check: ``assign`` declines it among the length
    relations, before the memo's lookup, so the lookup keeps no family for it (the int32 bound, which such an
    ``out_cache_loc`` also fails, declines after the lookup: its family stays kept, and serves the next call)."""
    c, memo = call_path
    many = torch.zeros(1, dtype=torch.int64).expand(2**62)  # 2**62 slots, one in memory
    args = (*assign_arguments(bs=2)[:4], many[:1000])  # out_cache_loc of 1000 slots, strided as `many`
    sig = c.assign_signature("auto", *args, 2)
    assert c.assign_signature("auto", *args[:4], many, 2) == sig  # len(out_cache_loc) is not in the signature
    for batch_size, kept in ((2, False), (None, False), (1, True)):  # 2 * 2**62 is 2**63; 1 * 2**62 is below it
        memo[sig] = [assign_kernel(c)]
        configure(c, memo)  # forgets the family found last
        assert _launched_with(c.assign, driver, "auto", *args[:4], many, batch_size) == (sig, None), batch_size
        memo.clear()
        assert (_launched_with(c.assign, driver, "auto", *args, 2)[0] is True) == kept, batch_size


def test_the_scatter_and_the_assignment_keep_their_own_last_family(call_path, driver):
    c, memo = call_path
    scatter, assignment = cpu_arguments(), assign_arguments()
    memo[c.signature("auto", *scatter)] = [kernel(c, n_scratch=0, function=0x1111)] + [None] * (launch_plan.SLOTS - 1)
    memo[c.assign_signature("auto", *assignment, 8)] = [assign_kernel(c, function=0x2222)]
    for _ in range(2):  # alternating ops: each finds its own family
        assert launched(c, driver, "auto", *scatter)[1][0] == 0x1111
        assert _launched_with(c.assign, driver, "auto", *assignment, 8)[1][0] == 0x2222


def test_the_call_path_takes_its_configuration_by_name(c_module):
    config = dict(memo={}, tensor_type=torch.Tensor, hooks=NO_HOOKS, raw_stream=lambda d: 0, current_device=None,
                  rule=launch_plan.native_config())
    with pytest.raises(TypeError):  # positional
        c_module.configure(*config.values())
    with pytest.raises(TypeError):  # one missing
        c_module.configure(**{k: v for k, v in config.items() if k != "hooks"})
    with pytest.raises(KeyError):  # a number of the rule missing
        c_module.configure(**dict(config, rule={k: v for k, v in config["rule"].items() if k != "tiled_slot"}))
    with pytest.raises(ValueError):  # slots that collide
        c_module.configure(**dict(config, rule=dict(config["rule"], tiled_slot=launch_plan.LOOP_SLOT)))
    with pytest.raises(TypeError):
        c_module.configure(**dict(config, rule=(1, 2, 3)))


# A fresh process (the driver, once loaded, stays for the process): the piece without a driver, then a library that
# is no driver.
NO_DRIVER = """
import pathlib, sys, torch
from types import SimpleNamespace
from kv_canary_torch.launch import native, plan as launch_plan
c = native.load_module(pathlib.Path(sys.argv[1]))
memo = {}
c.configure(memo=memo, tensor_type=torch.Tensor, hooks=None, raw_stream=lambda device: 0, current_device=None,
            rule=launch_plan.native_config())
args = (torch.zeros(100, dtype=torch.int64), torch.zeros(3, dtype=torch.int64), torch.zeros(2, dtype=torch.int64),
        torch.zeros(4, 50, dtype=torch.int32))
sig = c.signature("auto", *args)
memo[sig] = [c.bind(0x1234, 64, 0, 8, 0, None)] * launch_plan.SLOTS
assert c.call("auto", *args) == sig and c.served() == 0  # no driver: declined, its signature back
for library in ("/nonexistent/libcuda.so.1", "libc.so.6"):  # absent; present without the driver's functions
    try:
        c.load_driver(library)
    except OSError as error:
        print("refused:", error)
print("declined")
"""


def test_without_a_driver_nothing_is_launched_and_a_library_that_is_none_is_refused(tmp_path_factory):
    path = native.build(shared_native_cache(tmp_path_factory))
    done = subprocess.run([sys.executable, "-c", NO_DRIVER, str(path)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "declined" and len([line for line in lines if line.startswith("refused:")]) == 2, lines


def test_copy_to_device_enqueues_the_drivers_copy_or_declines(call_path, driver):
    c, _ = call_path
    driver.copy_result = 0
    before = driver.copies
    assert c.copy_to_device(0x10000, 0x2000, 64, STREAM) is True
    library = driver.library
    assert driver.copies == before + 1
    assert ctypes.c_uint64.in_dll(library, "copy_dst").value == 0x10000
    assert ctypes.c_void_p.in_dll(library, "copy_src").value == 0x2000
    assert ctypes.c_uint64.in_dll(library, "copy_bytes").value == 64
    assert ctypes.c_void_p.in_dll(library, "copy_stream").value == STREAM
    assert c.copy_to_device(0x10000, 0x2000, 0, STREAM) is True and driver.copies == before + 1  # nothing to copy
    driver.context = 0  # no CUDA context on this thread: declined, nothing enqueued (torch copies)
    assert c.copy_to_device(0x10000, 0x2000, 64, STREAM) is False and driver.copies == before + 1
    driver.context = 1
    driver.copy_result = 1
    with pytest.raises(RuntimeError, match="cuMemcpyHtoDAsync failed: CUDA_ERROR_FAKE"):
        c.copy_to_device(0x10000, 0x2000, 64, STREAM)
    driver.copy_result = 0
    with pytest.raises(ValueError, match="nbytes"):
        c.copy_to_device(0x10000, 0x2000, -1, STREAM)
    with pytest.raises(TypeError):
        c.copy_to_device(0x10000, 0x2000, 64)
