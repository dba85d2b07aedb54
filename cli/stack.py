"""`lb up` / `lb down`: the local stack in the background, tracked by pid files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from api.metrics import MULTIPROC_ENV, prepare_multiprocess_dir
from conf.settings import Settings
from speed.server import RedisServer

REDIS_PID = "redis.pid"
API_PID = "api.pid"
REDIS_URL_FILE = "redis.url"
API_URL_FILE = "api.url"


class StackError(RuntimeError):
    pass


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _alive(pid: int, expect: str) -> bool:
    """True if ``pid`` runs and is the program we started (its cmdline names it)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return expect.encode() in cmdline


def local_redis_url(settings: Settings) -> str | None:
    """The URL of the redis-server `lb up` started for this data dir, if any."""
    return _read(settings.run_dir / REDIS_URL_FILE)


def api_url(settings: Settings) -> str | None:
    return _read(settings.run_dir / API_URL_FILE)


def wait_ready(url: str, timeout: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise StackError(f"API exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise StackError(f"API did not become ready within {timeout} s")


def up(settings: Settings, port: int) -> str:
    """Start Redis (unless LB_REDIS_URL is set) and the API; return the API URL."""
    run = settings.run_dir
    run.mkdir(parents=True, exist_ok=True)
    pid = _read(run / API_PID)
    if pid and _alive(int(pid), "uvicorn"):
        raise StackError(f"already running (API pid {pid}); `lb down` first")

    redis_url = settings.redis_url
    if not redis_url:
        server = RedisServer(
            settings.redis_dir, unix_socket=True, appendfsync=settings.appendfsync
        )
        server.start()
        assert server.process is not None
        (run / REDIS_PID).write_text(str(server.process.pid))
        redis_url = server.url
        (run / REDIS_URL_FILE).write_text(redis_url)

    env = dict(
        os.environ, LB_REDIS_URL=redis_url, LB_DATA_DIR=str(settings.data_dir.resolve())
    )
    # Metrics of every worker in one place, emptied at each start (api/metrics.py).
    env[MULTIPROC_ENV] = str(prepare_multiprocess_dir(settings))
    log = open(run / "api.log", "ab")  # noqa: SIM115 - handed to the child process
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "api.main:create_app",
            "--factory",
            "--host",
            settings.api_host,
            "--port",
            str(port),
            "--workers",
            str(settings.api_workers),
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    (run / API_PID).write_text(str(process.pid))
    url = f"http://{settings.api_host}:{port}"
    (run / API_URL_FILE).write_text(url)
    try:
        wait_ready(url, 60, process)
    except StackError:
        down(settings)
        raise
    return url


def _stop(pid_file: Path, expect: str) -> bool:
    pid_text = _read(pid_file)
    stopped = False
    if pid_text and pid_text.isdigit() and _alive(int(pid_text), expect):
        pid = int(pid_text)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while _alive(pid, expect) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid, expect):
            os.kill(pid, signal.SIGKILL)
        stopped = True
    pid_file.unlink(missing_ok=True)
    return stopped


def down(settings: Settings) -> list[str]:
    """Stop exactly what `lb up` started for this data dir (API first, then Redis)."""
    run = settings.run_dir
    stopped = []
    if _stop(run / API_PID, "uvicorn"):
        stopped.append("api")
    if _stop(run / REDIS_PID, "redis-server"):
        stopped.append("redis")
    (run / API_URL_FILE).unlink(missing_ok=True)
    (run / REDIS_URL_FILE).unlink(missing_ok=True)
    return stopped
