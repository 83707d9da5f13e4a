"""The documented name of the DLPack bridge; it lives in ``kv_canary_arrays.bridge``."""

from kv_canary_arrays.bridge import to_jax, to_torch

__all__ = ["to_jax", "to_torch"]
