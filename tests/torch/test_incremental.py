"""``IncrementalWriter``: serving steps against the reference in every form, and every bad step refused with the
spec's message, nothing written, the next step as if it had not been called."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from kv_canary_torch import IncrementalWriter
from shared_spec import errors
from shared_spec.reference import scatter_reference
from tests.contract import examples
from tests.torch_support import BACKENDS, as_numpy, device_for, freed, sentinel

FORMS = ["nested lists", "nested arrays", "nested tensors", "flat list", "flat array", "flat tensor", "counts"]


def give(form: str, new: list, rng):
    """``new`` (one list of ints per request) as ``step``'s ``(new_tokens, lengths)`` in ``form``."""
    flat = [t for ids in new for t in ids]
    if form == "nested lists":
        return new, None
    if form == "nested arrays":
        return [np.asarray(ids, np.int64) for ids in new], None
    if form == "nested tensors":
        return [torch.tensor(ids, dtype=torch.int64) for ids in new], None
    if form == "counts":
        return flat, [len(ids) for ids in new] if rng.random() < 0.5 else np.array([len(ids) for ids in new])
    k = len(new[0]) if new else 1  # the flat forms with an int k: every request k tokens
    as_form = {"flat list": list, "flat array": np.array, "flat tensor": torch.tensor}[form]
    return as_form(flat), k


def ints(values: list, rng):
    kind = rng.integers(0, 3)
    return values if kind == 0 else np.array(values, np.int64) if kind == 1 else torch.tensor(values, dtype=torch.int64)


def serve(writer, expected, rng, steps: int, width: int):
    """Random steps, each a request's new tokens at its current length; returns the expected pool."""
    lengths: dict = {}
    for _ in range(steps):
        form = FORMS[rng.integers(0, len(FORMS))]
        bs = int(rng.integers(0, writer.max_requests + 1))
        rows = [int(r) for r in rng.permutation(expected.shape[0])[:bs]]
        same = int(rng.integers(1, 3))
        new = [list(map(int, rng.integers(-(2**40), 2**40, size=same if form.startswith("flat")
                                          else int(rng.integers(0, 4))))) for _ in rows]
        if sum(map(len, new)) > writer.max_new_tokens:
            continue
        start_cols = [lengths.get(row, 0) % width for row in rows]
        tokens, cut = give(form, new, rng)
        writer.step(tokens, ints(rows, rng), ints(start_cols, rng), lengths=cut)
        flat = np.array([t for ids in new for t in ids], np.int64)
        offsets = np.concatenate([[0], np.cumsum([len(ids) for ids in new])]).astype(np.int64)
        expected = scatter_reference(flat, offsets, np.array(rows, np.int64), expected, np.array(start_cols, np.int64))
        for row, ids in zip(rows, new):
            lengths[row] = lengths.get(row, 0) + len(ids)
    return expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_serving_steps_write_what_the_reference_writes(backend):
    @examples(6 if device_for(backend) != "cpu" or backend == "torch" else 3)
    @given(seed=st.integers(0, 2**32 - 1))
    def check(seed):
        rng = np.random.default_rng(seed)
        pool = sentinel(6, 12, seed=seed % 5, device=device_for(backend))
        writer = IncrementalWriter(pool, max_requests=4, max_new_tokens=12, backend=backend)
        expected = serve(writer, as_numpy(pool).copy(), rng, steps=10, width=12)
        np.testing.assert_array_equal(as_numpy(pool), expected)

    check()


# -- refused steps -----------------------------------------------------------------------------------------------

