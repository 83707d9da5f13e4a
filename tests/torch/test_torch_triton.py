"""The contract on the torch frontend's Triton backend (interpreted on a CPU-only machine)."""

import pytest

from kv_canary.platform import cuda_available
from kv_canary_torch.conformance import TorchRunner
from kv_canary_torch.launch import plan
from tests.contract import ScatterContract
from tests.strategies import large_batch
from tests.torch_support import SM90_RUN, SM90_SCRIPTS, compiled_for_sm90


class TestTorchTriton(ScatterContract):
    examples = 25  # the Triton interpreter runs each program in numpy: cheap for small grids
    # The interpreter runs each of a LARGE launch's programs (one a request here) on 1024 lanes in numpy, about 3 ms
    # each: 2000 requests of width 9 are the round count past SMALL_CELLS (1820 at this width), still the LARGE launch.
    large_bs = 2000

    @classmethod
    def make_runner(cls):
        return TorchRunner("triton")

    def test_thousands_of_requests(self, runner):
        flat_in, _, _, pool = large_batch(bs=self.large_bs, width=9, seed=3)
        assert plan.launch_shape(self.large_bs, pool.shape[1], len(flat_in)) == plan.LARGE
        super().test_thousands_of_requests(runner)


# Compiles the kernel (not interpreted) for an H100/H200 (sm_90) without a GPU:
# catches what only the compiler rejects. Run in a fresh process because this
# one may have defined the kernel in interpreter mode (tests.torch_support.SM90_SCRIPTS). (triton.compile's
# ASTSource API as of Triton 3.9.)
COMPILE_FOR_SM90 = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kv_canary_torch import triton_kernel as k
from kv_canary_torch.launch import plan as launch
import re
ints = ("n_tokens", "n_rows", "width", "flat_stride", "offsets_stride", "rows_stride", "stride_row", "stride_col")
def params(ptx):  # the entry's parameter count
    return len(re.findall(r"[.]param [.]", ptx.split(")", 1)[0]))
def loads(ptx):
    return ptx.count("ld.global")
