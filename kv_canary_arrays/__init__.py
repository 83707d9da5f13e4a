"""kv-canary's framework-neutral array layer, between ``shared_spec`` and the two frontends.

It knows torch, JAX and numpy, and imports each only when asked about an array
of it (inside functions), so importing it starts no framework. It imports
nothing of this project but ``shared_spec``. Modules, one purpose each:

- ``frameworks``: which framework an object belongs to, and what this machine
  has installed (``installed``, ``cuda_available``).
- ``devices``: canonical device names (``cpu``, ``cuda:0``) of torch tensors and
  JAX devices, and the JAX device questions both frontends ask.
- ``describe``: any argument as the spec's checks see it (``ArrayView`` or
  ``NotAnArray``: shape, canonical dtype name, device, why it cannot be written
  in place), for the frontend that will compute with it.
- ``bridge``: zero-copy moves between torch and JAX through DLPack, refusing
  (never silently doing) a copy or a cast.
- ``adopt``: an argument that passed the checks as the frontend's own array:
  zero-copy where possible, one copy where not.
"""
