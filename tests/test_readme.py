"""The README as a newcomer uses it: every python block runs as written, and its install is the one CI runs.

Each ```python block runs in a fresh interpreter, from an empty directory, with
none of this test process's setup (conftest's ``XLA_FLAGS``, x64 and
``TRITON_INTERPRET`` are removed from the environment), so a block gets only
what it sets itself. The package is found through ``PYTHONPATH`` (the README's
``pip install -e`` does the same). The blocks assert their own results.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```$", README, flags=re.M | re.S)
# What this process set up that a reader's fresh shell does not have.
TEST_SETUP = ("XLA_FLAGS", "JAX_ENABLE_X64", "TRITON_INTERPRET")


def block_id(block: str) -> str:
    """A block's name in the test ids: its first import."""
    first = next(line for line in block.splitlines() if line.startswith(("import", "from")))
    return re.sub(r"\W+", "_", first)[:40]


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 3  # torch, JAX, sharded


@pytest.mark.parametrize("block", BLOCKS, ids=[block_id(b) for b in BLOCKS])
def test_block_runs_as_written(block, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in TEST_SETUP}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"README block failed:\n{block}\n--- stderr ---\n{done.stderr}"


CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def install_command(text: str) -> list[str]:
    """The words of the first ``pip install`` in ``text``, up to the next ``&&`` or line end."""
    line = next(line for line in text.splitlines() if "pip install" in line and not line.lstrip().startswith("#"))
    words = shlex.split(line[line.index("pip install"):])
    return words[: words.index("&&")] if "&&" in words else words


def test_the_install_is_the_one_ci_runs_and_names_the_cpu_index():
    """The README's first command installs the cpu and test extras with PyTorch's CPU index; CI the same, that index aside."""
    readme = install_command(README.split("```bash", 1)[1])
    assert readme == ["pip", "install", "-e", ".[cpu,test]", *CPU_INDEX.split()]
    ci = install_command((ROOT / ".ci" / "run").read_text().split("--upgrade pip", 1)[1])
    assert [word for word in ci if word != "-q"] == readme[: -len(CPU_INDEX.split())]


def test_the_readme_table_names_the_cpu_pins():
    pins = dict(
        re.fullmatch(r"([\w-]+)==([\w.]+)", spec).groups()
        for spec in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cpu"]
    )
    cpu_row = next(line for line in README.splitlines() if line.startswith("| CPU (CI"))
    cells = [cell.strip() for cell in cpu_row.strip("|").split("|")]
    assert cells[2:] == [pins["torch"] + "+cpu", pins["triton"], pins["jax"]]
    assert pins["jax"] == pins["jaxlib"]
