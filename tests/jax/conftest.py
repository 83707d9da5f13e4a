"""The JAX tests compute on the host CPU (JAX's default device may be a GPU), except those marked ``gpu``."""

from __future__ import annotations

import jax
import pytest


@pytest.fixture(autouse=True)
def host_default_device(request):
    if request.node.get_closest_marker("gpu"):
        yield
        return
    with jax.default_device(jax.devices("cpu")[0]):
        yield