def store_bytes(ptx):  # the bytes each st.global instruction writes: lanes (.v2/.v4/.v8) x element width (.b32, .u32, ...)
    sizes = []
    for match in re.finditer(r"st[.]global((?:[.][A-Za-z0-9_:]+)*)[ \t]", ptx):
        parts = match.group(1).split(".")[1:]  # cache and eviction qualifiers (.cs, .L1::...) are skipped
        lanes = next((int(p[1:]) for p in parts if re.fullmatch(r"v[0-9]+", p)), 1)
        sizes.append(lanes * next(int(p[1:]) for p in parts if re.fullmatch(r"[bsuf][0-9]+", p)) // 8)
    return sizes
for int_type in ("i32", "i64"):
    for windowed in (False, True):
        # Unwindowed, start_cols_ptr and its stride are None (constexprs, no parameter: the call path's layout);
        # windowed, a pointer and a stride of 1 (which Triton specializes to a constant).
        window = dict(start_cols_ptr="*i64", start_cols_stride="constexpr") if windowed else dict(
            start_cols_ptr="constexpr", start_cols_stride="constexpr")
        window_values = dict(start_cols_stride=1) if windowed else dict(start_cols_ptr=None, start_cols_stride=None)
        signature = dict(flat_in_ptr="*i64", offsets_ptr="*i64", rows_ptr="*i64", pool_ptr="*i32",
                         **{name: int_type for name in ints}, **window,
                         **{name: "constexpr" for name in launch.LANES_CONSTEXPRS})
        for block, warps, _ in (launch.SMALL, launch.LARGE):
            multiplies = {}
            for wide, unit, one in ((w, u, o) for w in (False, True) for u in (False, True) for o in (False, True)):
                values = (block, wide, unit, True, one, windowed)
                source = ASTSource(fn=k.scatter_req_token_ids_kernel, signature=signature,
                                   constexprs={**dict(zip(launch.LANES_CONSTEXPRS, values)), **window_values})
                compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
                ptx = compiled.asm["ptx"]
                assert "st.global" in ptx
                # four pointers and the ints (then Triton's scratch pointers); windowed one pointer more
                assert params(ptx) - 4 - len(ints) - windowed in (0, 1, 2), params(ptx)
                multiplies[wide, unit, one] = sum(line.split()[0].startswith(("mul.", "mad.")) for line in ptx.splitlines() if line.strip())
            # UNIT: no stride multiply per element (each thread handles BLOCK / (32 * warps) of them, twice: load and store).
            per_thread = block // (32 * warps)
            assert all(multiplies[wide, False, one] - multiplies[wide, True, one] >= per_thread
                       for wide in (False, True) for one in (False, True)), multiplies
# The tiled kernel (contiguous arguments, the LARGE shape): its tiles store 16 bytes at a time, edges included.
# What is held is the kind of store, not Triton's instruction counts (which move with its versions): every
# thread's share of a tile goes out in 16-byte (or wider) vectors on both store paths of a tile (whole tiles and
# the whole 4-cell groups of edge tiles), and the only narrower stores are the <= 8 end-cell lanes, however
# Triton spreads them over threads: 8 cells, less than one tile's share, so no scalar path stores a tile.
# The loads are counted relative to each other: windowing costs exactly one scalar load (start_cols), whatever
# the version emits for the rest.
tiled_ints = ("n_tokens", "n_rows", "width", "offsets_stride", "rows_stride", "stride_row")
tiled_loads = {}
for int_type in ("i32", "i64"):
    for windowed in (False, True):
        window = dict(start_cols_ptr="*i64", start_cols_stride="constexpr") if windowed else dict(
            start_cols_ptr="constexpr", start_cols_stride="constexpr")
        window_values = dict(start_cols_stride=1) if windowed else dict(start_cols_ptr=None, start_cols_stride=None)
        signature = dict(flat_in_ptr="*i64", offsets_ptr="*i64", rows_ptr="*i64", pool_ptr="*i32",
                         **{name: int_type for name in tiled_ints}, **window, BLOCK="constexpr", DENSE="constexpr",
                         WINDOWED="constexpr")
        block, warps = launch.LARGE[0], launch.TILED_WARPS
        aligned = {(3,): [["tt.divisibility", 16]]}  # the pool pointer 16-byte aligned, as Triton specializes it
        source = ASTSource(fn=k.scatter_req_token_ids_tiled_kernel, signature=signature, attrs=aligned,
                           constexprs={"BLOCK": block, "DENSE": True, "WINDOWED": windowed, **window_values})
        ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}).asm["ptx"]
        assert params(ptx) - 4 - len(tiled_ints) - windowed in (0, 1, 2), params(ptx)
        tiled_loads[int_type, windowed] = loads(ptx)
        if not windowed:
            sizes = store_bytes(ptx)
            share = 4 * block // (32 * warps)  # the bytes of a tile one thread stores
            wide, narrow = sum(s for s in sizes if s >= 16), sum(s for s in sizes if s < 16)
            assert wide >= 2 * share and narrow <= 4 * 8 < share, sizes
        else:  # the row moved by shift cells has no known alignment: the stores are scalar, but they are stores
            assert "st.global" in ptx
    assert tiled_loads[int_type, True] == tiled_loads[int_type, False] + 1, tiled_loads  # the one more scalar load
print("compiled")
"""
SM90_SCRIPTS["lanes and tiled"] = COMPILE_FOR_SM90


@pytest.mark.skipif(cuda_available(), reason="on a GPU the contract above runs the compiled kernel itself")
@SM90_RUN.ahead
def test_kernel_compiles_for_sm90():
    assert compiled_for_sm90("lanes and tiled") == "compiled"
