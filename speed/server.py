"""A local ``redis-server`` process: started for `lb up` and for tests.

Data lives in the given directory with AOF on; ``appendfsync always`` by default, so a
reply to a write means the write is on disk.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import redis

from conf.settings import Settings


class RedisServerError(RuntimeError):
    pass


class RedisDataInUse(RedisServerError):
    """Another process has this data dir's AOF open: a second server on the same
    files would interleave two histories in one log."""


class RedisNotConfigured(RuntimeError):
    """Neither LB_REDIS_URL nor a local stack names the Redis to use."""

    # cli/main.py's explain(): a service is unavailable (its message says the fix).
    exit_code = 3
    hint = None


# Files created by the local Redis (AOF, its manifest, the log) are readable by
# their owner only: they hold every event of the partition logs.
PRIVATE_UMASK = 0o077
AOF_DIR = "appendonlydir"  # Redis 7's multi-part AOF directory, under --dir
# sun_path of a unix socket address holds 108 bytes with its terminating NUL.
UNIX_PATH_MAX = 107
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child between fork and exec: get SIGTERM when the parent dies, so a
    killed supervisor does not leave its children running (Linux prctl)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # pragma: no cover - not Linux: best effort
        pass


def processes_with_open_files(directory: Path) -> dict[int, str]:
    """pid -> program name of every process with a file under ``directory`` open.

    Reads ``/proc/<pid>/fd``; processes of other users are not visible and skipped.
    """
    root = str(Path(directory).resolve()) + os.sep
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(root):
                try:
                    name = Path(f"/proc/{pid}/comm").read_text().strip()
                except OSError:
                    name = "?"
                found[pid] = name
                break
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_server_binary() -> str:
    binary = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if binary is None:
        raise RedisServerError(
            "redis-server not found: run `make setup` (installs Debian's redis-server)"
        )
    return binary


def check_unix_socket_path(path: Path) -> None:
    """Raise OSError(ENAMETOOLONG) naming ``path`` when a unix socket cannot live
    there (redis-server would exit with only its log saying why)."""
    resolved = str(path.resolve())
    size = len(os.fsencode(resolved))
    if size > UNIX_PATH_MAX:
        raise OSError(
            errno.ENAMETOOLONG,
            f"unix socket path too long ({size} bytes, at most {UNIX_PATH_MAX})",
            resolved,
        )


def redis_socket_path(redis_dir: Path) -> Path:
    """Where a ``RedisServer(unix_socket=True)`` in ``redis_dir`` listens."""
    return redis_dir / "redis.sock"


class RedisServer:
    """One redis-server bound to loopback (TCP port) or a unix socket."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        unix_socket: bool = False,
        appendfsync: str = "always",
        log_file: Path | None = None,
        new_session: bool = True,
        env: dict[str, str] | None = None,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port if port is not None else (0 if unix_socket else free_port())
        self.socket_path = redis_socket_path(self.data_dir) if unix_socket else None
        self.appendfsync = appendfsync
        self.log_file = log_file or self.data_dir / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None
        # A supervisor keeps Redis in its own process group (new_session=False) so
        # that stopping the group stops it; tests give it a session of its own.
        self.new_session = new_session
        self.env = env
        self.preexec = preexec

    @property
    def url(self) -> str:
        if self.socket_path is not None:
            return f"unix://{self.socket_path.resolve()}"
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        args = [
            redis_server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.data_dir.resolve()),
            "--appendonly",
            "yes",
            "--appendfsync",
            self.appendfsync,
            "--save",
            "",
            "--logfile",
            str(self.log_file.resolve()),
            "--protected-mode",
            "yes",
            "--maxmemory-policy",
            "noeviction",
        ]
        if self.socket_path is not None:
            args += [
                "--unixsocket",
                str(self.socket_path.resolve()),
                "--unixsocketperm",
                "700",
            ]
        return args

    def aof_dir(self) -> Path:
        return self.data_dir / AOF_DIR

    def start(self, timeout: float = 20.0, wait: bool = True) -> RedisServer:
        """Start the server; refuses (RedisDataInUse) while any process has this data
        dir's AOF open, e.g. a server orphaned by a killed stack. ``wait=False``
        returns once the process is started (the caller waits for it to answer)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)
        if self.socket_path is not None:
            check_unix_socket_path(self.socket_path)
        if self.aof_dir().is_dir():
            holders = processes_with_open_files(self.aof_dir())
            holders.pop(os.getpid(), None)
            if holders:
                listed = ", ".join(f"{p} ({n})" for p, n in sorted(holders.items()))
                raise RedisDataInUse(
                    f"the AOF in {self.aof_dir()} is open by pid {listed}; "
                    "stop it (`lb down`) before starting Redis on it"
                )
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=self.new_session,
            env=self.env,
            umask=PRIVATE_UMASK,
            preexec_fn=self.preexec,
        )
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RedisServerError(
                    f"redis-server exited with {self.process.returncode}; "
                    f"see {self.log_file}"
                )
            try:
                client = redis.Redis.from_url(self.url, socket_timeout=1)
                try:
                    # LOADING while the AOF replays: keep waiting.
                    if client.ping():
                        return
                finally:
                    client.close()
            except (
                redis.exceptions.ConnectionError,
                redis.exceptions.BusyLoadingError,
                OSError,
            ):
                time.sleep(0.05)
        raise RedisServerError(f"redis-server did not answer within {timeout} s")

    def stop(self, kill: bool = False) -> None:
        if self.process is None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


def resolve_redis_url(settings: Settings) -> str:
    """LB_REDIS_URL, else the server `lb up` started for LB_DATA_DIR.

    Never a default address: a job that lands and trims logs must not reach some
    other Redis that happens to listen on the usual port.

    :raises RedisNotConfigured: when neither names a Redis.
    """
    if settings.redis_url:
        return settings.redis_url
    try:
        url = (settings.run_dir / "redis.url").read_text().strip()
    except OSError:
        url = ""
    if not url:
        raise RedisNotConfigured(
            f"no Redis for data dir {settings.data_dir}: start the stack with "
            "`lb up` or set LB_REDIS_URL"
        )
    return url
