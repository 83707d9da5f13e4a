"""Kinds of arrays and options beyond plain strided arrays and names: each is written as the reference writes it or refused by name.

Beside ``test_hostile_inputs.py``, with the same promise: every call returns
the reference's pool or raises the spec's exception, the two frontends raise
the same class with a byte-identical message, and a refused call leaves every
pool as it was. Here: tensors that are not plain strided memory (sparse,
nested, meta, lazily negated or conjugated views), numpy masked arrays and
zero-itemsize pools, deleted JAX arrays, inference pools, tensors inside a
``torch.func`` transform, and ``backend=``/``implementation=`` values that are
not names. The last test runs the same families through the native piece's
remembered-signature path on a GPU.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from kv_canary_jax import IMPLEMENTATIONS, scatter_req_token_ids
from kv_canary_torch import BACKENDS, launch_scatter_req_token_ids_kernel
from kv_canary_arrays.describe import torch_backed
from shared_spec import errors, scatter_reference
from shared_spec.arguments import ARGUMENT_NAMES
from tests.strategies import sentinel_pool
from tests.spec.test_hostile_inputs import FLAT_IN, OFFSETS, ROOT, ROWS
from tests.torch_support import device_for

P = errors.PREFIX
# Every torch backend runs here: Triton in its interpreter, Pallas in its interpreter (tests/conftest.py).
TORCH_BACKENDS = ("auto", "torch", "triton", "pallas")


def _pool() -> np.ndarray:
    return sentinel_pool(4, 5, seed=11)


def _expected(pool=None) -> np.ndarray:
    return scatter_reference(FLAT_IN, OFFSETS, ROWS, _pool() if pool is None else pool)


def _tensors(device="cpu"):
    return [torch.from_numpy(a.copy()).to(device) for a in (FLAT_IN, OFFSETS, ROWS, _pool())]


def _quietly(make):
    """``make()`` with torch's beta-feature warnings (sparse CSR, nested tensors) silenced: they are not what is tested."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make()


def _torch_raises(args, backend):
    """The exception the torch launcher raises for ``args`` (flat_in, offsets, req_pool_indices, pool_out)."""
    with pytest.raises((errors.KvCanaryTypeError, errors.KvCanaryValueError)) as info:
        launch_scatter_req_token_ids_kernel(**dict(zip(ARGUMENT_NAMES, args)), backend=backend)
    return info.value


def _jax_raises(args):
    with pytest.raises((errors.KvCanaryTypeError, errors.KvCanaryValueError)) as info:
        scatter_req_token_ids(*args)
    return info.value


def _readable(x) -> np.ndarray | None:
    """The values a refused call must leave as they were (None for memory there is nothing to read of)."""
    if isinstance(x, torch.Tensor):
        if x.device.type == "meta" or x.layout != torch.strided or x.is_nested or not torch_backed(x):
            return None
        return x.resolve_neg().resolve_conj().detach().clone().numpy()
    if isinstance(x, np.ndarray):
        return np.array(x)
    return None


def _assert_refused_everywhere(args, error_class, message):
    """Every torch backend and the JAX frontend raise exactly ``error_class(message)``; nothing is written."""
    before = [_readable(a) for a in args]
    for backend in TORCH_BACKENDS:
        error = _torch_raises(args, backend)
        assert type(error) is error_class and str(error) == message, (backend, error)
    error = _jax_raises(args)
    assert type(error) is error_class and str(error) == message, ("jax", error)
    for a, kept in zip(args, before):
        if kept is not None:
            np.testing.assert_array_equal(_readable(a), kept)


# -- the storage check: strided memory that holds the values, for every argument ---------------


def _sparse_coo(t):
    return t.to_sparse()


def _sparse_csr(t):
    return _quietly(t.to_sparse_csr) if t.dim() == 2 else t.to_sparse()


def _jagged(t):
    return _quietly(lambda: torch.nested.nested_tensor([t.reshape(-1)[:2], t.reshape(-1)[2:]], layout=torch.jagged))


def _nested(t):
    return _quietly(lambda: torch.nested.nested_tensor(list(t) if t.dim() == 2 else [t[:2], t[2:]]))


