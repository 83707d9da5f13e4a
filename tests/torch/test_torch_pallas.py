"""The torch frontend's ``backend="pallas"``: the contract, which JAX kernel runs, and the reason when none can."""

import json

import numpy as np
import pytest
import torch
from hypothesis import given

pytest.importorskip("jax")
from kv_canary_jax import implementations  # noqa: E402
from kv_canary_torch import backends, launch_scatter_req_token_ids_kernel, pallas_backend  # noqa: E402
from kv_canary_torch.conformance import TorchRunner  # noqa: E402
from shared_spec import errors, scatter_reference  # noqa: E402
from tests.contract import INTERPRETED_CASE_EVERY, ScatterContract  # noqa: E402
from tests.profiles import property_settings  # noqa: E402
from tests.strategies import batches, large_batch  # noqa: E402
from tests.torch_support import FIRST_CALLS_RUN, first_calls_in_a_fresh_process  # noqa: E402


class TestTorchPallas(ScatterContract):
    # Pallas' interpreter on a CPU-only machine: a compile per shape, and per case a sample by default (tests/contract.py)
    case_every = INTERPRETED_CASE_EVERY
    examples = 4
    few_shapes = True

    @classmethod
    def make_runner(cls):
        return TorchRunner("pallas")


@FIRST_CALLS_RUN.ahead
def test_pallas_backend_needs_no_global_x64():
    """A torch user never touches JAX's configuration: the backend scopes x64 to its own call.

    In a fresh interpreter, where nothing (no conftest) has enabled x64 (``first_calls_in_a_fresh_process``).
    """
    facts = first_calls_in_a_fresh_process()
    assert facts["x64_before_pallas"] is False
    assert facts["pool_after_pallas"] == [[21, 22, -1], [-1, -1, -1], [-1, -1, -1], [11, 12, 13]]
    assert facts["x64_after_pallas"] is False  # the global flag is untouched
    assert facts["int_dtype_after_pallas"] == "int32"  # and so is what this thread sees afterwards


# -- which kernel runs, and when none can ---------------------------------------------------------

NO_TRITON_LOWERING = "ModuleNotFoundError: No module named 'jax.experimental.pallas.triton'"
NO_MOSAIC_GPU = "ImportError: No module named 'absl'"


@pytest.fixture
def fresh_choice(monkeypatch):
    """The backend cache emptied for the test (and restored after), so the probes it patches are asked."""
    monkeypatch.setattr(backends, "_resolved", {})
    return monkeypatch


@pytest.fixture
def chosen(monkeypatch):
    """Every choice the JAX frontend makes during the test, in order (implementations.choice, wrapped)."""
    choices, choice = [], implementations.choice

    def recording(*args):
        choices.append(choice(*args))
        return choices[-1]

    monkeypatch.setattr(implementations, "choice", recording)
    return choices


def launch(batch, device="cpu"):
    flat_in, offsets, rows, pool = (torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in batch)
    launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend="pallas")
    return pool.cpu().numpy()


def test_on_cpu_tensors_the_interpreter_runs_jaxs_default_kernel(chosen):
    """JAX's default order under interpret=True, XLA left out: Mosaic GPU where it imports (it does here: absl-py is
    in the cpu extra), the kernel the default compiles on Hopper."""
    assert pallas_backend.kernels("cpu") == ("mosaic", "pallas")
    expected = implementations.choice(None, "cpu", True)
    assert expected == ((None, "mosaic"),)
    chosen.clear()
    batch = large_batch(bs=6, width=150, seed=31)  # windows of 128 columns and more: the vector copies too
    np.testing.assert_array_equal(launch(batch), scatter_reference(*batch))
    assert chosen == [expected]


def test_on_cpu_tensors_the_interpreted_kernel_matches_the_reference():
    @property_settings(3)
    @given(batch=batches(max_rows=6, max_width=160, max_bs=6, max_tokens=400, few_shapes=True))
    def run(batch):
        np.testing.assert_array_equal(launch(batch), scatter_reference(*batch))

    run()


