"""Argument checks for torch tensors: the spec's checks, spelled in torch.

Contract (the launcher calls these three; nothing is written by any):

Each takes ``start_cols=None`` last (the windowed write's first columns): when
it is not None it is checked too, after the four, as ``shared_spec.checks``
orders it; None leaves it out of the checks (and the messages) entirely.

- ``fast_check(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> bool``: True
  exactly when the arguments are torch tensors that pass every check of
  ``shared_spec.checks.CHECK_ORDER``. One generated boolean expression
  (compiled once at import from ``TORCH_DIALECT`` by
  ``shared_spec.checks.compile_fast_check``): about two and a half
  microseconds on a CPU, no allocation.
- ``argument_error(...) -> Exception | None``: what
  ``shared_spec.checks.first_error`` names for the arguments as
  ``kv_canary_arrays.describe`` describes them (None: every check passes),
  returned, not raised.
- ``adopt_arguments(...)``: where ``fast_check`` is False, raises that error,
  or, when every check passes (another framework's arrays), returns the five
  arguments as torch tensors (``kv_canary_arrays.adopt``; ``start_cols`` None
  stays None).

Only where ``fast_check`` is False are the arguments described as
``ArrayView``/``NotAnArray`` for the spec's exact checker, which builds the
message.

Under ``torch.compile`` the launcher runs ``compiled_fast_check``, the same
checks spelled for TorchDynamo (``COMPILED_DIALECT``): isinstance, ``layout``,
``is_nested``, ``is_meta``, ``dim()``, ``dtype``, ``shape``, ``device``,
``is_contiguous()`` and ``stride()`` trace and fold into Dynamo's guards;
``is_neg()``/``is_conj()`` do not, and ``torch_lazy_bit`` reads both bits
from the dispatch keys instead, which Dynamo answers from the traced tensor's
fake and guards on. The one check it leaves out is an inference pool outside
inference mode, which Dynamo cannot decide while tracing (it compiles with
inference mode off, refuses ``is_inference()``, and guards grad mode, not
inference mode): the launcher's compiled path asks ``is_inference`` of the
real pool while tracing and, for an inference pool, puts a node into the
graph that asks for inference mode when the graph runs
(``op.require_inference_mode``). It also leaves out whether memory holds
every element (``torch_backed``): Dynamo's fake tensors have no data, and a
storage can be freed between two runs of a graph without a guard seeing it,
so the graph's scatter node asks it of the real tensors each time it runs
(``op.scatter_req_token_ids``). A pool layout that none of
``torch_writable``'s shortcuts answers reaches ``cells_overlap``, whose
Euclid loop Dynamo traces with dynamic shapes too, specializing on the
pool's strides.
"""

from __future__ import annotations

import dataclasses

import torch

from kv_canary_arrays import adopt
from kv_canary_arrays.describe import TORCH, describe, torch_backed, torch_lazy_bit, torch_writable
from kv_canary_torch.traced import assume_constant_result
from shared_spec.arguments import ARGUMENT_NAMES, OUTPUT, START_COLS
from shared_spec.checks import NO_MEMORY, Dialect, compile_fast_check, first_error, storage_problem_error

TORCH_DIALECT = Dialect(
    is_array="isinstance({x}, Tensor)",
    # The conjugate bit is left out: only complex tensors have it, and the dtype terms refuse those.
    storage="({x}.layout is strided and not {x}.is_nested and not {x}.is_neg() and torch_backed({x}))",
    has_data="not {x}.is_meta",
    rank="{x}.dim()",
    dtype_is="{x}.dtype is {dtype}",
    length="{x}.shape[0]",
    # Two CUDA tensors compare by index (two C++ calls, no torch.device objects:
    # the hot path of the launcher); anything else compares whole devices.
    # get_device() alone would not do: it is -1 for the CPU and for every other
    # non-indexed device (meta, ...).
    same_device="(({x}.is_cuda and {y}.is_cuda and {x}.get_device() == {y}.get_device()) or {x}.device == {y}.device)",
    # An inference tensor's test first: one C++ call for a normal pool. The rule is
    # describe.torch_inference_outside_mode's, inlined: a Python call per check on this path.
    writable="(not {x}.is_inference() or inference_mode()) and torch_writable({x})",
    dtype_object=lambda name: getattr(torch, name),
    namespace={
        "Tensor": torch.Tensor, "strided": torch.strided, "torch_writable": torch_writable, "torch_backed": torch_backed,
        "inference_mode": torch.is_inference_mode_enabled,
    },
)
# The same checks as TorchDynamo traces them: the lazy bits from the dispatch keys (torch_lazy_bit),
# and neither the inference question nor the memory one (the compiled graph asks them when it runs).
COMPILED_DIALECT = dataclasses.replace(
    TORCH_DIALECT,
    storage="({x}.layout is strided and not {x}.is_nested and torch_lazy_bit({x}) is None)",
    writable="torch_writable({x})",
    namespace={**TORCH_DIALECT.namespace, "torch_lazy_bit": torch_lazy_bit},
)


