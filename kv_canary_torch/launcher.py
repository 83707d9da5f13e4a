"""The public launcher: a drop-in for sglang's ``launch_scatter_req_token_ids_kernel``.

Contract: keyword-only arguments, ``pool_out`` written in place, returns None.
``start_cols`` (default None: sglang's call as it is) makes the call a windowed
write (``shared_spec.reference``: request ``r`` writes from column
``start_cols[r]``). Errors are raised before anything is written, in this order:

1. the argument checks (``checks``: the spec's order and messages; ``start_cols``
   checked after the four when given); JAX and
   numpy arrays are accepted (``kv_canary_arrays``: zero-copy through DLPack,
   one copy of a read-only argument DLPack cannot share), except as
   ``pool_out`` for JAX (immutable);
2. the backend (``backends.resolve``: unknown name, or not runnable here);
3. ``check_values`` is a bool (``shared_spec.checks.require_bool``: ``bool`` or
   ``numpy.bool_``; anything else is the spec's ``TypeError``);
4. the checked mode's value rules when ``check_values=True`` (a host copy of
   ``offsets`` and ``req_pool_indices``: a sync on CUDA; inside ``torch.func``
   transforms per ``vmap`` example, ``values``).

Eager calls go straight to ``op.run``; once a call's argument signature has
passed steps 1 to 3 and launched through the Triton backend, the next eager
calls with that signature and ``check_values=False`` are one C call each
(``launch.dispatch.call_bound``: the same checks' answer, remembered per
signature, and the launch), windowed ones too where ``start_cols`` has unit
stride. The signature is what stays fixed from one serving step to the next
(dtypes, ranks, strides, devices, the pool's shape, the backend, whether and
how ``start_cols`` is given), never ``len(flat_in)`` or ``bs``, so a step whose shapes change
every call takes that path too. Under ``torch.compile`` Dynamo traces
steps 1 to 3 (plain tensor metadata, folded into guards) and records the call
to the ``kv_canary::scatter_req_token_ids`` custom op, which runs step 4 and the
kernel inside the compiled graph: ``fullgraph=True`` holds. An error of steps 1
to 3 is recorded into the graph too (``op.record_error``) and raised, the
spec's exception as it is, when the graph runs, before the kernel; an exception
raised while tracing would reach a ``fullgraph=True`` caller only as the
``__cause__`` of Dynamo's ``Unsupported``. One check of step 1 is decided when
the graph runs, not while tracing: an inference pool outside inference mode
(``op.require_inference_mode``; Dynamo traces with inference mode off and does
not guard it). A message holding a size (a rank's shape, the offsets length, an
overlapping pool's strides) is recorded as its template and fields, the sizes
``SymInt`` arguments of the node, and formatted when the graph runs
(``errors.format_message``, as eager calls format it): with dynamic shapes
(``dynamic=True``, or Dynamo's default recompiling with automatic dynamic
shapes) one graph raises each call's own message. What ``fullgraph=True``
does not support: numpy and JAX arguments (Dynamo cannot trace them; without
``fullgraph`` it breaks the graph there and the call runs eagerly), and
sparse tensors (Dynamo refuses them as graph inputs)
(``tests/torch/test_torch_compile_support.py`` has a test per statement).
"""

from __future__ import annotations

import torch

from kv_canary_torch import backends, op
from kv_canary_torch.checks import adopt_arguments, argument_error, compiled_fast_check, fast_check, is_inference
from kv_canary_torch.launch import dispatch
from shared_spec import errors
from shared_spec.checks import require_bool

_is_compiling = torch.compiler.is_compiling
_run = op.run
_resolve = backends.resolve
_TRITON = backends.TRITON


def launch_scatter_req_token_ids_kernel(
    *,
    flat_in: torch.Tensor,
    offsets: torch.Tensor,
    req_pool_indices: torch.Tensor,
    pool_out: torch.Tensor,
    start_cols: torch.Tensor | None = None,
    check_values: bool = False,
    backend: str = "auto",
) -> None:
    """Write each request's token ids into its row of ``pool_out``.

    For request ``r``: ``pool_out[req_pool_indices[r], j] = int32(flat_in[offsets[r] + j])``
    for ``j < min(offsets[r+1] - offsets[r], C)``, skipping rows outside the
    pool and tokens outside ``flat_in`` (full semantics: ``shared_spec.reference``).
    ``start_cols`` (int64 ``[bs]`` on ``pool_out``'s device, or None): request ``r``
    writes its tokens from column ``start_cols[r]`` instead of 0, columns past ``C`` dropped.
    ``backend``: ``"auto"`` (Triton for CUDA tensors, torch otherwise),
    ``"triton"``, ``"torch"``, or ``"pallas"`` (the JAX frontend's kernel on these
    tensors, for conformance). ``check_values=True`` also enforces the value
    rules of ``shared_spec.values`` (one host sync); it must be a bool.
    """
    if _is_compiling():
        _compiled(flat_in, offsets, req_pool_indices, pool_out, start_cols, check_values, backend)
        return
    signature = None
    if check_values is False:
        signature = dispatch.call_bound(backend, flat_in, offsets, req_pool_indices, pool_out, start_cols)
        if signature is True:
            return
    if not fast_check(flat_in, offsets, req_pool_indices, pool_out, start_cols):
        # A failing check raises here; another framework's arrays come back as tensors.
        flat_in, offsets, req_pool_indices, pool_out, start_cols = adopt_arguments(
            flat_in, offsets, req_pool_indices, pool_out, start_cols
        )
    implementation = _resolve(backend, pool_out, flat_in, offsets, req_pool_indices, start_cols)
    if check_values is not False and check_values is not True:  # two identity tests on the hot path
        check_values = require_bool("check_values", check_values)
    _run(flat_in, offsets, req_pool_indices, pool_out, check_values, implementation, start_cols)
    if implementation == _TRITON and check_values is False:
        dispatch.remember_call(signature, backend, flat_in, offsets, req_pool_indices, pool_out, start_cols)


def _compiled(flat_in, offsets, req_pool_indices, pool_out, start_cols, check_values, backend) -> None:
    """The launcher as TorchDynamo traces it: the same steps, errors recorded into the graph (``op.record_error``).

    Step 1 is ``compiled_fast_check``'s: every argument check but one, the
    inference pool, which only the running graph can decide
    (``op.require_inference_mode``, put in for a pool that is an inference
    tensor; a later error is ordered after it).
    """
    arguments = (flat_in, offsets, req_pool_indices, pool_out, start_cols)
    if not compiled_fast_check(*arguments):
        error = argument_error(*arguments)
        if error is not None:
            op.record_error(error)
            return
        flat_in, offsets, req_pool_indices, pool_out, start_cols = adopt_arguments(*arguments)
    after = None
    if is_inference(pool_out):
        torch.ops.kv_canary.require_inference_mode(pool_out)
        after = pool_out
    try:
        implementation = _resolve(backend, pool_out, flat_in, offsets, req_pool_indices, start_cols)
        check_values = require_bool("check_values", check_values)
    except (errors.KvCanaryTypeError, errors.KvCanaryValueError) as error:  # the spec's backend and flag errors
        op.record_error(error, after)
        return
    torch.ops.kv_canary.scatter_req_token_ids(
        flat_in, offsets, req_pool_indices, pool_out, check_values, implementation, start_cols
    )
