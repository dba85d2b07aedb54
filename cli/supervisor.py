"""The stack's supervisor: one process that owns Redis and the API for its lifetime.

`lb up` takes the data dir's lock (``run/stack.lock``) and starts this module in a
new session, handing it the locked file descriptor; the lock is then held exactly as
long as the supervisor lives. The supervisor starts Redis (unless LB_REDIS_URL is
set) and the API (uvicorn, possibly several workers) in its own process group, each
child with LB_INSTANCE_TOKEN in its environment, and:

* if the API or Redis exits (a crash, a kill -9 of uvicorn's own supervisor), it
  stops everything else, orphaned workers included, and exits: a half stack never
  keeps acknowledging writes;
* on SIGTERM (`lb down`) it stops the API first, then any process left in its group,
  then Redis, so no write can land after Redis has stopped;
* its children get SIGTERM if the supervisor itself is killed (PR_SET_PDEATHSIG).

Run as ``python -m cli.supervisor --port N --token T --lock-fd FD``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conf.settings import Settings
from speed.server import PRIVATE_UMASK, RedisServer, die_with_parent

REDIS_PID = "redis.pid"
API_PID = "api.pid"
REDIS_URL_FILE = "redis.url"
API_URL_FILE = "api.url"
STACK_FILE = "stack.json"
ERROR_FILE = "supervisor.err"
TOKEN_ENV = "LB_INSTANCE_TOKEN"
STOP_SECONDS = 20.0


def stack_pids(token: str) -> list[int]:
    """Every live process whose environment carries this stack's instance token.

    The token is set by the supervisor for everything it starts and inherited by
    uvicorn's workers, so this finds orphans too, whatever their parent is now.
    """
    needle = f"{TOKEN_ENV}={token}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry.name}/environ").read_bytes()
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1]
        except OSError:
            continue
        if state.split()[0] == "Z":  # a zombie holds nothing
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return sorted(found)


def end_processes(pids: list[int], timeout: float = STOP_SECONDS) -> None:
    """SIGTERM, then SIGKILL whatever is left after ``timeout`` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (timeout if sig == signal.SIGTERM else 5)
        while time.monotonic() < deadline:
            pids = [p for p in pids if _running(p)]
            if not pids:
                return
            time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)  # reap our own children; others raise
    except ChildProcessError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Supervisor:
    def __init__(self, settings: Settings, port: int, token: str) -> None:
        self.settings = settings
        self.port = port
        self.token = token
        self.run = settings.run_dir
        self.redis: RedisServer | None = None
        self.api: subprocess.Popen[bytes] | None = None
        self.stopping = False

    def _env(self, **extra: str) -> dict[str, str]:
        return dict(
            os.environ,
            LB_DATA_DIR=str(self.settings.data_dir.resolve()),
            **{TOKEN_ENV: self.token},
            **extra,
        )

    def start(self) -> None:
        redis_url = self.settings.redis_url
        if not redis_url:
            self.redis = RedisServer(
                self.settings.redis_dir,
                unix_socket=True,
                appendfsync=self.settings.appendfsync,
                new_session=False,
                env=self._env(),
                preexec=die_with_parent,
            )
            self.redis.start()
            assert self.redis.process is not None
            (self.run / REDIS_PID).write_text(str(self.redis.process.pid))
            redis_url = self.redis.url
            (self.run / REDIS_URL_FILE).write_text(redis_url)
        # Every worker's metrics in one directory, emptied at each start (ops, #9).
        from api.metrics import MULTIPROC_ENV, prepare_multiprocess_dir

        metrics_dir = str(prepare_multiprocess_dir(self.settings))
        log = open(self.run / "api.log", "ab")  # noqa: SIM115 - the child's stdout
        self.api = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "api.main:create_app",
                "--factory",
                "--host",
                self.settings.api_host,
                "--port",
                str(self.port),
                "--workers",
                str(self.settings.api_workers),
                "--no-access-log",
                # A deadline for each request's headers (half-open connections).
                "--http",
                "api.http_protocol:HeaderTimeoutProtocol",
                "--log-level",
                "warning",
            ],
            env=self._env(LB_REDIS_URL=redis_url, **{MULTIPROC_ENV: metrics_dir}),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            preexec_fn=die_with_parent,
        )
        log.close()
        (self.run / API_PID).write_text(str(self.api.pid))
        url = f"http://{self.settings.api_host}:{self.port}"
        (self.run / API_URL_FILE).write_text(url)

    def watch(self) -> str:
        """Block until a child exits or a stop is asked; returns why."""
        while not self.stopping:
            if self.api is not None and self.api.poll() is not None:
                return f"API exited with {self.api.returncode}; see run/api.log"
            process = self.redis.process if self.redis else None
            if process is not None and process.poll() is not None:
                return f"redis-server exited with {process.returncode}"
            time.sleep(0.1)
        return "stop requested"

    def stop(self) -> None:
        """API first (its workers with it), then leftovers, then Redis."""
        if self.api is not None and self.api.poll() is None:
            end_processes([self.api.pid])
        redis_pid = self.redis.process.pid if self.redis and self.redis.process else 0
        leftovers = [
            p for p in stack_pids(self.token) if p not in (os.getpid(), redis_pid)
        ]
        end_processes(leftovers)
        if self.redis is not None and self.redis.process is not None:
            if self.redis.process.poll() is None:
                # SIGTERM: Redis finishes its AOF write and exits cleanly.
                end_processes([redis_pid])
            self.redis.process = None
        for name in (API_PID, REDIS_PID, API_URL_FILE, REDIS_URL_FILE):
            (self.run / name).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cli.supervisor")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--lock-fd", type=int, required=True)
    args = parser.parse_args(argv)
    os.umask(PRIVATE_UMASK)
    settings = Settings()
    supervisor = Supervisor(settings, args.port, args.token)
    error_file = settings.run_dir / ERROR_FILE
    error_file.unlink(missing_ok=True)

    def request_stop(signum: int, _frame: object) -> None:
        supervisor.stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    code = 0
    try:
        supervisor.start()
        (settings.run_dir / STACK_FILE).write_text(
            json.dumps(
                {"supervisor": os.getpid(), "token": args.token, "port": args.port}
            )
        )
        reason = supervisor.watch()
        if reason != "stop requested":
            error_file.write_text(reason + "\n")
            code = 1
    except Exception as exc:  # noqa: BLE001 - reported to `lb up` through the file
        error_file.write_text(f"{exc}\n")
        code = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        supervisor.stop()
        (settings.run_dir / STACK_FILE).unlink(missing_ok=True)
        # The lock goes last: until here, a new `lb up` must wait.
        os.close(args.lock_fd)
    return code


if __name__ == "__main__":
    sys.exit(main())
