"""Choosing an implementation: ``implementation=None | "pallas" | "mosaic" | "mosaic_tpu" | "xla" | sequence``.

Contract: ``choice(implementation, platform, interpret) -> Choice`` names what
runs, or raises ``errors.choice_error`` (a name, or a sequence entry, that is
not one of ``IMPLEMENTATIONS``), ``errors.unavailable_error`` (one name that
cannot run here) or ``errors.none_available_error`` (a sequence none of which
can). ``available_implementations(interpret=False)`` names those that can run
on JAX's default platform. Neither reads data.

- ``"xla"``: runs on every platform.
- ``"pallas"``: the Triton-lowered Pallas kernel, on CUDA GPUs; on any
  platform with ``interpret=True`` (the Pallas interpreter: for tests, slow).
  It needs ``jax.experimental.pallas.triton`` to import: JAX 0.11 deprecates
  that lowering and a later JAX removes it. Where it does not import, "pallas"
  is unavailable with the import error as the reason (``PALLAS_NOT_IMPORTABLE``),
  the default falls through to the next name with no error, and nothing of
  this package imports it before "pallas" is chosen.
- ``"mosaic"``: the Mosaic GPU Pallas kernel (``pallas_mosaic_gpu``), on CUDA
  GPUs of compute capability 9.0 or newer (Hopper on); on any platform with
  ``interpret=True``. Either way it needs ``jax.experimental.pallas.mosaic_gpu``
  to import (a JAX that has it, and absl-py); where it does not, "mosaic" is
  unavailable with the import error as the reason, and never breaks the others.
- ``"mosaic_tpu"``: the Mosaic TPU Pallas kernel (``pallas_mosaic_tpu``), on
  TPUs; on any platform with ``interpret=True`` (Pallas's TPU interpreter).
  Where ``jax.experimental.pallas.tpu`` does not import, it is unavailable
  with the import error as the reason (``MOSAIC_TPU_NOT_IMPORTABLE``).
- a sequence (a ``collections.abc.Sequence`` of names: a tuple or a list,
  not a numpy array): the first name that can run. Anything else that is not
  a ``str`` is refused with ``errors.choice_error``, before any membership test.
- None: the platform's entry in ``PLATFORM_DEFAULTS`` (none yet; a TPU's
  would be ``("mosaic_tpu", "xla")``, see there), else ``DEFAULT``:
  ``("mosaic", "pallas", "xla")``. A
  GPU of compute capability 9.0 or newer runs Mosaic GPU and never imports
  the Triton lowering (neither choosing nor running it: "mosaic" comes first
  and is available, so "pallas" is never probed); an older GPU finds "mosaic"
  unavailable and runs "pallas" for as long as JAX ships that lowering, then
  XLA; under ``interpret=True`` Mosaic GPU wherever it imports.

The compute capability is that of the first CUDA GPU JAX sees
(``jax.devices("gpu")``: ``jax.devices()[0]`` wherever a GPU is the default
device); machines that mix GPU generations are not told apart.

``platform`` is where the computation runs when the arrays say so (a concrete
array's device), or None under tracing, where arrays carry no device. Then the
choice keeps one name per platform and the computation picks among them with
``jax.lax.platform_dependent`` when it is lowered, so ``jax.jit`` of the same
function runs the kernel on GPU arrays and XLA on CPU arrays. A choice is raised
as an error only for ``jax.devices()[0]``'s platform (what a jitted call
compiles for by default); a choice with no name for some other platform fails
only if lowered there, with JAX's message.

A ``Choice`` is a tuple of ``(platform, name)`` pairs, hashable (a static jit
argument); platform None is the default branch.
"""

from __future__ import annotations

import collections.abc
import functools
import importlib

from shared_spec import errors
from kv_canary_jax import platforms

