"""What this machine can run, for the tools; the answers live in ``kv_canary_arrays.frameworks``."""

from kv_canary_arrays.frameworks import cuda_available, installed

__all__ = ["cuda_available", "installed"]