def test_without_the_triton_lowering_the_backend_runs_mosaic_gpu(fresh_choice, chosen):
    """A JAX that no longer ships Pallas' Triton lowering: the default's next Pallas kernel runs, no JAX option asked for."""
    fresh_choice.setattr(implementations, "pallas_triton_import_error", lambda: NO_TRITON_LOWERING)
    batch = large_batch(bs=4, width=9, seed=32)
    np.testing.assert_array_equal(launch(batch), scatter_reference(*batch))
    assert chosen == [((None, "mosaic"),)]


def test_without_mosaic_gpu_the_interpreter_runs_the_triton_lowered_kernel(fresh_choice, chosen):
    fresh_choice.setattr(implementations, "mosaic_import_error", lambda: NO_MOSAIC_GPU)
    batch = large_batch(bs=4, width=9, seed=33)
    np.testing.assert_array_equal(launch(batch), scatter_reference(*batch))
    assert chosen == [((None, "pallas"),)]


def no_kernel_message(device: str, causes: list[str]) -> str:
    reason = errors.PALLAS_BACKEND_NO_KERNEL.format(device=device, causes="; ".join(causes))
    return errors.unavailable_error("backend", "pallas", reason).args[0]


def assert_for_a_torch_caller(message: str) -> None:
    assert "implementation" not in message and "interpret" not in message, message


def test_without_any_pallas_kernel_the_backend_is_unavailable_with_the_specs_error(fresh_choice):
    fresh_choice.setattr(implementations, "pallas_triton_import_error", lambda: NO_TRITON_LOWERING)
    fresh_choice.setattr(implementations, "mosaic_import_error", lambda: NO_MOSAIC_GPU)
    expected = no_kernel_message("cpu", [
        errors.PALLAS_BACKEND_NOT_IMPORTABLE["mosaic"].format(error=NO_MOSAIC_GPU),
        errors.PALLAS_BACKEND_NOT_IMPORTABLE["pallas"].format(error=NO_TRITON_LOWERING),
    ])
    assert_for_a_torch_caller(expected)
    pool = torch.full((3, 4), -7, dtype=torch.int32)
    with pytest.raises(errors.KvCanaryValueError) as info:
        backends.resolve("pallas", pool)
    assert str(info.value) == expected
    flat_in, offsets, rows = torch.arange(4), torch.tensor([0, 4]), torch.tensor([1])
    with pytest.raises(errors.KvCanaryValueError) as info:
        launch_scatter_req_token_ids_kernel(flat_in=flat_in, offsets=offsets, req_pool_indices=rows, pool_out=pool, backend="pallas")
    assert str(info.value) == expected
    assert (pool == -7).all()  # nothing written
    assert backends.resolve("torch", pool) == "torch"  # the other backends are untouched


class FakeGpu:
    """What ``platforms.gpu_device`` answers on a machine whose JAX sees a CUDA GPU."""


@pytest.mark.parametrize("triton_lowering", [True, False])
@pytest.mark.parametrize("capability", [(8, 0), (9, 0)])
def test_on_cuda_tensors_the_compiled_default_kernel_or_the_reason(monkeypatch, capability, triton_lowering):
    """The GPU's choice, as JAX's default makes it: Mosaic GPU on Hopper and newer, else the Triton-lowered kernel."""
    from kv_canary_jax import platforms

    monkeypatch.setattr(platforms, "gpu_device", lambda: FakeGpu())
    monkeypatch.setattr(implementations, "gpu_capability", lambda: capability)
    monkeypatch.setattr(implementations, "mosaic_import_error", lambda: None)
    monkeypatch.setattr(implementations, "pallas_triton_import_error", lambda: None if triton_lowering else NO_TRITON_LOWERING)
    assert pallas_backend.kernels("cuda") == ("mosaic", "pallas")
    reason = pallas_backend.unavailable_reason("cuda")
    if capability >= (9, 0) or triton_lowering:
        assert reason is None
        return
    assert reason == errors.PALLAS_BACKEND_NO_KERNEL.format(device="cuda", causes="; ".join([
        errors.PALLAS_BACKEND_NEEDS_HOPPER.format(capability="8.0"),
        errors.PALLAS_BACKEND_NOT_IMPORTABLE["pallas"].format(error=NO_TRITON_LOWERING),
    ]))
    assert_for_a_torch_caller(reason)


