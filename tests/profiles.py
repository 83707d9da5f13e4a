"""Hypothesis profiles of the test suite: ``default`` for every run, ``thorough`` one flag away.

Contract: importing this module registers both profiles and loads
``thorough`` when the environment says ``KV_CANARY_THOROUGH=1``, else
``default`` (tests/conftest.py imports it before any test module, so the
counts below are final when the tests are defined). ``pytest
--hypothesis-profile=thorough`` (Hypothesis' own option, applied after the
conftest) selects it too, and wins over the variable.

A property states its example count for the default profile with
``property_settings(n)``; the loaded profile scales it by its
``max_examples`` over the default profile's (``thorough``: 10x). The default
counts are sized to each property's cost per example (an interpreted kernel
recompiles for every new shape, so its properties get few examples; pure
numpy ones get hundreds), and the thorough counts are at least what every
property ran before the profiles existed. Properties that state no count get
the profile's ``max_examples`` directly. Neither profile narrows a strategy:
only how many examples are drawn changes.

Both profiles have no deadline (interpreted kernels and first compiles take
seconds on one example) and print the reproducing blob of a failure.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

DEFAULT, THOROUGH = "default", "thorough"
# Environment variable that selects the thorough profile ("1"; "0" or unset: default).
THOROUGH_VARIABLE = "KV_CANARY_THOROUGH"
DEFAULT_EXAMPLES = 25
THOROUGH_FACTOR = 10

settings.register_profile(DEFAULT, max_examples=DEFAULT_EXAMPLES, deadline=None, print_blob=True)
settings.register_profile(THOROUGH, max_examples=DEFAULT_EXAMPLES * THOROUGH_FACTOR, deadline=None, print_blob=True)
settings.load_profile(THOROUGH if os.environ.get(THOROUGH_VARIABLE, "") not in ("", "0") else DEFAULT)


def scaled(examples: int) -> int:
    """``examples`` (the default profile's count) scaled to the loaded profile."""
    return max(1, round(examples * settings.default.max_examples / DEFAULT_EXAMPLES))


def property_settings(examples: int, *, health_checks: bool = False, **overrides) -> settings:
    """Settings for a property: ``scaled(examples)`` examples; ``overrides`` pass any other setting.

    Hypothesis' health checks are off unless ``health_checks``: the timing
    ones (too_slow, data_too_large on big batches) fire on interpreted
    kernels and first compiles for reasons that are not bugs.
    """
    suppressed = [] if health_checks else list(HealthCheck)
    return settings(max_examples=scaled(examples), suppress_health_check=suppressed, **overrides)