NOT_STRIDED = {
    "sparse_coo": (_sparse_coo, "sparse_coo"),
    "sparse_csr": (_sparse_csr, None),  # CSR for the 2-D pool, COO for the 1-D inputs
    "jagged": (_jagged, "jagged"),
    "nested": (_nested, "nested"),
}


@pytest.mark.parametrize("kind", list(NOT_STRIDED))
@pytest.mark.parametrize("name", ARGUMENT_NAMES)
def test_tensors_that_are_not_strided_are_refused_by_name(name, kind):
    make, layout = NOT_STRIDED[kind]
    args = _tensors()
    position = ARGUMENT_NAMES.index(name)
    args[position] = make(args[position])
    layout = layout or str(args[position].layout).removeprefix("torch.")
    message = f"{P} {name} must be a strided tensor, got layout {layout}; pass a dense, strided tensor"
    _assert_refused_everywhere(args, errors.KvCanaryTypeError, message)


@pytest.mark.parametrize("name", ARGUMENT_NAMES)
def test_meta_tensors_are_refused_as_holding_no_data(name):
    args = _tensors()
    position = ARGUMENT_NAMES.index(name)
    args[position] = args[position].to("meta")
    message = f"{P} {name} is on meta, which holds no data; pass a tensor on a device with memory"
    _assert_refused_everywhere(args, errors.KvCanaryValueError, message)


def test_all_meta_arguments_are_refused_at_the_first():
    args = [t.to("meta") for t in _tensors()]
    _assert_refused_everywhere(args, errors.KvCanaryValueError, errors.NO_DATA.format(arg="flat_in"))


@pytest.mark.parametrize("name", ARGUMENT_NAMES)
def test_negative_bit_views_are_refused_not_read_raw(name):
    """Triton and Pallas once read the raw memory (-11 where the tensor reads 11): now every backend refuses."""
    args = _tensors()
    position = ARGUMENT_NAMES.index(name)
    args[position] = torch._neg_view(args[position])
    assert args[position].is_neg()
    message = f"{P} {name} has its negative bit set (a lazily negated view); pass {name}.resolve_neg()"
    _assert_refused_everywhere(args, errors.KvCanaryValueError, message)


def _freed(t):
    """A copy of ``t`` with its storage freed under it (``resize_(0)``, as FSDP frees a parameter's)."""
    t = t.clone()  # a storage torch allocated: resizable
    t.untyped_storage().resize_(0)
    return t


def _shrunk(t):
    """A copy of ``t`` one element into a storage that ends one element before the copy's last."""
    buffer = torch.zeros(t.numel() + 1, dtype=t.dtype)
    view = buffer[1:].view(t.shape)
    view.copy_(t)
    buffer.untyped_storage().resize_(t.numel() * t.element_size())
    return view


def _zero_tensor(t):
    return torch._efficientzerotensor(t.shape, dtype=t.dtype)


NO_MEMORY = {"freed": _freed, "shrunk": _shrunk, "zero_tensor": _zero_tensor}


@pytest.mark.parametrize("kind", list(NO_MEMORY))
@pytest.mark.parametrize("name", ARGUMENT_NAMES)
def test_tensors_whose_elements_no_memory_holds_are_refused_by_name(name, kind):
    """A kernel never reads or writes through a null data pointer or past a storage's end: every backend refuses."""
    args = _tensors()
    position = ARGUMENT_NAMES.index(name)
    args[position] = NO_MEMORY[kind](args[position])
    _assert_refused_everywhere(args, errors.KvCanaryValueError, errors.NO_MEMORY.format(arg=name))


def test_the_memory_check_is_the_storage_checks_and_comes_before_the_rank_check():
    args = _tensors()
    args[0], args[3] = torch.zeros((2, 2), dtype=torch.int64), _freed(args[3])
    _assert_refused_everywhere(args, errors.KvCanaryValueError, errors.NO_MEMORY.format(arg="pool_out"))


