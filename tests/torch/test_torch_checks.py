"""The torch frontend's checks beyond the conformance cases.

Argument errors on layouts and devices the cases cannot express, the fast
predicate against the spec's ordered checker (with an independent brute-force
overlap oracle), backend choice, and the checked mode -- each error with its
exact class and message, and the pool untouched after every one.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kv_canary_torch import BACKENDS, launch_scatter_req_token_ids_kernel, op
from kv_canary_torch.checks import compiled_fast_check, fast_check
from shared_spec import checks, errors
from shared_spec.arguments import ARGUMENTS, ARGUMENT_NAMES
from shared_spec.checks import ArrayView, NotAnArray, first_error
from shared_spec.values import raise_first_value_error
from tests.children import ROOT, Child
from tests.profiles import property_settings
from tests.torch_support import as_numpy, device_for, sentinel

P = errors.PREFIX


def good_args(pool=None, device="cpu"):
    return {
        "flat_in": torch.tensor([11, 12, 13, 14, 15], dtype=torch.int64, device=device),
        "offsets": torch.tensor([0, 2, 5], dtype=torch.int64, device=device),
        "req_pool_indices": torch.tensor([1, 3], dtype=torch.int64, device=device),
        "pool_out": sentinel(4, 6, device=device) if pool is None else pool,
    }


def assert_raises_untouched(error_class, message, *, check_values=False, backend="auto", memory=None, **changes):
    """The call raises exactly ``error_class(message)`` and leaves pool_out's memory as it was."""
    args = good_args()
    args.update(changes)
    pool = args["pool_out"]
    watched = memory if memory is not None else pool
    before = as_numpy(watched).copy() if isinstance(watched, torch.Tensor) else None
    with pytest.raises(error_class) as raised:
        launch_scatter_req_token_ids_kernel(**args, check_values=check_values, backend=backend)
    assert type(raised.value) is error_class
    assert str(raised.value) == message
    if before is not None:
        np.testing.assert_array_equal(as_numpy(watched), before)


# -- argument checks the conformance cases do not reach ----------------------


@pytest.mark.parametrize(
    "value, type_name",
    [(b"abc", "bytes"), (3.5, "float"), ("abc", "str"), (range(5), "range")],
)
def test_non_tensors_are_named_by_type(value, type_name):
    assert_raises_untouched(errors.KvCanaryTypeError, f"{P} flat_in must be an array, got {type_name}", flat_in=value)


@pytest.mark.parametrize(
    "dtype, name",
    [(torch.float64, "float64"), (torch.int16, "int16"), (torch.complex64, "complex64"), (torch.uint8, "uint8")],
)
def test_dtype_names_are_canonical(dtype, name):
    rows = torch.tensor([1, 3]).to(dtype)
    assert_raises_untouched(errors.KvCanaryTypeError, f"{P} req_pool_indices must be int64, got {name}", req_pool_indices=rows)


# Arguments on two devices with data (an accelerator and the CPU): the conformance cases on a GPU
# (flat_in_on_host, rows_on_host, pool_on_host). A meta tensor, which holds no data, fails the storage
# check before the device check looks at it.


def test_a_pool_on_meta_is_refused_before_the_device_check():
    pool = torch.empty((4, 6), dtype=torch.int32, device="meta")
    with pytest.raises(errors.KvCanaryValueError) as raised:
        launch_scatter_req_token_ids_kernel(**good_args(pool))
    assert str(raised.value) == f"{P} pool_out is on meta, which holds no data; pass a tensor on a device with memory"


@pytest.mark.parametrize("arg", ["flat_in", "offsets", "req_pool_indices"])
def test_an_input_on_meta_is_refused_before_the_device_check(arg):
    value = good_args()[arg].to("meta")
    message = f"{P} {arg} is on meta, which holds no data; pass a tensor on a device with memory"
    assert_raises_untouched(errors.KvCanaryValueError, message, **{arg: value})


def overlapping_layouts():
    base = sentinel(4, 6, seed=1)
    flat = sentinel(1, 64, seed=2).reshape(-1)
    return [
        ("rows_broadcast", base[:1].expand(4, -1), base),
        ("columns_broadcast", base[:, :1].expand(-1, 6), base),
        ("unit_strides", flat.as_strided((4, 6), (1, 1)), flat),
        ("rows_interleave", flat.as_strided((4, 6), (2, 3)), flat),
    ]


