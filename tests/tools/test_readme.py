"""The README and the docs pages as a newcomer uses them.

- Every ```python block, of the README and of every page under docs/, runs as
  written: in a fresh interpreter (started ahead: ``tests.children``), from an empty directory, with none of this
  test process's setup (conftest's ``XLA_FLAGS``, x64 and ``TRITON_INTERPRET``
  are removed from the environment), so a block gets only what it sets itself.
  The package is found through ``PYTHONPATH`` (the README's ``pip install -e``
  does the same). The one thing the blocks share with the test run is JAX's
  persistent compilation cache (conftest's ``JAX_COMPILATION_CACHE_DIR``, kept in
  the environment: it changes no result, and its keys hold the XLA flags, so a
  block's entries are its own): their programs compile once a machine, not
  once a run. The blocks assert their own results.
- The README's install is the one CI runs, and its table names the pins.
- The README stays skimmable: at most ``README_LIMIT`` bytes, no prose line
  (table rows included; code blocks aside) over ``LINE_LIMIT`` characters, no
  figure that goes stale with each change (test counts, timings).
- Every relative link of the README and the pages names a file that exists;
  the README's link texts are the paths themselves (a package index shows the
  README without the files), and every page it links to is in the source
  distribution (``MANIFEST.in``).
"""

from __future__ import annotations

import pathlib
import re
import shlex
import tomllib

import pytest

from tests.children import Child

ROOT = pathlib.Path(__file__).resolve().parents[2]
README_PATH = ROOT / "README.md"
README = README_PATH.read_text()
PAGES = [README_PATH, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", flags=re.M | re.S)
BLOCKS = [(page, code) for page in PAGES for lang, code in FENCE.findall(page.read_text()) if lang == "python"]
# What this process set up that a reader's fresh shell does not have.
TEST_SETUP = ("XLA_FLAGS", "JAX_ENABLE_X64", "TRITON_INTERPRET")
README_LIMIT = 14 * 1024  # bytes
LINE_LIMIT = 300  # characters, of a prose line (a table row is one)
# The README's install options CI leaves out: PyTorch's CPU index, and no retries of an index pip cannot reach.
CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu --retries 0"
LINK = re.compile(r"\[([^\]]+)\]\(([^)#\s]+)(?:#[^)]*)?\)")
CODE_SPAN = re.compile(r"`[^`\n]*`")


def block_id(page: pathlib.Path, block: str) -> str:
    """A block's name in the test ids: its page and its first import."""
    first = next(line for line in block.splitlines() if line.startswith(("import", "from")))
    return page.stem + "-" + re.sub(r"\W+", "_", first)[:40]


def prose_lines(text: str) -> list[str]:
    """The lines outside code blocks (table rows included)."""
    return FENCE.sub("", text).splitlines()


def links(text: str) -> list[tuple[str, str]]:
    """``(text, target)`` of every relative link outside code."""
    found = LINK.findall(CODE_SPAN.sub("", FENCE.sub("", text)))
    return [(label, target) for label, target in found if "://" not in target]


def test_the_readme_has_one_example_per_frontend_and_the_docs_the_rest():
    readme_blocks = [code for page, code in BLOCKS if page == README_PATH]
    assert len(readme_blocks) == 2
    assert "kv_canary_torch" in readme_blocks[0] and "kv_canary_jax" in readme_blocks[1]
    assert any("scatter_req_token_ids_sharded" in code for page, code in BLOCKS if page.name == "jax.md")


# Each block's run: a fresh interpreter in an empty directory of its own, started ahead (tests.children).
BLOCK_RUNS = [Child(["-c", block], unset=TEST_SETUP, set_env={"PYTHONPATH": str(ROOT)}, cwd=None) for _, block in BLOCKS]


@pytest.mark.parametrize("page, block, run", [
    pytest.param(page, block, run, marks=run.ahead, id=block_id(page, block)) for (page, block), run in zip(BLOCKS, BLOCK_RUNS)
])
def test_block_runs_as_written(page, block, run):
    done = run.run()
    assert done.returncode == 0, f"{page.name} block failed:\n{block}\n--- stderr ---\n{done.stderr}"


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


def test_the_readme_is_skimmable():
    assert len(README.encode()) <= README_LIMIT
    long = [line for line in prose_lines(README) if len(line) > LINE_LIMIT]
    assert not long, f"{len(long)} README lines over {LINE_LIMIT} characters: {[line[:60] for line in long]}"


def test_the_readme_has_no_figure_that_goes_stale():
    """No test counts or timings: they change with every commit; docs/test-timings.md and docs/performance.md record them."""
    prose = "\n".join(prose_lines(README))
    counts = re.findall(r"\b\d+ (?:passed|failed|skipped|tests)\b", prose)
    timings = re.findall(r"\b\d+(?:\.\d+)? ?(?:s|ms|us|µs|min|minutes|seconds)\b", prose)
    assert not counts and not timings, counts + timings
    assert "docs/test-timings.md" in README and "docs/performance.md" in README


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_relative_links_name_files_that_exist(page):
    for text, target in links(page.read_text()):
        assert (page.parent / target).is_file(), f"{page.name}: [{text}]({target}) names no file"
        if page == README_PATH:
            assert text == target, f"the README's link [{text}]({target}) does not name its path"


def test_every_page_the_readme_links_to_is_in_the_source_distribution():
    grafted = [line.split()[1] for line in (ROOT / "MANIFEST.in").read_text().splitlines() if line.startswith("graft ")]
    targets = [target for _, target in links(README)]
    assert targets
    for target in targets:
        # setuptools puts the README, pyproject.toml and the license files in every source distribution
        assert target == "LICENSE" or any(target.startswith(folder + "/") for folder in grafted), target
