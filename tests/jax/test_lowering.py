"""The kernels lower for hardware this machine lacks: Mosaic GPU and the Triton lowering for CUDA, Mosaic TPU for a
TPU. Pallas's lowerings refuse what their compilers cannot express, so every code path is lowered here, in the
index dtypes JAX takes; each call is one custom call on the donated pool, with nothing around it."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import pytest

from jax.experimental import checkify

from kv_canary_jax import implementations, pallas_mosaic_gpu, pallas_mosaic_tpu, pallas_triton, scatter_req_token_ids

# (N, bs, R, C, block): tiles with several lanes, short copies, the staged path (N >= and < the vector), many
# requests, a tile cap of one vector.
SHAPES = [(5000, 10, 11, 3000, None), (5000, 10, 11, 700, None), (50, 4, 5, 9, None), (3000, 70_000, 70_001, 3, None),
          (1200, 4, 4, 7 * 128 + 3, 128), (700, 3, 4, 200, None)]


def lowered(f, platform, n_tokens, bs, n_rows, width, dtype, windowed) -> str:
    index = [((n_tokens,), dtype), ((bs + 1,), dtype), ((bs,), dtype), ((n_rows, width), jnp.int32)]
    shapes = [jax.ShapeDtypeStruct(s, t) for s, t in index + [((bs,), dtype)] * windowed]
    return jax.jit(f, donate_argnums=3).trace(*shapes).lower(lowering_platforms=(platform,)).as_text()


def assert_one_kernel_on_the_donated_pool(text: str, target: str) -> None:
    assert re.findall(r'= "?(\w+\.\w+)', text) == ["stablehlo.custom_call"], "something runs around the kernel"
    assert f"stablehlo.custom_call @{target}" in text and "tf.aliasing_output = 0" in text


def assert_no_wide_tensor_for_int32(text: str, dtype) -> None:
    if dtype == jnp.int32:
        assert not re.search(r"tensor<([0-9x]*)i64>", text)


@pytest.fixture(params=["int32", "int32-x64", "int64"])
def dtype(request):
    with jax.enable_x64(request.param != "int32"):
        yield jnp.int64 if request.param == "int64" else jnp.int32


@pytest.mark.parametrize("windowed", [False, True], ids=["plain", "windowed"])
@pytest.mark.parametrize("n_tokens,bs,n_rows,width,block", SHAPES)
def test_mosaic_gpu_lowers_for_cuda(dtype, windowed, n_tokens, bs, n_rows, width, block):
    f = functools.partial(pallas_mosaic_gpu.scatter, block=block)
    text = lowered(f, "cuda", n_tokens, bs, n_rows, width, dtype, windowed)
    assert_one_kernel_on_the_donated_pool(text, "mosaic_gpu")
    assert_no_wide_tensor_for_int32(text, dtype)


@pytest.mark.parametrize("windowed", [False, True], ids=["plain", "windowed"])
def test_the_triton_lowering_lowers_for_cuda(dtype, windowed):
    text = lowered(pallas_triton.scatter, "cuda", 5000, 10, 11, 3000, dtype, windowed)
    assert_one_kernel_on_the_donated_pool(text, "__gpu$xla.gpu.triton")
    assert_no_wide_tensor_for_int32(text, dtype)


@pytest.fixture
def tpu_lowering(monkeypatch):
    """Pallas lowers for a TPU by asking the default device for TPU facts: v5e's here (a private table)."""
    tpu_info = pytest.importorskip("jax._src.pallas.mosaic.tpu_info")
    if not hasattr(tpu_info, "registry") or not hasattr(tpu_info, "get_tpu_info_for_chip"):
        pytest.skip("this JAX cannot lower Pallas TPU kernels without a TPU")
    v5e = functools.partial(tpu_info.get_tpu_info_for_chip, tpu_info.ChipVersion.TPU_V5E, 1)
    monkeypatch.setitem(tpu_info.registry, jax.devices()[0].device_kind, v5e)


@pytest.mark.parametrize("windowed", [False, True], ids=["plain", "windowed"])
@pytest.mark.parametrize("n_tokens,bs,n_rows,width", [(5000, 300, 301, 3000), (3, 2, 5, 1), (2**20, 8, 9, 8193)])
def test_mosaic_tpu_lowers_for_tpu(tpu_lowering, dtype, windowed, n_tokens, bs, n_rows, width):
    text = lowered(pallas_mosaic_tpu.scatter, "tpu", n_tokens, bs, n_rows, width, dtype, windowed)
    assert text.count("stablehlo.custom_call @tpu_custom_call") == 1
    assert "tf.aliasing_output = 0" in text and "output_operand_aliases" in text
    assert_no_wide_tensor_for_int32(text, dtype)


def test_a_traced_call_lowers_each_platforms_choice(monkeypatch):
    """With a Hopper GPU beside the CPU, one jitted call lowers Mosaic GPU for CUDA and XLA for the CPU, also
    checkified; the platform is picked when lowering."""
    cpu = jax.devices("cpu")[0]
    monkeypatch.setattr(implementations, "first_device", lambda platform: cpu if platform in ("cpu", "cuda") else None)
    monkeypatch.setattr(implementations, "gpu_capability", lambda: (9, 0))
    shapes = [jax.ShapeDtypeStruct(s, jnp.int32) for s in ((50,), (4,), (3,), (5, 9), (3,))]
    windowed = jax.jit(lambda a, b, c, d, e: scatter_req_token_ids(a, b, c, d, start_cols=e, check_values=True))
    checked = checkify.checkify(windowed, errors=checkify.user_checks)
    for f, n_args in ((jax.jit(scatter_req_token_ids, donate_argnums=3), 4), (checked, 5)):
        traced = jax.jit(f).trace(*shapes[:n_args])
        assert "@mosaic_gpu" in traced.lower(lowering_platforms=("cuda",)).as_text()
        assert "@mosaic_gpu" not in traced.lower().as_text()