@pytest.mark.parametrize("name, pool, memory", overlapping_layouts(), ids=[x[0] for x in overlapping_layouts()])
def test_pools_whose_cells_share_memory_are_refused(name, pool, memory):
    reason = errors.WRITE_OVERLAP.format(strides=tuple(pool.stride()))
    message = f"{P} pool_out cannot be written in place: strides {tuple(pool.stride())} make several cells share memory"
    assert message == errors.NOT_WRITABLE.format(reason=reason)
    assert_raises_untouched(errors.KvCanaryValueError, message, pool_out=pool, memory=memory, backend="torch")


WRITABLE_LAYOUTS = {
    "transposed": lambda d: sentinel(6, 4, seed=5, device=d).t(),
    "column_slice": lambda d: sentinel(4, 20, seed=3, device=d)[:, 5:11],
    "every_other_row": lambda d: sentinel(8, 6, seed=6, device=d)[::2],
    "every_other_column": lambda d: sentinel(4, 20, seed=3, device=d)[:, ::2][:, :6],
    "column_major": lambda d: sentinel(1, 64, seed=4, device=d).reshape(-1).as_strided((4, 6), (1, 4)),
    # cells 7r + 2c are distinct although no dimension steps over the other
    "interleaved_without_overlap": lambda d: sentinel(1, 64, seed=4, device=d).reshape(-1).as_strided((4, 6), (7, 2)),
    "one_row_broadcast": lambda d: sentinel(1, 6, seed=7, device=d).reshape(-1).expand(1, 6),
    "empty_broadcast": lambda d: sentinel(1, 0, device=d).expand(5, 0),
}


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("layout", list(WRITABLE_LAYOUTS))
def test_strided_pools_that_do_not_alias_are_written(layout, backend):
    from shared_spec import scatter_reference

    device = device_for(backend)
    pool = WRITABLE_LAYOUTS[layout](device)
    args = good_args(pool, device)
    n_rows = pool.shape[0]
    args["req_pool_indices"] = torch.tensor([n_rows - 1, 0 if n_rows > 1 else -1], dtype=torch.int64, device=device)
    expected = scatter_reference(*(as_numpy(args[name]) for name in ARGUMENT_NAMES))
    launch_scatter_req_token_ids_kernel(**args, backend=backend)
    np.testing.assert_array_equal(as_numpy(pool), expected)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_strided_inputs_are_read_through_their_strides(backend):
    from shared_spec import scatter_reference

    device = device_for(backend)
    flat = torch.arange(100, 140, dtype=torch.int64, device=device)[::3]  # stride 3
    offsets = torch.tensor([0, 9, 2, 9, 5, 9, 13, 9], dtype=torch.int64, device=device)[::2]  # [0, 2, 5, 13]
    rows = torch.tensor([2, 7, 0, 7, 1, 7], dtype=torch.int64, device=device)[::2]  # [2, 0, 1]
    pool = sentinel(3, 8, seed=8, device=device)
    expected = scatter_reference(as_numpy(flat), as_numpy(offsets), as_numpy(rows), as_numpy(pool))
    launch_scatter_req_token_ids_kernel(flat_in=flat, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend=backend)
    np.testing.assert_array_equal(as_numpy(pool), expected)


# -- the fast predicate agrees with the spec's ordered checks ----------------

DTYPES = [torch.int64, torch.int32, torch.float32, torch.bool, torch.uint8, torch.bfloat16]


def brute_force_view(value, written):
    """An ArrayView built without the frontend's code: overlap by enumerating cell offsets."""
    if not isinstance(value, torch.Tensor):
        return NotAnArray(type(value).__name__)
    dtype, device = str(value.dtype).removeprefix("torch."), str(value.device)
    if value.layout != torch.strided:
        return ArrayView((), dtype, device, layout=str(value.layout).removeprefix("torch."))
    problem = None
    if written and value.is_inference() and not torch.is_inference_mode_enabled():
        problem = errors.WRITE_INFERENCE
    elif written and value.dim() == 2:
        (rows, cols), (s0, s1) = value.shape, value.stride()
        cells = [r * s0 + c * s1 for r in range(rows) for c in range(cols)]
        if len(set(cells)) != len(cells):
            problem = errors.WRITE_OVERLAP.format(strides=tuple(value.stride()))
    lazy = checks.NEGATIVE_BIT if value.is_neg() else None
    return ArrayView(tuple(value.shape), dtype, device, problem, storage_problem=lazy)