def test_empty_tensors_need_no_memory():
    """No element, no byte to hold: an empty flat_in with a null data pointer is a valid call."""
    flat, offsets, rows, pool = _tensors()
    empty = _freed(torch.zeros(0, dtype=torch.int64))
    assert empty.data_ptr() == 0
    for backend in TORCH_BACKENDS:
        before = pool.clone()
        launch_scatter_req_token_ids_kernel(
            flat_in=empty, offsets=torch.zeros_like(offsets), req_pool_indices=rows, pool_out=pool, backend=backend
        )
        assert torch.equal(pool, before), backend


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_under_torch_func_functionalize_the_torch_path_runs(backend):
    flat, offsets, rows, pool = _tensors()

    def step(pool):
        launch_scatter_req_token_ids_kernel(flat_in=flat, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend=backend)
        return pool

    np.testing.assert_array_equal(torch.func.functionalize(step)(pool).numpy(), _expected())


@pytest.mark.parametrize("backend", ["triton", "pallas"])
def test_under_torch_func_functionalize_the_kernels_say_they_cannot_run(backend):
    flat, offsets, rows, pool = _tensors()
    before = pool.clone()

    def step(pool):
        launch_scatter_req_token_ids_kernel(flat_in=flat, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend=backend)
        return pool

    with pytest.raises(errors.KvCanaryValueError) as info:
        torch.func.functionalize(step)(pool)
    assert str(info.value) == errors.unavailable_error("backend", backend, errors.TORCH_FUNC_TRANSFORMED).args[0]
    assert torch.equal(pool, before)


def test_a_conjugate_bit_view_is_refused_before_its_dtype():
    args = _tensors()
    args[0] = torch.arange(12).to(torch.complex64).conj()
    assert args[0].is_conj()
    _assert_refused_everywhere(args, errors.KvCanaryValueError, errors.CONJUGATE_BIT.format(arg="flat_in"))


def test_the_storage_check_comes_after_the_array_check_and_before_the_rank_check():
    args = _tensors()
    args[0], args[3] = [1, 2], args[3].to_sparse()  # not an array, then a sparse pool
    _assert_refused_everywhere(args, errors.KvCanaryTypeError, errors.NOT_AN_ARRAY.format(arg="flat_in", type_name="list"))
    args = _tensors()
    args[1], args[2] = torch.zeros((2, 2), dtype=torch.int64), torch._neg_view(args[2])  # a rank error, then a neg view
    _assert_refused_everywhere(args, errors.KvCanaryValueError, errors.NEGATIVE_BIT.format(arg="req_pool_indices"))


def test_resolved_views_are_written_as_the_tensors_read():
    args = _tensors(device_for("triton"))
    negated = torch._neg_view(-args[0])  # reads FLAT_IN
    launch_scatter_req_token_ids_kernel(
        flat_in=negated.resolve_neg(), offsets=args[1], req_pool_indices=args[2], pool_out=args[3], backend="triton"
    )
    np.testing.assert_array_equal(args[3].cpu().numpy(), _expected())


# -- numpy masked arrays, zero-itemsize pools, deleted JAX arrays ------------------------------


@pytest.mark.parametrize("name", ARGUMENT_NAMES)
def test_numpy_masked_arrays_are_refused_in_both_frontends(name):
    args = [FLAT_IN.copy(), OFFSETS.copy(), ROWS.copy(), _pool()]
    position = ARGUMENT_NAMES.index(name)
    args[position] = np.ma.masked_array(args[position], mask=np.zeros(args[position].shape, bool))
    message = (
        f"{P} {name} is a numpy masked array, whose mask the operation cannot honour; "
        f"pass {name}.filled(value), or {name}.data to use the masked values as they are"
    )
    _assert_refused_everywhere(args, errors.KvCanaryTypeError, message)


@pytest.mark.parametrize("dtype", [np.dtype([]), jax.dtypes.float0], ids=["void0", "float0"])
def test_zero_itemsize_numpy_pools_get_the_rank_and_dtype_errors(dtype):
    """The torch frontend once divided by the itemsize (ZeroDivisionError) before the rank check."""
    args = [FLAT_IN, OFFSETS, ROWS, np.zeros((4,), dtype=dtype)]
    _assert_refused_everywhere(args, errors.KvCanaryValueError, errors.WRONG_RANK.format(arg="pool_out", rank=2, shape="(4,)"))
    args[3] = np.zeros((4, 5), dtype=dtype)
    _assert_refused_everywhere(args, errors.KvCanaryTypeError, errors.WRONG_DTYPE.format(arg="pool_out", dtype="int32", got="void"))


