"""Marking a function's result constant for TorchDynamo without importing TorchDynamo.

Contract: ``assume_constant_result(fn)`` returns ``fn`` marked as ``torch.compiler.assume_constant_result``
marks it: TorchDynamo, meeting ``fn`` while it traces, calls it once and folds its result into the graph as a
constant. Why not torch's own: ``torch.compiler.assume_constant_result`` imports ``torch._dynamo`` (about a second
of a process's start on the CPU machine) only to set one attribute, ``MARKER``, the one Dynamo reads
(``torch._dynamo.decorators.assume_constant_result``, torch 2.11 to 2.13); an eager serving worker never traces,
so the attribute is set here and Dynamo is imported by whoever compiles. tests/torch/test_torch_compile_support.py holds
the compiled behaviour that depends on it, and a test holds ``MARKER`` to what torch's decorator sets.
"""

from __future__ import annotations

MARKER = "_dynamo_marked_constant"


def assume_constant_result(fn):
    """``fn``, marked as ``torch.compiler.assume_constant_result`` marks it (module docstring)."""
    setattr(fn, MARKER, True)
    return fn
