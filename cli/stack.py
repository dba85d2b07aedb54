"""`lb up` / `lb down`: the local stack in the background, under one supervisor.

`lb up` takes the data dir's lock (``run/stack.lock``), checks that the port is free
and that no process of an earlier stack still runs, then starts
:mod:`cli.supervisor` in a new session with the locked descriptor. The supervisor
holds the lock for the stack's lifetime and owns Redis and the API. `lb up` returns
once ``/readyz`` answers 200 with the instance token of this start, so an API of
another stack that answers on the same port is never taken for ours.

Every failure is a :class:`StackError` (a RuntimeError: `lb` prints it on one line).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from cli.supervisor import (
    API_PID,
    API_URL_FILE,
    ERROR_FILE,
    REDIS_PID,
    REDIS_URL_FILE,
    STACK_FILE,
    TOKEN_ENV,
    end_processes,
    stack_pids,
)
from conf.settings import Settings
from speed.server import (
    AOF_DIR,
    check_unix_socket_path,
    processes_with_open_files,
    redis_socket_path,
)

LOCK_FILE = "stack.lock"
READY_SECONDS = 60.0

__all__ = [
    "API_PID",
    "REDIS_PID",
    "StackError",
    "StackRunning",
    "PortInUse",
    "RedisUnreachable",
    "StackStartFailed",
    "up",
    "down",
]


class StackError(RuntimeError):
    """`lb up` / `lb down` could not do what was asked; the message says why."""


class StackRunning(StackError):
    """Another stack (or what is left of one) runs on this data dir."""


class PortInUse(StackError):
    """The API port is taken by another process."""


class RedisUnreachable(StackError):
    """The API started but cannot reach Redis."""


class StackStartFailed(StackError):
    """The supervisor, Redis or the API exited during start-up."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _stack_info(settings: Settings) -> dict[str, Any]:
    text = _read(settings.run_dir / STACK_FILE)
    try:
        return dict(json.loads(text)) if text else {}
    except ValueError:
        return {}


def local_redis_url(settings: Settings) -> str | None:
    """The URL of the redis-server `lb up` started for this data dir, if any."""
    return _read(settings.run_dir / REDIS_URL_FILE)


def api_url(settings: Settings) -> str | None:
    return _read(settings.run_dir / API_URL_FILE)


def _take_lock(settings: Settings) -> int:
    """The data dir's stack lock, held (non-blocking); StackRunning if taken."""
    fd = os.open(settings.run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        pid = _stack_info(settings).get("supervisor", "?")
        raise StackRunning(
            f"already running for {settings.data_dir} (supervisor pid {pid}); "
            "`lb down` first"
        ) from None
    return fd


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # The API binds with SO_REUSEADDR too (and SO_REUSEPORT, which a socket
        # without it cannot join): same test, same answer.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(
                    f"port {port} on {host} is in use by another process; "
                    "choose another with --port"
                ) from None
            raise StackError(f"cannot bind {host}:{port}: {exc.strerror}") from None


def _stack_members(settings: Settings, token: str | None) -> list[int]:
    """Live processes of this data dir's stack: those with its instance token, and
    whatever has its AOF open (redis-server rewrites its environment area for its
    process title, so the token cannot be read back from it)."""
    members = set(stack_pids(token)) if token else set()
    aof = settings.redis_dir / AOF_DIR
    if aof.is_dir():
        members |= set(processes_with_open_files(aof))
    members.discard(os.getpid())
    return sorted(members)


def _check_no_leftovers(settings: Settings) -> None:
    """Refuse while processes of an earlier stack of this data dir still run."""
    pids = _stack_members(settings, _stack_info(settings).get("token"))
    if pids:
        raise StackRunning(
            f"processes of an earlier stack still run for {settings.data_dir} "
            f"(pids {', '.join(map(str, pids))}); `lb down` first"
        )


def _supervisor_error(settings: Settings, process: subprocess.Popen[bytes]) -> str:
    reason = _read(settings.run_dir / ERROR_FILE)
    return reason or f"the supervisor exited with {process.returncode}"