@st.composite
def argument_sets(draw):
    args = {}
    for arg in ARGUMENTS:
        kind = draw(st.sampled_from(["good"] * 8 + ["rank", "dtype", "list", "none", "meta", "sparse", "negative"]))
        if kind == "list":
            args[arg.name] = [1, 2]
            continue
        if kind == "none":
            args[arg.name] = None
            continue
        rank = arg.rank if kind != "rank" else draw(st.integers(0, 3).filter(lambda r, a=arg: r != a.rank))
        dtype = getattr(torch, arg.dtype) if kind != "dtype" else draw(st.sampled_from(DTYPES))
        shape = tuple(draw(st.integers(0, 4)) for _ in range(rank))
        value = torch.full(shape, 3, dtype=dtype, device="meta" if kind == "meta" else "cpu")
        if kind == "sparse":
            value = value.to_sparse()
        elif kind == "negative":
            value = torch._neg_view(value)
        args[arg.name] = value
    if draw(st.booleans()):  # make the length rule hold more often than chance
        rows, offsets = args["req_pool_indices"], args["offsets"]
        if isinstance(rows, torch.Tensor) and rows.dim() == 1 and isinstance(offsets, torch.Tensor) and offsets.dim() == 1:
            args["offsets"] = torch.zeros(rows.shape[0] + 1, dtype=offsets.dtype, device=offsets.device)
    pool = args["pool_out"]
    plain = isinstance(pool, torch.Tensor) and pool.layout == torch.strided and not pool.is_neg()
    if plain and pool.dim() == 2 and pool.device.type == "cpu":
        layout = draw(st.sampled_from(["plain"] * 3 + ["strided", "expand_rows", "expand_cols", "transpose", "slice", "inference"]))
        rows, cols = pool.shape
        if layout == "strided":
            s0, s1 = draw(st.integers(0, 7)), draw(st.integers(0, 7))
            size = max(1, (rows - 1) * s0 + (cols - 1) * s1 + 1) if rows and cols else 1
            pool = torch.zeros(size, dtype=pool.dtype).as_strided((rows, cols), (s0, s1))
        elif layout == "expand_rows" and rows:
            pool = pool[:1].expand(rows + 1, -1)
        elif layout == "expand_cols" and cols:
            pool = pool[:, :1].expand(-1, cols + 1)
        elif layout == "transpose":
            pool = pool.t()
        elif layout == "slice":
            pool = torch.zeros((rows, cols + 3), dtype=pool.dtype)[:, 1 : 1 + cols]
        elif layout == "inference":
            with torch.inference_mode():
                pool = pool.clone()
        args["pool_out"] = pool
    return args


@property_settings(150)
@given(args=argument_sets())
def test_fast_predicate_agrees_with_first_error(args):
    views = {name: brute_force_view(args[name], name == "pool_out") for name in ARGUMENT_NAMES}
    error = first_error(views)
    values = [args[name] for name in ARGUMENT_NAMES]
    assert fast_check(*values) == (error is None), error
    # The compiled path's predicate is the same but for an inference pool, which the running graph refuses.
    pool = args["pool_out"]
    if not (isinstance(pool, torch.Tensor) and pool.layout == torch.strided and pool.is_inference()):
        assert compiled_fast_check(*values) == (error is None), error
    if error is not None:  # and the launcher raises exactly that error
        with pytest.raises(type(error)) as raised:
            launch_scatter_req_token_ids_kernel(**args, backend="torch")
        assert str(raised.value) == str(error)


# -- choosing a backend --------------------------------------------------------


@pytest.mark.parametrize("name", ["cuda", "Triton", "", None, 3, ["torch"]])
def test_unknown_backends_are_refused(name):
    message = errors.choice_error("backend", name, BACKENDS).args[0]
    assert message == f"{P} unknown backend {name!r}; expected one of 'auto', 'triton', 'torch', 'pallas'"
    assert_raises_untouched(errors.KvCanaryValueError, message, backend=name)


def test_argument_errors_come_before_backend_errors():
    flat = torch.tensor([1, 2, 3], dtype=torch.int32)
    assert_raises_untouched(errors.KvCanaryTypeError, f"{P} flat_in must be int64, got int32", flat_in=flat, backend="nope")


def test_backend_errors_come_before_value_errors():
    bad_offsets = torch.tensor([-1, 2, 5], dtype=torch.int64)
    message = f"{P} unknown backend 'nope'; expected one of 'auto', 'triton', 'torch', 'pallas'"
    assert_raises_untouched(errors.KvCanaryValueError, message, offsets=bad_offsets, check_values=True, backend="nope")


