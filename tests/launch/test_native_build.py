"""How the launcher's native piece is built and loaded: in the calling thread, once per machine, safely side by side.

``native.compile_cached`` builds it; ``dispatch._load_call_path`` builds and
loads it at a process's first remembered call on a GPU. Runs on a CPU
machine: the builders are child processes whose $CXX is a wrapper script that
logs each compiler run (then "compiles", after ``HOLD`` seconds or once the
file ``HOLD_UNTIL`` exists when set, or fails when ``FAIL`` names it), so that
the tests count compiles. What these tests hold is the build's bookkeeping
(one compile for processes side by side, the cache, partial folders, the
lock), not the compiler's work: the wrapper writes the piece the real
compiler built once for the test run (``shared_native_cache``, which the
launcher's tests load too) where the command line's ``-o`` names, as the
compiler would, and fails as the compiler does where that folder is gone. A
CPU machine has no CUDA driver, so the children load the piece without one
(``native.module`` loads it with).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from kv_canary_torch.launch import build as build_command, native
from tests.torch_support import shared_native_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A child process: build the piece ("c": native.build(); "call path": through native.module() and
# dispatch._load_call_path, twice) and print what it ended with.
BUILDER = """
import json, sys
from kv_canary_torch.launch import dispatch, native
report = {}
if sys.argv[1] == "c":
    report["c"] = native.load_module(native.build()).__name__
else:
    load = native.load_module

    def without_driver(path, name=native.MODULE):  # no driver here: the piece as native.module() loads it on a GPU
        loaded = load(path, name)
        loaded.load_driver = lambda *a: None
        return loaded

    native.load_module = without_driver
    dispatch._load_call_path()
    dispatch._load_call_path()  # a later first remembered call: nothing is tried again
    report |= {"configured": dispatch._c is not None and dispatch.call_bound == dispatch._c.call,
               "reason": native.unavailable_reason()}
print(json.dumps(report))
"""

WRAPPER = """#!/bin/sh
echo "start $(basename "$0")" >> "$COMPILER_LOG"
if [ "$FAIL" = "$(basename "$0")" ]; then exit 1; fi
if [ -n "$HOLD" ]; then sleep "$HOLD"; fi
if [ -n "$HOLD_UNTIL" ]; then while [ ! -e "$HOLD_UNTIL" ]; do sleep 0.05; done; fi
output=
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then output=$2; fi
  shift
