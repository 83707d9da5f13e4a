"""``check_values`` takes a bool (or ``numpy.bool_``) only: the spec's TypeError, the same in both frontends.

Anything else (``"yes"``, ``1``, ``None``, an array) is refused before
anything is written, with ``errors.NOT_A_BOOL``: a truthy value never switches
the checked mode on by accident.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kv_canary_torch import launch_scatter_req_token_ids_kernel
from shared_spec import errors, require_bool, scatter_reference
from tests.profiles import property_settings
from tests.strategies import sentinel_pool
from tests.torch_support import as_numpy, device_for

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from kv_canary_jax import scatter_req_token_ids  # noqa: E402

# Two requests; the second names row 9 of a 4-row pool: the checked mode refuses it, the plain mode skips it.
FLAT, OFFSETS, ROWS = np.arange(5, dtype=np.int64) + 100, np.array([0, 3, 5], dtype=np.int64), np.array([1, 9], dtype=np.int64)
ROW_ERROR = errors.ROW_OUT_OF_RANGE.format(i=1, row=9, rows=4)
NOT_BOOLS = ["yes", "", 1, 0, 1.0, None, np.int64(1), np.array(True), np.array([True]), torch.tensor(True), [True], (False,)]


def message(value) -> str:
    return errors.NOT_A_BOOL.format(option="check_values", type_name=type(value).__name__)


def torch_call(check_values, backend="torch"):
    """The pool after the torch launcher's call, and the exception it raised (or None)."""
    device = device_for(backend)
    pool = torch.from_numpy(sentinel_pool(4, 6)).to(device)
    try:
        launch_scatter_req_token_ids_kernel(
            flat_in=torch.from_numpy(FLAT).to(device), offsets=torch.from_numpy(OFFSETS).to(device),
            req_pool_indices=torch.from_numpy(ROWS).to(device), pool_out=pool, check_values=check_values, backend=backend,
        )
    except Exception as error:  # compared below
        return as_numpy(pool), error
    return as_numpy(pool), None


def jax_call(check_values, jit=False):
    """The JAX frontend's result (or the untouched pool) and the exception it raised (or None)."""
    pool = jnp.asarray(sentinel_pool(4, 6))
    f = scatter_req_token_ids
    if jit:
        f = jax.jit(f, static_argnames=("implementation", "check_values"))
    try:
        return np.asarray(f(jnp.asarray(FLAT), jnp.asarray(OFFSETS), jnp.asarray(ROWS), pool, implementation="xla", check_values=check_values)), None
    except Exception as error:  # compared below
        return np.asarray(pool), error


@pytest.mark.parametrize("value", NOT_BOOLS, ids=lambda v: type(v).__name__ + repr(v)[:12])
def test_a_non_bool_is_refused_identically_by_both_frontends(value):
    expected = message(value)
    outcomes = {
        "torch/torch": torch_call(value),
        "torch/triton": torch_call(value, backend="triton"),
        "jax/xla": jax_call(value),
    }
    for name, (pool, error) in outcomes.items():
        assert type(error) is errors.KvCanaryTypeError, name
        assert isinstance(error, TypeError)
        assert str(error) == expected, name
        assert np.array_equal(pool, sentinel_pool(4, 6)), f"{name} wrote the pool"


@pytest.mark.parametrize("value", ["yes", 1])
def test_a_non_bool_static_argument_under_jit_is_refused(value):
    _, error = jax_call(value, jit=True)
    assert type(error) is errors.KvCanaryTypeError and str(error) == message(value)


@pytest.mark.parametrize("value", [True, np.True_])
def test_true_and_numpy_true_turn_the_checked_mode_on(value):
    for name, (pool, error) in {"torch": torch_call(value), "jax": jax_call(value)}.items():
        assert type(error) is errors.KvCanaryValueError and str(error) == ROW_ERROR, name
        assert np.array_equal(pool, sentinel_pool(4, 6)), name


@pytest.mark.parametrize("value", [False, np.False_])
def test_false_and_numpy_false_leave_it_off(value):
    expected = scatter_reference(FLAT, OFFSETS, ROWS, sentinel_pool(4, 6))
    for name, (pool, error) in {"torch": torch_call(value), "jax": jax_call(value)}.items():
        assert error is None, name
        assert np.array_equal(pool, expected), name


@property_settings(60, health_checks=True)
@given(
    value=st.one_of(
        st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=4), st.none(),
        st.lists(st.booleans(), max_size=2), st.builds(np.bool_, st.booleans()),
    )
)
def test_require_bool_accepts_exactly_bools(value):
    if isinstance(value, (bool, np.bool_)):
        assert require_bool("check_values", value) is bool(value)
    else:
        with pytest.raises(errors.KvCanaryTypeError) as info:
            require_bool("check_values", value)
        assert str(info.value) == message(value)