@pytest.mark.parametrize("name", ARGUMENT_NAMES)
def test_deleted_jax_arrays_are_refused_by_name(name):
    args = [jnp.asarray(a) for a in (FLAT_IN, OFFSETS, ROWS)] + [torch.from_numpy(_pool())]
    position = ARGUMENT_NAMES.index(name)
    deleted = jnp.asarray(_pool()) if name == "pool_out" else args[position]
    deleted.delete()
    args[position] = deleted
    message = f"{P} {name} is a deleted jax.Array (donated or deleted); pass a live array"
    _assert_refused_everywhere(args, errors.KvCanaryValueError, message)


def test_a_donated_pool_is_refused_at_its_next_use():
    step = jax.jit(scatter_req_token_ids, donate_argnums=3)
    pool = jnp.asarray(_pool())
    out = step(*(jnp.asarray(a) for a in (FLAT_IN, OFFSETS, ROWS)), pool)
    np.testing.assert_array_equal(np.asarray(out), _expected())
    assert pool.is_deleted()
    error = _jax_raises((FLAT_IN, OFFSETS, ROWS, pool))
    assert str(error) == errors.DELETED_ARRAY.format(arg="pool_out")


# -- inference pools: refused outside inference mode, before anything is written ------------


def test_an_inference_pool_outside_inference_mode_is_refused_by_every_backend():
    with torch.inference_mode():
        pool = torch.from_numpy(_pool()).clone()
    args = _tensors()[:3]
    message = errors.NOT_WRITABLE.format(reason=errors.WRITE_INFERENCE)
    assert message == (
        f"{P} pool_out cannot be written in place: it is an inference tensor, used outside "
        "torch.inference_mode(); call inside inference mode, or make the pool outside it"
    )
    for backend in TORCH_BACKENDS:
        error = _torch_raises((*args, pool), backend)
        assert type(error) is errors.KvCanaryValueError and str(error) == message, backend
        np.testing.assert_array_equal(pool.numpy(), _pool())
    # The JAX frontend writes no pool in place: it reads this one like any tensor.
    np.testing.assert_array_equal(np.asarray(scatter_req_token_ids(*args, pool)), _expected())


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
def test_an_inference_pool_inside_inference_mode_is_written(backend):
    device = device_for(backend)
    with torch.inference_mode():
        pool = torch.from_numpy(_pool()).to(device)
        launch_scatter_req_token_ids_kernel(**dict(zip(ARGUMENT_NAMES, (*_tensors(device)[:3], pool))), backend=backend)
    np.testing.assert_array_equal(pool.cpu().numpy(), _expected())


# -- torch.func transforms: torch's tensor ops follow them, the kernels cannot ------------------


def _vmapped(backend, batched_flat_in: bool):
    flat, offsets, rows, _ = _tensors()
    pools = torch.from_numpy(np.stack([_pool(), _pool() - 100]))

    def one(flat_in, pool):
        launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend=backend)
        return pool

    if batched_flat_in:
        return pools, lambda: torch.func.vmap(one)(torch.stack([flat, flat + 1000]), pools)
    return pools, lambda: torch.func.vmap(one, in_dims=(None, 0))(flat, pools)