PALLAS, MOSAIC, MOSAIC_TPU, XLA = "pallas", "mosaic", "mosaic_tpu", "xla"
IMPLEMENTATIONS: tuple[str, ...] = (PALLAS, MOSAIC, MOSAIC_TPU, XLA)
# implementation=None everywhere PLATFORM_DEFAULTS names nothing. Mosaic GPU
# first: on Hopper and newer it runs, and the default never imports the Triton
# lowering, which warns (DeprecationWarning) on JAX 0.11 and which a later JAX
# removes; in a jitted step like a server's the two Pallas kernels are within
# the step's noise of each other and XLA's scatter adds 10x to 40x more
# (docs/jax.md#performance has the figures and their runs). The Triton-lowered
# kernel second: older GPUs, where Mosaic GPU does not run, take it for as long
# as JAX ships it. XLA last: it runs everywhere.
DEFAULT: tuple[str, ...] = (MOSAIC, PALLAS, XLA)
# implementation=None on these platforms instead of DEFAULT. A TPU is not here:
# its entry would be (MOSAIC_TPU, XLA), and it waits until the Mosaic TPU kernel
# has compiled and passed `kv-canary check` on a real TPU. It is tested in TPU
# interpret mode only, and Mosaic TPU may refuse its DMAs, whose column windows
# start and end anywhere, at compile time (docs/performance-notes.md), past the
# point where the default could still fall through to XLA. Adding that entry is
# the whole change.
PLATFORM_DEFAULTS: dict[str, tuple[str, ...]] = {}
# The kernels that run once per example under jax.vmap (each wraps itself in batching.per_example);
# compute maps the checked mode's gate around them the same way.
PER_EXAMPLE: tuple[str, ...] = (MOSAIC, MOSAIC_TPU)
OPTION = "implementation"
# The oldest GPU Mosaic GPU compiles for: Hopper (sm_90).
MOSAIC_MIN_CAPABILITY = (9, 0)

Choice = tuple[tuple[str | None, str], ...]


def requested(implementation, platform: str | None = None) -> tuple[tuple[str, ...], bool]:
    """The names to try on ``platform``, in order, and whether exactly one name was asked for."""
    if implementation is None:
        return PLATFORM_DEFAULTS.get(platform, DEFAULT), False
    if isinstance(implementation, str):
        implementation = str(implementation)  # a plain str, also for a subclass (numpy.str_): messages, jit keys
        if implementation not in IMPLEMENTATIONS:
            raise errors.choice_error(OPTION, implementation, IMPLEMENTATIONS)
        return (implementation,), True
    # A sequence of names, not any iterable: a numpy array of names is not a Sequence (and its
    # membership tests are arrays); a generator would be spent by the first platform's choice.
    if not isinstance(implementation, collections.abc.Sequence):
        raise errors.choice_error(OPTION, implementation, IMPLEMENTATIONS)
    names = tuple(implementation)
    if not names:
        raise errors.choice_error(OPTION, implementation, IMPLEMENTATIONS)
    for name in names:
        if not isinstance(name, str) or name not in IMPLEMENTATIONS:
            raise errors.choice_error(OPTION, str(name) if isinstance(name, str) else name, IMPLEMENTATIONS)
    return tuple(str(name) for name in names), False


def unavailable_reason(name: str, platform: str, interpret: bool) -> str | None:
    """Why ``name`` cannot run on ``platform`` (None: it can)."""
    if name == PALLAS:
        return _platform_then_import(
            platform, interpret, platforms.CUDA, errors.PALLAS_NEEDS_GPU,
            pallas_triton_import_error, errors.PALLAS_NOT_IMPORTABLE,
        )
    if name == MOSAIC:
        return _mosaic_unavailable_reason(platform, interpret)
    if name == MOSAIC_TPU:
        return _platform_then_import(
            platform, interpret, platforms.TPU, errors.MOSAIC_TPU_NEEDS_TPU,
            mosaic_tpu_import_error, errors.MOSAIC_TPU_NOT_IMPORTABLE,
        )
    return None


