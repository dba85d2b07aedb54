"""Process management of `lb up` / `lb down` (issue 7, items 1, 2, 9 and 10).

One supervisor owns Redis and the API; a lock in the data dir is held for the
stack's lifetime; orphans of a killed API supervisor stop serving; `lb up` only
believes its own API; Redis never starts on an AOF another process has open.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from api.security import sign
from cli.supervisor import stack_pids
from speed.server import RedisServer, free_port
from tests.conftest import event
from tests.support.lb import lb, stack_env

pytestmark = pytest.mark.e2e


def post_event(url: str, payload: dict[str, object]) -> httpx.Response:
    body = orjson.dumps(payload)
    return httpx.post(
        f"{url}/v1/score-events",
        content=body,
        headers={"X-Key-Id": "dev", "X-Signature": sign(b"dev-secret", body)},
        timeout=10,
    )


def answers(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=1)
    except httpx.HTTPError:
        return False
    return True


def wait_until(condition, timeout: float = 30) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())


def token_of(data_dir: Path) -> str:
    return str(json.loads((data_dir / "run" / "stack.json").read_text())["token"])


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "lb"
    yield path
    # Whatever a test left running is stopped here.
    lb("down", env=stack_env(path))


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    """One `lb up` stack (its data dir, its port) for the tests that only need a
    stack that runs and leave it running: started once for the module (each
    start and stop is about 10 s on two loaded cores), stopped at its end. The
    tests that kill or stop a stack start their own (``data_dir``)."""
    path = tmp_path_factory.mktemp("running") / "lb"
    port = free_port()
    try:
        started = lb("up", "--port", str(port), env=stack_env(path))
        assert started.returncode == 0, started.stderr
        yield path, port
    finally:
        lb("down", env=stack_env(path))


def test_kill_9_of_the_api_supervisor_leaves_no_orphan_serving(data_dir: Path) -> None:
    env = stack_env(data_dir, LB_API_WORKERS="2")
    port = free_port()
    started = lb("up", "--port", str(port), env=env)
    assert started.returncode == 0, started.stderr
    url = f"http://127.0.0.1:{port}"
    token = token_of(data_dir)
    api_pid = int((data_dir / "run" / "api.pid").read_text())
    # Premise: uvicorn runs two workers beside its own supervisor process.
    before = set(stack_pids(token))
    assert len(before) >= 4, before  # ours, uvicorn, 2 workers
    assert post_event(url, event()).status_code == 200
    os.kill(api_pid, signal.SIGKILL)
    # The stack's supervisor ends the orphaned workers and starts the API again
    # (issue 23): no process of the old API is left, the new one serves.
    redis_pid = int((data_dir / "run" / "redis.pid").read_text())
    supervisor = json.loads((data_dir / "run" / "stack.json").read_text())["supervisor"]
    old_api = before - {redis_pid, supervisor}
    assert wait_until(lambda: not old_api & set(stack_pids(token))), stack_pids(token)
    assert wait_until(lambda: post_ok(url), 60)
    reply = post_event(url, event())
    assert reply.status_code == 200 and reply.json()["status"] == "duplicate"
    assert token_of(data_dir) == token
    assert "stopped" in lb("down", env=env).stdout
    assert not stack_pids(token_of_missing_ok(data_dir) or token)
    assert not answers(url)


def post_ok(url: str) -> bool:
    try:
        return post_event(url, event()).status_code == 200
    except httpx.HTTPError:
        return False


def token_of_missing_ok(data_dir: Path) -> str | None:
    try:
        return token_of(data_dir)
    except OSError:
        return None


def test_kill_9_of_the_stack_supervisor_stops_its_children(data_dir: Path) -> None:
    env = stack_env(data_dir, LB_API_WORKERS="2")
    port = free_port()
    assert lb("up", "--port", str(port), env=env).returncode == 0
    info = json.loads((data_dir / "run" / "stack.json").read_text())
    os.kill(info["supervisor"], signal.SIGKILL)
    assert wait_until(lambda: not stack_pids(info["token"])), stack_pids(info["token"])
    redis_pid = int((data_dir / "run" / "redis.pid").read_text())
    assert wait_until(lambda: not Path(f"/proc/{redis_pid}").exists())
    again = lb("up", "--port", str(port), env=env)
    assert again.returncode == 0, again.stderr


def test_up_refuses_a_data_dir_whose_stack_runs(running: tuple[Path, int]) -> None:
    data_dir, _ = running
    env = stack_env(data_dir)
    other_port = free_port()
    again = lb("up", "--port", str(other_port), env=env)
    assert again.returncode == 1
    assert "already running" in again.stderr and len(again.stderr.splitlines()) == 1
    assert not answers(f"http://127.0.0.1:{other_port}")


def test_up_on_a_taken_port_fails_instead_of_trusting_the_other_api(
    running: tuple[Path, int], tmp_path: Path
) -> None:
    _, port = running
    second_dir = tmp_path / "second"
    second = stack_env(second_dir)
    try:
        started = time.monotonic()
        reply = lb("up", "--port", str(port), env=second)
        assert reply.returncode == 3, reply.stdout
        assert f"port {port}" in reply.stderr and "in use" in reply.stderr
        assert len(reply.stderr.strip().splitlines()) == 1
        assert time.monotonic() - started < 30
        # Nothing of the second stack is left, and the first one still serves.
        assert not (second_dir / "run" / "stack.json").exists()
        assert post_event(f"http://127.0.0.1:{port}", event()).status_code == 200
    finally:
        lb("down", env=second)


def test_wait_ready_rejects_an_api_that_is_not_ours(running: tuple[Path, int]) -> None:
    from cli.stack import PortInUse, wait_ready

    _, port = running
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(PortInUse):
            wait_ready(f"http://127.0.0.1:{port}", 10, sleeper, token="not-ours")
    finally:
        sleeper.kill()
        sleeper.wait()


def test_redis_unreachable_fails_fast_with_the_reason(
    data_dir: Path, tmp_path: Path
) -> None:
    env = stack_env(data_dir)
    env["LB_REDIS_URL"] = f"unix://{tmp_path}/nothing-here.sock"
    started = time.monotonic()
    reply = lb("up", "--port", str(free_port()), env=env)
    assert reply.returncode == 3
    assert "redis unavailable" in reply.stderr.lower()
    assert "ConnectionError" in reply.stderr
    assert len(reply.stderr.strip().splitlines()) == 1
    assert time.monotonic() - started < 20


def test_redis_never_starts_on_an_aof_another_process_has_open(
    data_dir: Path,
) -> None:
    # An orphaned redis-server of an earlier stack still has the AOF open.
    orphan = RedisServer(data_dir / "redis", unix_socket=True).start()
    try:
        reply = lb("up", "--port", str(free_port()), env=stack_env(data_dir))
        assert reply.returncode == 1
        assert str(orphan.process.pid) in reply.stderr  # type: ignore[union-attr]
        assert "lb down" in reply.stderr
        assert orphan.process is not None and orphan.process.poll() is None
        # `lb down` ends it: it belongs to this data dir.
        down = lb("down", env=stack_env(data_dir))
        assert down.returncode == 0 and "redis" in down.stdout
        assert wait_until(lambda: orphan.process.poll() is not None)  # type: ignore[union-attr]
    finally:
        if orphan.process is not None and orphan.process.poll() is None:
            orphan.stop()
    with pytest.raises(Exception, match="open by pid"):
        first = RedisServer(data_dir / "redis2", unix_socket=True).start()
        try:
            RedisServer(data_dir / "redis2", port=free_port()).start()
        finally:
            first.stop()


def test_stack_files_are_private(running: tuple[Path, int]) -> None:
    data_dir, port = running
    assert post_event(f"http://127.0.0.1:{port}", event()).status_code == 200
    files = [p for p in (data_dir / "redis").rglob("*") if p.is_file()]
    assert any(p.suffix == ".aof" or ".aof." in p.name for p in files), files
    for path in files:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, (path, oct(mode))


def test_publish_without_a_redis_stops_with_a_clear_message(data_dir: Path) -> None:
    started = time.monotonic()
    reply = lb("publish", env=stack_env(data_dir))
    assert reply.returncode == 3
    assert "no Redis for data dir" in reply.stderr and "LB_REDIS_URL" in reply.stderr
    assert "6379" not in reply.stderr + reply.stdout
    # Checked before Spark starts.
    assert time.monotonic() - started < 15