@assume_constant_result
def is_inference(tensor: torch.Tensor) -> bool:
    """``tensor.is_inference()``, which Dynamo refuses to trace: to Dynamo a constant, read from the real tensor.

    Sound: an inference tensor has other dispatch keys than a normal one (no
    ADInplaceOrView, no Autograd), and Dynamo guards each input's. The fake
    Dynamo traces has lost the flag, so Dynamo computes the real tensor to
    ask: for a pool that is the compiled function's input, or a view of one,
    that is the input itself; for a pool that is the result of an in-place
    op of the same function (``pool = buffer.add_(1)``), that op runs once
    more while tracing.
    """
    return tensor.is_inference()


# fast_check(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> bool; True exactly
# when shared_spec.checks.first_error finds nothing.
fast_check = compile_fast_check(TORCH_DIALECT)
# The same under torch.compile, but for an inference pool outside inference mode (see the module docstring).
compiled_fast_check = compile_fast_check(COMPILED_DIALECT)


def _views(values, start_cols) -> dict:
    """The arguments as ``shared_spec.checks`` views: the four, and ``start_cols`` only when it is not None."""
    views = {name: describe(value, frontend=TORCH, written=name == OUTPUT) for name, value in zip(ARGUMENT_NAMES, values)}
    if start_cols is not None:
        views[START_COLS.name] = describe(start_cols, frontend=TORCH, written=False)
    return views


def argument_error(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> Exception | None:
    """The spec's first argument error for these arguments (None: every check passes); raises nothing.

    Plain attribute reads and string formatting, so TorchDynamo traces it too
    (the launcher records the error into a compiled graph; see ``launcher``).
    """
    return first_error(_views((flat_in, offsets, req_pool_indices, pool_out), start_cols))


def adopt_arguments(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> tuple:
    """The slow path: raise the spec's first error, or return the five arguments as torch tensors (``start_cols``
    None stays None).

    Reached when ``fast_check`` is False: either a check fails (raised here with
    the spec's message, nothing written or copied), or some argument is another
    framework's array (a JAX array, a numpy array). Every argument is described
    by ``kv_canary_arrays.describe`` for this frontend; once every check passes,
    the read-only ones become tensors on ``pool_out``'s device
    (``adopt.torch_input``: zero-copy, or one copy where DLPack cannot share
    them) and ``pool_out`` a tensor over its own memory (``adopt.torch_output``).
    A JAX ``pool_out`` fails the writable check: JAX arrays are immutable.
    """
    values = (flat_in, offsets, req_pool_indices, pool_out)
    error = argument_error(*values, start_cols)
    if error is not None:
        raise error
    if all(isinstance(value, torch.Tensor) for value in (*values, start_cols) if value is not None):
        # fast_check and first_error disagree: a bug in this module, never silently ignored.
        raise AssertionError("kv-canary: fast_check rejected arguments that first_error accepts")
    pool = adopt.torch_output(pool_out)
    window = None if start_cols is None else adopt.torch_input(start_cols, pool.device)
    return (*(adopt.torch_input(value, pool.device) for value in values[:3]), pool, window)


def require_memory(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> None:
    """Raise the storage check's ``NO_MEMORY`` error for the first argument whose elements no memory holds.

    The memory part of the storage check alone (``torch_backed``), for a compiled graph's scatter node, which
    runs on real tensors whose storage may have been freed since the graph was traced; ``start_cols`` (None: none)
    after the four, as the checks walk it.
    """
    for name, tensor in zip((*ARGUMENT_NAMES, START_COLS.name), (flat_in, offsets, req_pool_indices, pool_out, start_cols)):
        if tensor is not None and not torch_backed(tensor):
            raise storage_problem_error(name, NO_MEMORY)
