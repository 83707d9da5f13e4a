"""The spec's argument checks over torch tensors: generated fast predicates, and the exact error where they fail.

- ``scatter_ok(flat_in, offsets, req_pool_indices, pool_out, start_cols=None)`` and ``assign_ok(req_pool_indices,
  req_to_token, start_offset, end_offset, out_cache_loc, batch_size=None)``: True exactly when the spec's checks
  (``shared_spec.checks.first_failure``) find nothing; one expression each, generated from the spec's tables
  through ``DIALECT``. They assume no ``torch.func`` transform is active (the launchers ask first).
- ``scatter_traced_ok``: the same checks as TorchDynamo traces them (``TRACED``): the lazy bits read from the
  dispatch keys, and neither memory nor inference mode asked (a traced graph asks them when it runs).
- ``scatter_failure(...)``: the first failing check and its error, raised by nobody (None: none).
- ``scatter_arguments(...)`` / ``assign_arguments(...)``: the slow path, where the predicate is False or a
  transform is active: raise the spec's first error, or return the arguments as tensors (numpy and JAX arrays
  adopted through DLPack, zero-copy where it shares them, on the output's device) and, for the assignment,
  ``batch_size`` as an int.
"""

from __future__ import annotations

import dataclasses

import torch

from kv_canary_arrays.bridge import torch_input, torch_output
from kv_canary_arrays.describe import describe, torch_backed, torch_lazy_bit, torch_writable
from shared_spec import checks
from shared_spec.checks import ASSIGN, SCATTER, TORCH


DIALECT = checks.Dialect(
    frontend=TORCH,
    # Subclasses take the slow path, which adopts what they are.
    is_array="type({x}) is Tensor",
    # The conjugate bit is left out: only complex tensors have it, and the dtype terms refuse those. A contiguous
    # tensor's extent by its size; any other's by torch_backed. Every argument lies on the output's device, a CUDA
    # or CPU one (else the slow path), where storage of a positive size has an address.
    storage="({x}.layout is strided and not {x}.is_nested and not {x}.is_neg() and ({x}.is_contiguous() and "
            "({x}.storage_offset() + {x}.numel()) * {itemsize} <= {x}.untyped_storage().nbytes() or backed({x})))",
    itemsize="{x}.itemsize",
    has_data="({x}.is_cuda or {x}.is_cpu)",
    rank="{x}.dim()",
    dtype_is="{x}.dtype is {dtype}",
    length="{x}.shape[0]",
    # CUDA tensors compare by index, without making torch.device objects.
    bindings="cuda, device = {y}.is_cuda, {y}.get_device()",
    same_device="(cuda and {x}.get_device() == device and {x}.is_cuda or {x}.device == {y}.device)",
    writable="(not {x}.is_inference() or inference_mode()) and torch_writable({x})",
    dtype_object=lambda name: getattr(torch, name),
    namespace={"Tensor": torch.Tensor, "strided": torch.strided, "backed": torch_backed,
               "torch_writable": torch_writable, "inference_mode": torch.is_inference_mode_enabled},
)
TRACED = dataclasses.replace(
    DIALECT,
    is_array="isinstance({x}, Tensor)",
    storage="({x}.layout is strided and not {x}.is_nested and torch_lazy_bit({x}) is None)",
    has_data="not {x}.is_meta",
    bindings="",
    same_device="{x}.device == {y}.device",
    writable="torch_writable({x})",
    namespace={**DIALECT.namespace, "torch_lazy_bit": torch_lazy_bit},
)
scatter_ok = checks.compile_fast_check(SCATTER, DIALECT)
scatter_traced_ok = checks.compile_fast_check(SCATTER, TRACED)
assign_ok = checks.compile_fast_check(ASSIGN, DIALECT)


def scatter_failure(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> tuple | None:
    """``(check, error)``: the scatter's first failing check and its error (None: none); raises nothing."""
    values = (flat_in, offsets, req_pool_indices, pool_out)
    views = {arg.name: describe(v, TORCH, written=arg.name == SCATTER.output) for arg, v in zip(SCATTER.args, values)}
    if start_cols is not None:
        views["start_cols"] = describe(start_cols, TORCH)
    return checks.first_failure(SCATTER, views, TORCH)


def scatter_arguments(flat_in, offsets, req_pool_indices, pool_out, start_cols=None) -> tuple:
    """Raise the spec's first error, or return the five arguments as tensors (``start_cols`` None stays None)."""
    failure = scatter_failure(flat_in, offsets, req_pool_indices, pool_out, start_cols)
    if failure is not None:
        raise failure[1]
    pool = torch_output(pool_out)
    window = None if start_cols is None else torch_input(start_cols, pool.device)
    return (*(torch_input(v, pool.device) for v in (flat_in, offsets, req_pool_indices)), pool, window)


def assign_arguments(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size) -> tuple:
    """Raise the spec's first error, or return the five arrays as tensors and ``batch_size`` as an int."""
    values = (req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc)
    views = {arg.name: describe(v, TORCH, written=arg.name == ASSIGN.output) for arg, v in zip(ASSIGN.args, values)}
    failure = checks.first_failure(ASSIGN, views, TORCH, batch_size)
    if failure is not None:
        raise failure[1]
    bs = views["req_pool_indices"].shape[0] if batch_size is None else checks.batch_size_value(batch_size)
    table = torch_output(req_to_token)
    return (*(table if v is req_to_token else torch_input(v, table.device) for v in values), bs)
