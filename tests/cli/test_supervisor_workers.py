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
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        parent.kill()
        parent.wait()
