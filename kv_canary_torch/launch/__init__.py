"""The Triton backend's launch machinery: what runs between the launcher's checks and the driver.

- ``plan``: the launch rule (kernel, launch shape, grid, ints) from shapes and strides, a pure function,
  and its numbers (``Rule``), written once; the assignment kernel's grid (``assign_grid``), which
  ``assign_kernel`` launches with;
- ``dispatch``: each launch through Triton, the kernels remembered per variant, and the call path that
  takes a remembered call whole in C++;
- ``native`` (``native.cpp``): the native piece (tensor reader, rule, launch; one op descriptor each for
  the scatter and the assignment), and how it is built;
- ``build``: ``python -m kv_canary_torch.launch.build`` builds the native piece ahead of its first use.

The rest of ``kv_canary_torch`` reads as the op, the checks and the kernels; only ``dispatch`` is
called from there (``op``, ``launcher``, ``backends``, ``assign``).
"""