@pytest.mark.parametrize("batched_flat_in", [False, True], ids=["pools", "pools-and-tokens"])
@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_under_torch_func_vmap_the_torch_path_runs(backend, batched_flat_in):
    pools, call = _vmapped(backend, batched_flat_in)
    expected = [_expected(_pool()), _expected(_pool() - 100)]
    if batched_flat_in:
        expected[1] = scatter_reference(FLAT_IN + 1000, OFFSETS, ROWS, _pool() - 100)
    call()
    for got, want in zip(pools, expected):
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("check_values", [False, True])
@pytest.mark.parametrize("batched", ["offsets", "req_pool_indices"])
@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_under_torch_func_vmap_batched_segments_get_the_spec_error(backend, batched, check_values):
    flat, offsets, rows, pool = _tensors()
    pools = torch.stack([pool, pool - 100])
    before = pools.clone()
    arguments = {"offsets": offsets, "req_pool_indices": rows}
    stacked = torch.stack([arguments[batched], arguments[batched]])

    def one(segments, pool):
        given = dict(arguments, **{batched: segments})
        launch_scatter_req_token_ids_kernel(flat_in=flat, pool_out=pool, backend=backend, check_values=check_values, **given)
        return pool

    with pytest.raises(errors.KvCanaryValueError) as info:
        torch.func.vmap(one)(stacked, pools)
    assert str(info.value) == errors.unavailable_error("backend", "torch", errors.TORCH_VMAP_BATCHED_SEGMENTS).args[0]
    assert torch.equal(pools, before)


@pytest.mark.parametrize("batched_flat_in", [False, True], ids=["pools", "pools-and-tokens"])
@pytest.mark.parametrize("backend", ["triton", "pallas"])
def test_under_torch_func_vmap_the_kernels_say_they_cannot_run(backend, batched_flat_in):
    pools, call = _vmapped(backend, batched_flat_in)
    before = pools.clone()
    with pytest.raises(errors.KvCanaryValueError) as info:
        call()
    assert str(info.value) == errors.unavailable_error("backend", backend, errors.TORCH_FUNC_TRANSFORMED).args[0]
    assert torch.equal(pools, before)


# -- backend= and implementation= that are not names: the spec's choice error ------------------

NOT_NAMES = [
    np.array(["torch"]),
    np.array(["torch", "auto"]),
    np.array("torch"),
    b"torch",
    {"torch": 1},
    3,
]


@pytest.mark.parametrize("value", NOT_NAMES, ids=lambda v: type(v).__name__ + str(np.shape(v)))
def test_a_backend_that_is_not_a_str_gets_the_choice_error(value):
    message = errors.choice_error("backend", value, BACKENDS).args[0]
    assert message.startswith(f"{P} unknown backend ")
    with pytest.raises(errors.KvCanaryValueError) as info:
        launch_scatter_req_token_ids_kernel(**dict(zip(ARGUMENT_NAMES, _tensors())), backend=value)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "value, bad",
    [
        (np.array(["xla"]), None),
        (np.array(["xla", "pallas"]), None),
        (np.array("xla"), None),
        (iter(["xla"]), None),
        (["xla", np.array(["xla"])], 1),  # a sequence whose second entry is not a name
        ({"xla": 1}, None),
    ],
    ids=["array-1", "array-2", "array-0d", "iterator", "list-with-array", "dict"],
)
def test_an_implementation_that_is_not_a_name_or_a_sequence_of_names_gets_the_choice_error(value, bad):
    named = value if bad is None else value[bad]
    message = errors.choice_error("implementation", named, IMPLEMENTATIONS).args[0]
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(FLAT_IN, OFFSETS, ROWS, _pool(), implementation=value)
    assert str(info.value) == message


@pytest.mark.parametrize("wrap", [lambda name: name, lambda name: [name], lambda name: ("xla", name)], ids=["bare", "list", "second"])
def test_an_unknown_str_subclass_name_is_shown_as_its_str(wrap):
    """numpy.str_("nope") reads 'nope' in the message, as torch's backend= shows it."""
    with pytest.raises(errors.KvCanaryValueError) as info:
        scatter_req_token_ids(FLAT_IN, OFFSETS, ROWS, _pool(), implementation=wrap(np.str_("nope")))
    assert str(info.value) == errors.choice_error("implementation", "nope", IMPLEMENTATIONS).args[0]
    with pytest.raises(errors.KvCanaryValueError) as info:
        launch_scatter_req_token_ids_kernel(**dict(zip(ARGUMENT_NAMES, _tensors())), backend=np.str_("nope"))
    assert str(info.value) == errors.choice_error("backend", "nope", BACKENDS).args[0]


