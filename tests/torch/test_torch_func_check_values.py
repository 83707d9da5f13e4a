"""The checked mode inside ``torch.func`` transforms: the value rules run per example.

``kv_canary_torch.values.check_values`` under ``vmap`` (single and nested, any
batch dimension, ``offsets`` and ``req_pool_indices`` batched by the same or by
different levels) raises exactly what ``shared_spec.values`` raises for the
first example that breaks a rule, in example order (outermost ``vmap`` first),
and passes when every example is valid; ``grad`` and ``functionalize`` wrappers
are read as the values they hold. Through the launcher an invalid batched value
is the spec's error before anything is written.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kv_canary_torch import launch_scatter_req_token_ids_kernel
from kv_canary_torch.values import check_values
from shared_spec import errors, scatter_reference
from shared_spec.values import raise_first_value_error
from tests.profiles import property_settings
from tests.strategies import sentinel_pool

N_TOKENS, N_ROWS = 12, 5
FLAT_IN = torch.arange(100, 100 + N_TOKENS)
POOL = torch.zeros((N_ROWS, 3), dtype=torch.int32)


@st.composite
def example_values(draw, examples: int, bs: int):
    """``examples`` pairs of (offsets, rows), each valid or broken, as int64 arrays."""
    values = []
    for _ in range(examples):
        if draw(st.booleans()):  # valid: sorted offsets within flat_in, distinct rows
            offsets = np.sort(np.array(draw(st.lists(st.integers(0, N_TOKENS), min_size=bs + 1, max_size=bs + 1))))
            rows = np.array(draw(st.permutations(range(N_ROWS)))[:bs])
        else:
            offsets = np.array(draw(st.lists(st.integers(-2, N_TOKENS + 2), min_size=bs + 1, max_size=bs + 1)))
            rows = np.array(draw(st.lists(st.integers(-1, N_ROWS), min_size=bs, max_size=bs)))
        values.append((offsets.astype(np.int64), rows.astype(np.int64)))
    return values


def _first_violation(pairs) -> str | None:
    for offsets, rows in pairs:
        try:
            raise_first_value_error(offsets, rows, N_TOKENS, N_ROWS)
        except errors.KvCanaryValueError as error:
            return str(error)
    return None


def _raised(call) -> str | None:
    try:
        call()
    except errors.KvCanaryValueError as error:
        return str(error)
    return None


def _check(offsets, rows):
    check_values(FLAT_IN, offsets, rows, POOL)
    return offsets.sum() + rows.sum()


def _stack(arrays, dim):
    return torch.stack([torch.from_numpy(a) for a in arrays], dim=dim)


@property_settings(60)
@given(data=st.data(), examples=st.integers(1, 4), bs=st.integers(0, 4), dims=st.tuples(st.integers(0, 1), st.integers(0, 1)))
def test_under_vmap_the_first_example_that_breaks_a_rule_raises_its_message(data, examples, bs, dims):
    pairs = data.draw(example_values(examples, bs))
    batched = data.draw(st.sampled_from(["both", "offsets", "rows"]))
    offsets = _stack([o for o, _ in pairs], dims[0]) if batched != "rows" else torch.from_numpy(pairs[0][0])
    rows = _stack([r for _, r in pairs], dims[1]) if batched != "offsets" else torch.from_numpy(pairs[0][1])
    in_dims = (dims[0] if batched != "rows" else None, dims[1] if batched != "offsets" else None)
    if batched != "both":  # the unbatched one is the same in every example
        pairs = [(o if batched == "offsets" else pairs[0][0], r if batched == "rows" else pairs[0][1]) for o, r in pairs]
    assert _raised(lambda: torch.func.vmap(_check, in_dims=in_dims)(offsets, rows)) == _first_violation(pairs)


@property_settings(40)
@given(data=st.data(), outer=st.integers(1, 3), inner=st.integers(1, 3), bs=st.integers(0, 3), split=st.booleans())
def test_under_nested_vmap_examples_run_outermost_first(data, outer, inner, bs, split):
    """split: offsets batched by the outer vmap only, rows by the inner one only (each repeated along the other)."""
    if split:
        offsets_pairs = data.draw(example_values(outer, bs))
        rows_pairs = data.draw(example_values(inner, bs))
        offsets = _stack([o for o, _ in offsets_pairs], 0)
        rows = _stack([r for _, r in rows_pairs], 0)
        pairs = [(o, r) for o, _ in offsets_pairs for _, r in rows_pairs]
        call = torch.func.vmap(lambda o: torch.func.vmap(lambda r: _check(o, r))(rows))
        assert _raised(lambda: call(offsets)) == _first_violation(pairs)
        return
    pairs = data.draw(example_values(outer * inner, bs))
    offsets = _stack([o for o, _ in pairs], 0).reshape(outer, inner, bs + 1).transpose(0, 1)  # inner-major memory, outer-first examples
    rows = _stack([r for _, r in pairs], 0).reshape(outer, inner, bs)
    call = torch.func.vmap(torch.func.vmap(_check), in_dims=(1, 0))
    assert _raised(lambda: call(offsets, rows)) == _first_violation(pairs)


def test_grad_and_functionalize_wrappers_are_read_as_their_values():
    offsets, rows = torch.tensor([0, 3, 10, 12]), torch.tensor([2, 0, 2])
    message = errors.ROW_REPEATED.format(j=2, row=2, i=0)
    assert _raised(lambda: torch.func.grad(lambda x: (_check(offsets, rows), x.sum())[1])(torch.ones(2))) == message
    assert _raised(lambda: torch.func.functionalize(_check)(offsets.clone(), rows.clone())) == message
    # functionalize's wrappers after an in-place update: the value as updated
    def updated(o, r):
        o.add_(1)
        return _check(o, r)

    with pytest.raises(errors.KvCanaryValueError) as raised:
        torch.func.functionalize(updated)(torch.tensor([-1, 3, 13]), torch.tensor([0, 1]))
    assert str(raised.value) == errors.OFFSETS_END.format(n=N_TOKENS, value=14)
    assert _raised(lambda: torch.func.functionalize(_check)(torch.tensor([0, 3, 12]), torch.tensor([0, 1]))) is None


def test_through_the_launcher_a_batched_bad_value_is_the_specs_error_and_nothing_is_written():
    flat, rows = torch.arange(100, 112), torch.tensor([2, 0, 3])
    offsets = torch.tensor([[0, 3, 10, 12], [0, 3, 10, 13]])
    pools = torch.from_numpy(np.stack([sentinel_pool(4, 5, seed=s) for s in (1, 2)]))
    before = pools.clone()

    def one(o, pool):
        launch_scatter_req_token_ids_kernel(flat_in=flat, offsets=o, req_pool_indices=rows, pool_out=pool, check_values=True)
        return pool

    with pytest.raises(errors.KvCanaryValueError) as raised:
        torch.func.vmap(one)(offsets, pools)
    assert str(raised.value) == errors.OFFSETS_END.format(n=12, value=13)
    assert torch.equal(pools, before)


def test_vmap_over_the_pool_alone_checks_once_and_writes_every_pool():
    flat, offsets, rows = torch.arange(100, 112), torch.tensor([0, 3, 10, 12]), torch.tensor([2, 0, 3])
    pools = torch.from_numpy(np.stack([sentinel_pool(4, 5, seed=s) for s in (1, 2)]))
    expected = [scatter_reference(flat.numpy(), offsets.numpy(), rows.numpy(), p.numpy()) for p in pools]

    def one(pool, r):
        launch_scatter_req_token_ids_kernel(flat_in=flat, offsets=offsets, req_pool_indices=r, pool_out=pool, check_values=True)
        return pool

    torch.func.vmap(one, in_dims=(0, None))(pools, rows)
    np.testing.assert_array_equal(pools.numpy(), np.stack(expected))
    with pytest.raises(errors.KvCanaryValueError) as raised:
        torch.func.vmap(one, in_dims=(0, None))(pools.clone(), torch.tensor([2, 0, 4]))
    assert str(raised.value) == errors.ROW_OUT_OF_RANGE.format(i=2, row=4, rows=4)


def test_a_wrapper_this_torch_cannot_unwrap_is_the_specs_error(monkeypatch):
    monkeypatch.delattr(torch._C._functorch, "get_unwrapped")
    offsets, rows = torch.tensor([[0, 3, 12]]), torch.tensor([0, 1])
    with pytest.raises(errors.KvCanaryValueError) as raised:
        torch.func.vmap(_check, in_dims=(0, None))(offsets, rows)
    assert str(raised.value).startswith(errors.CHECK_VALUES_TRANSFORMED.split("({error})")[0].format(arg="offsets"))
