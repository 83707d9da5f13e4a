"""The Triton backend's launch path: every variant compiles for sm_90, and a compiled variant is never served for
a call it does not fit (shapes, strides, windows, index dtypes and devices changing from call to call)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from kv_canary_arrays.frameworks import cuda_available
from kv_canary_torch import assign_req_to_token_pool_func, launch_scatter_req_token_ids_kernel
from shared_spec import arg_specs
from shared_spec.reference import assign_reference, scatter_reference
from tests.torch_support import as_numpy, device_for, run_python

DEVICE = device_for("triton")
# (bs, width, tokens per request): on the GPU each launch shape, the tile loop (more tiles than lanes) among them;
# interpreted, the shapes a CPU runs in seconds.
SHAPES = [(3, 5, 4), (1, 300, 300), (40, 9, 9), (2, 1500, 1400)] + (
    [(70_000, 4, 4), (4096, 1100, 1100), (2, 300_000, 300_000), (600, 600, 500)] if cuda_available() else [])


def batch(bs, width, tokens, seed, windowed=False):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, tokens + 1, size=bs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat_in = rng.integers(-(2**40), 2**40, size=int(offsets[-1]) + 3)
    rows = rng.permutation(bs + 1)[:bs].astype(np.int64)
    start_cols = rng.integers(0, width, size=bs) if windowed else None
    pool = np.full((bs + 1, width), -7, dtype=np.int32)
    return flat_in, offsets, rows, pool, start_cols


def spread(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a view of stride 2."""
    return torch.repeat_interleave(t, 2)[::2]


def test_calls_that_change_every_variant_key_get_the_reference_pool():
    for seed, ((bs, width, tokens), strided, windowed, column_stride) in enumerate(
            itertools.product(SHAPES, (False, True), (False, True), (1, 2))):
        flat_in, offsets, rows, pool, start_cols = batch(bs, width, tokens, seed, windowed=windowed)
        expected = scatter_reference(flat_in, offsets, rows, pool, start_cols)
        arrays = [torch.from_numpy(a).to(DEVICE) for a in (flat_in, offsets, rows)]
        if strided:
            arrays = [spread(a) for a in arrays]
        wide = torch.full((pool.shape[0], pool.shape[1] * column_stride), -9, dtype=torch.int32, device=DEVICE)
        view = wide[:, ::column_stride]
        view.copy_(torch.from_numpy(pool))
        window = None if start_cols is None else torch.from_numpy(start_cols).to(DEVICE)
        launch_scatter_req_token_ids_kernel(flat_in=arrays[0], offsets=arrays[1], req_pool_indices=arrays[2],
                                            pool_out=view, start_cols=window, backend="triton")
        np.testing.assert_array_equal(as_numpy(view), expected, err_msg=f"{bs}x{width} {strided} {windowed}")
        if column_stride == 2:
            assert (wide[:, 1::2] == -9).all()


def test_assignment_calls_that_change_index_dtypes_get_the_reference_table():
    rng = np.random.default_rng(7)
    for seed, dtypes in enumerate(itertools.product((np.int32, np.int64), repeat=4)):
        bs, width = int(rng.integers(1, 40)), int(rng.integers(1, 50))
        start = rng.integers(0, width, size=bs)
        end = start + rng.integers(0, width - start + 1)
        rows = rng.permutation(bs + 1)[:bs]
        loc = rng.integers(0, 2**31 - 1, size=int((end - start).sum()) + 2)
        arrays = [np.asarray(a, dtype) for a, dtype in zip((rows, start, end, loc), dtypes)]
        table = np.full((bs + 1, width), -5, dtype=np.int32)
        expected = assign_reference(arrays[0], table, *arrays[1:], bs)
        tensors = [torch.from_numpy(a).to(DEVICE) for a in arrays]
        table_t = torch.from_numpy(table).to(DEVICE)
        assign_req_to_token_pool_func(tensors[0], table_t, *tensors[1:], bs, backend="triton")
        np.testing.assert_array_equal(as_numpy(table_t), expected, err_msg=str(dtypes))


def test_a_decode_loop_whose_sizes_change_every_step():
    pool = np.full((300, 64), -3, dtype=np.int32)
    pool_t = torch.from_numpy(pool.copy()).to(DEVICE)
    for step in range(12):
        flat_in, offsets, rows, _, start_cols = arg_specs.decode_step(bs=1 + 23 * step % 257, context=64,
                                                                      new_tokens=1 + step % 3, seed=step)
        pool = scatter_reference(flat_in, offsets, rows, pool, start_cols)
        launch_scatter_req_token_ids_kernel(
            flat_in=torch.from_numpy(flat_in).to(DEVICE), offsets=torch.from_numpy(offsets).to(DEVICE),
            req_pool_indices=torch.from_numpy(rows).to(DEVICE), pool_out=pool_t,
            start_cols=torch.from_numpy(start_cols).to(DEVICE))
    np.testing.assert_array_equal(as_numpy(pool_t), pool)


