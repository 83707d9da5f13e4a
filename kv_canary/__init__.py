"""The cross-framework layer: the DLPack bridge, the conformance matrix and the ``kv-canary`` command."""
