"""The single specification of ``scatter_req_token_ids`` and ``assign_req_to_token_pool``, free of any framework.

- ``errors``: exception classes and every message.
- ``checks``: both operations' argument tables, their checks in order, and a fast predicate generated from them.
- ``reference``: the semantics: the window rule every implementation computes, and the numpy reference.
- ``values``: the checked mode's value rules, written once against numpy or jax.numpy.
- ``arg_specs``: the one source of inputs: named workloads and shapes for benchmarks, property tests and probes.
- ``cases``: the conformance cases (``data/conformance.json``, written by ``build_cases``); ``conformance``: the
  harness that runs any backend over them.
"""