W = "kv-canary: IncrementalWriter.step"
NOT_SEQ = "must be a sequence of one token-id sequence per request"
BAD_STEPS = {
    # the five that once escaped
    "entry without a length": (dict(new_tokens=[[1], 2]), errors.KvCanaryTypeError,
                               f"{W} new_tokens[1] must be a 1-D sequence of integers, got int"),
    "none": (dict(new_tokens=None), errors.KvCanaryTypeError, f"{W} new_tokens {NOT_SEQ}, got NoneType"),
    "generator": (dict(new_tokens=(ids for ids in [[1], [2]])), errors.KvCanaryTypeError,
                  f"{W} new_tokens {NOT_SEQ}, got generator"),
    "entry generator": (dict(new_tokens=[[1], (t for t in [2])]), errors.KvCanaryTypeError,
                        f"{W} new_tokens[1] must be a 1-D sequence of integers, got generator"),
    "entry bool": (dict(new_tokens=[[1], True]), errors.KvCanaryTypeError,
                   f"{W} new_tokens[1] must be a 1-D sequence of integers, got bool"),
    "entry dict": (dict(new_tokens=[[1], {2: 3}]), errors.KvCanaryTypeError,
                   f"{W} new_tokens[1] must be a 1-D sequence of integers, got dict"),
    "entry set": (dict(new_tokens=[[1], {2, 3}]), errors.KvCanaryTypeError,
                  f"{W} new_tokens[1] must be a 1-D sequence of integers, got set"),
    "wrapping lengths": (dict(new_tokens=[1, 2, 3], rows=[0, 1, 2, 3], start_cols=[0] * 4,
                              lengths=[2**62] * 3 + [2**62 + 3]), errors.KvCanaryValueError,
                         f"{W} new_tokens has 3 tokens, which lengths=[...] does not cut into requests "
                         f"(they sum to {4 * 2**62 + 3})"),
    # the rest
    "id past int64": (dict(new_tokens=[[1], [2, 2**63]]), errors.KvCanaryValueError,
                      f"{W} new_tokens[1][1] = {2**63} is outside the int64 range [{-2**63}, {2**63 - 1}]"),
    "flat float": (dict(new_tokens=[1, 2.5], lengths=1), errors.KvCanaryTypeError,
                   f"{W} new_tokens[1] must be a 1-D sequence of integers, got list of shape (1,) and dtype float64"),
    "flat none": (dict(new_tokens=None, lengths=1), errors.KvCanaryTypeError,
                  f"{W} new_tokens must be a 1-D sequence of int64 integers, got NoneType"),
    "flat 2-D": (dict(new_tokens=np.zeros((2, 1), np.int64), lengths=1), errors.KvCanaryTypeError,
                 errors.INCREMENTAL_NOT_INTS.format(arg="new_tokens", what="ndarray of shape (2, 1) and dtype int64")),
    "lengths zero": (dict(new_tokens=[1, 2], lengths=0), errors.KvCanaryValueError,
                     errors.INCREMENTAL_FLAT_LENGTHS.format(what="0")),
    "lengths bool": (dict(new_tokens=[1, 2], lengths=True), errors.KvCanaryValueError,
                     errors.INCREMENTAL_FLAT_LENGTHS.format(what="bool")),
    "lengths negative": (dict(new_tokens=[1, 2], lengths=[3, -1]), errors.KvCanaryValueError,
                         errors.INCREMENTAL_FLAT_LENGTHS.format(what="a negative count")),
    "not a multiple": (dict(new_tokens=[1, 2, 3], rows=[0], start_cols=[0], lengths=2), errors.KvCanaryValueError,
                       errors.INCREMENTAL_FLAT_COUNT.format(count=3, lengths=2, expected="not a multiple of 2")),
    "too many requests": (dict(new_tokens=[[1]] * 5, rows=[0] * 5, start_cols=[0] * 5), errors.KvCanaryValueError,
                          errors.INCREMENTAL_TOO_MANY_REQUESTS.format(bs=5, limit=4)),
    "too many tokens": (dict(new_tokens=[[1] * 7, [1] * 7]), errors.KvCanaryValueError,
                        errors.INCREMENTAL_TOO_MANY_TOKENS.format(count=14, limit=12)),
    "rows short": (dict(rows=[0]), errors.KvCanaryValueError,
                   errors.INCREMENTAL_LENGTHS.format(arg="rows", length=1, bs=2)),
    "rows float": (dict(rows=np.array([0.0, 1.0])), errors.KvCanaryTypeError,
                   errors.INCREMENTAL_NOT_INTS.format(arg="rows", what="ndarray of shape (2,) and dtype float64")),
    "start_cols none": (dict(start_cols=None), errors.KvCanaryTypeError,
                        errors.INCREMENTAL_NOT_INTS.format(arg="start_cols", what="NoneType")),
    "row outside, checked": (dict(rows=[0, 9], check_values=True), errors.KvCanaryValueError,
                             errors.ROW_OUT_OF_RANGE.format(i=1, row=9, rows=6)),
    "rows freed": (dict(rows=freed([0, 1])), errors.KvCanaryValueError,
                   errors.HOST_NO_MEMORY.format(where=errors.INCREMENTAL_WHERE.format(arg="rows"))),
    "tokens freed": (dict(new_tokens=[[1], freed([2, 3])]), errors.KvCanaryValueError,
                     errors.HOST_NO_MEMORY.format(where=errors.INCREMENTAL_WHERE.format(arg="new_tokens") + "[1]")),
    "flat tokens freed": (dict(new_tokens=freed([2, 3]), lengths=1), errors.KvCanaryValueError,
                          errors.HOST_NO_MEMORY.format(where=errors.INCREMENTAL_WHERE.format(arg="new_tokens"))),
    "rows a huge range": (dict(rows=range(10**12)), errors.KvCanaryTypeError,  # never made into an array
                          errors.INCREMENTAL_NOT_INTS.format(arg="rows", what="range")),
    "lengths a huge range": (dict(new_tokens=[1, 2], lengths=range(2**70)), errors.KvCanaryValueError,
                             errors.INCREMENTAL_FLAT_LENGTHS.format(what="range")),
    "rows sparse": (dict(rows=torch.arange(2).to_sparse()), errors.KvCanaryTypeError,
                    errors.INCREMENTAL_NOT_INTS.format(arg="rows", what="Tensor of layout sparse_coo")),
    "lengths on meta": (dict(new_tokens=[2, 3], lengths=torch.ones(2, dtype=torch.int64, device="meta")),
                        errors.KvCanaryValueError,
                        errors.HOST_NO_MEMORY.format(where=errors.INCREMENTAL_WHERE.format(arg="lengths"))),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(BAD_STEPS))
