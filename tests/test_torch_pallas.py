"""The contract on the torch frontend's ``backend="pallas"``: the JAX kernel on torch memory."""

from kv_canary_torch.conformance import TorchRunner
from tests.contract import ScatterContract


class TestTorchPallas(ScatterContract):
    examples = 4  # Pallas' interpreter on a CPU-only machine: a compile per shape

    @classmethod
    def make_runner(cls):
        return TorchRunner("pallas")


def test_pallas_backend_needs_no_global_x64():
    """A torch user never touches JAX's configuration: the backend scopes x64 to its own call.

    Run in a fresh interpreter, where nothing (no conftest) has enabled x64.
    """
    import subprocess
    import sys
    import textwrap

    program = textwrap.dedent(
        """
        import jax, torch
        from kv_canary_torch import launch_scatter_req_token_ids_kernel, pack_token_ids
        assert not jax.config.jax_enable_x64
        flat_in, offsets = pack_token_ids([[11, 12, 13], [21, 22]])
        pool = torch.full((4, 3), -1, dtype=torch.int32)
        launch_scatter_req_token_ids_kernel(
            flat_in=flat_in, offsets=offsets, req_pool_indices=torch.tensor([3, 0]), pool_out=pool, backend="pallas"
        )
        assert pool.tolist() == [[21, 22, -1], [-1, -1, -1], [-1, -1, -1], [11, 12, 13]], pool
        assert not jax.config.jax_enable_x64  # the global flag is untouched
        assert jax.numpy.asarray([1]).dtype == "int32"  # and so is what this thread sees afterwards
        """
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "JAX_ENABLE_X64"}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
