"""ptxas' register counts and the PTX launch directives of Mosaic GPU kernel variants (GPU).

    python benchmarks/mosaic_registers.py

Compiles ``pallas_mosaic_gpu`` as it is and with parts of it changed (no
short vector copies; fewer stores per step of the short-window path) and prints, per variant, ptxas' resource line and the PTX directives
that bound a launch (``.maxnreg``, ``.minnctapersm``, ``.maxntid``,
``.reqntid``): which part of the kernel sets its register count, hence how
many programs fit on an SM. Variants that switch a path off compute wrong
pools; they are compiled and launched once, never checked.
"""

from __future__ import annotations

import glob
import os
import re
import sys
import tempfile

DUMP = tempfile.mkdtemp(prefix="mosaic-dump-")
os.environ.update(MOSAIC_GPU_DUMP_TO=DUMP, MOSAIC_GPU_DUMP_PTX="1", MOSAIC_GPU_DUMP_PTXAS="1")


def summary(before: set) -> list[str]:
    """The resource and directive lines of the files the last compile dumped."""
    out = []
    for path in sorted(set(glob.glob(os.path.join(DUMP, "*"))) - before):
        text = open(path, errors="replace").read()
        for line in text.splitlines():
            if re.search(r"registers|spill|\.maxnreg|\.minnctapersm|\.maxntid|\.reqntid|bytes stack frame", line):
                out.append(f"    {os.path.basename(path)[-28:]}: {line.strip()[:150]}")
        if path.endswith(".ptx"):
            out.append(f"    {os.path.basename(path)[-28:]}: {len(text.splitlines())} PTX lines, "
                       f"{len(re.findall(r'ld.global', text))} ld.global, {len(re.findall(r'st.global', text))} st.global")
    return out


def main() -> None:
    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, os.path.dirname(__file__))
    from kv_canary.bench import make_inputs
    from kv_canary_jax import pallas_mosaic_gpu as m

    variants = {
        "library kernel": {},
        "no short vector copies": {"vector_sizes": lambda tile: ()},
        "batch 8": {"STAGE_BATCH": 8},
    }
    for case in ((4096, 512), (256, 2048)):
        inputs = make_inputs(*case, False)
        for name, patch in variants.items():
            saved = {k: getattr(m, k) for k in patch}
            for k, v in patch.items():
                setattr(m, k, v)
            before = set(glob.glob(os.path.join(DUMP, "*")))
            try:
                f = jax.jit(lambda *a: m.scatter(*a))
                np.asarray(f(*(jax.device_put(x) for x in inputs)))
                print(f"{case} {name}: tile/lanes {m.launch_shape(case[0], case[1] + 1, inputs[0].shape[0])}", flush=True)
                print("\n".join(summary(before)), flush=True)
            except Exception as e:  # a variant that does not compile is a finding, not a stop
                print(f"{case} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            finally:
                for k, v in saved.items():
                    setattr(m, k, v)


if __name__ == "__main__":
    main()
