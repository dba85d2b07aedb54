"""Redis unreachable: live and approximate reads answer from the latest generation,
labelled snapshot and flagged; writes answer 503 with Retry-After (real redis-server,
stopped mid-test)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from speed.server import RedisServer
from tests.conftest import SignedClient, event
from tests.support.redis_servers import own_server
from tests.support.segments import write_generation
from tests.support.settings import base_settings

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
SCORES = {"a": 30, "b": 20, "c": 20, "d": 5}


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = own_server(tmp_path / "redis")
    yield server
    server.stop()


def test_reads_fall_back_to_the_generation_while_redis_is_down(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    settings = base_settings(own_redis.url, tmp_path)
    write_generation(settings.segments_dir, 1, {BOARD: SCORES})
    with TestClient(create_app(settings)) as client:
        api = SignedClient(client)
        assert api.post("/v1/score-events", event(playerId="e")).status_code == 200
        live = api.get(f"/v1/boards/{BOARD}/top").json()
        assert live["basis"] == "live" and "liveLayer" not in live

        own_redis.stop()
        started = time.monotonic()
        top = api.get(f"/v1/boards/{BOARD}/top", params={"limit": 3})
        assert top.status_code == 200
        body = top.json()
        assert top.headers["X-Live-Layer"] == "unavailable"
        assert (body["basis"], body["exactness"], body["liveLayer"]) == (
            "snapshot",
            "exact",
            "unavailable",
        )
        assert body["generation"]["id"] == "g1" and body["mode"] == "live"
        assert [e["playerId"] for e in body["entries"]] == ["a", "b", "c"]
        assert [e["rank"] for e in body["entries"]] == [1, 2, 2]

        for mode in ("live", "approx"):
            rank = api.get(f"/v1/boards/{BOARD}/players/c", params={"mode": mode})
            assert rank.status_code == 200, rank.text
            got = rank.json()
            assert (got["basis"], got["liveLayer"], got["rank"], got["score"]) == (
                "snapshot",
                "unavailable",
                2,
                20,
            )
        near = api.get(f"/v1/boards/{BOARD}/players/d/nearby", params={"radius": 1})
        assert near.status_code == 200
        assert [e["playerId"] for e in near.json()["entries"]] == ["c", "d"]

        # Only live: its answer is unknown without Redis, not "not found".
        missing = api.get(f"/v1/boards/{BOARD}/players/e")
        assert missing.status_code == 503
        assert missing.json()["error"] == "unavailable"
        assert missing.headers["Retry-After"] == "1"

        write = api.post("/v1/score-events", event(eventId="E2", playerId="f"))
        assert write.status_code == 503 and "Retry-After" in write.headers
        assert time.monotonic() - started < 30

        metrics = api.get("/metrics").text
        assert 'lb_degraded_reads_total{endpoint="top"} 1.0' in metrics
        assert "lb_redis_up 0.0" in metrics


def test_a_stalled_redis_turns_into_snapshot_reads_within_the_timeout(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    # A stopped (not dead) Redis accepts connections and never answers: reads wait
    # out LB_REDIS_TIMEOUT (2 s by default, not redis-py's 5 s), then fall back.
    settings = base_settings(own_redis.url, tmp_path)
    assert settings.redis_timeout <= 2
    write_generation(settings.segments_dir, 1, {BOARD: SCORES})
    assert own_redis.process is not None
    with TestClient(create_app(settings)) as client:
        api = SignedClient(client)
        assert api.get(f"/v1/boards/{BOARD}/top").json()["basis"] == "live"
        own_redis.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            top = api.get(f"/v1/boards/{BOARD}/top", params={"limit": 3})
            elapsed = time.monotonic() - started
        finally:
            own_redis.process.send_signal(signal.SIGCONT)
        assert top.status_code == 200, top.text
        assert (top.json()["basis"], top.json()["liveLayer"]) == (
            "snapshot",
            "unavailable",
        )
        assert elapsed < settings.redis_timeout + 1.5, elapsed
