"""The C launcher of the Triton kernels (``kv_canary_torch.cuda_launch``): its build, its parameter layout, its refusals.

Runs on a CPU machine: the C module is built and its packing checked without a
driver, and the kernels' PTX entries come from compiling them for sm_90. What
only a GPU can show (the launch itself, graphs, threads) is in test_torch_gpu.py.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import warnings
from types import SimpleNamespace

import pytest
import torch

from kv_canary.platform import cuda_available
from kv_canary_torch import cuda_launch, tensor_meta

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def c_module(tmp_path_factory):
    return cuda_launch.load_module(cuda_launch.build(tmp_path_factory.mktemp("cache")))


def bound(c, sizes=(8, 8, 8, 8, 4, 4, 8, 8), values=(7, -1, 0, 0), function=0x1234, grid=(3, 2, 1), threads=64):
    return c.bind(function, *grid, threads, 0, sizes, values, 4, "owner")


def test_the_slots_hold_the_pointers_then_the_bound_ints(c_module):
    slots = c_module.pack(bound(c_module), 1, 2**40 + 3, 0, 2**64 - 1)
    assert len(slots) == 8 * 8
    words = struct.unpack("<8Q", slots)
    assert words[:4] == (1, 2**40 + 3, 0, 2**64 - 1)
    assert struct.unpack("<i", slots[32:36]) == (7,) and struct.unpack("<i", slots[40:44]) == (-1,)
    assert words[6:] == (0, 0)  # the scratch pointers, null


def test_an_eight_byte_int_parameter_keeps_its_sign(c_module):
    b = c_module.bind(1, 1, 1, 1, 32, 0, (8, 8, 8, 8, 8), (-(2**63),), 4, None)
    assert struct.unpack("<q", c_module.pack(b, 0, 0, 0, 0)[32:]) == (-(2**63),)


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda c: c.pack(bound(c), 1, 2, 3), TypeError),  # a pointer short
        (lambda c: c.pack(bound(c), 1, 2, 3, 4, 5), TypeError),
        (lambda c: c.pack(bound(c), 1, 2, 3, -1), OverflowError),
        (lambda c: c.pack(bound(c), 1, 2, 3, 2**64), OverflowError),
        (lambda c: c.pack(bound(c), 1, 2, 3, 1.5), TypeError),
        (lambda c: c.pack("not a bound launch", 1, 2, 3, 4), ValueError),
        (lambda c: c.pack(), TypeError),
        (lambda c: bound(c, values=(2**31, 0, 0, 0)), OverflowError),
        (lambda c: bound(c, values=(-(2**31) - 1, 0, 0, 0)), OverflowError),
        (lambda c: bound(c, values=(1, 2, 3)), ValueError),
        (lambda c: bound(c, sizes=(8, 8, 8, 4, 4, 4, 8, 8)), ValueError),  # a pointer of 4 bytes
        (lambda c: bound(c, sizes=(8, 8, 8, 8, 2, 4, 8, 8)), ValueError),
        (lambda c: bound(c, sizes=(8,) * 40, values=(0,) * 36), ValueError),
        (lambda c: bound(c, function=0), ValueError),
        (lambda c: bound(c, grid=(0, 1, 1)), ValueError),
        (lambda c: bound(c, grid=(2**31, 1, 1)), ValueError),
        (lambda c: bound(c, threads=0), ValueError),
    ],
)
def test_what_does_not_fit_is_refused(c_module, call, error):
    with pytest.raises(error):
        call(c_module)


@pytest.mark.skipif(cuda_available(), reason="with a driver loaded a launch would run")
def test_no_launch_without_a_driver(c_module):
    with pytest.raises(OSError, match="libcuda"):
        c_module.load_driver()
    with pytest.raises(RuntimeError, match="not loaded"):
        c_module.launch(bound(c_module), 0, 1, 2, 3, 4)


def test_the_build_is_cached_and_a_failed_build_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(tmp_path / "a"))  # the default cache
    first = cuda_launch.build()
    assert first.parent == tmp_path / "a" and cuda_launch.build() == first
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no partial file left behind
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(tmp_path / "b"))
    monkeypatch.setenv("CC", "false")
    with pytest.raises(OSError, match="failed"):
        cuda_launch.build()
    assert list((tmp_path / "b").iterdir()) == []


def test_unavailable_means_triton_keeps_launching(monkeypatch):
    for name, value in (("_tried", False), ("_module", None), ("_reason", None)):
        monkeypatch.setattr(cuda_launch, name, value)
    monkeypatch.setenv(cuda_launch.DISABLE, "0")
    assert cuda_launch.module() is None and cuda_launch.unavailable_reason() == "KV_CANARY_C_LAUNCHER=0"
    assert cuda_launch.bind(SimpleNamespace(metadata=PLAIN), (1, 1), (1, 2)) is None


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
    assert cuda_launch.plain_launch(SimpleNamespace(**{**vars(PLAIN), **change})) is plain


def test_entry_params_reads_scalars_and_refuses_arrays():
    ptx = (
        ".visible .entry other(\n\t.param .u32 other_param_0\n)\n"
        ".visible .entry k(\n\t.param .u64 .ptr .global .align 1 k_param_0,\n\t.param .u32 k_param_1,\n"
        "\t.param .s64 k_param_2\n)\n.reqntid 128\n{"
    )
    assert cuda_launch.entry_params(ptx, "k") == (8, 4, 8)
    assert cuda_launch.entry_params(ptx, "other") == (4,)
    assert cuda_launch.entry_params(ptx, "missing") is None
    assert cuda_launch.entry_params(".entry k(\n\t.param .align 64 .b8 k_param_0[128]\n)", "k") is None


@pytest.mark.parametrize(
    "sizes, n_ints, values",
    [
        ((8, 8, 8, 8, 4, 4), 2, ()),
        ((8, 8, 8, 8, 4, 4, 8), 2, (0,)),
        ((8, 8, 8, 8, 4, 4, 8, 8), 2, (0, 0)),
        ((8, 8, 8, 8, 4, 4, 8, 8, 8), 2, None),  # three trailing pointers: not Triton's scratch
        ((8, 8, 8, 8, 4, 8, 8, 8), 2, None),  # an int of 8 bytes: the kernel was specialized otherwise
        ((8, 8, 8, 8, 4), 2, None),  # an int missing (specialized to a constant)
        ((8, 8, 8, 4, 4, 4), 2, None),
        (None, 2, None),
    ],
)
def test_the_layout_must_be_four_pointers_the_ints_and_scratch(sizes, n_ints, values):
    assert cuda_launch.layout(sizes, n_ints) == values


# Both kernels compiled for sm_90 as the launcher's plans launch them (i32 ints, 16-byte aligned pointers): the
# C launcher takes each of them, with the plan's ints. A fresh process: this one may run Triton interpreted.
KERNELS_BIND = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kv_canary_torch import cuda_launch, triton_kernel as k, triton_launch as launch
aligned = {(i,): [["tt.divisibility", 16]] for i in range(4)}
pointers = dict(flat_in_ptr="*i64", offsets_ptr="*i64", rows_ptr="*i64", pool_ptr="*i32")
for bs, width, n_tokens, flat_stride, kind in ((64, 4097, 64 * 4096, 1, launch.TILED), (64, 4097, 64 * 4096, 2, launch.LANES),
                                               (4, 33, 100, 1, launch.LANES)):
    plan = launch._plan((bs, n_tokens, bs + 1, width, width, 1, flat_stride, 1, 1, 0))
    assert plan.kernel == kind and plan.small_ints
    fn = k.scatter_req_token_ids_tiled_kernel if kind == launch.TILED else k.scatter_req_token_ids_kernel
    constexpr_names = launch.TILED_CONSTEXPRS if kind == launch.TILED else launch.LANES_CONSTEXPRS
    names = [n for n in fn.arg_names if n not in pointers and n not in constexpr_names]
    constexprs = dict(zip(constexpr_names, plan.constexprs))
    signature = dict(pointers, **{n: "i32" for n in names}, **{n: "constexpr" for n in constexprs})
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=aligned)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": plan.shape[1]})
    assert len(names) == len(plan.ints), (names, plan.ints)
    sizes = cuda_launch.entry_params(compiled.asm["ptx"], compiled.metadata.name)
    assert cuda_launch.plain_launch(compiled.metadata), compiled.metadata
    assert cuda_launch.layout(sizes, len(plan.ints)) is not None, sizes
    assert f".reqntid {32 * plan.shape[1]}" in compiled.asm["ptx"]  # the threads the launcher gives it
print("bindable")
"""


