"""The launcher's native piece (``native.cpp``): a remembered call read, planned and launched in one C++ call.

Contract:

- ``module() -> module | None``: the built piece with the CUDA driver loaded
  (``native.cpp``'s contract at its top: ``bind``, ``configure``,
  ``signature``, ``call``, ``assign_signature``, ``assign``, ``plan``, ``served``), or None
  (``unavailable_reason()`` says why: no C++ compiler, a failed build, no CUDA
  driver, or ``KV_CANARY_C_LAUNCHER=0``). Tried once per process. Where it is
  None every call takes the launcher's checked path and Triton's own launch.
- ``bind(compiled, n_ints, n_window=0, n_pointers=4) -> kernel | None``: Triton's
  ``CompiledKernel`` ``compiled`` bound once for ``call`` (or ``assign``), for a
  launch whose parameters are ``n_pointers`` pointers (the scatter's four, the
  assignment's five) followed by ``n_ints`` ints (each passed as a
  signed 32-bit int) and, for a windowed kernel (``n_window`` 1), the
  ``start_cols`` pointer. None when this launch cannot stand in for Triton's
  exactly: a kernel that needs more than a plain launch (global or profile
  scratch, a cluster, cooperative or programmatic-dependent launch, more than
  48 KiB of shared memory), or whose PTX entry does not take exactly those
  parameters (and at most two trailing scratch pointers, which are passed null
  as Triton passes them when the kernel needs none). The PTX is read once per
  compiled kernel, never per shape.
- ``build(cache=None) -> Path``: the compiled module (``compile_cached``).

Why: on the H200 host Triton's own launcher (``CompiledKernel.run``) took
6.2-7.4 us a call: a Python frame that allocates scratch space, then a C
function that parses some twenty arguments, on top of the launcher's Python
checks. ``call`` reads the tensors' metadata from their ``at::Tensor``, finds
their signature, plans and calls ``cuLaunchKernel``: 4.4-7 us a whole
launcher call there, nearly all of it the driver's.

How it is built: one C++ source, compiled with the C++ compiler (``$CXX``,
else ``c++``, ``g++`` or ``clang++``) against this Python's headers and
torch's headers and libraries, at the first ``module()`` call (the first
checked Triton launch on a GPU that has a kernel to remember: ``dispatch``),
synchronously in the calling thread, and cached under
``$KV_CANARY_CACHE_DIR`` (default ``~/.cache/kv-canary``) by a hash of the
source, torch's version and ABI, Python and the platform; ``python -m
kv_canary_torch.launch.build`` builds it ahead. It needs no CUDA header and
finds the driver in the process (``dlopen("libcuda.so.1")``). The build runs
one process at a time per cache folder (the others wait, then load its
result), into a folder of its own renamed into place when the compiler
succeeds (``compile_cached``), and is bounded by ``BUILD_TIMEOUT_S``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

SOURCE = Path(__file__).with_name("native.cpp")
MODULE = "_kv_canary_native"
DISABLE = "KV_CANARY_C_LAUNCHER"  # "0": never use this launcher
POINTERS = 4  # flat_in, offsets, req_pool_indices, pool_out
# Triton appends these pointer parameters to every kernel it compiles (global and
# profile scratch; two since Triton 3.3), null when the kernel needs none.
MAX_SCRATCH_POINTERS = 2
# Above this, Triton sets the kernel's dynamic shared memory attribute before launching.
MAX_PLAIN_SHARED = 48 * 1024

_module = None
_reason: str | None = None  # why the launcher is unavailable (None: not asked yet, or available)
_tried = False
_loading = threading.Lock()


def cache_dir() -> Path:
    """Where compiled launchers are kept: ``$KV_CANARY_CACHE_DIR``, else ``~/.cache/kv-canary``."""
    return Path(os.environ.get("KV_CANARY_CACHE_DIR") or Path.home() / ".cache" / "kv-canary")


def find_compiler(variable: str, names: tuple[str, ...]) -> str | None:
    """``$variable``, else the first of ``names`` on the PATH, else None."""
    return os.environ.get(variable) or next((found for name in names if (found := shutil.which(name))), None)


def compiler() -> str | None:
    """The C++ compiler: ``$CXX``, else the first of ``c++``, ``g++``, ``clang++`` on the PATH."""
    return find_compiler("CXX", ("c++", "g++", "clang++"))


def python_include() -> str:
    """This Python's C headers."""
    scheme = sysconfig.get_default_scheme()
    if scheme == "posix_local":  # Debian's scheme points at /usr/local, which has no headers
        scheme = "posix_prefix"
    return sysconfig.get_paths(scheme=scheme)["include"]


