"""The single specification of ``scatter_req_token_ids``, free of any framework.

- ``arguments``: the argument table (names, ranks, dtypes).
- ``errors``: exception classes and every message.
- ``checks``: the argument checks in order, and a fast predicate derived from them.
- ``values``: the checked mode's value rules, written once against numpy or jax.numpy.
- ``reference``: the numpy reference of the semantics.
- ``cases``: the conformance cases (``data/conformance.json``), built by ``build_cases``.
- ``conformance``: the harness that runs any backend over the cases.
"""

from shared_spec.arguments import ARGUMENTS, ARGUMENT_NAMES, OP_NAME, START_COLS, Argument, format_shape
from shared_spec.checks import CHECK_ORDER, ArrayView, Dialect, NotAnArray, cells_overlap, compile_fast_check, first_error, first_failure, require_bool, storage_error
from shared_spec.errors import KvCanaryTypeError, KvCanaryValueError
from shared_spec.reference import scatter_reference, segment_lengths, windowed_columns
from shared_spec.values import raise_first_value_error, value_checks
