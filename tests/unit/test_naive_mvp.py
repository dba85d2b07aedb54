"""The naive yardstick counts what it accepts, once: a real redis-server and two
uvicorn workers, the same signed batches as our bench (bench/naive_mvp.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import httpx
import orjson
import pytest
import redis

from bench.harness import EventFactory, signed
from bench.naive_mvp import NaiveStack, board_ids, measure

pytestmark = pytest.mark.integration


def test_board_ids_name_the_ten_boards_of_an_event() -> None:
    boards = board_ids("2026-11-30T10:00:00Z", "eu")
    assert len(boards) == 10 == len(set(boards))
    assert "naive:b:weekly:2026-W49:eu" in boards
    assert "naive:b:daily:2026-11-30:global" in boards


def test_naive_service_accepts_once_and_refuses_unsigned() -> None:
    with NaiveStack() as stack:
        report = asyncio.run(measure(stack.url, 2000, 2, 50))
        assert report["accepted"] == 2000, report
        assert report["verification_failures"] == []
        client = redis.Redis.from_url(stack.redis_url)
        total = sum(
            int(score)
            for _, score in client.zrange(
                "naive:b:alltime:all:global", 0, -1, withscores=True
            )
        )
        assert total > 0
        # A redelivered batch counts nothing twice; an unsigned one is refused.
        event = EventFactory(5, seed=1, now=datetime.now(UTC)).event("again")
        body = orjson.dumps({"events": [event]})
        first = httpx.post(
            stack.url + "/v1/score-events:batch", content=body, headers=signed(body)
        ).json()
        second = httpx.post(
            stack.url + "/v1/score-events:batch", content=body, headers=signed(body)
        ).json()
        assert [r["status"] for r in first["results"] + second["results"]] == [
            "accepted",
            "duplicate",
        ]
        assert (
            httpx.post(stack.url + "/v1/score-events:batch", content=body).status_code
            == 401
        )