def compile_cached(module: str, sources: tuple[Path, ...], command, tag: bytes = b"", cache: Path | None = None) -> Path:
    """The extension ``module`` built from ``sources`` in ``cache`` (default ``cache_dir()``), compiled first if absent.

    Cached by a hash of the sources, ``tag``, the Python version and the
    platform. ``command(output)`` is the compiler's command line writing
    ``output``, or raises OSError saying why there is none. Raises OSError
    with the compiler's messages when the build fails, and
    ``subprocess.TimeoutExpired`` past ``BUILD_TIMEOUT_S``.

    The build finishes (or fails) before this returns, so a process that
    exits afterwards leaves no half-built file. Processes that need the same
    module at once build it once: each takes ``LOCK`` (``fcntl.flock`` on a
    file in ``cache``, released by the kernel when its holder exits, however it
    exits), and whoever finds the module there once it holds the lock loads it
    instead of compiling. The compiler writes into a folder of its own,
    ``<module file>.<pid>.<random>.partial``, whose file is renamed into place
    (atomic) when it succeeds; the folder is removed when the build ends, and
    by every later call once its process is dead (killed mid-build) or it is
    older than ``STALE_PARTIAL_S`` (``_drop_stale_partials``). A compiler
    that outlives its killed process then finds its folder gone and writes
    nothing. Where the cache's file system has no locks (``flock`` fails),
    each process builds in its own folder and renames its file into place:
    more work, the same result.
    """
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources) + tag + sys.version.encode())
    digest.update(sysconfig.get_platform().encode())
    folder = cache or cache_dir()
    target = folder / f"{module}-{digest.hexdigest()[:16]}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
    _drop_stale_partials(folder, module)
    if target.exists():  # renamed into place whole: there means built
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with _build_lock(folder):
        if target.exists():  # built by the process that held the lock before
            return target
        partial = Path(tempfile.mkdtemp(dir=folder, prefix=f"{target.name}.{os.getpid()}.", suffix=PARTIAL))
        try:
            line = command(str(partial / target.name))
            done = subprocess.run(line, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            if done.returncode != 0:
                raise OSError(f"{' '.join(line)} failed: {done.stderr.strip()[-2000:]}")
            os.replace(partial / target.name, target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target


LOCK = "build.lock"  # in the cache folder; kept (empty), so that every builder locks the same file
PARTIAL = ".partial"
BUILD_TIMEOUT_S = 300
# A partial build older than this is removed even where its process looks alive (a pid reused since, or one of
# another pid namespace sharing the cache): no build takes this long (BUILD_TIMEOUT_S).
STALE_PARTIAL_S = 600


@contextlib.contextmanager
def _build_lock(folder: Path):
    """Hold ``folder``'s build lock (an exclusive ``flock``, waiting for it) inside; no lock where the file system has none."""
    with open(folder / LOCK, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:  # no locks here (some network file systems): builds may then run side by side
            pass
        yield  # closing the file releases the lock; so does the process's exit


def _drop_stale_partials(folder: Path, module: str) -> None:
    """Remove ``module``'s partial builds in ``folder`` whose process is dead, or older than ``STALE_PARTIAL_S``."""
    for stale in folder.glob(f"{module}-*{PARTIAL}"):
        try:
            if not _builder_alive(stale.name) or time.time() - stale.stat().st_mtime > STALE_PARTIAL_S:
                if stale.is_dir():
                    shutil.rmtree(stale)
                else:  # a partial file of an older version of this module
                    stale.unlink()
        except OSError:  # another process removed it first, or its compiler still writes there: the next call retries
            pass


def _builder_alive(name: str) -> bool:
    """Whether the process that named partial build ``name`` (``<module file>.<pid>.<random>.partial``) may still run."""
    parts = name[: -len(PARTIAL)].rsplit(".", 2)
    if len(parts) < 3 or not parts[1].isdigit():
        return True  # not named by compile_cached: left to the age rule
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process, alive
        pass
    return True


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
    """The compiled module's path in ``cache`` (default ``cache_dir()``), compiled first if absent; raises why it cannot."""
    flags, tag = _torch_flags()

    def command(output: str) -> list[str]:
        cxx = compiler()
        if cxx is None:
            raise OSError("no C++ compiler (set CXX)")
        return [cxx, "-O2", "-std=c++17", "-w", "-shared", "-fPIC", f"-I{python_include()}", str(SOURCE), "-o", output,
                *flags, "-ldl"]

    return compile_cached(MODULE, (SOURCE,), command, tag, cache)


def load_module(path: Path, name: str = MODULE):
    """Import the compiled module ``name`` at ``path`` (its init function is ``PyInit_`` + ``name``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def module():
    """The native piece with the CUDA driver loaded, or None (``unavailable_reason()`` says why); tried once, built first if absent."""
    global _module, _reason, _tried
    if not _tried:
        with _loading:  # a second thread waits for the first one's build rather than seeing None meanwhile
            if not _tried:
                if os.environ.get(DISABLE) == "0":
                    _reason = f"{DISABLE}=0"
                else:
                    try:
                        loaded = load_module(build())
                        loaded.load_driver()
                        _module = loaded
                    except (OSError, ImportError, subprocess.SubprocessError) as error:
                        _reason = f"{type(error).__name__}: {error}"
                _tried = True
    return _module


def unavailable_reason() -> str | None:
    """Why ``module()`` is None (None: it loaded, or was not tried yet)."""
    return _reason


_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.([a-z])(\d+)\b([^,)]*)")


def entry_params(ptx: str, name: str) -> tuple[int, ...] | None:
    """Byte sizes of the parameters of PTX entry ``name``, in order; None if absent or not all scalars.

    A scalar is ``.param .u64 ...``, ``.param .s32 ...`` etc.; an array
    (``.param .align 64 .b8 desc[128]``, a tensor-map descriptor) is not.
    """
    found = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\(([^)]*)\)", ptx)
    if found is None:
        return None
    sizes = []
    for declaration in filter(None, (d.strip() for d in found.group(1).split(","))):
        match = _PARAM.match(declaration)
        if match is None or "[" in match.group(3):
            return None
        sizes.append(int(match.group(2)) // 8)
    return tuple(sizes)


def plain_launch(metadata) -> bool:
    """Whether Triton launches a kernel with this metadata by a plain launch with null scratch pointers."""
    get = lambda field, default=0: getattr(metadata, field, default)  # noqa: E731 (fields vary by Triton version)
    return (
        not get("global_scratch_size") and not get("profile_scratch_size") and get("num_ctas", 1) == 1
        and all(d == 1 for d in get("cluster_dims", ()) or ())
        and not get("launch_pdl", False) and not get("launch_cooperative_grid", False)
        and get("shared") <= MAX_PLAIN_SHARED
    )


def layout(sizes: tuple[int, ...] | None, n_ints: int, n_window: int = 0, n_pointers: int = POINTERS) -> int | None:
    """How many null scratch pointers follow ``n_pointers`` pointers, ``n_ints`` ints and ``n_window`` window pointers
    (a windowed kernel's ``start_cols``); None if ``sizes`` is not that layout."""
    if sizes is None:
        return None
    scratch = len(sizes) - n_pointers - n_ints - n_window
    expected = (8,) * n_pointers + (4,) * n_ints + (8,) * n_window + (8,) * scratch
    return scratch if 0 <= scratch <= MAX_SCRATCH_POINTERS and sizes == expected else None


def bind(c, compiled, n_ints: int, n_window: int = 0, n_pointers: int = POINTERS) -> object | None:
    """``compiled`` bound by ``c`` (``module()``; see the module docstring), or None; ``n_window`` 1 for a windowed
    kernel, whose ``start_cols`` pointer follows the ints (its unit stride compiled in); ``n_pointers`` the
    pointers before the ints (the scatter's four, the assignment's five)."""
    metadata = getattr(compiled, "metadata", None)
    if metadata is None or not plain_launch(metadata):
        return None
    try:
        sizes = entry_params(compiled.asm["ptx"], metadata.name)
    except (KeyError, AttributeError, TypeError):
        return None
    scratch = layout(sizes, n_ints, n_window, n_pointers)
    if scratch is None:
        return None
    return c.bind(compiled.function, 32 * metadata.num_warps, metadata.shared, n_ints, scratch, compiled, n_window,
                  n_pointers)