def _platform_then_import(platform, interpret, home: str, elsewhere: str, import_error, not_importable: str):
    """A kernel that runs on ``home`` (anywhere interpreted) and needs a module that may not import.

    The platform first: where the kernel cannot run anyway, its module is never
    imported (JAX 0.11 may warn about the Triton lowering's).
    """
    if platform != home and not interpret:
        return elsewhere
    error = import_error()
    return None if error is None else not_importable.format(error=error)


def _import_error(module: str) -> str | None:
    """Why ``module`` cannot be imported here, as ``"ClassName: message"`` (None: it can)."""
    try:
        importlib.import_module(module)
    except Exception as error:  # ImportError, or a JAX whose lowering fails to initialize
        return f"{type(error).__name__}: {error}"
    return None


@functools.cache
def pallas_triton_import_error() -> str | None:
    """Why ``jax.experimental.pallas.triton`` (Pallas' Triton lowering) cannot be imported here (None: it can)."""
    return _import_error("jax.experimental.pallas.triton")


@functools.cache
def mosaic_import_error() -> str | None:
    """Why ``jax.experimental.pallas.mosaic_gpu`` cannot be imported here (None: it can)."""
    return _import_error("jax.experimental.pallas.mosaic_gpu")


@functools.cache
def mosaic_tpu_import_error() -> str | None:
    """Why ``jax.experimental.pallas.tpu`` cannot be imported here (None: it can)."""
    return _import_error("jax.experimental.pallas.tpu")


def gpu_capability() -> tuple[int, int] | None:
    """``(major, minor)`` of the first CUDA GPU JAX sees; None without one (or if it does not say)."""
    device = platforms.gpu_device()
    if device is None:
        return None
    try:
        major, minor = str(device.compute_capability).split(".")[:2]
        return int(major), int(minor)
    except (AttributeError, ValueError):
        return None


def _mosaic_unavailable_reason(platform: str, interpret: bool) -> str | None:
    error = mosaic_import_error()
    if error is not None:
        return errors.MOSAIC_NOT_IMPORTABLE.format(error=error)
    if interpret:
        return None
    if platform != platforms.CUDA:
        return errors.MOSAIC_NEEDS_GPU
    capability = gpu_capability()
    if capability is None:
        return errors.MOSAIC_NEEDS_GPU
    if capability < MOSAIC_MIN_CAPABILITY:
        return errors.MOSAIC_NEEDS_HOPPER.format(capability="{}.{}".format(*capability))
    return None


def choose(names: tuple[str, ...], single: bool, platform: str, interpret: bool) -> str:
    """The first of ``names`` that runs on ``platform``; raises when none does."""
    reasons: dict[str, str] = {}
    for name in names:
        reason = unavailable_reason(name, platform, interpret)
        if reason is None:
            return name
        reasons.setdefault(name, reason)
    if single:
        raise errors.unavailable_error(OPTION, names[0], reasons[names[0]])
    raise errors.none_available_error(OPTION, reasons)


def available_implementations(interpret: bool = False) -> tuple[str, ...]:
    """The implementations that can run on JAX's default platform (``jax.devices()[0]``) here."""
    platform = platforms.default_platform()
    return tuple(name for name in IMPLEMENTATIONS if unavailable_reason(name, platform, interpret) is None)


def choice(implementation, platform: str | None, interpret: bool) -> Choice:
    """What runs: one name for a known platform, one per platform under tracing."""
    if platform is not None:
        return ((None, choose(*requested(implementation, platform), platform, interpret)),)
    likely = platforms.default_platform()
    choose(*requested(implementation, likely), likely, interpret)  # raises for the likely platform
    per_platform: dict[str | None, str] = {}
    for key, assumed in ((platforms.CUDA, platforms.CUDA), (platforms.TPU, platforms.TPU), (None, platforms.CPU)):
        try:
            per_platform[key] = choose(*requested(implementation, assumed), assumed, interpret)
        except errors.KvCanaryValueError:
            pass
    if None in per_platform:  # a platform that picks what the default branch picks needs no branch of its own
        per_platform = {k: v for k, v in per_platform.items() if k is None or v != per_platform[None]}
    return tuple(per_platform.items())