def test_a_refused_step_writes_nothing_and_the_next_one_runs(name, backend):
    changes, error_class, message = BAD_STEPS[name]
    pool = sentinel(6, 12, seed=2, device=device_for(backend))
    writer = IncrementalWriter(pool, max_requests=4, max_new_tokens=12, backend=backend)
    writer.step([[5, 6], [7]], [1, 2], [0, 0])
    before = as_numpy(pool).copy()
    call = {"new_tokens": [[1, 2], [3]], "rows": [0, 1], "start_cols": [2, 3], **changes}
    with pytest.raises(error_class) as raised:
        writer.step(call.pop("new_tokens"), call.pop("rows"), call.pop("start_cols"), **call)
    assert type(raised.value) is error_class and str(raised.value) == message
    np.testing.assert_array_equal(as_numpy(pool), before)
    writer.step([8, 9, 10, 11], [3, 4], [4, 5], lengths=[1, 3])
    expected = scatter_reference(np.array([8, 9, 10, 11]), np.array([0, 1, 4]), np.array([3, 4]), before,
                                 np.array([4, 5]))
    np.testing.assert_array_equal(as_numpy(pool), expected)


@pytest.mark.parametrize("name, value", [("max_requests", -1), ("max_requests", 2**31), ("max_requests", 1.0),
                                         ("max_requests", True), ("max_new_tokens", 2**40),
                                         ("max_new_tokens", None), ("max_new_tokens", "8")])
