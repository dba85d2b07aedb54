"""`lb up` starts one API worker per core unless LB_API_WORKERS says otherwise
(issue 13, item 6); every worker answers reads."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from speed.server import free_port
from tests.support.lb import lb, stack_env

pytestmark = pytest.mark.e2e


def worker_pids(api_pid: int) -> list[int]:
    """uvicorn's worker processes: children of its supervisor started through
    multiprocessing's spawn (not its resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == api_pid and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def test_one_worker_per_core_by_default(tmp_path: Path) -> None:
    data_dir = tmp_path / "lb"
    env = stack_env(data_dir)
    env.pop("LB_API_WORKERS", None)
    port = free_port()
    started = lb("up", "--port", str(port), env=env)
    try:
        assert started.returncode == 0, started.stderr
        api_pid = int((data_dir / "run" / "api.pid").read_text())
        assert len(worker_pids(api_pid)) == len(os.sched_getaffinity(0))
        url = f"http://127.0.0.1:{port}"
        # New connections spread over the workers; each one answers the read.
        for _ in range(10):
            with httpx.Client() as client:
                reply = client.get(f"{url}/v1/boards/alltime:all:global/top")
                assert reply.status_code == 200, reply.text
    finally:
        lb("down", env=env)
