"""Dense live ranks read the changed-sets once per partition and log position
(speed/live.py ``DenseChanges``): a write re-reads only its own partition, a shadow
(no position moves, the flags version does) and a publish drop what was read, and
every answer still equals the offline sort, on one server and on a cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis

from speed.partitions import partition_of
from tests.conftest import BACKENDS, SignedClient
from tests.support.live import (
    OPTIONS_RULES,
    PLAYERS,
    Oracle,
    options_settings,
    publish_oracle,
    send,
)
from tests.support.shadow import flag

pytestmark = pytest.mark.integration

BOARD = "season:S4:global"


@pytest.fixture
def settings(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> Any:
    return options_settings(redis_url, tmp_path)


def dense_ranks(api: SignedClient, players: list[str]) -> dict[str, int]:
    out = {}
    for player in players:
        body = api.get(
            f"/v1/boards/{BOARD}/players/{player}", params={"ranking": "dense"}
        ).json()
        assert (body["basis"], body["ranking"]) == ("live", "dense"), body
        out[player] = body["rank"]
    return out


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_dense_reads_reuse_unmoved_partitions_and_follow_every_change(
    api: SignedClient, redis_client: redis.Redis, settings: Any
) -> None:
    oracle = Oracle(OPTIONS_RULES)
    # Ties in the base: 10 held by p0, p1, p2; 5 by p3 alone; 0 by p4.
    for player, points in (("p0", 10), ("p1", 10), ("p2", 10), ("p3", 5), ("p4", 0)):
        send(api, oracle, player, 0, points)
    publish_oracle(api, redis_client, oracle, 1, settings.partitions)
    # After it: p3 leaves 5 (gone), p5 arrives at 7 (added).
    send(api, oracle, "p3", 1, 3)
    send(api, oracle, "p5", 0, 7)
    visible = [p for p in PLAYERS if p in oracle.totals(BOARD)]
    assert dense_ranks(api, visible) == oracle.dense(BOARD)
    live = api.client.app.state.live
    first = live._dense[BOARD]
    before = list(first.parts)
    assert all(part is not None for part in before)

    # One write: only the writer's partition is read again.
    send(api, oracle, "p4", 1, 10)
    assert dense_ranks(api, visible) == oracle.dense(BOARD)
    moved = partition_of("p4", settings.partitions)
    after = live._dense[BOARD]
    assert after is first
    for p, (old, new) in enumerate(zip(before, after.parts, strict=True)):
        assert (old is new) == (p != moved), p

    # A shadow moves no position: what was read goes, the answers follow.
    assert flag(api, "p5", "shadow").status_code == 200
    hidden = frozenset({"p5"})
    assert dense_ranks(api, [p for p in visible if p not in hidden]) == oracle.dense(
        BOARD, hidden
    )
    assert live._dense[BOARD] is not first
    assert flag(api, "p5", "restore").status_code == 200
    assert dense_ranks(api, visible) == oracle.dense(BOARD)

    # A publish (the rebase): read again against the new base.
    publish_oracle(api, redis_client, oracle, 2, settings.partitions)
    send(api, oracle, "p0", 1, 1)
    assert dense_ranks(api, visible) == oracle.dense(BOARD)
    assert live._dense[BOARD].key[0] == 2


def test_a_burst_of_cold_dense_reads_reads_the_changed_sets_once(
    api: SignedClient, redis_client: redis.Redis, settings: Any
) -> None:
    """Concurrent dense reads that all find the board's changed-sets unread wait
    for one read whole of them (at 1 M changed players each read whole costs Redis
    about a second; a burst of them blocked it for every client), and each still
    answers what the offline sort says."""
    oracle = Oracle(OPTIONS_RULES)
    for player, points in (("p0", 10), ("p1", 10), ("p2", 5), ("p3", 0)):
        send(api, oracle, player, 0, points)
    publish_oracle(api, redis_client, oracle, 1, settings.partitions)
    send(api, oracle, "p3", 1, 7)
    send(api, oracle, "p4", 0, 10)
    live = api.client.app.state.live
    reads_whole: list[list[int]] = []
    read_whole = live._read_whole

    async def counted(board: str, partitions: list[int]) -> list[list[Any]]:
        reads_whole.append(list(partitions))
        return await read_whole(board, partitions)

    live._read_whole = counted
    scores = sorted(set(oracle.totals(BOARD).values()))

    async def burst() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(live.above(BOARD, s) for s in scores * 8)))

    answers = api.client.portal.call(burst)  # type: ignore[attr-defined]
    # One read whole of every partition, not one per read.
    assert len(reads_whole) == 1, reads_whole
    assert sorted(reads_whole[0]) == list(range(settings.partitions))
    totals = oracle.totals(BOARD)
    for score, answer in zip(scores * 8, answers, strict=True):
        assert answer["above"] == sum(1 for t in totals.values() if t > score)
        assert answer["distinct"] == len({t for t in totals.values() if t > score})
