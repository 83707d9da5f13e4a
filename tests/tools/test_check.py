"""kv-canary check's judging, sampling, comparison and verdict with fake runners; the x64 child's protocol."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kv_canary import check
from shared_spec.cases import load_cases
from shared_spec.conformance import Runner
from tests.tools.frontends import needs_frontends

CASES = load_cases()


class Fake(Runner):
    """Does what its mode expects of every case, except the cases in ``wrong`` (one cell off)."""

    def __init__(self, frontend: str, backend: str, mode: str, wrong=(), in_place=True):
        self.frontend, self.backend, self.mode, self.wrong, self.in_place = frontend, backend, mode, set(wrong), in_place

    def run(self, case):
        expect = case.expected(self.mode)
        if expect.error_class:
            return None, type(expect.error_class, (Exception,), {})(expect.error_message), True
        pool = expect.pool.numpy().copy()
        if case.name in self.wrong:
            pool.reshape(-1)[0] += 1
        return pool, None, True


def quiet(line):
    pass


def value_case(mode="torch"):
    return next(c for c in CASES if c.expected(mode).pool is not None and np.prod(c.expected(mode).pool.shape) > 0)


def test_runners_that_do_what_the_spec_says_pass_and_agree():
    runners = [Fake("torch", "triton", "torch"), Fake("torch", "torch", "torch"),
               Fake("jax", "xla", "jax_x64_off", in_place=False),
               Fake("jax", "xla", "jax", in_place=False)]
    rows = check.run_rows(runners, CASES, sample=False, say=quiet)
    assert all(row.count("fail") == 0 for row in rows)
    assert rows[2].count("skip") == sum("in_place" in c.requires or "accelerator" in c.requires for c in CASES)
    assert check.compare(rows, CASES) == []  # modes that expect differently (by_mode) are not compared
    code, line = check.verdict(rows, {}, [], [], strict=False)
    assert code == 0 and line.startswith("OK")


def test_a_wrong_pool_fails_and_disagrees():
    case = value_case()
    rows = check.run_rows([Fake("torch", "triton", "torch", wrong=[case.name]), Fake("torch", "torch", "torch")],
                          [case], sample=False, say=quiet)
    assert rows[0].results[case.name].status == "fail" and "differ" in rows[0].results[case.name].detail
    assert check.compare(rows, [case]) == [{"case": case.name, "runners": ["torch/torch"],
                                            "outcomes": {r.label: check.outcome(r.results[case.name]) for r in rows}}]
    assert check.verdict(rows, {}, [], check.compare(rows, [case]), strict=False)[0] == 1


def test_a_runner_that_raises_outside_the_call_is_a_failure_not_a_crash():
    class Broken(Fake):
        def run(self, case):
            raise RuntimeError("cannot build arrays")

    (row,) = check.run_rows([Broken("torch", "torch", "torch")], CASES[:3], sample=False, say=quiet)
    assert row.count("fail") == 3 and "cannot build arrays" in row.results[CASES[0].name].detail


def test_interpreted_runners_take_every_error_case_and_every_4th_value_case():
    triton, torch_ = Fake("torch", "triton", "torch"), Fake("torch", "torch", "torch")
    compiled_pallas = Fake("jax", "pallas", "jax_x64_off")
    compiled_pallas.interpret = False
    for index, case in enumerate(CASES):
        error = case.expected("torch").error_class is not None
        assert check.planned(triton, case, index, sample=True) == (error or index % check.SAMPLE_EVERY == 0)
        assert check.planned(torch_, case, index, sample=True) and check.planned(triton, case, index, sample=False)
        assert check.planned(compiled_pallas, case, index, sample=True)
    triton.accelerator = "cuda:0"  # Triton compiled on a GPU
    assert all(check.planned(triton, case, index, sample=True) for index, case in enumerate(CASES))


@pytest.mark.parametrize("args, code", [
    (([], {}, [], [], False), 3),
    (([check.Row("torch/torch", "torch", {})], {"jax/*": "not installed"}, [], [], True), 1),
    (([check.Row("torch/torch", "torch", {})], {"jax/*": "not installed"}, [], [], False), 0),
    (([], {}, ["kv_canary_jax.conformance does not load"], [], False), 1),
])
def test_verdicts(args, code):
    assert check.verdict(*args)[0] == code


def test_rows_cross_a_process_boundary_as_json():
    rows = check.run_rows([Fake("jax", "xla", "jax", in_place=False)], CASES, sample=False, say=quiet)
    again = [check.Row.from_json(json.loads(json.dumps(r.to_json()))) for r in rows]
    assert again[0].results == rows[0].results and again[0].label == "jax/xla (x64)"


def fake_child(body: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(body)]


def test_the_child_protocol_request_on_stdin_rows_on_stdout():
    child = check.start_child({"cases": ["mixed_batch"], "backends": None, "sample": False}, quiet=True, command=fake_child("""
        import json, os, sys
        request = json.load(sys.stdin)
        assert os.environ["JAX_ENABLE_X64"] == "1"
        row = {"name": "jax/xla", "mode": "jax", "seconds": 0.5, "sampled": False,
               "results": [[name, "pass", "", ["pool", [2, 3], "ab"]] for name in request["cases"]]}
        print(json.dumps({"rows": [row], "unavailable": {"jax/mosaic (x64)": "no GPU"}, "problems": []}))
    """))
    rows, unavailable, problems = check.finish_child(child)
    assert [r.label for r in rows] == ["jax/xla (x64)"] and rows[0].results["mixed_batch"].signature == ("pool", (2, 3), "ab")
    assert unavailable == {"jax/mosaic (x64)": "no GPU"} and problems == []


def test_a_child_that_crashes_is_a_problem_with_its_stderr():
    child = check.start_child({"cases": [], "backends": None, "sample": False}, quiet=True,
                              command=fake_child("import sys; sys.stderr.write('jaxlib exploded'); sys.exit(7)"))
    rows, _, problems = check.finish_child(child)
    assert rows == [] and "exit 7" in problems[0] and "jaxlib exploded" in problems[0]


@needs_frontends
def test_check_end_to_end_on_compiled_runners():
    done = subprocess.run([sys.executable, "-m", "kv_canary.cli", "check", "--json", "--backend", "torch/torch",
                           "--backend", "jax/xla", "--case", "mixed_batch", "--case", "checked_valid_batch"],
                          capture_output=True, text=True, timeout=120)
    found = json.loads(done.stdout)
    assert done.returncode == 0, found
    assert {r["runner"] for r in found["runners"]} == {"torch/torch", "jax/xla", "jax/xla (x64)"}
    assert all(r["fail"] == 0 and r["ran"] == 2 for r in found["runners"])
