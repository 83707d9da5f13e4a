"""The lean host path (``kv_canary_torch.driver_launch``) without a GPU: what reaches the driver, and when it is refused.

The driver's two functions are replaced by Python fakes that read the
parameter buffer the way ``cuLaunchKernel`` does (an array of addresses, one
per kernel parameter), so the marshalling is checked value by value; the GPU
tests (``test_torch_gpu.py``) run the real driver call.
"""

from __future__ import annotations

import ctypes
import threading
import time
from types import SimpleNamespace

import pytest

from kv_canary_torch import driver_launch

SIZES = [8] * driver_launch.POINTERS + [4] * driver_launch.INTS + [8, 8]  # Triton 3.5+: two scratch pointers
INTS = (1000, 7, 389, 1, 1, 1, 389, 1)


def fake_param_info(sizes):
    def param_info(function, index, offset, size):
        if index >= len(sizes):
            return 1  # CUDA_ERROR_INVALID_VALUE: no such parameter
        size._obj.value = sizes[index]
        offset._obj.value = sum(sizes[:index])
        return driver_launch.CUDA_SUCCESS

    return param_info


class FakeLaunch:
    """Records what a launch passes, reading each parameter from the address the buffer holds."""

    def __init__(self, n_params, status=driver_launch.CUDA_SUCCESS, pause=0.0):
        self.n_params, self.status, self.pause, self.calls = n_params, status, pause, []

    def __call__(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        if self.pause:
            time.sleep(self.pause)  # another thread runs here, as while a real driver call holds no GIL
        addresses = [params[i] for i in range(self.n_params)]
        values = [ctypes.c_uint64.from_address(a).value for a in addresses[: driver_launch.POINTERS]]
        values += [ctypes.c_int32.from_address(a).value for a in addresses[driver_launch.POINTERS : driver_launch.POINTERS + driver_launch.INTS]]
        values += [ctypes.c_uint64.from_address(a).value for a in addresses[driver_launch.POINTERS + driver_launch.INTS :]]
        self.calls.append(dict(function=function.value, grid=(gx, gy, gz), block=(bx, by, bz), shared=shared, stream=stream, values=values, extra=extra))
        return self.status


def compiled(**metadata):
    fields = dict(num_warps=4, shared=0, num_ctas=1, cluster_dims=(1, 1, 1), global_scratch_size=0, profile_scratch_size=0)
    fields.update(metadata)
    return SimpleNamespace(function=0xABC0, metadata=SimpleNamespace(**fields))


def prepared(kernel=None, sizes=SIZES, ints=INTS, **launch_options):
    fake = FakeLaunch(len(sizes), **launch_options)
    return driver_launch.prepare(kernel or compiled(), (64, 3), ints, functions=(fake, fake_param_info(sizes))), fake


def test_every_parameter_reaches_the_driver_in_order():
    launch, fake = prepared()
    pointers = (0x7F0000001000, 0x7F0000002000, 0x7F0000003000, 0x7F0000004000)
    assert launch.launch(pointers, stream=0x55)
    (call,) = fake.calls
    assert call["values"] == [*pointers, *INTS, 0, 0]  # scratch pointers null
    assert call["function"] == 0xABC0 and call["grid"] == (64, 3, 1) and call["block"] == (128, 1, 1)
    assert call["shared"] == 0 and call["stream"] == 0x55 and call["extra"] is None


def test_negative_ints_and_new_pointers_each_call():
    launch, fake = prepared(ints=(5, -1, 2**31 - 1, -(2**31), 0, 1, 2, 3))
    for k in range(3):
        assert launch.launch((16 * k, 32 * k, 48 * k, 2**63 + 16 * k), stream=k)
    assert [c["values"][:4] for c in fake.calls] == [[16 * k, 32 * k, 48 * k, 2**63 + 16 * k] for k in range(3)]
    assert all(c["values"][4:12] == [5, -1, 2**31 - 1, -(2**31), 0, 1, 2, 3] for c in fake.calls)


@pytest.mark.parametrize("trailing", [0, 1, 2])
def test_any_triton_scratch_arity(trailing):
    sizes = SIZES[: len(SIZES) - 2 + trailing]
    launch, fake = prepared(sizes=sizes)
    assert launch.launch((16, 32, 48, 64), stream=1)
    assert fake.calls[0]["values"] == [16, 32, 48, 64, *INTS] + [0] * trailing


def test_a_refusal_is_reported_not_raised():
    launch, fake = prepared(status=201)  # CUDA_ERROR_INVALID_CONTEXT
    assert launch.launch((16, 32, 48, 64), stream=1) is False


@pytest.mark.parametrize(
    "kernel, sizes, ints",
    [
        (compiled(global_scratch_size=128), SIZES, INTS),  # needs scratch memory Triton would allocate
        (compiled(profile_scratch_size=64), SIZES, INTS),
        (compiled(num_ctas=2), SIZES, INTS),
        (compiled(cluster_dims=(2, 1, 1)), SIZES, INTS),
        (compiled(launch_pdl=True), SIZES, INTS),
        (compiled(launch_cooperative_grid=True), SIZES, INTS),
        (compiled(num_warps=0), SIZES, INTS),
        (compiled(), [8] * 4 + [8] * 8 + [8, 8], INTS),  # int64 ints: another specialization
        (compiled(), [8] * 3 + [4] * 8, INTS),  # a parameter missing
        (compiled(), SIZES + [8], INTS),  # more trailing parameters than Triton adds
        (compiled(), SIZES, INTS[:7]),
        (compiled(), SIZES, (*INTS[:7], 2**31)),  # an int past int32
        (SimpleNamespace(function=None, metadata=compiled().metadata), SIZES, INTS),  # handles not loaded
    ],
)
def test_refused_where_it_would_not_launch_what_triton_launches(kernel, sizes, ints):
    launch, _ = prepared(kernel, sizes=sizes, ints=ints)
    assert launch is None


def test_no_driver_library_means_no_driver_path(monkeypatch):
    monkeypatch.setattr(driver_launch, "_driver", False)
    assert driver_launch.prepare(compiled(), (1, 1), INTS) is None


def test_threads_never_launch_with_each_others_pointers():
    """The buffer is shared per plan: the lock keeps each launch's pointers its own while the driver call runs."""
    launch, fake = prepared(pause=0.001)

    def worker(t):
        for k in range(20):
            ident = 1000 * t + k
            assert launch.launch((16 * ident, 16 * ident + 1, 16 * ident + 2, 16 * ident + 3), stream=ident)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(fake.calls) == 80
    for call in fake.calls:
        ident = call["stream"]
        assert call["values"][:4] == [16 * ident, 16 * ident + 1, 16 * ident + 2, 16 * ident + 3]