# Every variant compiled for an H100/H200 (sm_90) without a GPU, in a fresh process with TRITON_INTERPRET unset
# (this one defined the kernels interpreted): what only the compiler rejects. Each integer parameter must reach
# the kernel as a 64-bit one (its annotation), and windowing costs one more load.
COMPILE_FOR_SM90 = """
import itertools, json, re, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kv_canary_torch import assign_kernel as ak, launch, scatter_kernel as sk
target, out = GPUTarget("cuda", 90, 32), {}
def compiled(fn, signature, constexprs):
    ptx = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs), target=target,
                         options={"num_warps": launch.WARPS}).asm["ptx"]
    entry = ptx.split(".entry", 1)[1].split(")", 1)[0]
    return {"params64": len(re.findall(r"[.]param [.]u64", entry)), "loads": ptx.count("ld.global"),
            "stores": ptx.count("st.global")}
blocks = (launch.SMALL_BLOCK, launch.LARGE_BLOCK)
for block, one, windowed, unit in itertools.product(blocks, *[(False, True)] * 3):
    signature = {"flat_in_ptr": "*i64", "offsets_ptr": "*i64", "rows_ptr": "*i64", "pool_ptr": "*i32",
                 "start_cols_ptr": "*i64" if windowed else "constexpr", **{k: "i64" for k in sk.INTS},
                 **{k: "constexpr" for k in sk.CONSTEXPRS}}
    constexprs = dict(zip(sk.CONSTEXPRS, (block, one, windowed, unit)))
    if not windowed:
        constexprs["start_cols_ptr"] = None
    out[f"scatter {block} {one} {unit} {windowed}"] = compiled(sk.scatter_kernel, signature, constexprs)
signature = {"flat_in_ptr": "*i64", "offsets_ptr": "*i64", "rows_ptr": "*i64", "pool_ptr": "*i32",
             **{k: "i64" for k in sk.TILED_INTS}, "BLOCK": "constexpr"}
ptx = triton.compile(ASTSource(fn=sk.scatter_tiled_kernel, signature=signature, constexprs={"BLOCK": launch.LARGE_BLOCK},
                               attrs={(3,): [["tt.divisibility", 16]]}),
                     target=target, options={"num_warps": launch.TILED_WARPS}).asm["ptx"]
out["tiled"] = {"vector_stores": len(re.findall(r"st[.]global[.a-zA-Z0-9:]*[.]v4", ptx)), "stores": ptx.count("st.global")}
for dtypes in itertools.product(("i32", "i64"), repeat=4):
    pointers = dict(zip(ak.POINTERS, ["*" + dtypes[0], "*i32", *("*" + d for d in dtypes[1:])]))
    signature = {**pointers, **{k: "i64" for k in ak.INTS}, **{k: "constexpr" for k in ak.CONSTEXPRS}}
    out["assign " + " ".join(dtypes)] = compiled(ak.assign_kernel, signature, dict(ak.CONSTEXPRS))
print(json.dumps(out))
"""


@pytest.mark.skipif(cuda_available(), reason="on a GPU the tests above run the compiled kernels themselves")
def test_every_variant_compiles_for_sm90():
    from kv_canary_torch import assign_kernel, scatter_kernel

    ptx = json.loads(run_python(COMPILE_FOR_SM90, interpret=False))
    tiled = ptx.pop("tiled")
    assert tiled["vector_stores"] > 0, tiled  # the aligned pool's 16-byte stores: what the tiled kernel is for
    assert len(ptx) == 16 + 16
    for name, facts in ptx.items():
        assert facts["stores"] > 0, name
        kernel = scatter_kernel if name.startswith("scatter") else assign_kernel
        windowed = name.endswith("True")
        pointers = len(kernel.POINTERS) - (name.startswith("scatter") and not windowed)
        assert facts["params64"] >= pointers + len(kernel.INTS), (name, facts)  # (then Triton's scratch pointers)
    for key in ptx:
        if key.startswith("scatter") and key.endswith("False"):
            assert ptx[key[:-5] + "True"]["loads"] == ptx[key]["loads"] + 1, key


