"""LB_DEDUPE_WINDOW: a redelivery inside the window gets the saved result; one older
than the window is refused (422 too_old), never counted a second time, even once
its dedupe record is gone. The record outlives the window."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import redis
from fastapi.testclient import TestClient

from api.main import create_app
from conf.settings import Settings
from speed.partitions import Keys, partition_of
from speed.records import identity_hash, live_epochs
from tests.conftest import SignedClient, event

pytestmark = pytest.mark.integration

WINDOW_S = 2


def test_redelivery_after_the_window_is_too_old_not_counted_twice(
    settings: Settings, redis_client: redis.Redis
) -> None:
    windowed = settings.model_copy(
        update={"dedupe_window": timedelta(seconds=WINDOW_S)}
    )
    occurred = datetime.now(UTC).replace(microsecond=0)
    sent = event(
        eventId="W1",
        playerId="win",
        occurredAt=occurred.strftime("%Y-%m-%dT%H:%M:%SZ"),
        result={"points": 40},
    )
    with TestClient(create_app(windowed)) as client:
        api = SignedClient(client)
        first = api.post("/v1/score-events", sent)
        assert first.status_code == 200, first.text
        assert first.json()["status"] == "accepted"
        again = api.post("/v1/score-events", sent)
        assert again.json()["status"] == "duplicate"
        assert again.json()["boards"] == first.json()["boards"]

        keys = Keys(partition_of("win", windowed.partitions))
        bucket, record = identity_hash("win", "W1")
        epoch = live_epochs(redis_client, keys.base_generation)[0]
        key = keys.dedupe_bucket(epoch, bucket)
        assert redis_client.hexists(key, record)
        # The record lives at least as long as the window plus the allowed skew.
        assert redis_client.ttl(key) >= WINDOW_S + windowed.max_future_seconds

        # Past the window, and with the record gone (as if expired or moved out):
        # refused, so it cannot be applied a second time.
        time.sleep(max(0.0, occurred.timestamp() + WINDOW_S + 1 - time.time()))
        redis_client.hdel(key, record)
        late = api.post("/v1/score-events", sent)
        assert late.status_code == 422, late.text
        assert late.json()["error"] == "too_old"
        total = redis_client.hget(keys.totals("alltime:all:global"), "win")
        assert total == b"40|1"
