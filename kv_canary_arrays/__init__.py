"""The framework-neutral array layer, between ``shared_spec`` and the two frontends.

It imports torch, JAX and numpy only inside functions, when asked about an array of theirs, and nothing of this
project but ``shared_spec``.

- ``frameworks``: which framework an object belongs to, what this machine has installed.
- ``describe``: any argument as the spec's checks see it (``ArrayView`` or ``NotAnArray``), and device names.
- ``bridge``: zero-copy moves between torch and JAX through DLPack, and checked arguments as a frontend's arrays.
"""
