"""The launcher inside ``torch.func`` transforms: the torch backend runs there ("auto" picks it), the kernels are
refused, and the checked mode runs its rules per ``vmap`` example."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from kv_canary_torch import assign_req_to_token_pool_func, launch_scatter_req_token_ids_kernel
from shared_spec import errors
from shared_spec.reference import scatter_reference
from shared_spec.values import raise_first_value_error
from tests.contract import examples
from tests.torch_support import P, sentinel

N_TOKENS, N_ROWS = 12, 5
FLAT_IN = torch.arange(100, 100 + N_TOKENS)


def scatter_into(pool, offsets, rows, check_values=False, backend="auto", flat_in=FLAT_IN):
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool,
                                        check_values=check_values, backend=backend)
    return pool


def test_vmap_over_pools_and_tokens_writes_every_example():
    offsets, rows = torch.tensor([0, 3, 7]), torch.tensor([4, 1])
    pools = torch.stack([sentinel(N_ROWS, 6, seed=s) for s in (1, 2, 3)])
    tokens = torch.stack([FLAT_IN + 1000 * k for k in range(3)])
    expected = [scatter_reference(t.numpy(), offsets.numpy(), rows.numpy(), p.numpy()) for t, p in zip(tokens, pools)]
    out = torch.func.vmap(lambda p, t: scatter_into(p, offsets, rows, flat_in=t, check_values=True))(pools, tokens)
    np.testing.assert_array_equal(out.numpy(), np.stack(expected))
    np.testing.assert_array_equal(pools.numpy(), np.stack(expected))


def test_grad_flows_around_the_write():
    offsets, rows = torch.tensor([0, 2, 5]), torch.tensor([0, 3])

    def loss(x):
        pool = sentinel(N_ROWS, 6)
        scatter_into(pool, offsets, rows)
        return (x * pool.to(x.dtype)).sum()

    grad = torch.func.grad(loss)(torch.ones(N_ROWS, 6))
    expected = scatter_reference(FLAT_IN.numpy(), offsets.numpy(), rows.numpy(), sentinel(N_ROWS, 6).numpy())
    np.testing.assert_array_equal(grad.numpy(), expected.astype(np.float32))


def test_the_kernels_are_refused_and_batched_segments_too():
    pools = torch.stack([sentinel(N_ROWS, 6, seed=s) for s in (1, 2)])
    before = pools.clone()
    offsets, rows = torch.tensor([0, 2, 5]), torch.tensor([0, 3])
    with pytest.raises(errors.KvCanaryValueError) as raised:
        torch.func.vmap(lambda p: scatter_into(p, offsets, rows, backend="triton"))(pools)
    assert str(raised.value) == f"{P} backend 'triton' cannot run here: {errors.TORCH_FUNC_TRANSFORMED}"
    with pytest.raises(errors.KvCanaryValueError) as raised:
        torch.func.vmap(lambda p, o: scatter_into(p, o, rows))(pools, torch.stack([offsets, offsets]))
    reason = errors.TORCH_VMAP_BATCHED_SEGMENTS.format(segments="offsets, req_pool_indices or start_cols",
                                                      values="flat_in", output="pool_out")
    assert str(raised.value) == f"{P} backend 'torch' cannot run here: {reason}"
    assert torch.equal(pools, before)


def test_tokens_batched_deeper_than_the_pool_are_refused():
    pool, before = sentinel(N_ROWS, 6), sentinel(N_ROWS, 6)
    pools = torch.stack([sentinel(N_ROWS, 6, seed=s) for s in (1, 2)])
    offsets, rows = torch.tensor([0, 2, 5]), torch.tensor([0, 3])
    tokens = torch.stack([FLAT_IN, FLAT_IN + 1000])
    reason = errors.TORCH_VMAP_UNBATCHED_OUTPUT.format(values="flat_in", output="pool_out")
    with pytest.raises(errors.KvCanaryValueError, match="cannot run here") as raised:
        torch.func.vmap(lambda t: scatter_into(pool, offsets, rows, flat_in=t))(tokens)
    assert str(raised.value) == f"{P} backend 'torch' cannot run here: {reason}"
    with pytest.raises(errors.KvCanaryValueError, match="cannot run here"):  # the pool batched outside, tokens inside
        torch.func.vmap(lambda p: torch.func.vmap(lambda t: scatter_into(p, offsets, rows, flat_in=t))(tokens))(pools)
    with pytest.raises(errors.KvCanaryValueError, match="cannot run here"):  # and the other way round
        torch.func.vmap(lambda t: torch.func.vmap(lambda p: scatter_into(p, offsets, rows, flat_in=t))(pools))(tokens)
    assert torch.equal(pool, before)


def test_the_assignment_refuses_what_the_scatter_does_in_its_own_names():
    tables = torch.stack([sentinel(N_ROWS, 6, seed=s) for s in (1, 2)])
    table, before = sentinel(N_ROWS, 6), sentinel(N_ROWS, 6)
    rows, start, end, loc = torch.tensor([1, 2]), torch.tensor([0, 1]), torch.tensor([2, 3]), torch.arange(4)
    segments = dict(segments="req_pool_indices, start_offset or end_offset", values="out_cache_loc",
                    output="req_to_token")
    calls = {errors.TORCH_VMAP_BATCHED_SEGMENTS.format(**segments):
             lambda: torch.func.vmap(lambda t, s: assign_req_to_token_pool_func(rows, t, s, end, loc, 2))(
                 tables, torch.stack([start, start])),
             errors.TORCH_VMAP_UNBATCHED_OUTPUT.format(**segments):
             lambda: torch.func.vmap(lambda c: assign_req_to_token_pool_func(rows, table, start, end, c, 2))(
                 torch.stack([loc, loc]))}
    for reason, call in calls.items():
        with pytest.raises(errors.KvCanaryValueError) as raised:
            call()
        assert str(raised.value) == f"{errors.ASSIGN_PREFIX} backend 'torch' cannot run here: {reason}"
    assert torch.equal(table, before)


@st.composite
def example_values(draw, examples: int, bs: int):
    """``examples`` pairs of (offsets, rows), each valid or broken, as int64 arrays."""
    values = []
    for _ in range(examples):
        if draw(st.booleans()):
            offsets = np.sort(draw(st.lists(st.integers(0, N_TOKENS), min_size=bs + 1, max_size=bs + 1)))
            rows = np.array(draw(st.permutations(range(N_ROWS)))[:bs])
        else:
            offsets = np.array(draw(st.lists(st.integers(-2, N_TOKENS + 2), min_size=bs + 1, max_size=bs + 1)))
            rows = np.array(draw(st.lists(st.integers(-1, N_ROWS), min_size=bs, max_size=bs)))
        values.append((np.asarray(offsets, np.int64), np.asarray(rows, np.int64)))
    return values


def first_violation(pairs) -> str | None:
    for offsets, rows in pairs:
        try:
            raise_first_value_error(offsets, rows, N_TOKENS, N_ROWS)
        except errors.KvCanaryValueError as error:
            return str(error)
    return None


def raised(call) -> str | None:
    try:
        call()
    except errors.KvCanaryValueError as error:
        return str(error)
    return None


def checked(offsets, rows):
    """The checked mode alone (a pool that cannot be written reaches no write: the checks raise first)."""
    from kv_canary_torch.values import check_values

    check_values(FLAT_IN, offsets, rows, sentinel(N_ROWS, 1))
    return offsets.sum() + rows.sum()


@examples(40)
@given(data=st.data(), n=st.integers(1, 4), bs=st.integers(0, 4), dims=st.tuples(st.integers(0, 1), st.integers(0, 1)),
       batched=st.sampled_from(["both", "offsets", "rows"]))
def test_under_vmap_the_first_example_that_breaks_a_rule_raises(data, n, bs, dims, batched):
    pairs = data.draw(example_values(n, bs))
    if batched != "both":  # the unbatched one is the same in every example
        pairs = [(o if batched != "rows" else pairs[0][0], r if batched != "offsets" else pairs[0][1])
                 for o, r in pairs]
    offsets = torch.stack([torch.from_numpy(o) for o, _ in pairs], dims[0]) if batched != "rows" else \
        torch.from_numpy(pairs[0][0])
    rows = torch.stack([torch.from_numpy(r) for _, r in pairs], dims[1]) if batched != "offsets" else \
        torch.from_numpy(pairs[0][1])
    in_dims = (dims[0] if batched != "rows" else None, dims[1] if batched != "offsets" else None)
    assert raised(lambda: torch.func.vmap(checked, in_dims=in_dims)(offsets, rows)) == first_violation(pairs)


def test_nested_vmap_runs_the_outermost_examples_first():
    offsets = torch.tensor([[0, 3, 12], [0, 3, 13]])  # outer: the second example's end is past flat_in
    rows = torch.tensor([[0, 1], [2, 2]])  # inner: the second example repeats a row
    call = torch.func.vmap(lambda o: torch.func.vmap(lambda r: checked(o, r))(rows))
    assert raised(lambda: call(offsets)) == errors.ROW_REPEATED.format(j=1, row=2, i=0)
    assert raised(lambda: torch.func.vmap(lambda o: checked(o, rows[0]))(offsets)) == \
        errors.OFFSETS_END.format(n=N_TOKENS, value=13)


def test_grad_and_functionalize_wrappers_are_read_as_their_values():
    offsets, rows = torch.tensor([0, 3, 10, 12]), torch.tensor([2, 0, 2])
    message = errors.ROW_REPEATED.format(j=2, row=2, i=0)
    assert raised(lambda: torch.func.grad(lambda x: (checked(offsets, rows), x.sum())[1])(torch.ones(2))) == message

    def updated(o, r):
        o.add_(1)
        return checked(o, r)

    assert raised(lambda: torch.func.functionalize(updated)(torch.tensor([-1, 3, 13]), torch.tensor([0, 1]))) == \
        errors.OFFSETS_END.format(n=N_TOKENS, value=14)