def test_capacities_no_buffer_can_hold_are_refused(name, value):
    capacities = {"max_requests": 4, "max_new_tokens": 8, name: value}
    limit = 2**20 if name == "max_requests" else 2**24
    with pytest.raises(errors.KvCanaryValueError) as raised:
        IncrementalWriter(sentinel(2, 3), **capacities)
    assert str(raised.value) == errors.INCREMENTAL_CAPACITY.format(arg=name, limit=limit, value=value)


def test_the_largest_capacities_and_none_are_taken():
    pool = sentinel(2, 3)
    IncrementalWriter(pool, max_requests=0, max_new_tokens=0).step([], [], [])
    writer = IncrementalWriter(pool, max_requests=np.int64(2**20), max_new_tokens=0)
    for k in (1, 2**64, np.uint64(2**64 - 1)):  # no tokens: no requests, whatever each would have
        writer.step([], [], [], lengths=k)
    assert (pool == sentinel(2, 3)).all()


def test_tensors_negated_lazily_are_read_as_their_values():
    pool = sentinel(4, 6)
    writer = IncrementalWriter(pool, max_requests=2, max_new_tokens=4)
    writer.step([torch._neg_view(torch.tensor([-5, -6]))], torch._neg_view(torch.tensor([-2])), [1])
    assert pool[2, 1:3].tolist() == [5, 6]


def test_ranges_are_taken_as_their_ints():
    pool = sentinel(4, 6)
    IncrementalWriter(pool, max_requests=2, max_new_tokens=4).step([7, 8], range(1, 3), range(2), lengths=1)
    assert pool[1, 0] == 7 and pool[2, 1] == 8


def test_graphs_must_be_a_bool():
    with pytest.raises(errors.KvCanaryTypeError) as raised:
        IncrementalWriter(sentinel(2, 3), 2, 4, graphs="yes")
    assert str(raised.value) == errors.INCREMENTAL_NOT_A_BOOL.format(option="graphs", type_name="str")


@pytest.mark.parametrize("pool, what", [(np.zeros((2, 3), np.int32), "ndarray"), (None, "NoneType"),
                                        ([[0]], "list"), (torch.zeros(3, dtype=torch.int32),
                                                          "a tensor of shape (3,) and dtype int32 on cpu"),
                                        (torch.zeros((2, 3), dtype=torch.int32, device="meta"),
                                         "a tensor of shape (2, 3) and dtype int32 on meta")])
def test_a_pool_that_is_no_2d_int32_tensor_is_refused(pool, what, x64):
    with pytest.raises(errors.KvCanaryTypeError) as raised:
        IncrementalWriter(pool, max_requests=2, max_new_tokens=4)
    assert str(raised.value) == errors.INCREMENTAL_POOL.format(what=what)


def test_a_jax_pool_is_refused(x64):
    import jax.numpy as jnp

    with pytest.raises(errors.KvCanaryTypeError) as raised:
        IncrementalWriter(jnp.zeros((2, 3), jnp.int32), max_requests=2, max_new_tokens=4)
    assert str(raised.value).startswith(errors.INCREMENTAL_POOL.format(what=""))


def test_a_step_refused_by_the_launcher_leaves_the_pool():
    """The pool's own problems are the launcher's to find: a pool that is an inference tensor, used outside
    inference mode."""
    with torch.inference_mode():
        pool = sentinel(3, 4)
    writer = IncrementalWriter(pool, max_requests=2, max_new_tokens=4, backend="torch")
    message = errors.NOT_WRITABLE.format(reason=errors.WRITE_INFERENCE)
    with pytest.raises(errors.KvCanaryValueError) as raised:
        writer.step([[1]], [0], [0])
    assert str(raised.value) == message
    with torch.inference_mode():
        writer.step([[1]], [0], [0])
    assert int(pool[0, 0]) == 1
