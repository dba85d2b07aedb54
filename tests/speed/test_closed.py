"""Closed windows leave Redis: exactly the closed boards' keys go (real Redis)."""

from __future__ import annotations

import pytest
import redis

from conf.boards import BoardsConfig
from speed.closed import drop_board_keys, final_boards
from speed.partitions import Keys
from tests.conftest import BACKENDS

pytestmark = pytest.mark.integration

CLOSED = "season:S1:global"
OPEN = "season:S2:global"


def _fill(client: redis.Redis, partition: int, board: str) -> list[str]:
    keys = Keys(partition)
    client.hset(keys.totals(board), mapping={"p1": "5|1", "p2": "7|1"})
    client.zadd(keys.changed_live(board), {b"\x00p1": 0})
    client.set(keys.fenwick(board), b"\x00\x00\x00\x02")
    client.zadd(keys.buckets(board), {"1/1": 5})
    client.zadd(keys.best(board, "p1"), {"m1": 5})
    return [
        keys.totals(board),
        keys.changed_live(board),
        keys.fenwick(board),
        keys.buckets(board),
        keys.best(board, "p1"),
    ]


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_drop_removes_only_closed_boards(redis_client: redis.Redis) -> None:
    closed = _fill(redis_client, 0, CLOSED) + _fill(redis_client, 3, CLOSED)
    kept = _fill(redis_client, 0, OPEN)
    report = drop_board_keys(redis_client, 4, {CLOSED})
    assert report.boards == 1 and report.keys == len(closed)
    assert report.bytes_freed > 0
    assert not any(redis_client.exists(k) for k in closed)
    assert all(redis_client.exists(k) for k in kept)
    # Already dropped: nothing left to do.
    assert drop_board_keys(redis_client, 4, {CLOSED}) == type(report)(0, 0, 0)


@pytest.mark.unit
def test_final_boards_need_landing_after_the_close() -> None:
    config = BoardsConfig.model_validate(
        {
            "seasons": [
                {
                    "id": "S1",
                    "start": "2026-01-01T00:00:00Z",
                    "end": "2026-02-01T00:00:00Z",
                    "allowedLateness": "PT1H",
                }
            ],
            "windowLateness": "PT1H",
        }
    )
    boards = {
        "season:S1:global": {},
        "daily:2026-01-30:global": {},
        "alltime:all:global": {},
    }
    early = {"landingStartedAt": "2026-02-01T00:30:00.000Z", "boards": boards}
    late = {"landingStartedAt": "2026-02-01T01:00:01.000Z", "boards": boards}
    assert final_boards(config, early) == {"daily:2026-01-30:global"}
    assert final_boards(config, late) == {"season:S1:global", "daily:2026-01-30:global"}
    assert final_boards(config, {"boards": boards}) == set()
