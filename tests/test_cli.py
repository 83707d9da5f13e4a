"""The ``kv-canary`` command line: help, version, exit codes, subsets, progress, JSON, missing frameworks.

Most tests call ``main([...])`` in this process over a one- or two-backend,
few-case subset (the frameworks are already imported, so each takes well under
a second). What needs a process of its own runs ``python -c`` in a subprocess:
a framework made to look uninstalled (``sys.modules[name] = None``, which
makes ``find_spec`` answer None and ``import`` fail, as on a machine without it).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from kv_canary import cli
from kv_canary.platform import cuda_available
from shared_spec import errors

ROOT = pathlib.Path(__file__).resolve().parents[1]
# One value case, one error case, and a case the JAX frontend (not in place) always skips.
FEW_CASES = ["--case", "one_request", "--case", "flat_in_int32", "--case", "pool_rows_share_memory"]
IN_PLACE_ONLY = "the case is for frontends that write in place"


def run_main(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_blocked(blocked, *argv, broken=(), timeout=300):
    """``kv-canary argv`` in a fresh interpreter where the modules ``blocked`` look uninstalled
    and the modules ``broken`` are found but fail to import (a mismatched build)."""
    program = textwrap.dedent(
        f"""
        import importlib.abc, importlib.machinery, sys
        for name in {list(blocked)!r}:
            sys.modules[name] = None  # find_spec answers None, import raises ModuleNotFoundError

        class Broken(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, name, path=None, target=None):
                if name in {list(broken)!r}:
                    return importlib.machinery.ModuleSpec(name, self)
            def create_module(self, spec):
                return None  # the default module object

            def exec_module(self, module):
                raise ImportError(f"simulated broken {{module.__name__}}")

        sys.meta_path.insert(0, Broken())
        from kv_canary.cli import main
        sys.exit(main({list(argv)!r}))
        """
    )
    # Without this test process's setup (conftest's XLA_FLAGS, TRITON_INTERPRET), as a shell would run it.
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_ENABLE_X64", "TRITON_INTERPRET")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr


# -- help, version, usage ----------------------------------------------------------


def test_bare_command_prints_the_help_and_succeeds(capsys):
    code, out, err = run_main(capsys)
    assert code == cli.EXIT_OK and err == ""
    assert "usage: kv-canary" in out and "check" in out and "bench" in out and "exit codes" in out


@pytest.mark.parametrize("argv", [["--help"], ["check", "--help"], ["bench", "--help"]])
def test_help_says_what_how_long_and_the_exit_codes_without_markup(capsys, argv):
    code, out, _ = run_main(capsys, *argv)
    assert code == cli.EXIT_OK
    assert "``" not in out and "exit codes" in out
    for number in (cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_USAGE, cli.EXIT_NOTHING_RAN):
        assert f"\n  {number}  " in out
    if argv[0] == "check":
        assert "Time:" in out and "--backend" in out and "--case" in out and "--strict" in out
    if argv[0] == "bench":
        assert "CUDA GPU" in out and "minutes" in out


def test_version_names_the_package_and_the_frameworks(capsys):
    code, out, _ = run_main(capsys, "--version")
    assert code == cli.EXIT_OK
    lines = out.splitlines()
    assert lines[0] == f"kv-canary {importlib.metadata.version('kv-canary')}"
    assert f"torch {importlib.metadata.version('torch')}" in lines
    assert f"jax {importlib.metadata.version('jax')}" in lines


@pytest.mark.parametrize(
    "argv, says",
    [
        (["check", "--no-such-option"], "unrecognized arguments"),
        (["frobnicate"], "invalid choice"),
        (["check", "--backend", "cuda"], "--backend 'cuda'"),
        (["check", "--backend", "torch/"], "--backend 'torch/'"),
        (["check", "--case", "no_such_case"], "--case 'no_such_case' matches no conformance case"),
        (["check", "--backend", "jax/triton", "--case", "one_request"], "the backends are: jax/xla"),
    ],
)
def test_usage_errors_exit_2_and_print_nothing_on_stdout(capsys, argv, says):
    code, out, err = run_main(capsys, *argv)
    assert code == cli.EXIT_USAGE
    assert out == "" and says in err and "usage: kv-canary" in err


# -- check -------------------------------------------------------------------------


def test_a_subset_runs_only_what_was_asked_with_a_progress_line_per_backend(capsys):
    code, out, err = run_main(capsys, "check", "--backend", "torch/torch", "--backend", "jax/xla", *FEW_CASES)
    assert code == cli.EXIT_OK
    rows = [line.split()[0] for line in out.splitlines() if line.startswith(("torch/", "jax/"))]
    assert rows == ["torch/torch", "jax/xla"]
    assert out.rstrip().endswith("OK: 2 backends ran")
    assert f"case pool_rows_share_memory skipped on jax/xla: {IN_PLACE_ONLY}" in out
    progress = err.splitlines()
    assert progress[0].startswith("kv-canary check: loading torch and jax")
    assert "[1/2] torch/torch: running 3 cases..." in progress and "[2/2] jax/xla: running 3 cases..." in progress
    assert progress.index("[1/2] torch/torch: running 3 cases...") < progress.index("[2/2] jax/xla: running 3 cases...")


def test_a_whole_frontend_and_case_patterns_select(capsys):
    code, out, _ = run_main(capsys, "check", "--backend", "torch", "--case", "offsets_too_*", "--json", "--quiet")
    assert code == cli.EXIT_OK
    result = json.loads(out)
    assert set(result["runners"]) == {"torch/triton", "torch/torch", "torch/pallas"}
    assert set(result["errors_identical"]) == {"offsets_too_long", "offsets_too_short"}


def test_json_is_the_only_stdout_and_carries_notes_and_skip_reasons(capsys):
    code, out, err = run_main(capsys, "check", "--json", "--backend", "jax/xla", *FEW_CASES)
    assert code == cli.EXIT_OK
    result = json.loads(out)  # nothing else on stdout
    assert result["ok"] is True and result["exit_code"] == cli.EXIT_OK and result["verdict"] == "OK: 1 backend ran"
    assert any("x64" in note for note in result["notes"])
    row = result["runners"]["jax/xla"]
    assert (row["pass"], row["fail"], row["skip"]) == (2, 0, 1)
    assert row["skipped_cases"] == {"pool_rows_share_memory": IN_PLACE_ONLY}
    assert "[1/1] jax/xla: running 3 cases..." in err


def test_quiet_silences_the_progress(capsys):
    code, _, err = run_main(capsys, "check", "--quiet", "--backend", "torch/torch", "--case", "one_request")
    assert code == cli.EXIT_OK and err == ""


def test_a_skipped_backend_is_counted_and_strict_fails_on_it(capsys, monkeypatch):
    jax = pytest.importorskip("jax")
    monkeypatch.setenv("JAX_ENABLE_X64", "0")
    argv = ["check", "--backend", "torch/torch", "--backend", "jax/xla", "--case", "one_request"]
    with jax.enable_x64(False):  # this thread only: what JAX_ENABLE_X64=0 gives a fresh process
        code, out, err = run_main(capsys, *argv)
        strict_code, strict_out, _ = run_main(capsys, *argv, "--strict")
        json_code, json_out, _ = run_main(capsys, *argv, "--json", "--strict")
    assert code == cli.EXIT_OK
    assert out.rstrip().endswith("OK: 1 backend ran, 1 skipped (jax/xla); --strict fails on skips")
    assert "skipped jax/xla: jax_enable_x64 is off" in out
    assert "JAX_ENABLE_X64 is off" in err
    assert strict_code == cli.EXIT_FAILED
    assert strict_out.rstrip().endswith("FAILED (--strict: a backend was skipped): 1 backend ran, 1 skipped (jax/xla)")
    result = json.loads(json_out)
    assert json_code == cli.EXIT_FAILED and result["ok"] is False and "jax/xla" in result["skipped"]


def test_nothing_ran_exits_3(capsys, monkeypatch):
    jax = pytest.importorskip("jax")
    monkeypatch.setenv("JAX_ENABLE_X64", "0")
    with jax.enable_x64(False):
        code, out, _ = run_main(capsys, "check", "--backend", "jax/xla", "--case", "one_request")
    assert code == cli.EXIT_NOTHING_RAN
    assert "errors identical" not in out  # no empty table
    assert out.rstrip().endswith("NOTHING RAN: no selected backend can run here (see the skip reasons)")


def test_a_failing_case_exits_1_and_is_named(capsys, monkeypatch):
    from kv_canary_torch.conformance import TorchRunner

    def wrong(self, args, check_values):
        pool = args["pool_out"]
        pool.add_(1)
        return pool

    monkeypatch.setattr(TorchRunner, "call", wrong)
    code, out, _ = run_main(capsys, "check", "--backend", "torch/torch", "--backend", "jax/xla", "--case", "one_request")
    assert code == cli.EXIT_FAILED
    assert "FAIL torch/torch one_request:" in out and "DISAGREE one_request" in out
    assert out.rstrip().endswith("FAILED: 2 backends ran")


def test_list_names_backends_and_cases(capsys):
    code, out, _ = run_main(capsys, "check", "--list", "--json", "--backend", "jax")
    assert code == cli.EXIT_OK
    listing = json.loads(out)
    assert "jax/xla" in listing["backends"] and "one_request" in listing["cases"]


# -- missing frameworks and no GPU -------------------------------------------------


def test_check_without_torch_or_jax_says_once_what_to_install_and_exits_3():
    code, out, err = run_blocked(["torch", "jax"], "check")
    assert code == cli.EXIT_NOTHING_RAN
    assert "skipped torch/*: torch is not installed\n" in out and "skipped jax/*: jax is not installed\n" in out
    assert f"install: {errors.install_hint(['torch', 'jax'])}" in out
    assert out.count("pip install 'kv-canary[cpu]'") == 1 and "pip install 'kv-canary[torch,jax]'" in out
    assert "errors identical" not in out and "NOTHING RAN" in out
    assert "Triton's interpreter" not in err  # no note about a kernel that cannot run


def test_check_without_torch_runs_the_jax_backends_and_counts_the_skip():
    code, out, _ = run_blocked(["torch"], "check", "--json", "--quiet", "--backend", "torch", "--backend", "jax/xla", "--case", "one_request")
    assert code == cli.EXIT_OK
    result = json.loads(out)
    assert list(result["runners"]) == ["jax/xla"]
    assert result["skipped"]["torch/*"] == "torch is not installed"
    assert result["install"] == errors.install_hint(["torch"]) and "'kv-canary[torch]'" in result["install"]
    assert result["verdict"] == "OK: 1 backend ran, 1 skipped (torch/*); --strict fails on skips"
    code, out, _ = run_blocked(["torch"], "check", "--list", "--backend", "torch")
    assert "  torch/*  (cannot run here: torch is not installed)\n" in out
    assert f"install: {errors.install_hint(['torch'])}\n" in out


def test_a_framework_that_does_not_import_is_reported_not_raised():
    code, out, _ = run_blocked([], "check", "--case", "one_request", broken=["torch", "jax"])
    assert code == cli.EXIT_NOTHING_RAN
    assert "skipped torch/*: torch is installed but does not import (ImportError: simulated broken torch)" in out
    assert "skipped jax/*: jax is installed but does not import (ImportError: simulated broken jax)" in out
    code, _, err = run_blocked([], "bench", broken=["torch"])
    assert code == cli.EXIT_NOTHING_RAN and "torch is installed but does not import" in err


@pytest.mark.parametrize("as_json", [False, True])
def test_bench_without_frameworks_says_once_what_to_install_and_exits_3(as_json):
    code, out, err = run_blocked(["torch", "triton", "jax"], "bench", *(["--json"] if as_json else []))
    assert code == cli.EXIT_NOTHING_RAN
    reason = errors.not_installed(["torch", "triton", "jax"])
    assert reason.startswith("torch, triton and jax are not installed; pip install 'kv-canary[cpu]'")
    assert err.strip().endswith(f"kv-canary bench: nothing ran: {reason}")
    assert err.count("pip install") == 2  # the hint once: the cpu extra, or torch,jax
    if as_json:
        result = json.loads(out)
        assert result["exit_code"] == cli.EXIT_NOTHING_RAN and result["nothing_ran"] == reason
    else:
        assert out == ""


@pytest.mark.skipif(cuda_available(), reason="a CUDA GPU is here: bench would run")
@pytest.mark.parametrize("as_json", [False, True])
def test_bench_without_a_gpu_exits_3_and_honours_json(capsys, as_json):
    code, out, err = run_main(capsys, "bench", *(["--json"] if as_json else []))
    assert code == cli.EXIT_NOTHING_RAN
    assert cli.NO_GPU in err
    if as_json:
        assert json.loads(out) == {"ok": False, "exit_code": cli.EXIT_NOTHING_RAN, "nothing_ran": cli.NO_GPU}
    else:
        assert out == ""
