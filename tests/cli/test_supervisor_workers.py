"""The supervisor counts a worker that died under a living uvicorn, never the
workers of a uvicorn that died itself (those were handed to init, and watch()
heals the API once). CI's kill drill once counted 5 restarts for 2 deaths: the
dead uvicorn's three children (two workers, the resource tracker) as died
workers, then the API itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cli.supervisor import Supervisor, uvicorn_workers
from conf.settings import Settings
from tests.drills.harness import wait_until

pytestmark = pytest.mark.integration

# A stand-in for uvicorn's supervisor: two children that sleep, one of them
# named like multiprocessing's resource tracker, and a parent that waits.
PARENT = """
import subprocess, sys, time
sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
workers = [subprocess.Popen(sleeper) for _ in range(2)]
tracker = subprocess.Popen(sleeper + ["resource_tracker"])
time.sleep(60)
"""


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _children(pid: int) -> set[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return {int(p) for p in path.read_text().split()}


def _end(parent: subprocess.Popen[bytes], children: set[int]) -> None:
    """The stand-in and the children it had (they outlive a killed parent)."""
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    parent.kill()
    parent.wait()


def test_the_workers_of_a_dead_uvicorn_are_not_counted_as_restarts(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path, api_workers=2)
    settings.run_dir.mkdir(parents=True)
    supervisor = Supervisor(settings, 0, "t")
    parent = subprocess.Popen([sys.executable, "-c", PARENT])
    children: set[int] = set()
    try:
        # All three started (the tracker is spawned after the workers: waiting for
        # the two workers alone once read the children before it, on a loaded CI).
        assert wait_until(lambda: len(_children(parent.pid)) == 3), (
            "premise: two workers and the tracker"
        )
        assert wait_until(lambda: len(uvicorn_workers(parent.pid)) == 2)
        children = _children(parent.pid)
        supervisor.api = parent
        assert supervisor._watch_workers()
        assert supervisor.workers == uvicorn_workers(parent.pid)
        os.kill(parent.pid, signal.SIGKILL)
        # Dead, not yet reaped: what watch() sees between two rounds.
        assert wait_until(lambda: _state(parent.pid) == "Z")
        assert uvicorn_workers(parent.pid) == set(), "premise: children handed on"
        assert supervisor._watch_workers()
        assert supervisor.state["restarts"]["api"] == 0
        assert supervisor.state["events"] == []
    finally:
        _end(parent, children)


# A stand-in whose third child is read between its fork and its exec (as
# multiprocessing starts the resource tracker): for a moment it has the parent's
# command line, then it becomes the tracker. It never died.
FORKED_THEN_TRACKER = """
import os, subprocess, sys, time
sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
workers = [subprocess.Popen(sleeper) for _ in range(2)]
go = sys.argv[1]
if os.fork() == 0:
    deadline = time.monotonic() + 60  # bounded, should the test fail first
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.01)
    # Named in two parts: before the exec this child's command line is this
    # script's, which must not read as the tracker's.
    os.execv(sys.executable, sleeper + ["resource_" + "tracker"])
deadline = time.monotonic() + 60
while time.monotonic() < deadline:  # reaps a dead child, as uvicorn does
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        pass
    time.sleep(0.01)
"""


def test_the_tracker_read_before_its_exec_is_not_a_died_worker(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path, api_workers=2)
    settings.run_dir.mkdir(parents=True)
    supervisor = Supervisor(settings, 0, "t")
    go = tmp_path / "exec-now"
    parent = subprocess.Popen([sys.executable, "-c", FORKED_THEN_TRACKER, str(go)])
    children: set[int] = set()
    try:
        # Before the exec the forked child reads as a third worker.
        assert wait_until(lambda: len(uvicorn_workers(parent.pid)) == 3), (
            "premise: the fork read with the parent's command line"
        )
        children = _children(parent.pid)
        supervisor.api = parent
        assert supervisor._watch_workers()
        assert len(supervisor.workers) == 3
        go.touch()
        assert wait_until(lambda: len(uvicorn_workers(parent.pid)) == 2), (
            "premise: the fork became the tracker"
        )
        assert supervisor._watch_workers()
        assert supervisor.state["restarts"]["api"] == 0
        assert supervisor.state["events"] == []
        assert supervisor.workers == uvicorn_workers(parent.pid)
        # A worker that does die is still counted, once reaped.
        worker = min(supervisor.workers)
        os.kill(worker, signal.SIGKILL)
        assert wait_until(lambda: worker not in _children(parent.pid))
        assert supervisor._watch_workers()
        assert supervisor.state["restarts"]["api"] == 1
        assert [(e["reason"], e["worker"]) for e in supervisor.state["events"]] == [
            (f"API worker {worker} died", worker)
        ]
    finally:
        _end(parent, children)
