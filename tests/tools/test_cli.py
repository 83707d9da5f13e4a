"""The ``kv-canary`` command line: help, version, exit codes, usage errors, subsets, progress, JSON, missing frameworks.

Most tests call ``main([...])`` in this process over a one- or two-backend,
few-case subset (the frameworks are already imported, so each takes well under
a second). What needs a process of its own runs ``python -c`` in a child process, started ahead (``tests.children``):
a framework made to look uninstalled (``sys.modules[name] = None``, which
makes ``find_spec`` answer None and ``import`` fail, as on a machine without it).
"""

from __future__ import annotations

import importlib.metadata
import json
import pathlib
import textwrap

import pytest

from kv_canary import cli
from kv_canary.platform import cuda_available
from shared_spec import errors
from tests.children import Child

ROOT = pathlib.Path(__file__).resolve().parents[2]
# One value case, one error case, and a case the JAX frontend (not in place) always skips.
FEW_CASES = ["--case", "one_request", "--case", "flat_in_int32", "--case", "pool_rows_share_memory"]
IN_PLACE_ONLY = "the case is for frontends that write in place"


def run_main(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def blocked(blocked, *argv, broken=()) -> Child:
    """``kv-canary argv`` in a fresh interpreter where the modules ``blocked`` look uninstalled
    and the modules ``broken`` are found but fail to import (a mismatched build); ``outcome`` reads it."""
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
    return Child(["-c", program], unset=("XLA_FLAGS", "JAX_ENABLE_X64", "TRITON_INTERPRET"), set_env={"PYTHONPATH": str(ROOT)})


def outcome(child: Child) -> tuple[int, str, str]:
    """A ``blocked`` run's exit code, stdout and stderr; it must not end in a traceback."""
    done = child.run()
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr


# -- help, version, usage ----------------------------------------------------------


def test_bare_command_prints_the_help_and_succeeds(capsys):
    code, out, err = run_main(capsys)
    assert code == cli.EXIT_OK and err == ""
    assert "usage: kv-canary" in out and "check" in out and "bench" in out and "exit codes" in out


ALL_CODES = (cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_USAGE, cli.EXIT_NOTHING_RAN, cli.EXIT_INTERRUPTED)


@pytest.mark.parametrize(
    "argv, codes, nothing_ran_says",
    [
        (["--help"], (cli.EXIT_OK, cli.EXIT_USAGE), None),
        (["check", "--help"], ALL_CODES, "torch/jax not installed"),
        (["bench", "--help"], ALL_CODES, "no CUDA GPU"),
    ],
)
def test_help_says_what_how_long_and_its_own_exit_codes_without_markup(capsys, argv, codes, nothing_ran_says):
    code, out, _ = run_main(capsys, *argv)
    assert code == cli.EXIT_OK
    assert "``" not in out
    listed = out.split("\nexit codes:\n", 1)[1]  # the epilog: this command's exit codes, and nothing after them
    numbers = [int(line.split()[0]) for line in listed.splitlines() if line.startswith("  ")]
    assert numbers == list(codes)
    if nothing_ran_says:
        line = next(line for line in listed.splitlines() if line.startswith(f"  {cli.EXIT_NOTHING_RAN} "))
        assert nothing_ran_says in line
    if argv[0] == "check":
        assert "Time:" in out and "--backend" in out and "--case" in out and "--strict" in out
        assert "CUDA GPU" not in listed  # bench's reasons are not check's
    if argv[0] == "bench":
        assert "CUDA GPU" in out and "minutes" in out
        assert "backend or case" not in listed and "disagreed with the reference" in listed


def test_version_names_the_package_and_the_frameworks(capsys):
    code, out, _ = run_main(capsys, "--version")
    assert code == cli.EXIT_OK
    lines = out.splitlines()
    assert lines[0] == f"kv-canary {importlib.metadata.version('kv-canary')}"
    assert f"torch {importlib.metadata.version('torch')}" in lines
    assert f"jax {importlib.metadata.version('jax')}" in lines


USAGE_ERRORS = [
    (["check", "--no-such-option"], "unrecognized arguments: --no-such-option"),
    (["check", "--jso"], "unrecognized arguments: --jso"),  # options are spelled in full
    (["check", "--case"], "argument --case: expected one argument"),
    (["bench", "--no-such-option"], "unrecognized arguments: --no-such-option"),
    (["frobnicate"], "invalid choice"),
    (["--no-such-option", "check"], "unrecognized arguments: --no-such-option"),
    (["check", "--backend", "cuda"], "--backend 'cuda'"),
    (["check", "--backend", "torch/"], "--backend 'torch/'"),
    (["check", "--case", "no_such_case"], "--case 'no_such_case' matches no conformance case"),
    (["check", "--backend", "jax/triton", "--case", "one_request"], "the backends are: jax/xla"),
    (["check", "--backend", "torch/cuda"], "--backend 'torch/cuda' is not a backend"),
]


TOP_USAGE = "usage: kv-canary [-h] [--version]"


def assert_usage_of_its_command(err: str, argv) -> None:
    """A usage error in ``argv`` printed (after any progress line) its command's usage, or the top parser's."""
    usage = f"usage: kv-canary {argv[0]} [-h]" if argv[0] in ("check", "bench") else TOP_USAGE
    assert err.startswith(usage) or f"\n{usage}" in err, err
    assert usage == TOP_USAGE or TOP_USAGE not in err, err


@pytest.mark.parametrize("argv, command, options", [
    (["--json", "check"], "check", "--json"),
    (["--quiet", "bench", "--no-jax"], "bench", "--quiet"),
    (["--json", "--strict", "check", "--list"], "check", "--json --strict"),
])
def test_a_command_option_before_the_command_says_where_it_goes(capsys, argv, command, options):
    code, out, err = run_main(capsys, *argv)
    assert code == cli.EXIT_USAGE
    assert f"unrecognized arguments: {options} (" in err
    assert f"write {'them' if ' ' in options else 'it'} after the command, 'kv-canary {command} {options}')" in err
    if "--json" in argv:  # still one JSON object, with the hint in its error
        assert f"'kv-canary {command} {options}'" in json.loads(out)["error"]


def test_an_option_no_command_has_gets_no_hint(capsys):
    code, _, err = run_main(capsys, "--no-such-option", "check")
    assert code == cli.EXIT_USAGE and "unrecognized arguments: --no-such-option\n" in err and "after the command" not in err


@pytest.mark.parametrize("argv, says", USAGE_ERRORS)
def test_usage_errors_exit_2_print_the_usage_of_their_command_and_nothing_on_stdout(capsys, argv, says):
    code, out, err = run_main(capsys, *argv)
    assert code == cli.EXIT_USAGE
    assert out == "" and says in err
    assert_usage_of_its_command(err, argv)


# -- --json: one object on stdout, whatever happened -------------------------------


@pytest.mark.parametrize("argv, says", [(argv, says) for argv, says in USAGE_ERRORS if argv[0] != "frobnicate"])
def test_with_json_a_usage_error_is_one_json_object_with_the_message_and_exit_code(capsys, argv, says):
    code, out, err = run_main(capsys, *argv, "--json")
    assert code == cli.EXIT_USAGE
    result = json.loads(out)  # one object, nothing else
    assert result["ok"] is False and result["exit_code"] == cli.EXIT_USAGE and says in result["error"]
    assert result["error"] in err  # stderr still says it as without --json
    assert_usage_of_its_command(err, argv)


def test_with_json_an_interrupt_is_one_json_object(capsys, monkeypatch):
    from kv_canary import matrix

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(matrix, "run_matrix", interrupted)
    code, out, err = run_main(capsys, "check", "--json", "--backend", "torch/torch", "--case", "one_request")
    assert code == cli.EXIT_INTERRUPTED
    assert json.loads(out) == {"ok": False, "exit_code": cli.EXIT_INTERRUPTED, "error": "interrupted"}
    assert "kv-canary check: interrupted" in err


def test_with_json_a_crash_is_one_json_object_and_still_raises(capsys, monkeypatch):
    from kv_canary import matrix

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(matrix, "run_matrix", broken)
    with pytest.raises(RuntimeError, match="a bug"):  # the traceback still reaches the reader; the process exits 1
        cli.main(["check", "--json", "--backend", "torch/torch", "--case", "one_request"])
    out, _ = capsys.readouterr()
    assert json.loads(out) == {"ok": False, "exit_code": cli.EXIT_FAILED, "error": "RuntimeError: a bug"}


def test_with_json_an_error_after_the_object_is_merged_into_it(capsys, monkeypatch):
    """A command that printed its JSON object and then failed leaves one object: its own, with the error."""

    def prints_then_fails(args):
        print(json.dumps({"rows": [1, 2]}))
        raise cli.NothingRan("the second half")

    monkeypatch.setattr(cli, "check", prints_then_fails)
    code, out, _ = run_main(capsys, "check", "--json")
    assert code == cli.EXIT_NOTHING_RAN
    assert json.loads(out) == {"rows": [1, 2], "ok": False, "exit_code": cli.EXIT_NOTHING_RAN, "error": "nothing ran: the second half"}


# -- check -------------------------------------------------------------------------


def test_a_subset_runs_only_what_was_asked_with_a_progress_line_per_backend(capsys):
    code, out, err = run_main(capsys, "check", "--backend", "torch/torch", "--backend", "jax/xla", *FEW_CASES)
    assert code == cli.EXIT_OK
    rows = [line.split()[0] for line in out.splitlines() if line.startswith(("torch/", "jax/"))]
    assert rows == ["torch/torch", "jax/xla"]
    assert out.rstrip().endswith("OK: 2 backends ran")
    assert "errors identical across backends:  yes (1/1 error cases)" in out
    assert "results identical across backends: yes (1/1 value cases)" in out
    # jax/xla skips it, so only torch/torch ran it: said, not counted as agreeing
    assert "not compared (ran on one backend only): pool_rows_share_memory" in out
    assert f"case pool_rows_share_memory skipped on jax/xla: {IN_PLACE_ONLY}" in out
    progress = err.splitlines()
    assert progress[0].startswith("kv-canary check: loading torch and jax")
    first = progress.index("[1/2] torch/torch: running 3 cases...")  # nothing finished yet: no time left to tell
    second = next(i for i, line in enumerate(progress) if line.startswith("[2/2] jax/xla: running 3 cases... (about "))
    assert first < second and progress[second].endswith(" left)")


@pytest.mark.parametrize("spent, remaining, says", [
    ([2.0, 4.0], 3, "9 s"), ([0.1], 2, "a second"), ([30.0], 4, "2 min"), ([10.0, 20.0], 0, "a second"),
])
def test_the_time_left_is_the_mean_pace_times_the_backends_left(spent, remaining, says):
    assert cli.time_left(spent, remaining) == says


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
    assert "error" not in result  # it did what was asked


def test_with_one_backend_nothing_is_said_to_be_compared(capsys):
    code, out, _ = run_main(capsys, "check", "--quiet", "--backend", "jax/xla", *FEW_CASES)
    assert code == cli.EXIT_OK
    assert "compared across backends: nothing (1 backend ran)" in out
    assert "identical" not in out
    code, out, _ = run_main(capsys, "check", "--quiet", "--json", "--backend", "jax/xla", *FEW_CASES)
    result = json.loads(out)
    assert result["errors_identical"] == {} and result["results_identical"] == {}
    assert result["not_compared"] == ["one_request", "flat_in_int32"]


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
    with jax.enable_x64(False):
        code, out, _ = run_main(capsys, "check", "--json", "--backend", "jax/xla", "--case", "one_request")
    result = json.loads(out)
    assert code == result["exit_code"] == cli.EXIT_NOTHING_RAN and result["error"] == result["verdict"]


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


WITHOUT_TORCH_OR_JAX = blocked(["torch", "jax"], "check")


@WITHOUT_TORCH_OR_JAX.ahead
def test_check_without_torch_or_jax_says_once_what_to_install_and_exits_3():
    code, out, err = outcome(WITHOUT_TORCH_OR_JAX)
    assert code == cli.EXIT_NOTHING_RAN
    assert "skipped torch/*: torch is not installed\n" in out and "skipped jax/*: jax is not installed\n" in out
    assert f"install: {errors.install_hint(['torch', 'jax'])}" in out
    assert out.count("pip install 'kv-canary[cpu]'") == 1 and "pip install 'kv-canary[torch,jax]'" in out
    assert "errors identical" not in out and "NOTHING RAN" in out
    assert "Triton's interpreter" not in err  # no note about a kernel that cannot run
    assert "loading" not in err  # nothing to load


LIST_WITHOUT_TORCH = blocked(["torch"], "check", "--list")


@LIST_WITHOUT_TORCH.ahead
def test_check_says_it_loads_only_the_frameworks_that_are_installed():
    _, _, err = outcome(LIST_WITHOUT_TORCH)
    assert "kv-canary check: loading jax (a few seconds)..." in err and "loading torch" not in err


CHECK_WITHOUT_TORCH = blocked(["torch"], "check", "--json", "--quiet", "--backend", "torch", "--backend", "jax/xla",
                              "--case", "one_request")
LIST_TORCH_WITHOUT_TORCH = blocked(["torch"], "check", "--list", "--backend", "torch")


@CHECK_WITHOUT_TORCH.ahead
@LIST_TORCH_WITHOUT_TORCH.ahead
def test_check_without_torch_runs_the_jax_backends_and_counts_the_skip():
    code, out, _ = outcome(CHECK_WITHOUT_TORCH)
    assert code == cli.EXIT_OK
    result = json.loads(out)
    assert list(result["runners"]) == ["jax/xla"]
    assert result["skipped"]["torch/*"] == "torch is not installed"
    assert result["install"] == errors.install_hint(["torch"]) and "'kv-canary[torch]'" in result["install"]
    assert result["verdict"] == "OK: 1 backend ran, 1 skipped (torch/*); --strict fails on skips"
    code, out, _ = outcome(LIST_TORCH_WITHOUT_TORCH)
    assert "  torch/*  (cannot run here: torch is not installed)\n" in out
    assert f"install: {errors.install_hint(['torch'])}\n" in out


CHECK_BROKEN = blocked([], "check", "--case", "one_request", broken=["torch", "jax"])
BENCH_BROKEN = blocked([], "bench", broken=["torch"])


@CHECK_BROKEN.ahead
@BENCH_BROKEN.ahead
def test_a_framework_that_does_not_import_is_reported_not_raised():
    code, out, _ = outcome(CHECK_BROKEN)
    assert code == cli.EXIT_NOTHING_RAN
    assert "skipped torch/*: torch is installed but does not import (ImportError: simulated broken torch)" in out
    assert "skipped jax/*: jax is installed but does not import (ImportError: simulated broken jax)" in out
    code, _, err = outcome(BENCH_BROKEN)
    assert code == cli.EXIT_NOTHING_RAN and "torch is installed but does not import" in err


@pytest.mark.parametrize("args, message", [
    (["--case", "5x"], "--case '5x' is not a case: BSxSEQ, optionally suffixed r"),
    (["--case", "256x8192", "--case", "no_such_workload"], "--case 'no_such_workload' is not a case"),
    (["--case", "256x8192", "--host"], "--case selects device-time cases; --host times the launcher's host work alone"),
    (["--windowed"], "--windowed is the step bench's: bench --step --windowed"),
    (["--incremental", "--case", "256x8192", "--write", "x.md"], "--incremental runs its own sizes and prints its tables "
     "(markdown to paste into docs/performance.md, or --json); it takes no --case, --write"),
    (["--incremental", "--step"], "it takes no --step"),
])
def test_bench_case_errors_are_usage_errors_before_anything_loads(capsys, args, message):
    code, out, err = run_main(capsys, "bench", *args)
    assert code == cli.EXIT_USAGE and out == ""
    assert message in err and "usage: kv-canary bench" in err
    assert "loading torch" not in err


BENCH_WITHOUT_FRAMEWORKS = {as_json: blocked(["torch", "triton", "jax"], "bench", *(["--json"] if as_json else []))
                            for as_json in (False, True)}


@pytest.mark.parametrize("as_json", [pytest.param(as_json, marks=run.ahead) for as_json, run in BENCH_WITHOUT_FRAMEWORKS.items()])
def test_bench_without_frameworks_says_once_what_to_install_and_exits_3(as_json):
    code, out, err = outcome(BENCH_WITHOUT_FRAMEWORKS[as_json])
    assert code == cli.EXIT_NOTHING_RAN
    reason = errors.not_installed(["torch", "triton", "jax"])
    assert reason.startswith("torch, triton and jax are not installed; pip install 'kv-canary[cpu]'")
    assert err.strip().endswith(f"kv-canary bench: nothing ran: {reason}")
    assert err.count("pip install") == 2  # the hint once: the cpu extra, or torch,jax
    if as_json:
        assert json.loads(out) == {"ok": False, "exit_code": cli.EXIT_NOTHING_RAN, "error": f"nothing ran: {reason}"}
    else:
        assert out == ""


INCREMENTAL_WITHOUT_TORCH = blocked(["torch", "triton"], "bench", "--incremental")


@INCREMENTAL_WITHOUT_TORCH.ahead
def test_bench_incremental_needs_torch_and_triton_alone():
    code, _, err = outcome(INCREMENTAL_WITHOUT_TORCH)
    assert code == cli.EXIT_NOTHING_RAN
    assert err.strip().endswith(f"kv-canary bench: nothing ran: {errors.not_installed(['torch', 'triton'])}")


@pytest.mark.skipif(cuda_available(), reason="a CUDA GPU is here: bench would run")
@pytest.mark.parametrize("as_json", [False, True])
def test_bench_without_a_gpu_exits_3_and_honours_json(capsys, as_json):
    code, out, err = run_main(capsys, "bench", *(["--json"] if as_json else []))
    assert code == cli.EXIT_NOTHING_RAN
    assert cli.NO_GPU in err
    if as_json:
        assert json.loads(out) == {"ok": False, "exit_code": cli.EXIT_NOTHING_RAN, "error": f"nothing ran: {cli.NO_GPU}"}
    else:
        assert out == ""


@pytest.mark.skipif(cuda_available(), reason="a CUDA GPU is here: bench would run")
@pytest.mark.parametrize("mode", [[], ["--host"], ["--no-jax"], ["--step"], ["--step", "--case", "64x8192"],
                                  ["--step", "--windowed"], ["--incremental"]])
def test_every_bench_mode_without_a_gpu_refuses_alike_before_it_runs(capsys, monkeypatch, mode):
    from kv_canary import bench_incremental, bench_step

    monkeypatch.setattr(bench_step, "main", lambda argv=None: pytest.fail("the step bench ran without a GPU"))
    monkeypatch.setattr(bench_incremental, "run", lambda args: pytest.fail("the incremental bench ran without a GPU"))
    code, out, err = run_main(capsys, "bench", *mode)
    assert code == cli.EXIT_NOTHING_RAN and out == ""
    assert err.strip().endswith(f"kv-canary bench: nothing ran: {cli.NO_GPU}")


def test_bench_short_is_the_step_benchs_and_is_passed_on(capsys, monkeypatch):
    import argparse

    from kv_canary import bench_step

    code, _, err = run_main(capsys, "bench", "--short")
    assert code == cli.EXIT_USAGE and "--short is the step bench's CPU variant: bench --step --short" in err
    seen = []
    short_parser = argparse.ArgumentParser()
    short_parser.add_argument("--short", action="store_true")
    monkeypatch.setattr(bench_step, "parser", lambda: short_parser)
    monkeypatch.setattr(bench_step, "main", lambda argv=None: seen.append(argv) or 0)
    code, _, _ = run_main(capsys, "bench", "--step", "--short", "--case", "64x8192", "--json")
    assert code == cli.EXIT_OK and seen == [["--json", "--case", "64x8192", "--short"]]
    code, _, _ = run_main(capsys, "bench", "--step", "--short", "--windowed")
    assert code == cli.EXIT_OK and seen[-1] == ["--windowed", "--short"]
