"""``needs_frontends``: skips a test while a frontend's conformance module does not import (checked in a child)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def frontends_load() -> bool:
    script = "import kv_canary_torch.conformance as t, kv_canary_jax.conformance as j; t.runners, j.runners"
    return subprocess.run([sys.executable, "-c", script], capture_output=True).returncode == 0


needs_frontends = pytest.mark.skipif(not frontends_load(), reason="a frontend does not load")
