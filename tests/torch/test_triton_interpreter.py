"""tests/triton_interpreter.py: a launch patches Triton's language once, computes what Triton computes, and restores it."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

from kv_canary_torch.launch import dispatch  # noqa: E402

pytestmark = pytest.mark.skipif(not dispatch.interpreted(), reason="the kernels are compiled here, not interpreted")


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _kernel(out_ptr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, _twice(_twice(i)))  # two device-function calls a program


def test_a_launch_patches_the_language_once_and_restores_it(monkeypatch):
    if not hasattr(interpreter, "_LangPatchScope"):
        pytest.skip("this Triton's interpreter has no restorable patch scope: tests/triton_interpreter.py leaves it")
    assert getattr(interpreter._patch_lang, "patched_once", False), "tests/conftest.py did not call patch_once()"
    calls = []
    original = interpreter._patch_lang.original
    monkeypatch.setattr(interpreter._patch_lang, "original", lambda fn: calls.append(fn.__name__) or original(fn))
    before = {name: getattr(tl, name) for name in ("store", "arange", "program_id", "range", "reduce")}
    out = torch.full((4 * 8,), -1, dtype=torch.int32)
    _kernel[(4,)](out, BLOCK=8)
    assert out.tolist() == [4 * i for i in range(32)]
    assert calls == ["_kernel"]  # the launch; not the eight helper calls
    assert {name: getattr(tl, name) for name in before} == before  # the language as it was
