"""The README's shell blocks are valid bash, and every ``kv-canary`` command it shows parses."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from kv_canary import cli

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
TEXT = README.read_text() if README.exists() else None
pytestmark = pytest.mark.skipif(TEXT is None, reason="no README.md")
SHELL_BLOCK = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]{2,}\b")  # COMMAND, DIR: a word the reader replaces


def commands() -> list[str]:
    """Every ``kv-canary ...`` in a shell block or an inline code span, cut at ``&&``, ``;``, ``|`` and ``#``."""
    spans = [b for b in SHELL_BLOCK.findall(TEXT or "")] + re.findall(r"`(kv-canary [^`]*)`", TEXT or "")
    found = []
    for span in spans:
        for line in span.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|;|\|", line.split(" #")[0]):
                part = part.strip()
                if part.startswith("kv-canary") and not PLACEHOLDER.search(part):
                    found.append(part)
    return found


@pytest.mark.parametrize("block", SHELL_BLOCK.findall(TEXT or ""))
def test_shell_blocks_are_valid_bash(block):
    done = subprocess.run(["bash", "-n"], input=block, text=True, capture_output=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("command", commands() or ["kv-canary"])
def test_kv_canary_commands_parse(command):
    try:
        cli.parser().parse_args(shlex.split(command)[1:])
    except SystemExit as done:  # --help, --version
        assert done.code == 0


@pytest.mark.parametrize("block", re.findall(r"```python\n(.*?)```", TEXT or "", re.S))
def test_python_blocks_run(block):
    """Each Python example runs as written, in a fresh interpreter with JAX's defaults (x64 off)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    done = subprocess.run([sys.executable, "-c", block], text=True, capture_output=True, env=env,
                          cwd=README.parent)
    assert done.returncode == 0, done.stderr[-3000:]
