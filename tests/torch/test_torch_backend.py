"""The vectorized torch backend where its memory bound shows: a batch that writes far more cells than the pool
holds, enumerated in chunks."""

from __future__ import annotations

import numpy as np
import torch

from kv_canary_torch import launch_scatter_req_token_ids_kernel
from shared_spec.reference import scatter_reference


def test_requests_rereading_flat_in_into_one_row_leave_one_of_their_values_in_each_cell():
    """600 requests, every other one the whole of flat_in into row 1: 300K cells into a pool of 2000."""
    n_tokens, bs = 1000, 600
    flat_in = np.arange(n_tokens, dtype=np.int64) * 3
    offsets = np.zeros(bs + 1, dtype=np.int64)
    offsets[1::2] = n_tokens  # segments [0, N), [N, 0) (empty), [0, N), ...
    rows = np.ones(bs, dtype=np.int64)
    start_cols = np.arange(bs, dtype=np.int64) % 7
    pool = np.full((2, 1000), -1, dtype=np.int32)
    pool_t = torch.from_numpy(pool.copy())
    launch_scatter_req_token_ids_kernel(flat_in=torch.from_numpy(flat_in), offsets=torch.from_numpy(offsets),
                                        req_pool_indices=torch.from_numpy(rows), pool_out=pool_t,
                                        start_cols=torch.from_numpy(start_cols), backend="torch")
    # Each writing request's cells, alone: the cell must hold one of the values written to it (the spec's rule).
    alone = [scatter_reference(flat_in, [0, n_tokens], [1], pool, [s]) for s in sorted(set(start_cols[::2]))]
    got = pool_t.numpy()
    assert (got[0] == -1).all() and (got[1] != -1).all()
    assert np.any([got == one for one in alone], axis=0)[1].all()
