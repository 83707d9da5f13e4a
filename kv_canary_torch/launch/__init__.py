"""The Triton backend's launch machinery: what runs between the launcher's checks and the driver.

- ``plan``: the launch rule (kernel, launch shape, grid, ints) from shapes and strides, a pure function;
- ``dispatch``: each launch, the kernels remembered per variant, and the call path that takes a
  remembered call whole in C;
- ``native`` (``native.c``): the C launcher and the call path, built on first use (and how a native piece is built);
- ``tensor_meta`` (``tensor_meta.cpp``): the C++ reader of a tensor's metadata the call path keys on;
- ``build``: ``python -m kv_canary_torch.launch.build`` builds both native pieces ahead of their first use.

The rest of ``kv_canary_torch`` reads as the op, the checks and the kernels; only ``dispatch`` is
called from there (``op``, ``launcher``, ``backends``).
"""
