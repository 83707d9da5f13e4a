"""Build the launcher's native piece ahead of time: ``python -m kv_canary_torch.launch.build``.

The launcher builds it itself at a process's first remembered call on a GPU
(``native.module``: seconds, once per machine and torch); this builds it now,
for a deployment that wants no process to pay that, say in a container
image's build (no GPU needed). It lands in ``$KV_CANARY_CACHE_DIR`` (default
``~/.cache/kv-canary``), which must be the same folder when the launcher runs.

Prints its path, or why it cannot be built. Exit status: 0 when built, 1 when not.
"""

from __future__ import annotations

import subprocess
import sys

from kv_canary_torch.launch import native


def main() -> int:
    try:
        print(f"native piece: {native.build()}")
    except (OSError, subprocess.SubprocessError) as error:
        print(f"native piece: not built: {type(error).__name__}: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