done
cp {built} "$output"
status=$?
echo "end $(basename "$0") $status" >> "$COMPILER_LOG"
exit $status
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The piece as the real compiler builds it (once for the test run, in the cache the launcher's tests share)."""
    if native.compiler() is None:
        pytest.skip("needs a C++ compiler")
    return native.build(shared_native_cache(tmp_path_factory))


@pytest.fixture
def wrapper(tmp_path, built):
    """The logging compiler wrapper (``WRAPPER``), writing ``built`` where its command line's ``-o`` names."""
    path = tmp_path / "cxx"
    path.write_text(WRAPPER.format(built=shlex.quote(str(built))))
    path.chmod(0o755)
    return path


@pytest.fixture
def machine(tmp_path, wrapper):
    """A fresh cache folder and a logging compiler wrapper: ``(env, cache, compiles)``; ``compiles()`` lists the runs so far."""
    log, cache = tmp_path / "compiles.log", tmp_path / "cache"
    env = dict(os.environ, KV_CANARY_CACHE_DIR=str(cache), CXX=str(wrapper), COMPILER_LOG=str(log),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for variable in ("HOLD", "HOLD_UNTIL", "FAIL", native.DISABLE):
        env.pop(variable, None)

    def compiles(event: str = "start") -> list[str]:
        """The compilers started (or, with ``event="end"``, ended: ``"cxx 0"``, the exit status after the name), in order."""
        lines = log.read_text().splitlines() if log.exists() else []
        return [line.split(" ", 1)[1] for line in lines if line.startswith(event + " ")]

    return env, cache, compiles


def builder(env, what: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BUILDER, what], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


def report(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out)


def partials(cache) -> list[str]:
    return sorted(p.name for p in cache.glob(f"*{native.PARTIAL}"))


def test_builders_started_together_compile_once_and_a_later_process_not_at_all(machine):
    env, cache, compiles = machine
    held = dict(env, HOLD="1")  # each compile waits a second first: the second builder arrives during it
    together = [builder(held, "call path"), builder(held, "call path")]
    for found in map(report, together):
        assert found == {"configured": True, "reason": None}
    assert compiles() == ["cxx"]
    assert report(builder(env, "call path"))["configured"] and compiles() == ["cxx"]  # loaded from the cache
    assert partials(cache) == []


def wait_for(condition, process: subprocess.Popen | None = None) -> None:
    """Poll until ``condition()``; fails if ``process`` exits first (its errors shown) or nothing happens for minutes."""
    deadline = time.monotonic() + 300
    while not condition():
        assert process is None or process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "still waiting"
        time.sleep(0.05)


def test_a_build_killed_midway_leaves_nothing_the_next_build_trips_over(machine):
    env, cache, compiles = machine
    never = cache.parent / "never"
    killed = builder(dict(env, HOLD_UNTIL=str(never)), "c", start_new_session=True)  # its compiler waits
    wait_for(lambda: compiles() == ["cxx"], killed)
    os.killpg(killed.pid, signal.SIGKILL)  # the process and its compiler, mid-build
    killed.wait()
    assert len(partials(cache)) == 1 and not list(cache.glob(f"{native.MODULE}-*.so"))  # what a killed build leaves
    assert report(builder(env, "c")) == {"c": native.MODULE}
    assert compiles() == ["cxx", "cxx"] and partials(cache) == []


def test_a_compiler_that_outlives_its_killed_process_writes_nothing_once_the_next_build_ran(machine):
    env, cache, compiles = machine
    go = cache.parent / "go"
    killed = builder(dict(env, HOLD_UNTIL=str(go)), "c")  # its compiler waits for the file go, then compiles
    wait_for(lambda: compiles() == ["cxx"], killed)
    killed.kill()  # the process alone: its compiler runs on
    killed.wait()
    assert report(builder(env, "c")) == {"c": native.MODULE}
    go.touch()
    wait_for(lambda: len(compiles("end")) == 2)
    assert compiles("end")[0] == "cxx 0" and compiles("end")[1] != "cxx 0"  # ours, then the orphan's, which found no folder
    assert partials(cache) == []


def test_a_piece_that_fails_to_build_leaves_no_call_path_says_why_and_is_tried_once(machine):
    env, cache, compiles = machine
    found = report(builder(dict(env, FAIL="cxx"), "call path"))
    assert found["configured"] is False and "failed" in found["reason"]
    assert compiles() == ["cxx"]  # one try for the process, not one per first remembered call
    assert partials(cache) == []


def test_the_build_is_cached_and_a_failed_build_says_why(tmp_path, monkeypatch, wrapper):
    monkeypatch.setenv("COMPILER_LOG", str(tmp_path / "compiles.log"))
    monkeypatch.setenv("CXX", str(wrapper))
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(tmp_path / "a"))  # the default cache
    first = native.build()
    assert first.parent == tmp_path / "a" and native.build() == first
    assert sorted(p.name for p in first.parent.iterdir()) == sorted([first.name, native.LOCK])  # no partial file
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(tmp_path / "b"))
    monkeypatch.setenv("CXX", "false")
    with pytest.raises(OSError, match="failed"):
        native.build()
    assert [p.name for p in (tmp_path / "b").iterdir()] == [native.LOCK]


def test_a_disabled_piece_is_never_built_and_says_why(tmp_path, monkeypatch):
    for name, value in (("_tried", False), ("_module", None), ("_reason", None)):
        monkeypatch.setattr(native, name, value)
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(native.DISABLE, "0")
    assert native.module() is None and native.unavailable_reason() == f"{native.DISABLE}=0"
    assert list(tmp_path.iterdir()) == []


def test_a_partial_build_of_a_dead_process_or_an_old_one_is_dropped(tmp_path, monkeypatch, wrapper):
    monkeypatch.setenv("COMPILER_LOG", str(tmp_path / "compiles.log"))
    monkeypatch.setenv("CXX", str(wrapper))
    exited = subprocess.Popen(["true"])
    exited.wait()
    name = f"{native.MODULE}-x.so"
    dead = tmp_path / f"{name}.{exited.pid}.abc{native.PARTIAL}"
    alive = tmp_path / f"{name}.{os.getpid()}.abc{native.PARTIAL}"  # a build in progress (this process's)
    for folder in (dead, alive):
        folder.mkdir()
        (folder / name).write_bytes(b"half")
    unnamed = tmp_path / f"{name}abc{native.PARTIAL}"  # no pid in its name (a file, as older builds left): the age rule alone
    unnamed.write_bytes(b"")
    native.build(tmp_path)
    assert not dead.exists() and alive.exists() and unnamed.exists()
    old = alive.stat().st_mtime - native.STALE_PARTIAL_S - 1
    for path in (alive, unnamed):
        os.utime(path, (old, old))
    native.build(tmp_path)  # built already: its folder is still swept
    assert not alive.exists() and not unnamed.exists()


def test_the_build_command_builds_the_piece_ahead_and_says_where(tmp_path_factory, monkeypatch, capsys):
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(shared_native_cache(tmp_path_factory)))
    assert build_command.main() == 0
    assert capsys.readouterr().out.splitlines() == [f"native piece: {native.build()}"]
    monkeypatch.setenv("CXX", "false")
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(tmp_path_factory.mktemp("empty")))
    assert build_command.main() == 1
    assert capsys.readouterr().out.splitlines()[0].startswith("native piece: not built: OSError:")
