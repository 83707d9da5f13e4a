"""``kv-canary plot`` and docs/performance.md's tables: drawn and written from a bench run's JSON, on any machine.

The figures are docs/performance.json (the last H200 run); the plot tests
skip without matplotlib (the optional ``plot`` extra, which CI leaves out).
"""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys

import pytest

from kv_canary import bench_markdown, cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAVED = json.loads((ROOT / "docs" / "performance.json").read_text())
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_the_page_is_its_json_rendered():
    """docs/performance.md is what the renderer writes from docs/performance.json, the step section kept."""
    page = (ROOT / "docs" / "performance.md").read_text()
    rendered = bench_markdown.document(SAVED["meta"], SAVED["rows"])
    assert page.startswith(rendered.rstrip("\n") + "\n\n" + bench_markdown.STEP_TITLE)


def test_each_table_answers_one_question_with_few_columns():
    text = bench_markdown.document(SAVED["meta"], SAVED["rows"])
    heads = [line for line in text.splitlines() if line.startswith("| case |") or line.startswith("| pattern |")]
    assert len(heads) == len(bench_markdown.TABLES) + 1  # the host table
    assert all(line.count("|") - 1 <= 10 for line in heads), heads
    assert max(len(line) for line in text.splitlines()) < 200
    assert "Measured 2026-12-01 at commit f0e85aa; python 3.12.3" in text


def test_a_run_without_a_figure_leaves_its_cells_and_tables_out():
    rows = copy.deepcopy(SAVED["rows"][:2])
    for row in rows:
        row["results"] = {k: v for k, v in row["results"].items() if not k.startswith(("jax_", "mosaic", "pallas"))}
    del rows[1]["results"]["torch_triton_chained_us"]
    text = bench_markdown.document({"gpu": "X", "date": "2026-01-02", "commit": "abc1234"}, rows)
    assert "## JAX" not in text and "host time" not in text
    assert "| 1 x 512 | 512 | 4.54 | 4.77 | 0.95 |  | 1.50 | 0.95 |" in text
    assert "Measured 2026-01-02 at commit abc1234; gpu X." in text


def test_writing_keeps_the_sections_from_the_step_section_on_which_the_bench_does_not_measure(tmp_path):
    page = tmp_path / "performance.md"
    kept = f"{bench_markdown.STEP_TITLE}\n\nthe step figures\n\n## a later section\n\nlater\n"
    page.write_text("# old\n\n## torch: old table\n\nold\n\n" + kept)
    bench_markdown.write(page, "# new\n\nnew figures\n")
    assert page.read_text() == "# new\n\nnew figures\n\n" + kept
    bench_markdown.write(page, f"# newer\n\n{bench_markdown.STEP_TITLE}\n\nnew step figures\n")
    assert page.read_text().endswith("new step figures\n") and "the step figures" not in page.read_text()


def test_without_matplotlib_the_import_names_the_plot_extra_and_the_command_exits_3():
    program = "import sys; sys.modules['matplotlib'] = None\n" + (
        "try:\n    import kv_canary.plot\nexcept ImportError as e:\n    print(e)\n"
        "from kv_canary.cli import main\nsys.exit(main(['plot', 'docs/performance.json', '--out', '/nonexistent']))"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.stdout.startswith("kv_canary.plot needs matplotlib: pip install 'kv-canary[plot]'")
    assert done.returncode == cli.EXIT_NOTHING_RAN and "pip install 'kv-canary[plot]'" in done.stderr


def test_plot_refuses_a_file_that_is_not_a_bench_run(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert cli.main(["plot", str(bad), "--out", str(tmp_path)]) == cli.EXIT_USAGE
    assert "is not the JSON of kv-canary bench --json" in capsys.readouterr().err


def test_plot_draws_both_pictures_from_a_run(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    saved = tmp_path / "bench.json"
    saved.write_text(json.dumps(SAVED))
    assert cli.main(["plot", str(saved), "--out", str(tmp_path / "out"), "--json"]) == cli.EXIT_OK
    written = json.loads(capsys.readouterr().out)["written"]
    assert [pathlib.Path(p).name for p in written] == ["performance-grid.png", "performance-host.png"]
    assert all(pathlib.Path(p).read_bytes().startswith(PNG_MAGIC) for p in written)


def test_plot_draws_only_what_the_run_has(tmp_path):
    pytest.importorskip("matplotlib")
    from kv_canary import plot

    no_host = {"meta": {k: v for k, v in SAVED["meta"].items() if k != "host"}, "rows": SAVED["rows"]}
    assert [p.name for p in plot.write(no_host, tmp_path)] == ["performance-grid.png"]
    host_only = {"meta": SAVED["meta"], "rows": []}
    assert [p.name for p in plot.write(host_only, tmp_path / "h")] == ["performance-host.png"]
    assert plot.write({"meta": {}, "rows": []}, tmp_path / "none") == []


def test_every_picture_of_the_committed_figures_is_committed(tmp_path):
    """Each PNG that kv-canary plot draws from docs/performance.json lies in docs/, where docs/performance.md shows it."""
    pytest.importorskip("matplotlib")
    from kv_canary import plot

    for path in plot.write(SAVED, tmp_path):
        assert (ROOT / "docs" / path.name).is_file()
        assert (ROOT / "docs" / path.name).stat().st_size > 10_000  # a picture, not an empty canvas
        assert f"]({path.name})" in (ROOT / "docs" / "performance.md").read_text()
