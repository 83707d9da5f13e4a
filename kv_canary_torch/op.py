"""The launcher under ``torch.compile``: the operation as a ``torch.library`` op, and argument errors in the graph.

``kv_canary::scatter_req_token_ids`` is ``scatter.scatter`` as a custom op (mutates ``pool_out``, returns nothing,
a fake that does nothing), so a compiled graph keeps the call as one node: ``fullgraph=True`` holds. When the graph
runs, the node runs the eager operation whole, checks included, so what only real tensors can tell (freed storage,
a backend's name, the checked mode) is raised there as eager calls raise it. One thing the node cannot see: the
graph may hand it a copy of an inference pool, so ``inference_pool`` (read from the real pool while tracing;
Dynamo guards on its dispatch keys) tells it to refuse the call outside inference mode. The launcher calls the op
only while TorchDynamo traces; eager calls skip its dispatch.

``traced(...)`` is the launcher as Dynamo traces it: the checks tensor metadata decides
(``checks.scatter_traced_ok``, which Dynamo guards), and where one fails, ``kv_canary::argument_error`` instead of
the op, which raises the spec's exception itself when the graph runs (an exception raised while tracing would
reach a ``fullgraph=True`` caller as Dynamo's ``Unsupported``, with only a string of it as its cause). That node
takes the tensors and formats the message from the real ones (a size may be symbolic while tracing); where the
first failure is an argument that is no tensor, a storage problem, a ``backend`` that is no str or a
``check_values`` that is no bool, the message is a constant of the trace.
"""

from __future__ import annotations

from typing import List, Optional

import torch

from kv_canary_torch import backends, checks
from kv_canary_torch.scatter import scatter
from shared_spec import errors
from shared_spec.checks import require_bool

_KINDS = {cls.__name__: cls for cls in (errors.KvCanaryTypeError, errors.KvCanaryValueError)}


@torch.library.custom_op("kv_canary::scatter_req_token_ids", mutates_args={"pool_out"})
def scatter_op(flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor, pool_out: torch.Tensor,
               start_cols: Optional[torch.Tensor], check_values: bool, backend: str, inference_pool: bool) -> None:
    """``scatter.scatter``, refusing a pool traced as an inference tensor outside inference mode."""
    if inference_pool and not torch.is_inference_mode_enabled():
        failure = checks.scatter_failure(flat_in, offsets, req_pool_indices, pool_out, start_cols)
        raise errors.value_error(errors.NOT_WRITABLE, reason=errors.WRITE_INFERENCE) if failure is None else failure[1]
    scatter(flat_in, offsets, req_pool_indices, pool_out, start_cols, check_values, backend)


@scatter_op.register_fake
def _(flat_in, offsets, req_pool_indices, pool_out, start_cols, check_values, backend, inference_pool) -> None:
    return None


@torch.library.custom_op("kv_canary::argument_error", mutates_args=())
def argument_error_op(arguments: List[torch.Tensor], kind: str, message: str) -> None:
    """Raise the spec's error of ``arguments`` (the four tensors and ``start_cols`` where given; empty: none to
    read), else ``kind(message)``."""
    failure = checks.scatter_failure(*arguments) if arguments else None
    raise _KINDS[kind](message) if failure is None else failure[1]


@argument_error_op.register_fake
def _(arguments, kind, message) -> None:
    return None


def _keep(op) -> bool:
    """Mark ``op`` an ordered side effect, so that graph passes keep it although nothing uses its result; False
    where this torch's private API for it moved (errors are then raised while tracing)."""
    try:
        from torch._higher_order_ops.effects import _EffectType, _register_effectful_op

        _register_effectful_op(op._opoverload, _EffectType.ORDERED)
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - a torch that moved it
        return False
    return True


ERRORS_IN_GRAPH = _keep(argument_error_op)


def _is_inference(tensor) -> bool:
    return tensor.is_inference()


# torch.compiler.assume_constant_result's mark, set without importing TorchDynamo (seconds of an eager worker's
# start): Dynamo calls the function on the real tensor while tracing and folds its answer into the graph.
_is_inference._dynamo_marked_constant = True


def traced(flat_in, offsets, req_pool_indices, pool_out, start_cols, check_values, backend) -> None:
    """The launcher as TorchDynamo traces it (module docstring)."""
    arguments = (flat_in, offsets, req_pool_indices, pool_out, start_cols)
    if type(backend) is str and type(check_values) is bool and checks.scatter_traced_ok(*arguments):
        torch.ops.kv_canary.scatter_req_token_ids(*arguments, check_values, backend, _is_inference(pool_out))
        return
    failure = checks.scatter_failure(*arguments)
    if failure is None and not isinstance(backend, str):
        failure = ("backend", errors.choice_error("backend", backend, backends.BACKENDS))
    if failure is None:
        try:
            check_values = require_bool("check_values", check_values)
        except errors.KvCanaryTypeError as error:
            failure = ("check_values", error)
    if failure is None:  # a str subclass as backend: the op takes a str
        torch.ops.kv_canary.scatter_req_token_ids(*arguments, check_values, str(backend), _is_inference(pool_out))
        return
    check, error = failure
    if not ERRORS_IN_GRAPH:
        raise error
    if check in ("array", "storage", "backend", "check_values"):
        torch.ops.kv_canary.argument_error([], type(error).__name__, error.args[0])
    else:  # tensors that a graph can take: their message is formatted from the real ones when the graph runs
        given = list(arguments[:4]) + ([start_cols] if start_cols is not None else [])
        torch.ops.kv_canary.argument_error(given, type(error).__name__, error.template)
