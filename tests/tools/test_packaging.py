"""What a packager reads in pyproject.toml: the Python floor, the license, the extras, and the install hints' names for them.

- ``requires-python`` is the oldest Python the classifiers name, and the
  classifiers name exactly the Pythons of the README's table of tested toolchains.
- The license is Apache-2.0 as an SPDX expression, with its LICENSE file.
- The ``cpu`` extra is the runtime stack only, pinned; the ``test`` extra holds
  the test tools, pinned; no module of the packages imports a test tool, so
  the runtime stack alone runs them.
- Every extra the install hints name (``shared_spec.errors``) exists and installs
  the framework it is named for.
"""

from __future__ import annotations

import ast
import pathlib
import re
import tomllib

from shared_spec import errors

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
EXTRAS = PROJECT["optional-dependencies"]
TEST_TOOLS = {"pytest", "pytest-xdist", "hypothesis"}
PACKAGES = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]


def distribution(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group().lower().replace("_", "-")


def python_versions_classified() -> list[tuple[int, int]]:
    found = [re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c) for c in PROJECT["classifiers"]]
    return sorted((3, int(m.group(1))) for m in found if m)


def test_the_python_floor_is_the_oldest_tested_python():
    versions = python_versions_classified()
    assert PROJECT["requires-python"] == ">=%d.%d" % versions[0]
    readme_rows = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith(("| CPU", "| GPU"))]
    tested = sorted({tuple(map(int, row.split("|")[2].strip().split("."))) for row in readme_rows})
    assert versions == tested


def test_the_license_is_apache_2_with_its_file():
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"] and "END OF TERMS AND CONDITIONS" in text
    # PEP 639: with a license expression, no license classifier
    assert not [c for c in PROJECT["classifiers"] if c.startswith("License ::")]
    assert PROJECT["keywords"]


def test_the_cpu_extra_is_the_runtime_stack_and_the_test_extra_the_test_tools_all_pinned():
    cpu, test = EXTRAS["cpu"], EXTRAS["test"]
    assert {distribution(r) for r in test} == TEST_TOOLS
    assert not {distribution(r) for r in cpu} & TEST_TOOLS
    assert all(re.fullmatch(r"[\w-]+==[\w.]+", r) for r in cpu + test), cpu + test
    for loose in ("torch", "jax"):
        assert not {distribution(r) for r in EXTRAS[loose]} & TEST_TOOLS


def test_no_module_of_the_packages_imports_a_test_tool():
    tools = {"pytest", "xdist", "hypothesis"}
    for package in PACKAGES:
        for path in (ROOT / package.rstrip("*")).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
                assert not {name.split(".")[0] for name in names} & tools, f"{path} imports {names}"


def test_the_install_hints_name_extras_that_install_their_frameworks():
    for module, extra in errors.EXTRA.items():
        assert module in {distribution(r) for r in EXTRAS[extra]}, (module, extra)
        assert module in {distribution(r) for r in EXTRAS["cpu"]}, module
    hint = errors.install_hint(["torch", "triton", "jax"])
    assert "pip install 'kv-canary[cpu]'" in hint and "pip install 'kv-canary[torch,jax]'" in hint
    assert "-e" not in hint.split() and "checkout" not in hint  # a wheel user has no checkout
    assert errors.not_installed(["jax"]) == f"jax is not installed; {errors.install_hint(['jax'])}"
    for reason, module in ((errors.TRITON_NOT_INSTALLED, "triton"), (errors.PALLAS_NEEDS_JAX, "jax")):
        assert f"pip install 'kv-canary[{errors.EXTRA[module]}]'" in reason


def test_the_cpu_install_hint_names_the_readmes_cpu_index_and_no_retries():
    """The hint's cpu install is the README's: without PyTorch's CPU index pip pulls the CUDA build, several GB more."""
    readme = (ROOT / "README.md").read_text()
    index = re.search(r"--extra-index-url (\S+)", readme).group(1)
    hint = errors.install_hint(["torch"])
    assert f"pip install 'kv-canary[cpu]' --extra-index-url {index} --retries 0 " in hint


def test_the_plot_extra_is_matplotlib_and_ci_installs_without_it():
    assert {distribution(r) for r in EXTRAS["plot"]} == {"matplotlib"}
    assert "plot" not in (ROOT / ".ci" / "run").read_text()