@pytest.mark.skipif(cuda_available(), reason="on a GPU test_torch_gpu.py binds the compiled kernels themselves")
def test_both_kernels_compiled_for_sm90_are_plain_launches():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", KERNELS_BIND], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "bindable" in done.stdout, done.stderr[-3000:]


# The call path: a whole launcher call in C for a remembered argument signature.

STREAM = 0x5000


@pytest.fixture(scope="session")
def tensor_reader(tmp_path_factory):
    """The C++ tensor reader's capsule, built once for the session's workers (a cache they share)."""
    return tensor_meta.reader(tmp_path_factory.getbasetemp().parent / "kv-canary-native")


@pytest.fixture(params=["getters", "reader"])
def call_path(request, c_module):
    """The C module's call path over a fresh memo, hooks idle, one device, reading the tensors each way."""
    read = request.getfixturevalue("tensor_reader") if request.param == "reader" else None
    memo = {}
    c_module.configure(memo, torch.Tensor, lambda: True, lambda device: STREAM, None, read)
    c_module.read = read  # what configure takes to keep reading this way (the tests that reconfigure)
    yield c_module, memo
    c_module.configure({}, torch.Tensor, lambda: True, lambda device: STREAM, None)


def cpu_arguments(width=100):
    return (
        torch.zeros(1000, dtype=torch.int64), torch.zeros(9, dtype=torch.int64),
        torch.zeros(8, dtype=torch.int64), torch.zeros(10, width, dtype=torch.int32),
    )


