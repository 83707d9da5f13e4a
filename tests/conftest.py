"""Test-process setup: interpreters on machines without a GPU, x64 for JAX, CPU devices, GPU markers.

TRITON_INTERPRET must be set before any Triton kernel is defined, so it is set
here, before test modules import the frontends. Enabling JAX's x64 here is the
test process's choice; the library never changes that flag. JAX's CPU platform
gets four host devices (``XLA_FLAGS``, read once when JAX starts, so set before
anything imports JAX) for the sharded-pool tests; a device count already in
``XLA_FLAGS`` wins.

On a machine without CUDA, XLA:CPU also compiles with LLVM's optimizations off
and its older loop emitters (``FAST_CPU_COMPILE``): the CPU tests compile a new
program for almost every shape they draw (the interpreted Pallas kernels
above all) and run each once, so compile time is most of their time, and this
halves it. Results do not depend on either flag; ``kv-canary check`` (CI)
runs every backend with XLA's defaults. Each flag is added only when
``XLA_FLAGS`` does not set it already (pytest-xdist workers inherit it), and
never on a CUDA machine, whose XLA may not know the flags (an unknown flag
aborts XLA). On a machine without CUDA the garbage collector also runs its
generations less often (``GC_THRESHOLDS``): its full collections walk every
object the test process holds; and Triton's interpreter patches its language
once a launch, not again at every device-function call
(``tests/triton_interpreter.py``).

Under pytest-xdist (``-n 2``: the README's command) every worker is a
separate process that inherits this environment; on a GPU each worker's JAX
then allocates GPU memory as it needs it instead of preallocating most of it
(``XLA_PYTHON_CLIENT_PREALLOCATE=false``), so that several workers fit on one
GPU.

Hypothesis profiles (``default``; ``thorough`` with ``KV_CANARY_THOROUGH=1``
or ``--hypothesis-profile=thorough``) are registered by ``tests.profiles``,
imported here so that the profile is loaded before any test module is.
"""

from __future__ import annotations

import gc
import os
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

HOST_DEVICES = "--xla_force_host_platform_device_count"
if HOST_DEVICES not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {HOST_DEVICES}=4".strip()

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from kv_canary.platform import cuda_available  # noqa: E402

FAST_CPU_COMPILE = {"--xla_backend_optimization_level": "0", "--xla_cpu_use_fusion_emitters": "false"}
# The collector's thresholds in this process on a machine without CUDA (Python's: 700, 10, 10). A full collection
# walks every object torch, JAX, Triton and the collected tests keep (millions), and tracing makes garbage fast
# enough that Python's thresholds ran about 30 of them in the serial default run; collecting the youngest generation
# every 50000 allocations (the others every 20 of the one below) leaves the full collections to the interpreter's
# "a quarter more long-lived objects" rule. Objects in reference cycles live a little longer; nothing else changes.
GC_THRESHOLDS = (50_000, 20, 20)

if not cuda_available():
    gc.set_threshold(*GC_THRESHOLDS)
    os.environ.setdefault("TRITON_INTERPRET", "1")
    if os.environ["TRITON_INTERPRET"] not in ("", "0"):
        from tests import triton_interpreter  # imports Triton: after TRITON_INTERPRET, which its @jit reads

        triton_interpreter.patch_once()
    os.environ["XLA_FLAGS"] = " ".join(
        [os.environ["XLA_FLAGS"]]
        + [f"{name}={value}" for name, value in FAST_CPU_COMPILE.items() if name not in os.environ["XLA_FLAGS"]]
    )

import tests.profiles  # noqa: E402,F401  (registers and loads the Hypothesis profile)

# JAX's persistent compilation cache: every program the tests compile is kept
# on disk, so the next run of the suite on this machine (a GPU run runs
# it several times) loads instead of compiling. Keys cover the program, the
# XLA flags and the versions, so a stale entry is never used. Costs about 5%
# on an empty cache, and grows by about 8 MB a CPU run (Hypothesis draws new
# shapes; no size cap, whose LRU bookkeeping rescans the folder on every
# write): delete it at will. KV_CANARY_JAX_CACHE=0 turns it off, or names
# another folder; JAX_COMPILATION_CACHE_DIR, if set, wins.
JAX_CACHE = os.environ.get("KV_CANARY_JAX_CACHE", os.path.join(tempfile.gettempdir(), "kv-canary-jax-cache"))

try:
    import jax

    jax.config.update("jax_enable_x64", True)
    if JAX_CACHE not in ("", "0") and not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", JAX_CACHE)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # The tests' child processes (fresh interpreters, the README's blocks, the tools' JAX children) share the
    # cache: JAX reads these variables when it starts. A variable already set wins.
    if jax.config.jax_compilation_cache_dir:
        for name in ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                     "jax_persistent_cache_min_entry_size_bytes"):
            os.environ.setdefault(name.upper(), str(getattr(jax.config, name)))
except ImportError:  # the JAX tests skip themselves
    pass

import pytest  # noqa: E402


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by -m
def pytest_collection_modifyitems(config, items):
    from tests.contract import mark_unsampled_cases_slow

    mark_unsampled_cases_slow(items)
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    """The children (``tests.children``) of the selected tests that will run start ahead, in the tests' order."""
    from tests import children

    marked = [child for item in session.items if not skipped(item)
              for mark in item.iter_markers("children") for child in mark.args]
    children.start_ahead(marked, xdist_worker=hasattr(session.config, "workerinput"))


def skipped(item) -> bool:
    """Whether a skip or skipif mark of ``item`` skips it (a skipif's condition a string is evaluated by pytest
    alone: taken as not skipping)."""
    if item.get_closest_marker("skip") is not None:
        return True
    return any(condition is True for mark in item.iter_markers("skipif")
               for condition in (*mark.args, mark.kwargs.get("condition")))


def pytest_sessionfinish(session):
    from tests import children

    children.stop_ahead()
