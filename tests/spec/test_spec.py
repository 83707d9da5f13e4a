"""The spec itself: the case data is current, the window rule is exact in every width, the checks run in order."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, strategies as st

from shared_spec import arg_specs, build_cases, checks, errors
from shared_spec.cases import ASSIGN, CASES_FILE, load_cases
from shared_spec.checks import ArrayView, NotAnArray
from shared_spec.reference import assign_reference, saturated_sum, scatter_reference, window


def test_the_case_file_is_what_the_builder_writes():
    assert CASES_FILE.read_text() == build_cases.render()


def test_the_numpy_reference_gives_every_case_its_pool():
    for case in load_cases():
        if case.expect.pool is None:
            continue
        a = {k: getattr(v, "value", None) if not hasattr(v, "numpy") else v.numpy() for k, v in case.args.items()}
        if case.op == ASSIGN:
            got = assign_reference(a["req_pool_indices"], a["req_to_token"], a["start_offset"], a["end_offset"],
                                   a["out_cache_loc"], a["batch_size"])
        else:
            got = scatter_reference(a["flat_in"], a["offsets"], a["req_pool_indices"], a["pool_out"], a.get("start_cols"))
        np.testing.assert_array_equal(got, case.expect.pool.numpy(), err_msg=case.name)


def brute_force(start, end, first_col, width, n_tokens):
    """The spec's loop for one request, as (column, token) pairs, in Python integers."""
    return [(c, start + c - first_col) for c in range(width)
            if 0 <= c - first_col < end - start and 0 <= start + c - first_col < n_tokens]