def test_the_signature_is_each_arguments_dtype_shape_strides_and_device(call_path):
    c, _ = call_path
    args = cpu_arguments()
    if c.read is None:
        expected = ("auto", *(v for a in args for v in (a.layout, a.dtype, a.shape, a.stride(), a.device)))
        assert c.signature("auto", *args) == expected
    else:  # four KvTensorMeta (9 int64 each, data zeroed), then the backend's UTF-8
        words = struct.unpack("<36q", c.signature("auto", *args)[:288])
        assert c.signature("auto", *args)[288:] == b"auto"
        for i, a in enumerate(args):
            sizes, strides = (list(a.shape) + [0, 0])[:2], (list(a.stride()) + [0, 0])[:2]
            assert words[9 * i + 3:9 * i + 9] == (a.dim(), *sizes, *strides, 0)
            assert words[9 * i + 1:9 * i + 3] == (0, -1)  # c10::DeviceType::CPU, no index
    assert c.signature("auto", *args) == c.signature("auto", *(a.clone() for a in args))  # the data does not count


def test_the_reader_declines_what_it_does_not_describe(tensor_reader, c_module):
    memo = {}
    c_module.configure(memo, torch.Tensor, lambda: True, lambda device: STREAM, None, tensor_reader)
    try:
        args = cpu_arguments()
        assert c_module.signature("auto", *args[:3], args[3].unsqueeze(0)) is None  # rank 3
        assert c_module.signature("auto", args[0].to_sparse(), *args[1:]) is None  # not strided
        assert c_module.signature("a\udc80", *args) is None  # a backend with no UTF-8
        with pytest.raises(ValueError):
            c_module.configure(memo, torch.Tensor, lambda: True, lambda device: STREAM, None, bound(c_module))
    finally:
        c_module.configure({}, torch.Tensor, lambda: True, lambda device: STREAM, None)


@pytest.mark.parametrize(
    "change",
    [
        lambda a: (a[0].to(torch.int32), *a[1:]),  # a dtype
        lambda a: (a[0][:999], *a[1:]),  # a length
        lambda a: (a[0][::2], *a[1:]),  # a stride
        lambda a: (*a[:3], a[3].t().contiguous().t()),  # a pool's layout
        lambda a: (*a[:3], a[3].unsqueeze(0)),  # a rank
        lambda a: (a[0], a[1].to("meta"), *a[2:]),  # a device
        lambda a: (a[0].to_sparse(), *a[1:]),  # a layout
    ],
)
def test_any_difference_in_what_the_checks_read_is_another_signature(call_path, change):
    c, _ = call_path
    args = cpu_arguments()
    assert c.signature("auto", *change(args)) != c.signature("auto", *args)


