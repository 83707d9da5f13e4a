"""The JAX tests compute on the host CPU (JAX's default device may be a GPU), except those marked ``gpu`` and the
contract classes, whose runners place every array themselves (on the GPU where there is one)."""

from __future__ import annotations

import jax
import pytest

from tests.contract import Contract


@pytest.fixture(autouse=True)
def host_default_device(request):
    if request.node.get_closest_marker("gpu") or (request.cls is not None and issubclass(request.cls, Contract)):
        yield
        return
    with jax.default_device(jax.devices("cpu")[0]):
        yield
