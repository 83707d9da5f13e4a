"""The command line: parsing, exit codes, one JSON object with --json, help texts that state a time."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from kv_canary import check, cli

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def only_json(out: str) -> dict:
    found = json.loads(out)  # raises unless stdout is exactly one JSON document
    assert isinstance(found, dict) and {"ok", "exit_code"} <= found.keys()
    return found


def test_bare_command_prints_the_help(capsys):
    code, out, _ = run(capsys)
    assert code == cli.EXIT_OK and "check" in out and "bench" in out and "plot" in out


def test_version_names_the_frameworks(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == cli.EXIT_OK and out.startswith("kv-canary ") and "torch" in out and "jax" in out


@pytest.mark.parametrize("command", ["check", "bench", "plot"])
def test_each_help_lists_exit_codes_and_a_time(capsys, command):
    code, out, _ = run(capsys, command, "--help")
    assert code == cli.EXIT_OK and "exit codes:" in out
    assert re.search(r"\b\d+ (s|seconds?|minutes?)\b|a few seconds", out), out


@pytest.mark.parametrize("argv", [["nope"], ["check", "--bogus"], ["check", "--case", "no_such_case"],
                                  ["check", "--backend", "tensorflow"], ["bench", "--bogus"], ["check", "--json", "--cas", "x"]])
def test_usage_errors_exit_2_with_one_json_object(capsys, argv):
    code, out, err = run(capsys, *argv, "--json")
    assert code == cli.EXIT_USAGE
    found = only_json(out)
    assert found["exit_code"] == 2 and not found["ok"] and found["error"]
    assert err  # the reason on stderr too


def test_usage_error_without_json_prints_nothing_on_stdout(capsys):
    code, out, err = run(capsys, "check", "--case", "no_such_case")
    assert code == cli.EXIT_USAGE and out == "" and "no_such_case" in err


def test_bench_without_a_gpu_exits_3_before_importing_a_framework():
    script = ("import sys; from kv_canary import cli; code = cli.main(['bench', '--json']); "
              "assert not {'torch', 'jax', 'triton'} & set(sys.modules), sorted(sys.modules); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), cwd=ROOT)
    assert done.returncode == cli.EXIT_NOTHING_RAN, done.stderr
    found = only_json(done.stdout)
    assert "GPU" in found["error"]


def test_bench_names_missing_frameworks_once(capsys, monkeypatch):
    from kv_canary import bench

    monkeypatch.setattr(bench, "gpu_visible", lambda: True)
    monkeypatch.setattr(bench, "installed", lambda module: False)
    code, out, _ = run(capsys, "bench", "--json")
    found = only_json(out)
    assert code == cli.EXIT_NOTHING_RAN
    assert found["error"].count("not installed") == 1 and "torch" in found["error"] and "jax" in found["error"]


def test_a_command_that_prints_leaves_stdout_to_the_json(capsys, monkeypatch):
    def noisy(args):
        print("a library's chatter")
        return cli.EXIT_OK, {"figure": 1}, "the table"

    monkeypatch.setattr(check, "run", noisy)
    code, out, err = run(capsys, "check", "--json")
    assert code == 0 and only_json(out)["figure"] == 1 and "chatter" in err
    code, out, _ = run(capsys, "check")
    assert out == "the table\n"


@pytest.mark.parametrize("raised, code", [(KeyboardInterrupt, cli.EXIT_INTERRUPTED), (RuntimeError("bug"), cli.EXIT_FAILED),
                                          (cli.nothing_ran("no runner"), cli.EXIT_NOTHING_RAN)])
def test_interrupts_crashes_and_refusals_still_give_one_json_object(capsys, monkeypatch, raised, code):
    def fails(args):
        raise raised

    monkeypatch.setattr(check, "run", fails)
    got, out, _ = run(capsys, "check", "--json")
    assert got == code and only_json(out)["exit_code"] == code and only_json(out)["error"]


def test_plot_refuses_a_file_that_is_not_a_bench_run(capsys, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    assert run(capsys, "plot", str(bad))[0] == cli.EXIT_USAGE
    assert run(capsys, "plot", str(tmp_path / "missing.json"))[0] == cli.EXIT_USAGE


def test_plot_draws_or_names_the_extra(capsys, tmp_path):
    source = tmp_path / "performance.json"
    row = {"workload": "8x128", "tokens": 1024, "ours_us": 1.0, "sglang_us": 2.0, "ours_chained_us": 1.0,
           "sglang_chained_us": 1.5}
    source.write_text(json.dumps({"parts": {"device": {"measured": {"gpu": "test", "date": "today"}, "rows": [row]}}}))
    code, out, err = run(capsys, "plot", str(source))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert code == cli.EXIT_NOTHING_RAN and "kv-canary[plot]" in err
    else:
        assert code == cli.EXIT_OK and (tmp_path / "performance.png").exists()
