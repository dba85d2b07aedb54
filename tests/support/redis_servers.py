"""The tests' session Redis servers, started so that two pytest-xdist workers (or
any other process on the machine) cannot end up sharing one.

``speed.server.free_port`` releases the port it found before redis-server binds
it: another process may take it meanwhile. The server started second then exits,
but its ``wait_ready`` may already have been answered by the first one's PING,
and the tests would flush and fill the other worker's Redis. Here each started
server must answer with its own pid (``INFO server``), or it is stopped and
started again on a new port."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import redis

from speed.cluster_server import RedisClusterServer
from speed.server import RedisServer, RedisServerError

ATTEMPTS = 3

S = TypeVar("S", RedisServer, RedisClusterServer)


def answers_itself(server: RedisServer) -> bool:
    """Whether the redis-server on ``server.url`` is ``server``'s own process."""
    if server.process is None or server.process.poll() is not None:
        return False
    client = redis.Redis.from_url(server.url, socket_timeout=10)
    try:
        return int(client.info("server")["process_id"]) == server.process.pid
    except (redis.exceptions.RedisError, OSError):
        return False
    finally:
        client.close()


def _nodes(server: RedisServer | RedisClusterServer) -> list[RedisServer]:
    if isinstance(server, RedisClusterServer):
        return list(server.nodes)
    return [server]


def start_own(build: Callable[[Path], S], root: Path, attempts: int = ATTEMPTS) -> S:
    """``build(root / "try<i>").start()``, again (new ports) when a port it picked
    was taken by another process meanwhile; the last error otherwise."""
    error: Exception | None = None
    for attempt in range(attempts):
        server = build(root / f"try{attempt}")
        try:
            server.start()
        except RedisServerError as exc:
            error = exc
            continue
        if all(answers_itself(node) for node in _nodes(server)):
            return server
        server.stop()
        error = RedisServerError(f"a port of {root} was taken by another process")
    assert error is not None
    raise error


def own_server(root: Path, appendfsync: str = "always") -> RedisServer:
    """One redis-server of a test's own under ``root``, started by ``start_own``."""
    return start_own(lambda path: RedisServer(path, appendfsync=appendfsync), root)
