"""The tools on top of both frontends: the conformance matrix, the ``kv-canary`` command, the benchmark.

``kv_canary.bridge`` (the DLPack bridge's documented name) and ``kv_canary.platform``
re-export ``kv_canary_arrays``; nothing below the tools imports this package.
"""
