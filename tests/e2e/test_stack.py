"""`lb up` starts Redis and the API in the background; `lb down` stops exactly them.
The stack's API closes a connection that sends no complete headers in time."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import httpx
import orjson
import pytest

from api.http_protocol import HEADER_TIMEOUT_SECONDS
from api.security import sign
from speed.server import free_port
from tests.conftest import event, open_windows_env
from tests.support.clients import closed_within
from tests.support.lb import lb, running

pytestmark = pytest.mark.e2e


def test_up_serves_signed_writes_and_down_leaves_nothing(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        LB_DATA_DIR=str(tmp_path / "lb"),
        LB_RATE_LIMIT="off",
    )
    env |= open_windows_env(tmp_path / "conf")  # event() is dated November 2026
    env.pop("LB_REDIS_URL", None)
    port = free_port()
    started = lb("up", "--port", str(port), env=env)
    assert started.returncode == 0, started.stderr
    run = tmp_path / "lb" / "run"
    pids = [int((run / name).read_text()) for name in ("api.pid", "redis.pid")]
    try:
        assert all(running(pid) for pid in pids)
        body = orjson.dumps(event())
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/score-events",
            content=body,
            headers={"X-Key-Id": "dev", "X-Signature": sign(b"dev-secret", body)},
        )
        assert reply.status_code == 200
        assert reply.json()["status"] == "accepted"
        again = lb("up", "--port", str(port), env=env)
        assert again.returncode == 1 and "already running" in again.stderr
        # The AOF is in LB_DATA_DIR: the event is on disk.
        assert list((tmp_path / "lb" / "redis").rglob("*.aof"))
        # A connection without complete headers is closed at the header deadline
        # (api/http_protocol.py, which `lb up` gives uvicorn; issue 23).
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET /v1/boards HTTP/1.1\r\nHo")
            took = closed_within(sock, HEADER_TIMEOUT_SECONDS + 10)
        assert took is not None, "lb up's API held the half-open connection"
        assert took < HEADER_TIMEOUT_SECONDS + 3
    finally:
        stopped = lb("down", env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert "api" in stopped.stdout and "redis" in stopped.stdout
    assert not any(running(pid) for pid in pids)
    assert not (run / "api.pid").exists()
    # A second down finds nothing to stop.
    assert "nothing was running" in lb("down", env=env).stdout