def test_on_cuda_tensors_a_jax_without_a_gpu_is_the_reason(monkeypatch):
    from kv_canary_jax import platforms

    monkeypatch.setattr(platforms, "gpu_device", lambda: None)
    assert pallas_backend.unavailable_reason("cuda") == errors.PALLAS_BACKEND_NO_JAX_GPU
    assert_for_a_torch_caller(errors.PALLAS_BACKEND_NO_JAX_GPU)


def test_tensors_of_another_device_type_are_refused_by_name(fresh_choice):
    reason = errors.PALLAS_BACKEND_DEVICE.format(device="meta")
    with pytest.raises(errors.KvCanaryValueError) as info:
        backends.resolve("pallas", torch.empty((2, 2), dtype=torch.int32, device="meta"))
    assert str(info.value) == errors.unavailable_error("backend", "pallas", reason).args[0]


def test_the_choice_is_cached_per_device_type(fresh_choice):
    calls = []
    probe = pallas_backend.unavailable_reason
    fresh_choice.setattr(pallas_backend, "unavailable_reason", lambda device_type: calls.append(device_type) or probe(device_type))
    pool = torch.zeros((2, 2), dtype=torch.int32)
    assert [backends.resolve("pallas", pool) for _ in range(3)] == ["pallas"] * 3
    assert calls == ["cpu"]


@FIRST_CALLS_RUN.ahead
def test_choosing_another_backend_imports_no_jax():
    """In a fresh interpreter: resolving and running 'torch' and 'auto' never imports JAX."""
    facts = first_calls_in_a_fresh_process()
    assert facts["resolved"] == ["torch", "torch"]
    assert facts["pool_after_torch"] == [[0, 0, 0], [0, 1, 2]]
    assert facts["jax_after_torch"] == []


def test_kv_canary_check_skips_the_backend_with_the_reason(capsys, fresh_choice):
    from kv_canary import cli

    fresh_choice.setattr(implementations, "pallas_triton_import_error", lambda: NO_TRITON_LOWERING)
    fresh_choice.setattr(implementations, "mosaic_import_error", lambda: NO_MOSAIC_GPU)
    argv = ["check", "--json", "--quiet", "--backend", "torch/torch", "--backend", "torch/pallas", "--case", "one_request"]
    code = cli.main(argv)
    result = json.loads(capsys.readouterr().out)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert result["skipped"] == {"torch/pallas": no_kernel_message(device, [
        errors.PALLAS_BACKEND_NOT_IMPORTABLE["mosaic"].format(error=NO_MOSAIC_GPU),
        errors.PALLAS_BACKEND_NOT_IMPORTABLE["pallas"].format(error=NO_TRITON_LOWERING),
    ])}
    assert code == cli.EXIT_OK and set(result["runners"]) == {"torch/torch"}


def test_kv_canary_check_without_the_triton_lowering_runs_the_backend(capsys, fresh_choice):
    from kv_canary import cli

    fresh_choice.setattr(implementations, "pallas_triton_import_error", lambda: NO_TRITON_LOWERING)
    code = cli.main(["check", "--json", "--quiet", "--backend", "torch/pallas", "--case", "one_request", "--case", "flat_in_int32"])
    result = json.loads(capsys.readouterr().out)
    assert code == cli.EXIT_OK and result["skipped"] == {}
    assert (result["runners"]["torch/pallas"]["pass"], result["runners"]["torch/pallas"]["fail"]) == (2, 0)


@pytest.mark.gpu
def test_on_cuda_tensors_the_kernel_jax_picks_by_default_runs(chosen):
    """On the GPU machine: the plan is JAX's own default for CUDA (Mosaic GPU on Hopper and newer), and it is right."""
    default = implementations.choice(None, "cuda", False)
    assert default[0][1] != "xla", default
    if implementations.gpu_capability() >= implementations.MOSAIC_MIN_CAPABILITY:
        assert default == ((None, "mosaic"),)
    chosen.clear()
    for seed, (bs, width) in enumerate([(8, 300), (300, 1029), (64, 5)]):
        batch = large_batch(bs=bs, width=width, seed=40 + seed)
        np.testing.assert_array_equal(launch(batch, "cuda"), scatter_reference(*batch))
    assert chosen == [default] * 3
