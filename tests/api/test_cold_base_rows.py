"""The first live read or write of a board on a base generation derives the board's
partition rows (speed/baserows.py) in a worker thread: at 100 M players that takes
23-27 s, and done on the event loop it held every other request of the worker, a
snapshot read included, until it ended. Here the derivation waits until a snapshot
read has been answered beside it; were it on the event loop, that read could not be
answered and the derivation's wait would time out."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import speed.baserows
from api.main import create_app
from speed.rebase import rebase_published
from speed.server import RedisServer
from tests.conftest import SignedClient, event
from tests.support.redis_servers import own_server
from tests.support.segments import write_generation
from tests.support.settings import base_settings

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
SCORES = {"a": 30, "b": 20, "c": 20, "d": 5}
WAIT_S = 60


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = own_server(tmp_path / "redis")
    yield server
    server.stop()


def live_read(api: SignedClient) -> Any:
    return api.get(f"/v1/boards/{BOARD}/players/b")


def write(api: SignedClient) -> Any:
    return api.post(
        "/v1/score-events",
        event(eventId="w1", playerId="b", matchId="w1", result={"points": 15}),
    )


@pytest.mark.parametrize("first", [live_read, write], ids=["live-read", "write"])
def test_a_snapshot_read_is_answered_while_a_board_s_rows_are_derived(
    own_redis: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    first: Callable[[SignedClient], Any],
) -> None:
    settings = base_settings(own_redis.url, tmp_path)
    write_generation(
        settings.segments_dir,
        1,
        {BOARD: SCORES},
        versions={BOARD: dict.fromkeys(SCORES, 1)},
    )
    rebase_published(settings, "g1")
    started, answered = threading.Event(), threading.Event()
    waited: list[bool] = []
    build = speed.baserows.build_partition_rows

    def slow_build(segment: Any, partitions: int) -> Any:
        # Stands for a big board: done only once a snapshot read sent after it
        # began was answered.
        started.set()
        waited.append(answered.wait(WAIT_S))
        return build(segment, partitions)

    monkeypatch.setattr(speed.baserows, "build_partition_rows", slow_build)
    with TestClient(create_app(settings)) as client:
        api = SignedClient(client)
        replies: list[Any] = []
        cold = threading.Thread(target=lambda: replies.append(first(api)))
        cold.start()
        assert started.wait(WAIT_S)
        snapshot = api.get(f"/v1/boards/{BOARD}/top", params={"mode": "snapshot"})
        answered.set()
        cold.join(WAIT_S)
        assert snapshot.status_code == 200, snapshot.text
        assert [e["playerId"] for e in snapshot.json()["entries"]] == list(SCORES)
        # The derivation ran (the cold request needed it) and saw the answer.
        assert waited and all(waited), waited
        (reply,) = replies
        assert reply.status_code == 200, reply.text
        body = reply.json()
        if first is live_read:
            assert (body["score"], body["rank"], body["basis"]) == (20, 2, "live")
        else:
            after = api.get(f"/v1/boards/{BOARD}/players/b").json()
            assert (after["score"], after["rank"]) == (35, 1)
