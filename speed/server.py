"""A local ``redis-server`` process: started for `lb up` and for tests.

Data lives in the given directory with AOF on; ``appendfsync always`` by default, so a
reply to a write means the write is on disk.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

from conf.settings import Settings


class RedisServerError(RuntimeError):
    pass


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
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port if port is not None else (0 if unix_socket else free_port())
        self.socket_path = self.data_dir / "redis.sock" if unix_socket else None
        self.appendfsync = appendfsync
        self.log_file = log_file or self.data_dir / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None

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

    def start(self, timeout: float = 20.0) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
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
    """LB_REDIS_URL, else the server `lb up` started for LB_DATA_DIR, else default."""
    if settings.redis_url:
        return settings.redis_url
    try:
        return (settings.run_dir / "redis.url").read_text().strip()
    except OSError:
        return "redis://127.0.0.1:6379/0"
