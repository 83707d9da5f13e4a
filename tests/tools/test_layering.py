"""Imports point down: read from every .py file's import statements (``ast``), nothing imported.

shared_spec imports no framework and nothing of ours; kv_canary_arrays, of ours, only shared_spec; the two frontends
neither each other nor the tools; the tools (kv_canary, benchmarks) may import everything.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
OURS = ("shared_spec", "kv_canary_arrays", "kv_canary_torch", "kv_canary_jax", "kv_canary")
FRAMEWORKS = ("torch", "triton", "jax", "jaxlib")
FORBIDDEN = {
    "shared_spec": set(OURS[1:]) | set(FRAMEWORKS),
    "kv_canary_arrays": set(OURS[2:]),
    "kv_canary_torch": {"kv_canary_jax", "kv_canary"},
    "kv_canary_jax": {"kv_canary_torch", "kv_canary"},
}


def imported(path: pathlib.Path, package: str) -> set[str]:
    """The top-level names of every module ``path`` imports (relative imports resolve to ``package``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(package if node.level else node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_down(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package} has no .py files"
    wrong = {str(f.relative_to(ROOT)): sorted(imported(f, package) & FORBIDDEN[package]) for f in files}
    assert not {f: names for f, names in wrong.items() if names}


def test_the_reader_sees_relative_and_nested_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from . import x\nimport kv_canary_jax.api as a\ndef f():\n    from torch import nn\n")
    assert imported(source, "kv_canary_torch") == {"kv_canary_torch", "kv_canary_jax", "torch"}
