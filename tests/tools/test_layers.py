"""The layers, read from the source: every import (module level or inside a function) points down.

Bottom up: ``shared_spec`` (no framework, nothing of ours), ``kv_canary_arrays``
(only ``shared_spec``; torch, JAX and numpy only inside functions), the two
frontends (neither imports the other, except the torch frontend's
``backend="pallas"`` module calling the JAX frontend), and the tools
(``kv_canary``), which only tools, tests and benchmarks import. No module
imports, directly or through others, a module that imports it back.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("shared_spec", "kv_canary_arrays", "kv_canary_torch", "kv_canary_jax", "kv_canary")
FRAMEWORKS = ("torch", "jax", "jaxlib", "triton")
TORCH_TO_JAX = "kv_canary_torch.pallas_backend"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _all_modules() -> set[str]:
    return {_module_name(path) for package in PACKAGES for path in (ROOT / package).rglob("*.py")}


def _imports(path: pathlib.Path, modules: set[str]):
    """``(imported module, at module level)`` for every import statement in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # "from pkg import mod" names the submodule pkg.mod; "from pkg import name", pkg itself.
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names]
        else:
            continue
        for name in names:
            yield name, id(node) in top_level


def _graph() -> dict[str, set[tuple[str, bool]]]:
    graph, modules = {}, _all_modules()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            graph[_module_name(path)] = set(_imports(path, modules))
    return graph


GRAPH = _graph()
MODULES = set(GRAPH)


def _package(name: str) -> str:
    return name.split(".")[0]


def _ours(graph_entry) -> set[str]:
    return {name for name, _ in graph_entry if name in MODULES}


def _violations(package: str, rule) -> list[str]:
    return [
        f"{module} imports {name}"
        for module, imports in GRAPH.items()
        if _package(module) == package
        for name, top in imports
        if not rule(module, name, top)
    ]


def test_the_graph_is_not_empty():
    assert {"shared_spec.errors", "kv_canary_arrays.describe", "kv_canary_torch.checks", "kv_canary_jax.api"} <= MODULES


def test_shared_spec_imports_no_framework_and_nothing_of_ours():
    def rule(module, name, top):
        root = _package(name)
        return root not in FRAMEWORKS and (root not in PACKAGES or root == "shared_spec")

    assert _violations("shared_spec", rule) == []


def test_the_array_layer_imports_only_the_spec_and_frameworks_lazily():
    def rule(module, name, top):
        root = _package(name)
        if root in PACKAGES:
            return root in ("shared_spec", "kv_canary_arrays")
        return not (top and root in FRAMEWORKS + ("numpy",))

    assert _violations("kv_canary_arrays", rule) == []


def test_the_jax_frontend_imports_neither_torch_nor_the_tools():
    def rule(module, name, top):
        return _package(name) not in ("torch", "kv_canary_torch", "kv_canary")

    assert _violations("kv_canary_jax", rule) == []


def test_the_torch_frontend_reaches_jax_only_through_its_pallas_backend():
    def rule(module, name, top):
        if _package(name) == "kv_canary":
            return False
        return _package(name) not in ("jax", "kv_canary_jax") or module == TORCH_TO_JAX

    assert _violations("kv_canary_torch", rule) == []


def test_only_tools_tests_and_benchmarks_import_the_tools():
    users = [f"{m} imports {n}" for m, imports in GRAPH.items() if _package(m) != "kv_canary" for n, _ in imports if _package(n) == "kv_canary"]
    assert users == []


def test_no_import_circles():
    """No module reaches itself through the imports of our modules (lazy ones included)."""
    edges = {module: _ours(imports) - {module} for module, imports in GRAPH.items()}
    circles = []
    for start in sorted(edges):
        stack, seen = [(start, (start,))], set()
        while stack:
            node, path = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    circles.append(" -> ".join(path + (start,)))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + (nxt,)))
    assert circles == []


@pytest.mark.parametrize("blocked", [("torch",), ("jax", "jaxlib"), ("torch", "jax", "jaxlib", "triton")])
def test_the_array_layer_and_the_spec_import_without_any_framework(blocked):
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "import shared_spec, kv_canary_arrays\n"
        "from kv_canary_arrays import adopt, bridge, describe, devices, frameworks\n"
        "assert describe.describe([1], frontend='torch').type_name == 'list'\n"
        "assert not (frameworks.is_torch(0) or frameworks.is_jax(0) or frameworks.is_numpy(0))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
