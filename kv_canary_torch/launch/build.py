"""Build the call path's two native pieces ahead of time: ``python -m kv_canary_torch.launch.build``.

The launcher builds them itself at a process's first bound kernel (the C
module in well under a second, the C++ tensor reader in seconds: see
``tensor_meta``), once per machine and torch; this builds both now, for a
deployment that wants no process to pay that, say in a container image's
build (no GPU needed). They land in ``$KV_CANARY_CACHE_DIR`` (default
``~/.cache/kv-canary``), which must be the same folder when the launcher runs.

Prints each piece's path, or why it cannot be built. Exit status: 0 when both
are built, 1 when either cannot be.
"""

from __future__ import annotations

import subprocess
import sys

from kv_canary_torch.launch import native, tensor_meta

PIECES = (("C launcher", native.build), ("C++ tensor reader", tensor_meta.build))


def main() -> int:
    failed = False
    for name, build in PIECES:
        try:
            print(f"{name}: {build()}")
        except (OSError, subprocess.SubprocessError) as error:
            print(f"{name}: not built: {type(error).__name__}: {error}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
