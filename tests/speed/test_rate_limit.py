"""The per-player token bucket of the owner transaction (API.md ``LB_RATE_LIMIT``).

``capacity/refillSeconds`` is a burst of ``capacity``, then one token every
``refillSeconds``. Time is stepped through ``SpeedLayer.clock``, so the test is exact.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from conf.boards import load_boards
from speed.events import ScoreEventIn, normalize
from speed.server import RedisServer
from speed.store import RateLimited, SpeedLayer

pytestmark = pytest.mark.integration

T0 = 1_800_000_000.0


def _event(match: int, **overrides: Any) -> Any:
    body: dict[str, Any] = {
        "eventId": f"E{match}",
        "playerId": "P1",
        "matchId": f"M{match}",
        "sourceRevision": 1,
        "occurredAt": "2026-11-20T10:00:00Z",
        "region": "eu",
        "result": {"points": 10},
    }
    body.update(overrides)
    return normalize(
        ScoreEventIn.model_validate(body),
        regions=["eu", "na"],
        now=datetime(2026, 11, 20, 12, tzinfo=UTC),
        max_future=timedelta(seconds=300),
    )


def _outcomes(server: RedisServer, steps: list[tuple[float, int]]) -> list[Any]:
    """Apply new matches at (seconds after T0, match number); the outcome of each."""

    async def run() -> list[Any]:
        client = aioredis.from_url(server.url)
        await client.flushall()
        speed = SpeedLayer(client, load_boards(), 4, 3600, (5, 60.0))
        results = []
        try:
            for at, match in steps:
                speed.clock = lambda at=at: T0 + at
                (outcome,) = await speed.apply([_event(match)])
                results.append(outcome.error or outcome.body["status"])
        finally:
            await client.aclose()
        return results

    return asyncio.run(run())


def test_burst_then_one_token_per_refill_period(redis_server: RedisServer) -> None:
    # 5 at once, the 6th refused; 12 s later the old bucket (5 tokens a minute) had
    # refilled one token, the contract's (1 a minute) has not.
    steps = [(0.0, m) for m in range(5)] + [(0.0, 5), (12.0, 6), (60.0, 7), (61.0, 8)]
    out = _outcomes(redis_server, steps)
    assert out[:5] == ["accepted"] * 5
    assert isinstance(out[5], RateLimited) and out[5].retry_after == 60
    assert isinstance(out[6], RateLimited) and out[6].retry_after == 48
    # One minute after the burst exactly one token is back: one match, then 429.
    assert out[7] == "accepted"
    assert isinstance(out[8], RateLimited) and out[8].retry_after == 59


def test_idle_bucket_refills_to_capacity_not_beyond(redis_server: RedisServer) -> None:
    steps = [(0.0, m) for m in range(5)] + [(3600.0 + 1, m) for m in range(5, 11)]
    out = _outcomes(redis_server, steps)
    assert out[:10] == ["accepted"] * 10
    assert isinstance(out[10], RateLimited)
