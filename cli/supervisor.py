"""The stack's supervisor: one process that owns Redis and the API for its lifetime.

`lb up` takes the data dir's lock (``run/stack.lock``) and starts this module in a
new session, handing it the locked file descriptor; the lock is then held exactly as
long as the supervisor lives. The supervisor starts Redis (unless LB_REDIS_URL is
set) and the API (uvicorn, possibly several workers) in its own process group, each
child with LB_INSTANCE_TOKEN in its environment, and:

* heals the stack: if Redis exits (a crash, kill -9), it makes sure nothing still
  has the AOF open and nothing answers on its socket, then starts Redis again on its
  own AOF (never a second Redis on it); meanwhile the API answers reads from the
  latest generation (``basis: snapshot``) and writes 503. If the API exits (uvicorn's
  own supervisor killed, or the single worker), it ends the orphaned workers, waits
  for the port, and starts the API again. A worker that dies under uvicorn's
  supervisor is restarted by uvicorn; the supervisor counts it;
* stops everything only after repeated failures: more than LB_RESTART_LIMIT
  (``restarts/seconds``, default 5/60) restarts of one process within the window;
  the reason goes to ``run/supervisor.err`` and ``run/supervisor.json``;
* records every restart in ``run/supervisor.json`` (conf/stack_state.py), which
  `lb status` shows and the API's /metrics exports as
  ``lb_supervisor_restarts_total{process}``;
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
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conf.settings import Settings
from conf.stack_state import MAX_EVENTS, write_stack_state
from speed.server import (
    PRIVATE_UMASK,
    RedisServer,
    RedisServerError,
    die_with_parent,
    processes_with_open_files,
)

REDIS_PID = "redis.pid"
API_PID = "api.pid"
REDIS_URL_FILE = "redis.url"
API_URL_FILE = "api.url"
STACK_FILE = "stack.json"
ERROR_FILE = "supervisor.err"
TOKEN_ENV = "LB_INSTANCE_TOKEN"
STOP_SECONDS = 20.0
# A restarted Redis replays its AOF before it answers; a large one takes a while.
REDIS_READY_SECONDS = 300.0
PORT_FREE_SECONDS = 20.0
BACKOFF_CAP_S = 5.0


# uvicorn's protocol of every API started here: a deadline for each request's
# headers (half-open connections), one write per response (api/http_protocol.py).
HTTP_PROTOCOL = ("--http", "api.http_protocol:HeaderTimeoutProtocol")


def api_command(host: str, port: int, *options: str) -> list[str]:
    """The API's command line: ``cli.api_server`` (uvicorn serving
    ``api.main:create_app``; with ``--workers N`` each worker listens on its own
    SO_REUSEPORT socket) on ``host:port`` with ``options`` (``--workers``,
    ``--http``), no access log, warnings only. The supervisor's, and that of every
    API started beside a stack (cli/cluster_demo.py, bench/harness.py)."""
    return [
        sys.executable,
        "-m",
        "cli.api_server",
        "--host",
        host,
        "--port",
        str(port),
        *options,
    ]


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


def describe_exit(name: str, code: int | None) -> str:
    """``redis-server was killed by SIGKILL`` / ``the API exited with 1``."""
    if code is not None and code < 0:
        try:
            signame = signal.Signals(-code).name
        except ValueError:
            signame = f"signal {-code}"
        return f"{name} was killed by {signame}"
    return f"{name} exited with {code}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class RestartBudget:
    """At most ``limit`` restarts within ``seconds``; a short back-off between
    restarts that follow each other (none for the first)."""

    def __init__(
        self, limit: int, seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.seconds = seconds
        self.clock = clock
        self.times: list[float] = []

    def _recent(self) -> list[float]:
        now = self.clock()
        self.times = [t for t in self.times if now - t < self.seconds]
        return self.times

    def allow(self) -> bool:
        """True (and counted) while the window has room for one more restart."""
        if len(self._recent()) >= self.limit:
            return False
        self.times.append(self.clock())
        return True

    def delay(self) -> float:
        """Seconds to wait before the restart just allowed."""
        earlier = len(self._recent()) - 1
        return 0.0 if earlier <= 0 else min(BACKOFF_CAP_S, 0.25 * 2 ** (earlier - 1))


def _children(pid: int) -> set[int]:
    """The child processes of ``pid`` (empty once it has died: its children were
    handed to init)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(child) for child in text.split()}


def _workers_among(children: Iterable[int]) -> set[int]:
    workers = set()
    for child in children:
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue  # gone already: not a worker to watch
        if b"resource_tracker" not in command:
            workers.add(child)
    return workers


def uvicorn_workers(pid: int) -> set[int]:
    """The worker processes of the uvicorn supervisor ``pid``: its children other
    than multiprocessing's resource tracker (not a worker; uvicorn never restarts
    it). Empty once ``pid`` has died (its children were handed to init).

    A child read between its fork and its exec still carries uvicorn's command
    line, so the tracker can pass for a worker for a moment after uvicorn starts
    it: :meth:`Supervisor._watch_workers` counts a worker as died only once it is
    no child of uvicorn at all."""
    return _workers_among(_children(pid))


