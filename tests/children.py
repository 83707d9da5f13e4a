"""Child processes the tests read, run ahead of their tests on the machine's other core.

A test whose behaviour only a fresh interpreter shows (what a first call
imports, a README block as a reader pastes it, a script's whole run) waits
seconds for its child, most of them spent importing torch or JAX, while this
process, which runs one test at a time on one core, does nothing. Declared
ahead, the children run in a background thread, one at a time and in the
order of the tests that read them, while this process runs the tests before
those: on a 2-core machine the second core runs them.

Contract:

- ``Child(argv, set_env=None, unset=(), cwd=ROOT, timeout=300)``: the command
  ``[sys.executable, *argv]`` (``argv`` a sequence, or a function returning
  one, called when the child starts: for scripts that test modules register
  at import), in the environment this process had when the children were
  started ahead (``start_ahead``; else at the child's start), less ``unset``,
  plus ``set_env``; in ``cwd`` (``None``: an empty directory of its own).
- ``child.ahead``: a mark (``pytest.mark.children(child)``) for a test, or a
  ``pytest.param``'s ``marks``, that reads ``child``.
- ``child.run() -> subprocess.CompletedProcess`` (text, stdout and stderr
  captured): the child's one run in this process. Started ahead, it waits for
  it; else, or not reached yet by the background thread, it runs it now in
  the calling thread. A child the background thread starts runs
  ``AHEAD_NICENESS`` below this process's priority, so that this process's tests keep the cores they use.
  A child past its timeout raises
  ``subprocess.TimeoutExpired``, from ``run()``, in the test.
- ``start_ahead(children)``: the background thread takes ``children`` in
  this order (conftest's ``pytest_collection_finish``: the marked children
  of the selected tests, in the tests' order), unless the machine has one
  core or this is a pytest-xdist worker (whose tests are spread over
  workers: each worker would run every child). ``stop_ahead()`` (the
  run's end: ``pytest_sessionfinish``) takes the ones not started off the queue and kills a
  running one.

The environment is the one of the moment the children are started ahead, not
of the moment each starts: a test that changes ``os.environ`` (monkeypatch)
while a child starts must not leak into it.
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AHEAD_NICENESS = 10  # niceness a child run ahead adds: where both want a core, the child gets about a tenth (Linux)

_lock = threading.Condition()
_queue: collections.deque[Child] = collections.deque()
_environment: dict[str, str] | None = None  # os.environ as start_ahead found it
_worker: threading.Thread | None = None
_current: Child | None = None  # the one the background thread runs
_stopping = False


class Child:
    """A child process some tests read (the module docstring's contract)."""

    def __init__(self, argv: Sequence[str] | Callable[[], Sequence[str]], *, set_env: Mapping[str, str] | None = None,
                 unset: Iterable[str] = (), cwd: str | None = ROOT, timeout: float = 300):
        self.argv, self.set_env, self.unset = argv, dict(set_env or {}), tuple(unset)
        self.cwd, self.timeout = cwd, timeout
        self._state = "idle"  # idle, queued, running, done
        self._done: subprocess.CompletedProcess | BaseException | None = None
        self._process: subprocess.Popen | None = None

    @property
    def ahead(self) -> pytest.MarkDecorator:
        return pytest.mark.children(self)

    def run(self) -> subprocess.CompletedProcess:
        with _lock:
            mine = self._state in ("idle", "queued")
            if mine:
                self._state = "running"
        if mine:
            self._finish()
        with _lock:
            _lock.wait_for(lambda: self._state == "done")
        if isinstance(self._done, BaseException):
            raise self._done
        return self._done

    def _finish(self) -> None:
        """Run the child in this thread and record its result (or the exception that ended it)."""
        try:
            result = self._start_and_wait()
        except BaseException as error:  # noqa: BLE001  (raised again by run(), in the test's thread)
            result = error
        with _lock:
            self._done, self._state, self._process = result, "done", None
            _lock.notify_all()

    def _start_and_wait(self) -> subprocess.CompletedProcess:
        argv = [sys.executable, *(self.argv() if callable(self.argv) else self.argv)]
        env = {k: v for k, v in environment().items() if k not in self.unset} | self.set_env
        with tempfile.TemporaryDirectory() as empty:
            with _lock:
                if _stopping:
                    raise RuntimeError("the test run ended before this child ran")
                self._process = subprocess.Popen(argv, cwd=self.cwd or empty, env=env, text=True,
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            process = self._process
            if threading.current_thread() is not threading.main_thread():
                # Ahead of its test: this process's tests come first where both want the cores. Set before the
                # child's imports start threads, which inherit it.
                with contextlib.suppress(OSError):
                    inherited = os.getpriority(os.PRIO_PROCESS, process.pid)
                    os.setpriority(os.PRIO_PROCESS, process.pid, min(inherited + AHEAD_NICENESS, 19))
            try:
                out, err = process.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                raise
        return subprocess.CompletedProcess(argv, process.returncode, out, err)


def environment() -> dict[str, str]:
    """The environment children start from: os.environ when ``start_ahead`` ran, else now (then kept)."""
    global _environment
    with _lock:
        if _environment is None:
            _environment = dict(os.environ)
        return _environment


def start_ahead(children: Iterable[Child], *, xdist_worker: bool = False) -> None:
    global _worker
    environment()
    if xdist_worker or (os.cpu_count() or 1) < 2:
        return
    with _lock:
        for child in dict.fromkeys(children):  # each once, in first-read order
            if child._state == "idle":
                child._state = "queued"
                _queue.append(child)
        if _queue and _worker is None:
            _worker = threading.Thread(target=_take_children, name="children ahead", daemon=True)
            _worker.start()


def _take_children() -> None:
    global _current, _worker
    while True:
        with _lock:
            while _queue and _queue[0]._state != "queued":  # a test ran it already
                _queue.popleft()
            if not _queue or _stopping:
                _current = _worker = None  # a later start_ahead starts another
                return
            _current = _queue.popleft()
            _current._state = "running"
        _current._finish()


def stop_ahead() -> None:
    global _stopping
    with _lock:
        _stopping = True
        for child in _queue:
            if child._state == "queued":
                child._state = "idle"
        _queue.clear()
        process = _current._process if _current is not None else None
    if process is not None:
        process.kill()
