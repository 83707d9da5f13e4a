"""The checked mode (``check_values=True``) for torch tensors.

Contract: ``check_values(flat_in, offsets, req_pool_indices, pool_out,
start_cols=None)`` raises the spec's first value violation (``shared_spec.values``,
same rules, same messages; rule 6 only with ``start_cols``) or returns None; it
writes nothing. It copies ``offsets``, ``req_pool_indices`` (and ``start_cols``) to the host, so on CUDA it waits for the stream (a
documented sync: the checked mode is for debugging and tests, not the hot path,
and cannot be captured in a CUDA graph).

Inside ``torch.func`` transforms (``vmap``, ``grad``, ``functionalize``, nested
in any order) the tensors are wrappers without memory of their own: each
is unwrapped (``host_examples``) to the plain tensor beneath, read with the
transforms switched off, and, where ``vmap`` batches it, cut into its
examples. The rules then run per example, in example order (the outermost
``vmap``'s index first, a tensor that one ``vmap`` does not batch repeated
along it), and the first example that breaks one raises that rule's message,
as an eager call with that example's values would. A wrapper this torch cannot
unwrap is the spec's ``errors.CHECK_VALUES_TRANSFORMED``.
"""

from __future__ import annotations

import numpy as np
import torch

from shared_spec import errors
from shared_spec.values import raise_first_value_error


def check_values(flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor, pool_out: torch.Tensor,
                 start_cols: torch.Tensor | None = None) -> None:
    """Raise the first violated value rule of the checked mode (host copy; a sync on CUDA)."""
    n_tokens, n_rows = flat_in.shape[0], pool_out.shape[0]
    if not torch._C._are_functorch_transforms_active():
        window = None if start_cols is None else start_cols.detach().cpu().numpy()
        raise_first_value_error(offsets.detach().cpu().numpy(), req_pool_indices.detach().cpu().numpy(), n_tokens, n_rows,
                                window)
        return
    tensors = {"offsets": offsets, "req_pool_indices": req_pool_indices}
    if start_cols is not None:
        tensors["start_cols"] = start_cols
    examples = host_examples(tensors)
    if start_cols is None:
        examples.append([None] * len(examples[0]))
    for example_offsets, example_rows, example_start_cols in zip(*examples):
        raise_first_value_error(example_offsets, example_rows, n_tokens, n_rows, example_start_cols)


def host_examples(tensors: dict[str, torch.Tensor]) -> list[np.ndarray]:
    """Each 1-D tensor (by argument name) as host arrays of shape ``(examples, length)``, one row per ``vmap`` example.

    The examples are the product of every ``vmap`` level that batches any of
    the tensors, the outermost level's index first; a tensor that a level
    does not batch is repeated along it. Outside ``vmap`` there is one example.
    """
    unwrapped = {name: _unwrap(name, tensor) for name, tensor in tensors.items()}
    levels = sorted({level for _, axes in unwrapped.values() for level in axes if level is not None})
    arrays = []
    for plain, axes in unwrapped.values():
        with torch._C._DisableFuncTorch():  # plain tensor ops, which the active transforms would wrap again
            host = plain.detach().cpu().numpy()
        # axes: the vmap level of each axis of the plain tensor (None: the tensor's own axis)
        present = [level for level in levels if level in axes]
        host = host.transpose([axes.index(level) for level in present] + [axes.index(None)])
        sizes = [host.shape[present.index(level)] if level in axes else 1 for level in levels]
        arrays.append(host.reshape(*sizes, host.shape[-1]))
    batch = np.broadcast_shapes(*(array.shape[:-1] for array in arrays))
    count = int(np.prod(batch, dtype=np.int64))
    return [np.broadcast_to(array, (*batch, array.shape[-1])).reshape(count, array.shape[-1]) for array in arrays]

def _unwrap(name: str, tensor: torch.Tensor) -> tuple[torch.Tensor, list[int | None]]:
    """The plain tensor beneath ``tensor``'s functorch wrappers, and the ``vmap`` level of each of its axes (None: its own)."""
    axes: list[int | None] = [None] * tensor.dim()
    try:
        functorch = torch._C._functorch
        while functorch.is_functorch_wrapped_tensor(tensor) or functorch.is_functionaltensor(tensor):
            if functorch.is_functionaltensor(tensor):
                torch._sync(tensor)  # apply the wrapper's pending updates to the tensor beneath
            elif functorch.is_batchedtensor(tensor):
                axes.insert(functorch.maybe_get_bdim(tensor), functorch.maybe_get_level(tensor))
            elif not functorch.is_gradtrackingtensor(tensor):
                raise TypeError(f"a wrapper of a kind this module does not know ({type(tensor).__name__})")
            tensor = functorch.get_unwrapped(tensor)
    except (AttributeError, RuntimeError, TypeError) as error:  # a torch whose functorch API differs
        raise errors.value_error(errors.CHECK_VALUES_TRANSFORMED, arg=name, error=f"{type(error).__name__}: {error}") from None
    if tensor.dim() != len(axes):
        raise errors.value_error(errors.CHECK_VALUES_TRANSFORMED, arg=name, error=f"unwrapped to {tensor.dim()} axes, not {len(axes)}")
    return tensor, axes