def _socket_answers(path: Path) -> bool:
    """True when some process accepts connections on the unix socket ``path``."""
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


class RestartFailed(RuntimeError):
    """A restart could not be done safely (the AOF or the address still in use)."""


class Supervisor:
    def __init__(self, settings: Settings, port: int, token: str) -> None:
        self.settings = settings
        self.port = port
        self.token = token
        self.run = settings.run_dir
        self.redis: RedisServer | None = None
        self.api: subprocess.Popen[bytes] | None = None
        self.redis_url = settings.redis_url or ""
        self.metrics_dir = ""
        self.stopping = False
        limit, seconds = settings.restart_window
        self.budgets = {
            name: RestartBudget(limit, seconds) for name in ("redis", "api")
        }
        self.workers: set[int] = set()
        self.state: dict[str, Any] = {
            "state": "starting",
            "pid": os.getpid(),
            "startedAt": _now(),
            "limit": settings.restart_limit,
            "restarts": {"redis": 0, "api": 0},
            "events": [],
        }

    def _env(self, **extra: str) -> dict[str, str]:
        return dict(
            os.environ,
            LB_DATA_DIR=str(self.settings.data_dir.resolve()),
            **{TOKEN_ENV: self.token},
            **extra,
        )

    def save(self, state: str | None = None) -> None:
        if state is not None:
            self.state["state"] = state
        write_stack_state(self.run, self.state)

    def _event(self, process: str, reason: str, **fields: Any) -> None:
        events = self.state["events"]
        events.append({"at": _now(), "process": process, "reason": reason, **fields})
        del events[:-MAX_EVENTS]

    def start(self) -> None:
        self.save("starting")
        if not self.settings.redis_url:
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
            self.redis_url = self.redis.url
            (self.run / REDIS_URL_FILE).write_text(self.redis_url)
        # Every worker's metrics in one directory, emptied at each start (ops, #9);
        # kept across API restarts, so counters keep their totals.
        from api.metrics import prepare_multiprocess_dir

        self.metrics_dir = str(prepare_multiprocess_dir(self.settings))
        self._start_api()
        url = f"http://{self.settings.api_host}:{self.port}"
        (self.run / API_URL_FILE).write_text(url)
        self.save("running")

    def _start_api(self) -> None:
        from api.metrics import MULTIPROC_ENV

        log = open(self.run / "api.log", "ab")  # noqa: SIM115 - the child's stdout
        self.api = subprocess.Popen(
            api_command(
                self.settings.api_host,
                self.port,
                "--workers",
                str(self.settings.api_workers),
                *HTTP_PROTOCOL,
            ),
            env=self._env(
                LB_REDIS_URL=self.redis_url, **{MULTIPROC_ENV: self.metrics_dir}
            ),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            preexec_fn=die_with_parent,
        )
        log.close()
        self.workers = set()
        (self.run / API_PID).write_text(str(self.api.pid))

    def _redis_pid(self) -> int:
        process = self.redis.process if self.redis else None
        return process.pid if process is not None else 0

    def _restart_redis(self) -> None:
        """Redis again on its own AOF, once nothing has that AOF open (a fork of the
        dead server, e.g. an AOF rewrite, is ended first) and nothing answers on
        its socket; waits until it has loaded the AOF."""
        assert self.redis is not None
        aof = self.redis.aof_dir()
        if aof.is_dir():
            holders = processes_with_open_files(aof)
            holders.pop(os.getpid(), None)
            # Forks of the dead server (an AOF rewrite) go; anything else that has
            # the AOF open (a copy being made) is waited for: the next round retries.
            forks = sorted(p for p, name in holders.items() if name.startswith("redis"))
            if forks:
                end_processes(forks, timeout=5)
                holders = processes_with_open_files(aof)
                holders.pop(os.getpid(), None)
            if holders:
                raise RestartFailed(
                    f"the AOF in {aof} is still open by pid "
                    + ", ".join(f"{p} ({n})" for p, n in sorted(holders.items()))
                )
        socket_path = self.redis.socket_path
        if socket_path is not None and _socket_answers(socket_path):
            raise RestartFailed(f"another process answers on {socket_path}")
        if self.redis.port and not _port_free("127.0.0.1", self.redis.port):
            raise RestartFailed(f"port {self.redis.port} is in use")
        self.redis.start(wait=False)
        assert self.redis.process is not None
        (self.run / REDIS_PID).write_text(str(self.redis.process.pid))
        deadline = time.monotonic() + REDIS_READY_SECONDS
        while not self.stopping and time.monotonic() < deadline:
            if self.redis.process.poll() is not None:
                return  # the watch loop sees it: one more failure
            try:
                self.redis.wait_ready(0.5)
                return
            except RedisServerError:
                continue
        if not self.stopping:
            raise RestartFailed(
                f"redis-server did not load its AOF within {REDIS_READY_SECONDS:.0f} s"
            )

    def _restart_api(self) -> None:
        """End what is left of the old API (orphaned workers keep the listening
        socket and would keep serving), wait for the port, start it again."""
        redis_pid = self._redis_pid()
        leftovers = [
            p for p in stack_pids(self.token) if p not in (os.getpid(), redis_pid)
        ]
        end_processes(leftovers)
        deadline = time.monotonic() + PORT_FREE_SECONDS
        while not _port_free(self.settings.api_host, self.port):
            if self.stopping:
                return
            if time.monotonic() > deadline:
                raise RestartFailed(f"port {self.port} stayed in use")
            time.sleep(0.1)
        self._start_api()

    def _heal(self, process: str, reason: str) -> bool:
        """Restart ``process`` (redis|api) within the budget; False: stop the stack
        (the reason is in ``self.state['stoppedReason']``)."""
        self._event(process, reason)
        budget = self.budgets[process]
        if not budget.allow():
            self.state["stoppedReason"] = (
                f"{reason}: more than {budget.limit} restarts of {process} within "
                f"{budget.seconds:g} s (LB_RESTART_LIMIT={self.settings.restart_limit})"
            )
            return False
        self.state["restarts"][process] += 1
        self.save(f"restarting {process}")
        print(f"{_now()} {reason}; restarting {process}", flush=True)
        pause = time.monotonic() + budget.delay()
        while not self.stopping and time.monotonic() < pause:
            time.sleep(0.05)
        if self.stopping:
            return True
        try:
            if process == "redis":
                self._restart_redis()
            else:
                self._restart_api()
        except (RestartFailed, RedisServerError, OSError) as exc:
            # The old process stays dead: the next round of the watch loop tries
            # again (and counts it) until the budget is spent.
            self._event(process, f"restart failed: {exc}")
        self.save("running")
        return True

    def _watch_workers(self) -> bool:
        """Count workers that died under uvicorn's supervisor (uvicorn starts a new
        one); False when that spends the API's budget."""
        if self.api is None or self.settings.api_workers < 2:
            return True
        children = _children(self.api.pid)
        now = _workers_among(children)
        if self.api.poll() is not None:
            # uvicorn itself died between two rounds: its workers were handed to
            # init, not restarted. watch() heals the API and counts that once. (The
            # children are read before the poll, so a death after the poll cannot
            # pass for the workers' deaths.)
            return True
        # A pid that left the workers but is still uvicorn's child was never one:
        # the resource tracker, read before its exec with uvicorn's command line
        # (a kill drill on a loaded CI counted it as a third restart).
        gone = self.workers - now - children
        self.workers = now
        for pid in sorted(gone):
            reason = f"API worker {pid} died"
            self._event("api", reason, worker=pid)
            if not self.budgets["api"].allow():
                self.state["stoppedReason"] = (
                    f"{reason}: more than {self.budgets['api'].limit} restarts of api "
                    f"within {self.budgets['api'].seconds:g} s "
                    f"(LB_RESTART_LIMIT={self.settings.restart_limit})"
                )
                return False
            self.state["restarts"]["api"] += 1
            print(f"{_now()} {reason}; uvicorn restarts it", flush=True)
            self.save("running")
        return True

    def watch(self) -> str:
        """Block until a stop is asked or the restart budget is spent; returns why."""
        while not self.stopping:
            if self.api is not None and self.api.poll() is not None:
                reason = describe_exit("the API", self.api.returncode)
                if not self._heal("api", reason + " (see run/api.log)"):
                    return str(self.state["stoppedReason"])
                continue
            process = self.redis.process if self.redis else None
            if process is not None and process.poll() is not None:
                reason = describe_exit("redis-server", process.returncode)
                if not self._heal("redis", reason + " (see redis/redis.log)"):
                    return str(self.state["stoppedReason"])
                continue
            if not self._watch_workers():
                return str(self.state["stoppedReason"])
            time.sleep(0.1)
        return "stop requested"

    def stop(self) -> None:
        """API first (its workers with it), then leftovers, then Redis."""
        if self.api is not None and self.api.poll() is None:
            end_processes([self.api.pid])
        redis_pid = self._redis_pid()
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
    reason = "stop requested"
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
            print(f"{_now()} stopping the stack: {reason}", flush=True)
            code = 1
    except Exception as exc:  # noqa: BLE001 - reported to `lb up` through the file
        reason = str(exc) or type(exc).__name__
        error_file.write_text(f"{reason}\n")
        code = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        supervisor.stop()
        supervisor.state["stoppedReason"] = reason
        supervisor.state["stoppedAt"] = _now()
        supervisor.save("stopped")
        (settings.run_dir / STACK_FILE).unlink(missing_ok=True)
        # The lock goes last: until here, a new `lb up` must wait.
        os.close(args.lock_fd)
    return code


if __name__ == "__main__":
    sys.exit(main())
