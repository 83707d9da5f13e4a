"""Situations, not arguments, that once escaped the spec: threads, unbounded memory, vmap of the checked mode.

Beside ``test_hostile_inputs.py``: every call returns the reference's pool or
raises the spec's exception, whoever calls it, however often, from however
many threads, with temporaries bounded by the arguments' sizes.
"""

from __future__ import annotations

import threading

import pytest
import torch

from kv_canary_torch import launch_scatter_req_token_ids_kernel

# -- 1. threads: Triton's interpreter keeps its launch state in module globals -------------------


def test_interpreted_triton_launches_from_eight_threads_each_write_their_pool():
    """Once, about half such calls raised InterpreterErrors and some returned with a row unwritten."""
    from kv_canary_torch import triton_launch

    if not triton_launch.interpreted():
        pytest.skip("the Triton kernel is compiled here: launches run on the GPU, not in the interpreter")
    problems, calls = [], 6

    def work(thread: int) -> None:
        bs = 4 + thread
        expected = torch.arange(bs * 8, dtype=torch.int32).reshape(bs, 8)
        for _ in range(calls):
            pool = torch.full((bs, 8), -1, dtype=torch.int32)
            try:
                launch_scatter_req_token_ids_kernel(
                    flat_in=torch.arange(bs * 8), offsets=torch.arange(bs + 1) * 8, req_pool_indices=torch.arange(bs),
                    pool_out=pool, backend="triton",
                )
            except Exception as error:  # noqa: BLE001 - any exception is the failure being counted
                problems.append(f"{type(error).__name__}: {error}")
            else:
                if not torch.equal(pool, expected):
                    problems.append(f"thread {thread}: pool written wrongly")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert problems == [], f"{len(problems)} of {8 * calls} calls: {problems[:3]}"