def test_only_exact_tensors_and_a_str_backend_have_a_signature(call_path):
    c, _ = call_path
    args = cpu_arguments()
    assert c.signature("triton", *args) != c.signature("auto", *args)
    assert c.signature(["auto"], *args) is None and c.signature(b"auto", *args) is None
    assert c.signature("auto", args[0].numpy(), *args[1:]) is None
    assert c.signature("auto", *args[:3], torch.nn.Parameter(args[3], requires_grad=False)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Sparse CSR tensor support is in beta state"
        csr = torch.zeros(10, 100, dtype=torch.int32).to_sparse_csr()  # stride() raises: no signature
    assert type(csr) is torch.Tensor and c.signature("auto", *args[:3], csr) is None
    with pytest.raises(TypeError):
        c.signature("auto", *args[:3])


def test_a_remembered_signature_plans_its_bound_launch_with_the_arguments_pointers(call_path):
    c, memo = call_path
    args = cpu_arguments()
    assert c.planned("auto", *args) is None  # nothing remembered
    launch = bound(c, sizes=(8, 8, 8, 8, 4), values=(5,))
    memo[c.signature("auto", *args)] = launch
    fresh = cpu_arguments()  # other tensors, the same signature
    assert c.planned("auto", *fresh) == (launch, STREAM, tuple(a.data_ptr() for a in fresh))
    assert c.planned("triton", *fresh) is None  # another backend named: not remembered
    assert c.planned("auto", *cpu_arguments(width=101)) is None


def test_no_launch_is_planned_for_unaligned_pointers_a_hook_or_another_device(c_module, call_path):
    c, memo = call_path
    args = cpu_arguments()
    memo[c.signature("auto", *args)] = bound(c, sizes=(8, 8, 8, 8, 4), values=(5,))
    shifted = torch.zeros(1001, dtype=torch.int64)[1:]  # 8 bytes past a 16-byte boundary
    assert shifted.data_ptr() % 16 == 8 and c.signature("auto", shifted, *args[1:]) in memo
    assert c.planned("auto", shifted, *args[1:]) is None
    c.configure(memo, torch.Tensor, lambda: False, lambda device: STREAM, None, c.read)  # a launch hook installed
    assert c.planned("auto", *args) is None
    c.configure(memo, torch.Tensor, lambda: True, lambda device: STREAM, lambda: 1, c.read)  # device 1, pool's None
    assert c.planned("auto", *args) is None
    c.configure(memo, torch.Tensor, lambda: True, lambda device: STREAM, lambda: None, c.read)
    assert c.planned("auto", *args) is not None


@pytest.mark.skipif(cuda_available(), reason="with a driver loaded a launch would run")
def test_call_launches_nothing_without_a_driver(call_path):
    c, memo = call_path
    args = cpu_arguments()
    memo[c.signature("auto", *args)] = bound(c, sizes=(8, 8, 8, 8, 4), values=(5,))
    served = c.served()
    assert c.call("auto", *args) is False and c.served() == served
    with pytest.raises(TypeError):
        c.call("auto", *args[:3])


def test_the_reader_loads_in_the_background(tensor_reader, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(tmp_path_factory.getbasetemp().parent / "kv-canary-native"))
    loaded = []
    tensor_meta.when_ready(loaded.append).join(120)
    assert len(loaded) == 1 and type(loaded[0]).__name__ == "PyCapsule"


def test_a_reader_that_cannot_build_is_never_used_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")
    loaded = []
    tensor_meta.when_ready(loaded.append).join(120)
    assert loaded == [] and "failed" in tensor_meta.unavailable_reason()
    for switch in ("KV_CANARY_TENSOR_READER", "KV_CANARY_C_LAUNCHER"):
        monkeypatch.setenv(switch, "0")
        assert tensor_meta.when_ready(loaded.append) is None and loaded == []
        assert tensor_meta.unavailable_reason() == f"{switch}=0"


def test_a_partial_build_left_by_an_exited_process_is_dropped(tmp_path, monkeypatch):
    stale, fresh = tmp_path / "_kv_canary_cuda_launch-x.so1.partial", tmp_path / "_kv_canary_cuda_launch-y.so2.partial"
    stale.write_bytes(b"")
    fresh.write_bytes(b"")
    old = stale.stat().st_mtime - cuda_launch.STALE_PARTIAL_S - 1
    os.utime(stale, (old, old))
    cuda_launch.build(tmp_path)
    assert not stale.exists() and fresh.exists()  # a concurrent build's file stays
    os.utime(fresh, (old, old))
    cuda_launch.build(tmp_path)  # built already: its folder is still swept
    assert not fresh.exists()
