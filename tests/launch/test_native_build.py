"""How the call path's native pieces are built and loaded: in the calling thread, once per machine, safely side by side.

``native.compile_cached`` builds the C module and the C++ tensor reader;
``dispatch._load_call_path`` builds and loads both at a process's first bound
kernel. Runs on a CPU machine: the builders are child processes whose $CC and
$CXX are wrapper scripts that log each compiler run (then run the real
compiler, after ``HOLD`` seconds or once the file ``HOLD_UNTIL`` exists when
set, or fail when ``FAIL`` names it), so
that the tests count compiles. A CPU machine has no CUDA driver, so the
children stand the driverless C module in for ``native.module()``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kv_canary_torch.launch import build as build_command, native, tensor_meta

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A child process: build the pieces named by argv[1] ("c": the C module; "call path": both, through
# dispatch._load_call_path, twice) and print what it ended with.
BUILDER = """
import json, sys
from kv_canary_torch.launch import dispatch, native, tensor_meta
c = native.load_module(native.build())
report = {"c": c.__name__}
if sys.argv[1] == "call path":
    native.module = lambda: c  # no driver here: the C module as native.module() returns it on a GPU
    dispatch._load_call_path()
    dispatch._load_call_path()  # a later first launch of another variant: nothing is tried again
    report |= {"configured": dispatch.call_bound == c.call, "reader": type(dispatch._reader).__name__,
               "reason": tensor_meta.unavailable_reason()}
print(json.dumps(report))
"""

WRAPPER = """#!/bin/sh
echo "start $(basename "$0")" >> "$COMPILER_LOG"
if [ "$FAIL" = "$(basename "$0")" ]; then exit 1; fi
if [ -n "$HOLD" ]; then sleep "$HOLD"; fi
if [ -n "$HOLD_UNTIL" ]; then while [ ! -e "$HOLD_UNTIL" ]; do sleep 0.05; done; fi
{real} "$@"
status=$?
echo "end $(basename "$0") $status" >> "$COMPILER_LOG"
exit $status
"""


@pytest.fixture
def machine(tmp_path):
    """A fresh cache folder and logging compiler wrappers: ``(env, cache, compiles)``; ``compiles()`` lists the runs so far."""
    real_cc, real_cxx = native.compiler(), tensor_meta.compiler()
    if real_cc is None or real_cxx is None:
        pytest.skip("needs a C and a C++ compiler")
    log, cache = tmp_path / "compiles.log", tmp_path / "cache"
    wrappers = {}
    for name, real in (("cc", real_cc), ("cxx", real_cxx)):
        wrapper = wrappers[name] = tmp_path / name
        wrapper.write_text(WRAPPER.format(real=real))
        wrapper.chmod(0o755)
    env = dict(os.environ, KV_CANARY_CACHE_DIR=str(cache), CC=str(wrappers["cc"]), CXX=str(wrappers["cxx"]),
               COMPILER_LOG=str(log), PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for variable in ("HOLD", "HOLD_UNTIL", "FAIL"):
        env.pop(variable, None)

    def compiles(event: str = "start") -> list[str]:
        """The compilers started (or, with ``event="end"``, ended: ``"cc 0"``, the exit status after the name), in order."""
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


def test_builders_started_together_compile_each_piece_once_and_a_later_process_none(machine):
    env, cache, compiles = machine
    held = dict(env, HOLD="1")  # each compile waits a second first: the second builder arrives during it
    together = [builder(held, "call path"), builder(held, "call path")]
    for found in map(report, together):
        assert found == {"c": native.MODULE, "configured": True, "reader": "PyCapsule", "reason": None}
    assert sorted(compiles()) == ["cc", "cxx"]
    assert report(builder(env, "call path"))["configured"] and sorted(compiles()) == ["cc", "cxx"]  # loaded from the cache
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
    wait_for(lambda: compiles() == ["cc"], killed)
    os.killpg(killed.pid, signal.SIGKILL)  # the process and its compiler, mid-build
    killed.wait()
    assert len(partials(cache)) == 1 and not list(cache.glob(f"{native.MODULE}-*.so"))  # what a killed build leaves
    assert report(builder(env, "c")) == {"c": native.MODULE}
    assert compiles() == ["cc", "cc"] and partials(cache) == []


def test_a_compiler_that_outlives_its_killed_process_writes_nothing_once_the_next_build_ran(machine):
    env, cache, compiles = machine
    go = cache.parent / "go"
    killed = builder(dict(env, HOLD_UNTIL=str(go)), "c")  # its compiler waits for the file go, then compiles
    wait_for(lambda: compiles() == ["cc"], killed)
    killed.kill()  # the process alone: its compiler runs on
    killed.wait()
    assert report(builder(env, "c")) == {"c": native.MODULE}
    go.touch()
    wait_for(lambda: len(compiles("end")) == 2)
    assert compiles("end")[0] == "cc 0" and compiles("end")[1] != "cc 0"  # ours, then the orphan's, which found no folder
    assert partials(cache) == []


def test_a_reader_that_fails_to_build_leaves_no_call_path_says_why_and_is_tried_once(machine):
    env, cache, compiles = machine
    found = report(builder(dict(env, FAIL="cxx"), "call path"))
    assert found["configured"] is False and found["reader"] == "NoneType" and "failed" in found["reason"]
    assert compiles() == ["cc", "cxx"]  # one try for the process, not one per first launch
    assert partials(cache) == []


def test_the_build_is_cached_and_a_failed_build_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(tmp_path / "a"))  # the default cache
    first = native.build()
    assert first.parent == tmp_path / "a" and native.build() == first
    assert sorted(p.name for p in first.parent.iterdir()) == sorted([first.name, native.LOCK])  # no partial file
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(tmp_path / "b"))
    monkeypatch.setenv("CC", "false")
    with pytest.raises(OSError, match="failed"):
        native.build()
    assert [p.name for p in (tmp_path / "b").iterdir()] == [native.LOCK]


def shared_cache(tmp_path_factory):
    """The cache folder the test session's workers share for the C++ reader (test_launch_native.py's too)."""
    return tmp_path_factory.getbasetemp().parent / "kv-canary-native"


def test_the_reader_loads_in_the_calling_thread(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(shared_cache(tmp_path_factory)))
    assert type(tensor_meta.load()).__name__ == "PyCapsule"


def test_a_reader_that_cannot_build_is_never_used_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")
    assert tensor_meta.load() is None and "failed" in tensor_meta.unavailable_reason()
    for switch in ("KV_CANARY_TENSOR_READER", "KV_CANARY_C_LAUNCHER"):
        monkeypatch.setenv(switch, "0")
        assert tensor_meta.load() is None and tensor_meta.unavailable_reason() == f"{switch}=0"


def test_a_partial_build_of_a_dead_process_or_an_old_one_is_dropped(tmp_path):
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


def test_the_build_command_builds_both_pieces_ahead_and_says_where(tmp_path_factory, monkeypatch, capsys):
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(shared_cache(tmp_path_factory)))
    assert build_command.main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"C launcher: {native.build()}", f"C++ tensor reader: {tensor_meta.build()}"]
    monkeypatch.setenv("CXX", "false")
    monkeypatch.setenv("KV_CANARY_CACHE_DIR", str(tmp_path_factory.mktemp("empty")))
    assert build_command.main() == 1
    assert capsys.readouterr().out.splitlines()[1].startswith("C++ tensor reader: not built: OSError:")
