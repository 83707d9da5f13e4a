"""The checked mode (``check_values=True``) on torch tensors: the spec's value rules on a host copy.

``check_values(flat_in, offsets, req_pool_indices, pool_out, start_cols=None)`` raises the first violated rule of
``shared_spec.values`` (rule 6 only with ``start_cols``) or returns; it writes nothing. It copies ``offsets``,
``req_pool_indices`` and ``start_cols`` to the host: on CUDA a sync, so not for CUDA graphs.

Inside ``torch.func`` transforms the tensors are wrappers without memory: each is unwrapped to the plain tensor
beneath, read with the transforms off, and cut into its ``vmap`` examples (the outermost level's index first, a
tensor a level does not batch repeated along it); the rules then run per example, and the first example that
breaks one raises, as an eager call with its values would. A wrapper this torch cannot unwrap is
``errors.CHECK_VALUES_TRANSFORMED``.
"""

from __future__ import annotations

import numpy as np
import torch

from shared_spec import errors
from shared_spec.values import raise_first_value_error


def check_values(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> None:
    """Raise the checked mode's first violation (module docstring)."""
    n_tokens, n_rows = flat_in.shape[0], pool_out.shape[0]
    tensors = {"offsets": offsets, "req_pool_indices": req_pool_indices}
    if start_cols is not None:
        tensors["start_cols"] = start_cols
    if torch._C._are_functorch_transforms_active():
        examples = host_examples(tensors)
    else:
        examples = [t.detach().cpu().numpy()[None] for t in tensors.values()]
    if start_cols is None:
        examples.append([None] * len(examples[0]))
    for example_offsets, example_rows, example_start_cols in zip(*examples):
        raise_first_value_error(example_offsets, example_rows, n_tokens, n_rows, example_start_cols)


def host_examples(tensors: dict) -> list[np.ndarray]:
    """Each 1-D tensor (by name) as a host array of shape ``(examples, length)``, one row per ``vmap`` example."""
    unwrapped = [_unwrap(name, tensor) for name, tensor in tensors.items()]
    levels = sorted({level for _, axes in unwrapped for level in axes if level is not None})
    arrays = []
    for plain, axes in unwrapped:
        with torch._C._DisableFuncTorch():  # plain ops, which the active transforms would wrap again
            host = plain.detach().cpu().numpy()
        present = [level for level in levels if level in axes]  # axes: each axis's vmap level (None: its own)
        host = host.transpose([axes.index(level) for level in present] + [axes.index(None)])
        sizes = [host.shape[present.index(level)] if level in axes else 1 for level in levels]
        arrays.append(host.reshape(*sizes, host.shape[-1]))
    batch = np.broadcast_shapes(*(array.shape[:-1] for array in arrays))
    count = int(np.prod(batch, dtype=np.int64))
    return [np.broadcast_to(array, (*batch, array.shape[-1])).reshape(count, array.shape[-1]) for array in arrays]


def _unwrap(name: str, tensor) -> tuple:
    """The plain tensor beneath ``tensor``'s functorch wrappers, and the ``vmap`` level of each of its axes."""
    axes: list = [None] * tensor.dim()
    try:
        functorch = torch._C._functorch
        while functorch.is_functorch_wrapped_tensor(tensor) or functorch.is_functionaltensor(tensor):
            if functorch.is_functionaltensor(tensor):
                torch._sync(tensor)  # the wrapper's pending updates, applied to the tensor beneath
            elif functorch.is_batchedtensor(tensor):
                axes.insert(functorch.maybe_get_bdim(tensor), functorch.maybe_get_level(tensor))
            elif not functorch.is_gradtrackingtensor(tensor):
                raise TypeError(f"a wrapper of a kind this module does not know ({type(tensor).__name__})")
            tensor = functorch.get_unwrapped(tensor)
    except (AttributeError, RuntimeError, TypeError) as error:  # a torch whose functorch API differs
        raise errors.value_error(errors.CHECK_VALUES_TRANSFORMED, arg=name,
                                 error=f"{type(error).__name__}: {error}") from None
    if tensor.dim() != len(axes):
        raise errors.value_error(errors.CHECK_VALUES_TRANSFORMED, arg=name,
                                 error=f"unwrapped to {tensor.dim()} axes, not {len(axes)}")
    return tensor, axes