def wait_ready(
    url: str,
    timeout: float,
    process: subprocess.Popen[bytes],
    token: str | None = None,
    settings: Settings | None = None,
) -> None:
    """Wait until ``url``/readyz answers 200 from the API with ``token``.

    Fails at once (without waiting out ``timeout``) when the supervisor exits, when
    another program answers on the port, or when our API says Redis is unreachable
    for a reason other than Redis still loading its AOF.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            reason = (
                _supervisor_error(settings, process)
                if settings is not None
                else f"API exited with {process.returncode}"
            )
            raise StackStartFailed(reason)
        try:
            reply = httpx.get(f"{url}/readyz", timeout=1)
        except httpx.HTTPError:
            time.sleep(0.1)
            continue
        try:
            body = reply.json()
        except ValueError:
            body = None
        instance = body.get("instance") if isinstance(body, dict) else None
        if token is not None and instance != token:
            raise PortInUse(f"another program answers on {url}; choose another --port")
        if reply.status_code == 200:
            return
        detail = str(body.get("detail", "")) if isinstance(body, dict) else ""
        if reply.status_code == 503 and "BusyLoading" not in detail:
            raise RedisUnreachable(detail or "Redis is unreachable")
        time.sleep(0.1)
    raise StackStartFailed(f"API did not become ready within {timeout:.0f} s")


def up(settings: Settings, port: int) -> str:
    """Start the supervisor (Redis unless LB_REDIS_URL is set, and the API); return
    the API URL once it is ready."""
    if not settings.redis_url:
        # Named here, with its path and exit code, not as the supervisor's failure.
        check_unix_socket_path(redis_socket_path(settings.redis_dir))
    run = settings.run_dir
    run.mkdir(parents=True, exist_ok=True)
    lock_fd = _take_lock(settings)
    try:
        _check_no_leftovers(settings)
        _check_port_free(settings.api_host, port)
        token = secrets.token_hex(16)
        env = dict(
            os.environ,
            LB_DATA_DIR=str(settings.data_dir.resolve()),
            **{TOKEN_ENV: token},
        )
        (run / ERROR_FILE).unlink(missing_ok=True)
        log = open(run / "supervisor.log", "ab")  # noqa: SIM115 - the child's output
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cli.supervisor",
                "--port",
                str(port),
                "--token",
                token,
                "--lock-fd",
                str(lock_fd),
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(lock_fd,),
            start_new_session=True,
        )
        log.close()
        (run / STACK_FILE).write_text(
            json.dumps({"supervisor": process.pid, "token": token, "port": port})
        )
    finally:
        # The supervisor holds the lock through its inherited descriptor.
        os.close(lock_fd)
    url = f"http://{settings.api_host}:{port}"
    try:
        wait_ready(url, READY_SECONDS, process, token, settings)
    except StackError:
        down(settings)
        raise
    return url


def down(settings: Settings) -> list[str]:
    """Stop the stack of this data dir: the supervisor (which stops the API, then
    Redis), then any process of the stack still alive (orphaned workers)."""
    run = settings.run_dir
    info = _stack_info(settings)
    token = info.get("token")
    stopped: list[str] = []
    pids = _stack_members(settings, token)
    if not pids:
        (run / STACK_FILE).unlink(missing_ok=True)
        return stopped
    names = {pid: _read(Path(f"/proc/{pid}/comm")) or "?" for pid in pids}
    api_pid, redis_pid = _read(run / API_PID), _read(run / REDIS_PID)
    supervisor = info.get("supervisor")
    if isinstance(supervisor, int) and supervisor in pids:
        end_processes([supervisor], timeout=60)
    # Whatever the supervisor did not stop (it was killed, or orphans escaped it).
    end_processes(_stack_members(settings, token))
    for pid, name in names.items():
        if str(pid) == redis_pid or name.startswith("redis"):
            stopped.append("redis")
        elif str(pid) == api_pid or pid != supervisor:
            stopped.append("api")
    for name in (API_PID, REDIS_PID, API_URL_FILE, REDIS_URL_FILE, STACK_FILE):
        (run / name).unlink(missing_ok=True)
    return sorted(set(stopped))