def test_too_many_requests_for_one_call_are_refused_everywhere():
    """2**31 requests (expanded rows and offsets) exceed CUDA's grid axis 0, a program per request: the spec's limit."""
    from shared_spec.checks import MAX_REQUESTS

    bs = MAX_REQUESTS + 1
    message = errors.TOO_MANY_REQUESTS.format(bs=bs, limit=MAX_REQUESTS)
    flat, _, _, pool = _tensors()
    before = pool.clone()
    args = [flat, torch.tensor([0]).expand(bs + 1), torch.tensor([0]).expand(bs), pool]
    for backend in TORCH_BACKENDS:  # (the arguments' 2**31 elements are never copied: no snapshot of them here)
        error = _torch_raises(args, backend)
        assert type(error) is errors.KvCanaryValueError and str(error) == message, backend
    assert torch.equal(pool, before)
    error = _jax_raises([np.asarray(flat), np.broadcast_to(np.int64(0), (bs + 1,)), np.broadcast_to(np.int64(0), (bs,)), _pool()])
    assert type(error) is errors.KvCanaryValueError and str(error) == message


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
def test_windows_stay_exact_at_the_end_of_int64(backend):
    """An expanded flat_in of 2**63 - 1 tokens and a window from column -3: the spec writes columns 3..7."""
    flat = torch.tensor([7]).expand(2**63 - 1)
    pool = torch.from_numpy(sentinel_pool(1, 8, seed=5))
    expected = pool.clone()
    expected[0, 3:] = 7
    call = functools.partial(
        launch_scatter_req_token_ids_kernel,
        flat_in=flat, offsets=torch.tensor([-3, 5]), req_pool_indices=torch.tensor([0]), pool_out=pool, backend=backend,
    )
    if backend == "pallas":  # JAX arrays are dense: 2**63 - 1 tokens cannot cross to it
        before = pool.clone()
        with pytest.raises(errors.KvCanaryValueError) as info:
            call()
        assert "into JAX without a copy: it crosses only as a dense copy, which cannot be made" in str(info.value)
        assert torch.equal(pool, before)
        return
    call()
    assert torch.equal(pool, expected)


def test_str_subclasses_and_sequences_of_names_still_choose():
    from kv_canary_torch import backends

    pool = torch.from_numpy(_pool())
    launch_scatter_req_token_ids_kernel(**dict(zip(ARGUMENT_NAMES, (*_tensors()[:3], pool))), backend=np.str_("torch"))
    np.testing.assert_array_equal(pool.numpy(), _expected())
    # The backend cache holds plain names: TorchDynamo, which reads it while tracing, cannot wrap a numpy.str_.
    assert all(type(name) is str for name, _ in backends._resolved)
    for implementation in (np.str_("xla"), ["xla"], ("pallas", "xla")):
        got = scatter_req_token_ids(FLAT_IN, OFFSETS, ROWS, _pool(), implementation=implementation, interpret=True)
        np.testing.assert_array_equal(np.asarray(got), _expected())


# -- on the GPU: a remembered signature never lets a refused input through ----------------------

