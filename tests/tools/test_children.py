"""``tests.children``: a child runs once, in the environment of the moment children were started ahead, with its
own changes on top; one started ahead runs in the background at a lower priority; one past its timeout fails its test."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests import children
from tests.children import Child

PROBE = "KV_CANARY_CHILDREN_PROBE"
SEES_THE_PROBE = Child(["-c", f"import os; print(os.environ.get({PROBE!r}, 'unset'))"])


@SEES_THE_PROBE.ahead
def test_a_test_that_patches_the_environment_does_not_reach_a_child(monkeypatch):
    monkeypatch.setenv(PROBE, "patched")
    done = SEES_THE_PROBE.run()
    assert (done.returncode, done.stdout.strip()) == (0, "unset")
    assert SEES_THE_PROBE.run() is done  # one run a process


def test_set_env_and_unset_apply_on_top_and_no_cwd_is_an_empty_directory_of_its_own():
    script = f"import os; print(os.environ[{PROBE!r}], 'PATH' in os.environ, os.listdir('.'))"
    done = Child(["-c", script], set_env={PROBE: "set"}, unset=["PATH"], cwd=None).run()
    assert done.stdout.split() == ["set", "False", "[]"], done.stderr


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="on one core nothing is started ahead")
def test_a_child_started_ahead_runs_in_the_background_below_this_process():
    child = Child(["-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"])
    children.start_ahead([child])
    deadline = time.monotonic() + 120
    while child._state != "done":  # the background thread's run, not one this test would start
        assert time.monotonic() < deadline, child._state
        time.sleep(0.01)
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert int(child.run().stdout) == min(mine + children.AHEAD_NICENESS, 19)


def test_a_child_past_its_timeout_raises_in_its_test_every_time():
    child = Child(["-c", "import time; time.sleep(60)"], timeout=0.3)
    for _ in range(2):
        with pytest.raises(subprocess.TimeoutExpired):
            child.run()
