"""The session Redis of a test worker is its own (tests/support/redis_servers.py):
a server whose port was taken meanwhile by another redis-server is not mistaken
for a started one (its PING would be answered by the other's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speed.server import RedisServer, RedisServerError
from tests.support.redis_servers import answers_itself, start_own

pytestmark = pytest.mark.integration


def test_a_server_on_a_taken_port_is_started_again_on_another(tmp_path: Path) -> None:
    other = RedisServer(tmp_path / "other").start()
    built: list[RedisServer] = []

    def build(path: Path) -> RedisServer:
        # The first try picks the other server's port, as ``free_port`` may when
        # another worker binds the port it just released.
        server = RedisServer(path, port=other.port if not built else None)
        built.append(server)
        return server

    try:
        server = start_own(build, tmp_path / "own")
        try:
            assert len(built) == 2
            assert server.port != other.port
            assert answers_itself(server)
            assert not answers_itself(built[0])
            assert answers_itself(other)
        finally:
            server.stop()
    finally:
        other.stop()


def test_no_own_server_in_any_attempt_raises(tmp_path: Path) -> None:
    other = RedisServer(tmp_path / "other").start()
    try:
        with pytest.raises(RedisServerError):
            start_own(lambda path: RedisServer(path, port=other.port), tmp_path / "own")
        assert answers_itself(other)
    finally:
        other.stop()