def cells(base, lo, hi):
    return [(c, c + int(base)) for c in range(int(lo), int(hi))]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_the_window_rule_is_exact_at_the_extremes_of_each_width(dtype):
    info = np.iinfo(dtype)
    values = [info.min, info.min + 1, info.min // 2, -7, -1, 0, 1, 3, 6, info.max // 2, info.max - 1, info.max]
    for width, n_tokens in [(0, 0), (5, 7), (7, 5), (1, 1), (4, 0), (0, 4)]:
        for start, end, first in itertools.product(values, repeat=3):
            base, lo, hi = window(np.array([start], dtype), np.array([end], dtype), np.array([first], dtype),
                                  width, n_tokens)
            assert base.dtype == dtype
            assert cells(base[0], lo[0], hi[0]) == brute_force(start, end, first, width, n_tokens), (start, end, first)


@given(st.data())
def test_the_window_rule_agrees_across_widths_and_frameworks(data):
    width, n_tokens = data.draw(st.integers(0, 40)), data.draw(st.integers(0, 40))
    lim = st.integers(-(2**31), 2**31 - 1)
    near = st.integers(-50, 50)
    start, end, first = (data.draw(st.one_of(lim, near)) for _ in range(3))
    expected = brute_force(start, end, first, width, n_tokens)
    for dtype in (np.int32, np.int64):
        arrays = [np.array([v], dtype) for v in (start, end, first)]
        assert cells(*(x[0] for x in window(*arrays, width, n_tokens))) == expected
    torch = pytest.importorskip("torch")
    tensors = [torch.tensor([v], dtype=torch.int64) for v in (start, end, first)]
    assert cells(*(int(x[0]) for x in window(*tensors, width, n_tokens, xp=torch))) == expected


def test_the_window_rule_in_jax_with_x64_off_and_on():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    lo, hi = -(2**31), 2**31 - 1
    triples = [(lo, hi, lo), (hi - 2, hi, -1), (lo, lo + 3, hi), (-5, hi, 2), (0, 9, -4), (3, 8, hi)]
    for start, end, first in triples:
        expected = brute_force(start, end, first, 6, 9)
        got = jax.jit(lambda s, e, f: window(s, e, f, 6, 9, jnp))(*(jnp.int32(v) for v in (start, end, first)))
        assert all(x.dtype == jnp.int32 for x in got)
        assert cells(*got) == expected
        with jax.enable_x64(True):
            got = window(*(jnp.int64(v) for v in (start, end, first)), 6, 9, jnp)
            assert cells(*got) == expected


@given(st.lists(st.integers(0, 2**31 - 1), min_size=2, max_size=6), st.integers(0, 2**31 - 1))
def test_the_saturated_running_sum_never_wraps(lengths, n_tokens):
    lengths = [min(x, n_tokens) for x in lengths]
    total = np.int32(0)
    for x in lengths:
        total = saturated_sum(total, np.int32(x), n_tokens)
    assert int(total) == min(sum(lengths), n_tokens)


def view(shape, dtype="int64", device="cpu", **kw):
    return ArrayView(tuple(shape), dtype, device, **kw)


def good_views(**changes):
    views = {"flat_in": view((5,)), "offsets": view((3,)), "req_pool_indices": view((2,)), "pool_out": view((4, 6), "int32")}
    views.update(changes)
    return views


def test_each_frontend_names_the_index_dtypes_it_takes():
    bad = good_views(flat_in=view((5,), "float32"))
    assert str(checks.first_failure(checks.SCATTER, bad, checks.TORCH)[1]).endswith("flat_in must be int64, got float32")
    assert str(checks.first_failure(checks.SCATTER, bad, checks.JAX)[1]).endswith("must be int32 or int64, got float32")
    int32 = good_views(req_pool_indices=view((2,), "int32"))
    assert checks.first_failure(checks.SCATTER, int32, checks.JAX) is None
    assert checks.first_failure(checks.SCATTER, int32, checks.TORCH)[0] == "dtype"


def test_the_checks_run_in_their_order():
    order = checks.CHECK_ORDER[checks.SCATTER.name]
    failures = {
        "array": {"flat_in": NotAnArray("list")},
        "storage": {"req_pool_indices": view((2,), storage_problem=checks.MASKED)},
        "rank": {"pool_out": view((24,), "int32")},
        "dtype": {"flat_in": view((5,), "float32")},
        "offsets_length": {"offsets": view((4,))},
        "start_cols_length": {"start_cols": view((3,))},
        "device": {"offsets": view((3,), device="cuda:0")},
        "writable": {"pool_out": view((4, 6), "int32", write_problem="it is read-only")},
    }
    for i, check in enumerate(order):
        if check not in failures:
            continue
        # every failure of this check and the later ones, an earlier check's view winning where two share an argument
        views = good_views(**{k: v for later in reversed(order[i:]) if later in failures for k, v in failures[later].items()})
        assert checks.first_failure(checks.SCATTER, views, checks.TORCH)[0] == check


def test_host_data_follows_the_first_placed_argument():
    views = good_views(pool_out=view((4, 6), "int32", device=None), offsets=view((3,), device="cuda:0"))
    check, error = checks.first_failure(checks.SCATTER, views, checks.JAX)
    assert check == "device" and "offsets is on cuda:0 but flat_in is on cpu" in str(error)


def test_assignment_errors_are_the_scatters_retitled():
    views = {"req_pool_indices": view((2,), (2, 1)), "req_to_token": view((4, 6), "int32"),
             "start_offset": view((2,)), "end_offset": view((2,)), "out_cache_loc": view((5,))}
    views["req_pool_indices"] = view((2, 1))
    check, error = checks.first_failure(checks.ASSIGN, views, checks.JAX, 2)
    assert str(error) == "kv-canary: assign_req_to_token_pool req_pool_indices must be 1-D, got shape (2, 1)"
    assert error.template == errors.for_assignment(errors.WRONG_RANK)


@pytest.mark.parametrize("batch_size", [True, 2.0, np.array([1, 2]), "2"])
def test_batch_size_must_be_an_int(batch_size):
    assert isinstance(checks.batch_size_value(batch_size), errors.KvCanaryTypeError)


def test_require_bool_refuses_truthy_values():
    assert checks.require_bool("check_values", np.bool_(True)) is True
    for value in (1, "yes", None, np.array([True])):
        with pytest.raises(errors.KvCanaryTypeError, match="check_values must be a bool"):
            checks.require_bool("check_values", value)


@given(st.integers(1, 6), st.integers(1, 6), st.integers(-3, 8), st.integers(-3, 8))
def test_cells_overlap_is_exact(rows, cols, s0, s1):
    addresses = [r * s0 + c * s1 for r in range(rows) for c in range(cols)]
    assert checks.cells_overlap((rows, cols), (s0, s1)) == (len(set(addresses)) < len(addresses))


@pytest.mark.parametrize("w", arg_specs.WORKLOADS, ids=lambda w: w.name)
def test_every_workload_is_a_well_formed_batch(w):
    if w.tokens > 2**21:
        pytest.skip("large: built on the GPU machine by the bench")
    flat_in, offsets, rows, pool = arg_specs.make_batch(w, dtype=np.int32)
    assert offsets[0] == 0 and np.all(np.diff(offsets) >= 0) and offsets[-1] == len(flat_in)
    assert len(set(rows.tolist())) == len(rows) and rows.max() < len(pool) and flat_in.dtype == np.int32
    assert arg_specs.workload(w.name) == w


def test_a_workload_name_that_is_no_form_is_refused():
    with pytest.raises(ValueError, match="is not a workload"):
        arg_specs.workload("256by8192")


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_hostile_batches_reach_the_extremes_of_their_width(dtype):
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(300):
        batch = arg_specs.hostile_batch(rng, 4, 6, 5, 9, dtype, windowed=True)
        assert all(a.dtype == dtype for a in batch[:3] + batch[4:])
        for a in (batch[1], batch[2], batch[4]):
            seen |= {int(v) for v in a if v in (np.iinfo(dtype).min, np.iinfo(dtype).max)}
    assert seen == {np.iinfo(dtype).min, np.iinfo(dtype).max}
