"""The operation behind the launcher: one implementation function and its torch.library op.

Contract: ``run(flat_in, offsets, req_pool_indices, pool_out, check_values,
implementation, start_cols=None)`` runs the checked mode when asked (which raises before
anything is written) and then the named implementation (``"triton"``,
``"torch"`` or ``"pallas"``, already resolved by ``backends.resolve``), writing ``pool_out``
in place. The argument checks have passed. Each implementation takes
``(flat_in, offsets, req_pool_indices, pool_out, start_cols)``.

``scatter_req_token_ids`` is the same function registered as the custom op
``kv_canary::scatter_req_token_ids`` (mutates ``pool_out``, returns nothing;
``start_cols`` a ``Tensor?``, last),
with a fake implementation that does nothing, so ``torch.compile`` keeps the
call in its graph as one opaque node (no graph break). The launcher calls
``run`` directly in eager mode -- custom-op dispatch costs host microseconds --
and the op only while compiling. ``record_error`` puts an argument error into
a compiled graph through a second op, ``kv_canary::raise_error``, so that the
spec's exception reaches a ``fullgraph=True`` caller as it is, its message
formatted when the graph runs (a size in it is symbolic under dynamic shapes);
``require_inference_mode`` puts in a third, ``kv_canary::require_inference_mode``,
which refuses an inference pool when the graph runs outside inference mode
(the one check Dynamo cannot decide while tracing).

Threads: Triton's interpreter (``TRITON_INTERPRET=1``, the CPU) keeps the
launch in progress -- its grid index, and the patches it makes to
``triton.language`` -- in module globals, so two threads' interpreted
launches corrupt each other (InterpreterErrors, pools left half written,
unwritten rows). Interpreted launches therefore run one at a time, under one
process-wide lock (``launch.dispatch.INTERPRETER_LOCK``, taken where the
interpreted kernel is launched); the compiled kernel (CUDA) never takes it.
Every other implementation is safe to call from several threads at once.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from kv_canary_torch import pallas_backend, torch_backend
from kv_canary_torch.checks import require_memory
from kv_canary_torch.launch import dispatch
from shared_spec import errors
from kv_canary_torch.values import check_values as _check_values

OP_QUALNAME = "kv_canary::scatter_req_token_ids"
ERROR_QUALNAME = "kv_canary::raise_error"
INFERENCE_QUALNAME = "kv_canary::require_inference_mode"
# The exception classes a recorded error may have (raise_error refuses any other name).
_ERROR_CLASSES = {cls.__name__: cls for cls in (errors.KvCanaryTypeError, errors.KvCanaryValueError)}

# implementation name -> function(flat_in, offsets, req_pool_indices, pool_out, start_cols)
IMPLEMENTATIONS = {"triton": dispatch.launch, "torch": torch_backend.scatter, "pallas": pallas_backend.scatter}


def run(flat_in, offsets, req_pool_indices, pool_out, check_values: bool, implementation: str, start_cols=None) -> None:
    """Checked mode (optional), then the implementation; see the module docstring."""
    if check_values:
        _check_values(flat_in, offsets, req_pool_indices, pool_out, start_cols)
    IMPLEMENTATIONS[implementation](flat_in, offsets, req_pool_indices, pool_out, start_cols)


@torch.library.custom_op(OP_QUALNAME, mutates_args={"pool_out"})
def scatter_req_token_ids(
    flat_in: torch.Tensor,
    offsets: torch.Tensor,
    req_pool_indices: torch.Tensor,
    pool_out: torch.Tensor,
    check_values: bool,
    implementation: str,
    start_cols: Optional[torch.Tensor] = None,
) -> None:
    """``run`` as a torch.library op (what compiled graphs call), after the memory part of the storage check.

    A traced graph cannot guard whether memory still holds the tensors (``checks.require_memory``), so the node asks
    each time it runs; the eager launcher's checks have asked it already and call ``run`` directly.
    """
    require_memory(flat_in, offsets, req_pool_indices, pool_out, start_cols)
    run(flat_in, offsets, req_pool_indices, pool_out, check_values, implementation, start_cols)


@scatter_req_token_ids.register_fake
def _(flat_in, offsets, req_pool_indices, pool_out, check_values, implementation, start_cols=None) -> None:
    # Writes pool_out in place and returns nothing: no output metadata to describe.
    return None


# The schema spelled out: torch.library cannot infer a list of str from annotations.
@torch.library.custom_op(
    ERROR_QUALNAME, mutates_args=(), schema="(str kind, str text, str[] fields, SymInt[] sizes, Tensor? after) -> ()"
)
def raise_error(kind: str, text: str, fields: Sequence[str], sizes: Sequence[int], after: Optional[torch.Tensor]) -> None:
    """Raise the spec's exception ``kind`` when a compiled graph runs this node.

    With ``fields`` empty, ``text`` is the message as it is; otherwise it is
    the message's template, and ``fields`` and ``sizes`` its fields
    (``encode_fields``): the sizes are the graph's, symbolic while it is
    traced (dynamic shapes), so the message is formatted here, by
    ``errors.format_message``, with the sizes of the call that runs.

    Registered as an ordered side effect (below), so the graph keeps the node
    although nothing uses its result, without a tensor to hang it on: the
    call's tensors may be ones a graph cannot take as a mutated operand
    (overlapping, on meta, with no tensor at all). ``after``, a tensor the
    node reads, orders it after that tensor's earlier writers in the graph
    (``require_inference_mode``'s, for an inference pool); None otherwise.
    """
    if not fields:
        raise _ERROR_CLASSES[kind](text)
    raise errors.spec_error(_ERROR_CLASSES[kind], text, decode_fields(list(fields), [int(size) for size in sizes]))


@raise_error.register_fake
def _(kind, text, fields, sizes, after) -> None:
    return None


# encode_fields' tags: how each field of a message travels through raise_error's schema.
_STR, _INT, _TUPLE, _MESSAGE = "str", "int", "tuple", "message"


def encode_fields(fields, names: list, sizes: list) -> bool:
    """Append ``fields`` (a spec message's) to ``names`` (str tokens) and ``sizes`` (ints); False for a field of another kind.

    A str field is three tokens (name, tag, value), an int one two and a size;
    a tuple of ints (a shape, strides) three and its sizes; an
    ``errors.Message`` four (name, tag, template, field count) and its fields.
    TorchDynamo traces this with the sizes symbolic: an int here may be a
    SymInt (Dynamo answers ``type(size) is int`` for one), which the schema's
    ``SymInt[]`` keeps symbolic. Any other field (a ``backend=`` object of
    some other type) holds no size: its message is constant while tracing.
    """
    for name, value in fields.items():
        if isinstance(value, errors.Message):
            names += [name, _MESSAGE, value.template, str(len(value.fields))]
            if not encode_fields(value.fields, names, sizes):
                return False
        elif isinstance(value, tuple) and all(type(size) is int for size in value):
            names += [name, _TUPLE, str(len(value))]
            sizes += list(value)
        elif type(value) is int:
            names += [name, _INT]
            sizes.append(value)
        elif type(value) is str:
            names += [name, _STR, "{}".format(value)]  # a constant: Dynamo may hold a name it read (type(x).__name__) lazily
        else:
            return False
    return True


def decode_fields(names: list, sizes: list, count: int | None = None) -> dict:
    """The fields ``encode_fields`` wrote (consuming ``names`` and ``sizes`` from the front); ``count``: how many, None for all."""
    fields = {}
    while names and (count is None or len(fields) < count):
        name, tag = names.pop(0), names.pop(0)
        if tag == _STR:
            fields[name] = names.pop(0)
        elif tag == _INT:
            fields[name] = sizes.pop(0)
        elif tag == _TUPLE:
            length = int(names.pop(0))
            fields[name] = tuple(sizes[:length])
            del sizes[:length]
        else:
            template, length = names.pop(0), int(names.pop(0))
            fields[name] = errors.Message(template, decode_fields(names, sizes, length))
    return fields


def _register_side_effect(op) -> bool:
    """Mark ``op`` an ordered side effect, so graph passes keep it and keep its order; False where this torch cannot.

    ``torch._higher_order_ops.effects`` is private; it has held this function,
    taking an OpOverload, for many releases (torch registers its own print op
    through it), and where it no longer does, errors are raised while tracing.
    """
    try:
        from torch._higher_order_ops.effects import _EffectType, _register_effectful_op

        _register_effectful_op(op._opoverload, _EffectType.ORDERED)
    except (ImportError, AttributeError, TypeError, AssertionError):  # pragma: no cover - a torch that moved it
        return False
    return True


# Whether raise_error survives into a compiled graph; where it cannot, record_error raises while tracing.
ERRORS_IN_GRAPH = _register_side_effect(raise_error)


def record_error(error: Exception, after: torch.Tensor | None = None) -> None:
    """Under ``torch.compile``: put ``error`` into the graph, to be raised when the graph runs.

    An exception raised while Dynamo traces reaches a ``fullgraph=True`` caller
    as Dynamo's own ``Unsupported`` (the spec's exception only its
    ``__cause__``); one raised by a graph node reaches the caller as it is
    (``after``: see ``raise_error``). Where this torch cannot keep the node
    (``ERRORS_IN_GRAPH`` False), the error is raised now, while tracing.
    """
    if not ERRORS_IN_GRAPH:
        raise error
    names: list[str] = []
    sizes: list = []
    if hasattr(error, "template") and encode_fields(error.fields, names, sizes):
        # the template and fields: a size may be symbolic (dynamic shapes), formatted when the graph runs
        torch.ops.kv_canary.raise_error(type(error).__name__, error.template, names, sizes, after)
    else:
        # the message as the exception holds it (constant): Dynamo (torch 2.11) cannot trace str() of an exception class
        torch.ops.kv_canary.raise_error(type(error).__name__, error.args[0], [], [], after)


@torch.library.custom_op(INFERENCE_QUALNAME, mutates_args={"pool_out"})
def require_inference_mode(pool_out: torch.Tensor) -> None:
    """Raise the spec's ``errors.WRITE_INFERENCE`` unless inference mode is on when the graph runs; writes nothing.

    The launcher's compiled path puts this node before the scatter for a pool
    that was an inference tensor when traced (Dynamo traces with inference
    mode off and does not guard it, so only the running graph can tell).
    ``pool_out`` is declared mutated only so that the node stays in the graph,
    ahead of the scatter that writes the same pool.
    """
    if not torch.is_inference_mode_enabled():
        raise errors.value_error(errors.NOT_WRITABLE, reason=errors.WRITE_INFERENCE)


@require_inference_mode.register_fake
def _(pool_out) -> None:
    return None