@pytest.mark.parametrize("backend, ran", [("auto", "torch"), ("torch", "torch"), ("triton", "triton")])
# auto on CPU tensors runs torch (test_torch_gpu covers auto on CUDA tensors)
def test_backend_runs_the_named_implementation(monkeypatch, backend, ran):
    calls = []
    for name in op.IMPLEMENTATIONS:
        monkeypatch.setitem(op.IMPLEMENTATIONS, name, lambda *args, name=name: calls.append(name))
    launch_scatter_req_token_ids_kernel(**good_args(device=device_for(ran)), backend=backend)
    assert calls == [ran]


# Triton reads TRITON_INTERPRET when the kernel is defined: a fresh process without it, and without a GPU.
TRITON_WITHOUT_INTERPRETER = (
    "import torch\n"
    "from kv_canary_torch import launch_scatter_req_token_ids_kernel as launch\n"
    "pool = torch.full((2, 3), -5, dtype=torch.int32)\n"
    "args = dict(flat_in=torch.tensor([1, 2]), offsets=torch.tensor([0, 2]), req_pool_indices=torch.tensor([1]), pool_out=pool)\n"
    "try:\n"
    "    launch(**args, backend='triton')\n"
    "except ValueError as error:\n"
    "    print(type(error).__name__, error, sep='|')\n"
    "assert (pool == -5).all()\n"
    "launch(**args)  # auto still runs, on torch\n"
    "assert pool.tolist() == [[-5, -5, -5], [1, 2, -5]], pool\n"
)
TRITON_WITHOUT_INTERPRETER_RUN = Child(
    ["-c", TRITON_WITHOUT_INTERPRETER], unset=["TRITON_INTERPRET"],
    set_env={"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")},
)


@TRITON_WITHOUT_INTERPRETER_RUN.ahead
def test_triton_on_the_cpu_without_the_interpreter_is_unavailable():
    done = TRITON_WITHOUT_INTERPRETER_RUN.run()
    assert done.returncode == 0, done.stderr
    expected = errors.unavailable_error("backend", "triton", errors.TRITON_NEEDS_CUDA)
    assert done.stdout.strip() == f"KvCanaryValueError|{expected}"


# -- the checked mode ---------------------------------------------------------


@property_settings(60)
@given(
    offsets=st.lists(st.integers(-3, 12), min_size=1, max_size=7),
    rows=st.lists(st.integers(-2, 6), max_size=6),
    n_tokens=st.integers(0, 12),
    backend=st.sampled_from(["torch", "triton"]),
)
def test_checked_mode_raises_the_spec_s_first_violation(offsets, rows, n_tokens, backend):
    rows = rows[: len(offsets) - 1]
    offsets = offsets[: len(rows) + 1]
    device = device_for(backend)
    offsets_t = torch.tensor(offsets, dtype=torch.int64, device=device)
    rows_t = torch.tensor(rows, dtype=torch.int64, device=device)
    try:
        raise_first_value_error(np.asarray(offsets, np.int64), np.asarray(rows, np.int64), n_tokens, 5)
    except errors.KvCanaryValueError as error:
        expected = error
    else:
        expected = None
    pool = sentinel(5, 4, seed=9, device=device)
    before = as_numpy(pool).copy()
    flat = torch.arange(n_tokens, dtype=torch.int64, device=device) + 7
    call = dict(flat_in=flat, offsets=offsets_t, req_pool_indices=rows_t, pool_out=pool, check_values=True, backend=backend)
    if expected is None:
        launch_scatter_req_token_ids_kernel(**call)
        return
    with pytest.raises(errors.KvCanaryValueError) as raised:
        launch_scatter_req_token_ids_kernel(**call)
    assert str(raised.value) == str(expected)
    np.testing.assert_array_equal(as_numpy(pool), before)


def test_checked_mode_reads_strided_views():
    offsets = torch.tensor([0, 99, 3, 99, 2], dtype=torch.int64)[::2]  # [0, 3, 2]: decreasing
    message = f"{P} offsets must be non-decreasing, got offsets[1]=3 > offsets[2]=2"
    rows = torch.tensor([0, 1], dtype=torch.int64)
    assert_raises_untouched(errors.KvCanaryValueError, message, offsets=offsets, req_pool_indices=rows, check_values=True)