# Triton's own binding of the arguments each launch passes (its binder, built for an sm_90 target without a GPU):
# the positional arguments the cached CompiledKernel is run with are the ones Triton binds, in its order, and
# Triton's specialization is the same for every call of a variant (ints of any size, pointers of any alignment),
# so the variant, the launch path's cache key, determines the compiled kernel.
SPECIALIZATION = """
import json, torch
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.runtime.jit import create_function_from_signature
from kv_canary_torch import launch
calls = []
launch._launch = lambda kernel, grid, output, arrays, ints, names, constexprs, dtypes, warps=4: calls.append(
    (kernel, (*arrays, *ints), names, constexprs, dtypes))
i64, i32 = torch.int64, torch.int32
def ints(n, dtype=i64, offset=0):
    return torch.arange(n + offset, dtype=dtype)[offset:]
for offset in (0, 1):
    for n in (3, 40, 2**31 + 7):
        flat = ints(3, offset=offset) if n == 3 else torch.zeros(1, dtype=i64).expand(n)
        pool = torch.zeros((5, 9 + offset), dtype=i32)[:, offset:]
        for start_cols in (None, ints(2, offset=offset), ints(4)[::2]):
            launch.scatter(flat, ints(3, offset=offset), ints(2, offset=offset), pool, start_cols)
            launch.scatter(flat[::2], ints(3), ints(2), pool.t()[:, :2], start_cols)
    big = torch.zeros(2**22 + 1 + offset, dtype=i64)[offset:]  # large enough for the tiled kernel
    for pool in (torch.zeros((2, 4100), dtype=i32), torch.zeros((2, 4101), dtype=i32)[:, 1:]):
        launch.scatter(big, torch.tensor([0, 2**22]), ints(1), pool)
    for dtypes in ((i64, i64, i64, i64), (i32, i64, i32, i64)):
        launch.assign(ints(2, dtypes[0], offset), torch.zeros((3, 4 + offset), dtype=i32)[:, offset:],
                      ints(2, dtypes[1], offset), ints(2, dtypes[2]) + 1, ints(7 * offset + 3, dtypes[3]), 2)
backend, binders, seen = CUDABackend(GPUTarget("cuda", 90, 32)), {}, {}
same_order = True
for kernel, args, names, constexprs, dtypes in calls:
    if kernel not in binders:
        binders[kernel] = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, _ = binders[kernel](*args, **dict(zip(names, constexprs)), num_warps=launch.WARPS)
    same_order &= list(bound.values()) == [*args, *constexprs]
    seen.setdefault(repr((kernel.__name__, constexprs, dtypes)), set()).add(repr(specialization))
print(json.dumps({"same_order": same_order, "calls": len(calls), "variants": {k: len(v) for k, v in seen.items()}}))
"""


def test_a_variant_determines_triton_s_specialization():
    found = json.loads(run_python(SPECIALIZATION, interpret=False))
    assert found["same_order"] and found["calls"] == 2 * 3 * 3 * 2 + 2 * 2 + 2 * 2
    assert all(count == 1 for count in found["variants"].values()), found["variants"]
    assert any(name.startswith("('scatter_tiled_kernel'") for name in found["variants"]), found["variants"]
    assert len(found["variants"]) >= 5


@pytest.mark.skipif(cuda_available(), reason="on a GPU the large batches of the GPU tests take the tiled kernel")
@pytest.mark.parametrize("width", [1025, 2049, 4096])
def test_the_tiled_kernel_writes_the_reference_cells(width):
    """The tiled kernel alone (the launcher takes it only past 4M tokens), interpreted: windows that start, end and
    fill tiles anywhere, rows outside the pool, decreasing and clipped segments."""
    from kv_canary_torch import launch, scatter_kernel

    rng = np.random.default_rng(width)
    for _ in range(3):
        flat_in, offsets, rows, pool, _ = arg_specs.hostile_batch(rng, 4, width, 3, 3 * width, np.int64)
        expected = scatter_reference(flat_in, offsets, rows, pool)
        f, o, r, p = (torch.from_numpy(a) for a in (flat_in, offsets, rows, pool))
        grid = (len(rows), launch.cdiv(min(width, len(flat_in)), launch.LARGE_BLOCK) + 1)
        if len(rows) and min(width, len(flat_in)):
            scatter_kernel.scatter_tiled_kernel[grid](f, o, r, p, len(flat_in), p.shape[0], width, 1, 1, p.stride(0),
                                                     BLOCK=launch.LARGE_BLOCK, num_warps=launch.TILED_WARPS)
        np.testing.assert_array_equal(p.numpy(), expected)


def test_the_tiled_kernel_takes_only_large_full_batches_of_long_windows():
    from types import SimpleNamespace

    from kv_canary_torch.launch import tiled

    big = 2**22
    aligned, misaligned = SimpleNamespace(data_ptr=lambda: 256), SimpleNamespace(data_ptr=lambda: 260)
    assert tiled(256, 256 * 32768, 32769, 1, 1, aligned)  # sglang's 256 x 32768
    assert not tiled(1024, 1024 * 2048, 2049, 1, 1, aligned)  # 2M tokens
    assert not tiled(256, 256 * 32768, 32769, 1, 1, misaligned)  # a pool not 16-byte aligned
    assert not tiled(256, 256 * 32768, 32769, 2, 1, aligned)  # strided tokens
    assert not tiled(256, 256 * 32768, 32769, 1, 2, aligned)  # strided pool columns
    assert not tiled(4096, big, 2048, 1, 1, aligned)  # windows of two tiles
    assert not tiled(256, big, 32769, 1, 1, aligned)  # a ragged batch: half its grid idle