# Each family: a valid CUDA call twice (the second goes through the native piece's remembered
# signature), then the same signature with an input that must be refused, which must raise the
# spec's error and leave the pool as it was. Run once with the native piece (the call path) and once
# without it (KV_CANARY_C_LAUNCHER=0: no native piece, no call path, every call checked).
_REMEMBERED_SIGNATURE = textwrap.dedent(
    """
    import numpy as np, torch
    from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch
    import os
    from kv_canary_torch.launch import native
    with_native = os.environ.get("KV_CANARY_C_LAUNCHER") != "0"
    served_calls = lambda: native.module().served() if with_native else 0
    from kv_canary_arrays.describe import torch_backed
    from shared_spec import errors, scatter_reference
    from tests.strategies import sentinel_pool

    flat_np, offsets_np, rows_np = np.arange(100, 112), np.array([0, 3, 10, 12]), np.array([2, 0, 3])
    cuda = lambda a: torch.from_numpy(np.asarray(a, dtype=np.int64)).cuda()
    flat, offsets, rows = cuda(flat_np), cuda(offsets_np), cuda(rows_np)
    fresh = lambda: torch.from_numpy(sentinel_pool(4, 5, seed=3)).cuda()
    expected = scatter_reference(flat_np, offsets_np, rows_np, sentinel_pool(4, 5, seed=3))

    def call(flat_in=flat, offsets=offsets, pool_out=None):
        launch(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool_out)

    def refused(message, **changed):
        pool = changed.get("pool_out")
        before = (pool.resolve_neg().clone() if pool is not None and pool.layout == torch.strided and torch_backed(pool)
                  else None)
        try:
            call(**changed)
        except (errors.KvCanaryTypeError, errors.KvCanaryValueError) as error:
            assert str(error) == message, (str(error), message)
        else:
            raise AssertionError("not refused: " + message)
        if before is not None:
            assert torch.equal(pool.resolve_neg(), before), message

    def remember():
        served = served_calls()
        for _ in range(3):  # the first call remembers the signature; the next ones take the call path
            pool = fresh()
            call(pool_out=pool)
            assert (pool.cpu().numpy() == expected).all()
        assert served_calls() - served >= (2 if with_native else 0)

    call(pool_out=fresh())  # compiles the kernel, loads the native piece and binds it: the next calls take the call path
    remember()
    with torch.inference_mode():
        inference_pool = fresh()
    refused(errors.NOT_WRITABLE.format(reason=errors.WRITE_INFERENCE), pool_out=inference_pool)
    with torch.inference_mode():  # inside inference mode the same pool is written
        call(pool_out=inference_pool)
    assert (inference_pool.cpu().numpy() == expected).all()
    remember()
    refused(errors.NEGATIVE_BIT.format(arg="flat_in"), flat_in=torch._neg_view(-flat), pool_out=fresh())
    remember()
    refused(errors.NEGATIVE_BIT.format(arg="pool_out"), pool_out=torch._neg_view(fresh()))
    remember()
    refused(errors.NOT_STRIDED.format(arg="offsets", layout="sparse_coo"), offsets=offsets.to_sparse(), pool_out=fresh())
    remember()
    refused(errors.NOT_STRIDED.format(arg="pool_out", layout="sparse_coo"), pool_out=fresh().to_sparse())
    remember()
    freed = fresh()
    freed.untyped_storage().resize_(0)  # as FSDP frees a parameter's storage
    refused(errors.NO_MEMORY.format(arg="pool_out"), pool_out=freed)
    remember()
    freed_flat = flat.clone()
    freed_flat.untyped_storage().resize_(0)
    refused(errors.NO_MEMORY.format(arg="flat_in"), flat_in=freed_flat, pool_out=fresh())
    remember()
    zero = torch._efficientzerotensor((4, 5), dtype=torch.int32, device="cuda")
    refused(errors.NO_MEMORY.format(arg="pool_out"), pool_out=zero)
    remember()
    # functionalize's wrappers read a null data pointer: the torch path runs them, also with nothing to write
    written = torch.func.functionalize(lambda pool: call(pool_out=pool) or pool)(fresh())
    assert (written.cpu().numpy() == expected).all()
    empty = torch.zeros(0, dtype=torch.int64, device="cuda")
    untouched = torch.func.functionalize(
        lambda pool: call(flat_in=empty, offsets=torch.zeros_like(offsets), pool_out=pool) or pool
    )(fresh())
    assert (untouched.cpu().numpy() == sentinel_pool(4, 5, seed=3)).all()
    remember()
    pools = torch.stack([fresh(), fresh()])  # each example's pool has the remembered signature
    torch.func.vmap(lambda pool: call(pool_out=pool) or pool)(pools)  # auto runs the torch path under vmap
    assert all((p.cpu().numpy() == expected).all() for p in pools)
    print("families ok")
    """
)


@pytest.mark.gpu
@pytest.mark.parametrize("native", ["native", "no-native"])
def test_the_remembered_signature_path_refuses_what_the_checks_refuse(native):
    from kv_canary_arrays.frameworks import cuda_available

    if not cuda_available():
        pytest.skip("needs a CUDA GPU")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if native == "no-native":
        env["KV_CANARY_C_LAUNCHER"] = "0"
    done = subprocess.run([sys.executable, "-c", _REMEMBERED_SIGNATURE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "families ok" in done.stdout
