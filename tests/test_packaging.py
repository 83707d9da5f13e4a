"""What a packager reads in pyproject.toml: the install hints' names for its extras.

- Every extra the install hints name (``shared_spec.errors``) exists and installs
  the framework it is named for.
"""

from __future__ import annotations

import pathlib
import re
import tomllib

from shared_spec import errors

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
EXTRAS = PROJECT["optional-dependencies"]


def distribution(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group().lower().replace("_", "-")


def test_the_install_hints_name_extras_that_install_their_frameworks():
    for module, extra in errors.EXTRA.items():
        assert module in {distribution(r) for r in EXTRAS[extra]}, (module, extra)
        assert module in {distribution(r) for r in EXTRAS["cpu"]}, module
    hint = errors.install_hint(["torch", "triton", "jax"])
    assert "pip install 'kv-canary[cpu]'" in hint and "pip install 'kv-canary[torch,jax]'" in hint
    assert "-e" not in hint.split() and "checkout" not in hint  # a wheel user has no checkout
    assert errors.not_installed(["jax"]) == f"jax is not installed; {errors.install_hint(['jax'])}"
    for reason, module in ((errors.TRITON_NOT_INSTALLED, "triton"), (errors.PALLAS_NEEDS_JAX, "jax")):
        assert f"pip install 'kv-canary[{errors.EXTRA[module]}]'" in reason
