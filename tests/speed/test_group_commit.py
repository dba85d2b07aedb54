"""Group commit: concurrent single-event calls share script calls, and each caller
still gets its own event's result (against a real redis-server)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from conf.boards import load_boards
from conf.rules import default_registry
from conf.settings import Settings
from speed.events import validate_event
from speed.partitions import Keys, partition_of
from speed.store import SpeedLayer
from tests.conftest import event

pytestmark = pytest.mark.integration
CALLS = 40


async def burst(
    url: str, settings: Settings, window_us: int
) -> tuple[list[Any], list[Any]]:
    boards = load_boards(settings.boards_file)
    now = datetime(2026, 11, 22, tzinfo=UTC)
    events = [
        validate_event(
            event(eventId=f"e{i}", playerId=f"p{i % 7}", matchId=f"m{i}"),
            settings,
            boards,
            now,
            default_registry(),
        )
        for i in range(CALLS)
    ]
    client = aioredis.from_url(url)
    try:
        speed = SpeedLayer(client, boards, settings.partitions, 3600, None)
        speed.group_window_us = window_us
        await speed.apply([events[0]])  # loads the script
        replies = await asyncio.gather(*[speed.apply([e]) for e in events[1:]])
        return [events[0], *events[1:]], [r for (r,) in replies]
    finally:
        await client.aclose()


def evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


@pytest.mark.parametrize("window_us", [0, 2000])
def test_concurrent_calls_are_grouped(
    settings: Settings, redis_client: redis.Redis, window_us: int
) -> None:
    redis_client.config_resetstat()
    events, outcomes = asyncio.run(burst(settings.redis_url, settings, window_us))
    grouped_calls = evalsha_calls(redis_client)
    # One per partition per group at most: far fewer than one per event.
    assert grouped_calls < CALLS // 2
    for normalized, outcome in zip(events[1:], outcomes, strict=True):
        assert outcome.body is not None
        assert outcome.body["eventId"] == normalized.event.eventId
        assert outcome.body["playerId"] == normalized.event.playerId
        assert outcome.body["status"] == "accepted"
    # Every event applied exactly once.
    for p in range(7):
        player = f"p{p}"
        sent = sum(1 for e in events if e.event.playerId == player)
        keys = Keys(partition_of(player, settings.partitions))
        total = redis_client.hget(keys.totals("alltime:all:global"), player)
        assert total == f"{30 * sent}|{sent}".encode()


def test_grouping_off_sends_one_call_per_event(
    settings: Settings, redis_client: redis.Redis
) -> None:
    redis_client.config_resetstat()
    asyncio.run(burst(settings.redis_url, settings, -1))
    assert evalsha_calls(redis_client) == CALLS
