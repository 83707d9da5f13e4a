"""The call path's tensor reader (``tensor_meta.cpp``): built against this torch, then loaded, in the calling thread.

Contract:

- ``build(cache=None) -> Path``: the compiled ``_kv_canary_tensor_meta``
  (``native.compile_cached``: cached by the source, torch's version and
  ABI, Python and the platform; one process builds, the others wait and load
  its file), compiled with the C++ compiler (``$CXX``, else ``c++``, ``g++``
  or ``clang++``) against torch's headers and libraries; OSError says why it
  cannot be built.
- ``reader(cache=None) -> capsule``: its ``READER`` capsule, for
  ``native``'s ``configure``.
- ``load() -> capsule | None``: ``reader()`` from the default cache, or None
  with ``unavailable_reason()`` saying why: it cannot be built (no C++
  compiler, the build fails) or is not wanted (``KV_CANARY_C_LAUNCHER=0``, or
  ``KV_CANARY_TENSOR_READER=0`` for this reader alone). There is then no call
  path, and every launcher call takes the checked path. It returns when the
  reader is loaded or has failed: milliseconds where it is built already, else
  the compile, once per machine and torch (13.7 s on the 2-core CPU machine,
  2026-12-01, commit ecc49b4; ``benchmarks/cold_start.py`` measures it on a
  GPU host).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kv_canary_torch.launch import native

SOURCE = Path(__file__).with_name("tensor_meta.cpp")
MODULE = "_kv_canary_tensor_meta"
DISABLE = "KV_CANARY_TENSOR_READER"  # "0": never build or load this reader

_reason: str | None = None


def compiler() -> str | None:
    """The C++ compiler: ``$CXX``, else the first of ``c++``, ``g++``, ``clang++`` on the PATH."""
    return native.find_compiler("CXX", ("c++", "g++", "clang++"))


def _torch_flags() -> tuple[list[str], bytes]:
    """The compile and link flags for this torch, and what of torch the build depends on (for the cache's tag)."""
    import torch

    root = Path(torch.__file__).parent
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    flags = [
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{root / 'include'}", f"-I{root / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
        f"-L{root / 'lib'}", "-lc10", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{root / 'lib'}",
    ]
    return flags, f"{torch.__version__} {abi} {root}".encode()


def build(cache: Path | None = None) -> Path:
    """The compiled reader module's path (see the module docstring); raises OSError why it cannot be built."""
    flags, tag = _torch_flags()

    def command(output: str) -> list[str]:
        cxx = compiler()
        if cxx is None:
            raise OSError("no C++ compiler (set CXX)")
        return [cxx, "-O2", "-std=c++17", "-w", "-shared", "-fPIC", f"-I{native.python_include()}",
                f"-I{SOURCE.parent}", str(SOURCE), "-o", output, *flags]

    return native.compile_cached(MODULE, (SOURCE, native.HEADER), command, tag, cache)


def reader(cache: Path | None = None):
    """The ``READER`` capsule of the built module (building it first if needed)."""
    return native.load_module(build(cache), MODULE).READER


def load():
    """The reader's capsule, built first where the cache lacks it, or None (see the module docstring)."""
    for switch in (native.DISABLE, DISABLE):
        if os.environ.get(switch) == "0":
            _unavailable(f"{switch}=0")
            return None
    try:
        return reader()
    except (OSError, ImportError, AttributeError, subprocess.SubprocessError) as error:
        _unavailable(f"{type(error).__name__}: {error}")
        return None


def _unavailable(reason: str) -> None:
    global _reason
    _reason = reason


def unavailable_reason() -> str | None:
    """Why the reader did not load (None: it loaded, or was not asked for)."""
    return _reason
