"""A killed and restarted redis-server loses no acknowledged event."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from api.main import create_app
from tests.conftest import SignedClient, event
from tests.support.redis_servers import own_server
from tests.support.settings import base_settings

pytestmark = pytest.mark.integration


def test_kill_and_restart_loses_no_acknowledged_event(tmp_path: Path) -> None:
    server = own_server(tmp_path / "redis")
    settings = base_settings(server.url, tmp_path)
    acknowledged: dict[str, int] = {}
    try:
        with TestClient(create_app(settings)) as client:
            api = SignedClient(client)
            for i in range(300):
                player = f"P{i % 23}"
                reply = api.post(
                    "/v1/score-events",
                    event(
                        eventId=f"D{i}",
                        playerId=player,
                        matchId=f"M{i}",
                        result={"points": i % 50},
                    ),
                )
                assert reply.status_code == 200
                totals = {b["board"]: b["total"] for b in reply.json()["boards"]}
                acknowledged[player] = totals["alltime:all:global"]
            # SIGKILL: no chance to flush anything that was not already fsynced.
            server.stop(kill=True)
            down = api.post("/v1/score-events", event(eventId="during", matchId="Mx"))
            assert down.status_code == 503
            assert down.json()["error"] == "unavailable"
            server.start()
            # Redelivering an acknowledged event is still a duplicate, not a new add.
            again = api.post(
                "/v1/score-events",
                event(eventId="D0", playerId="P0", matchId="M0", result={"points": 0}),
            )
            assert again.json()["status"] == "duplicate"
        check = redis.Redis.from_url(server.url, decode_responses=True)
        for player, total in acknowledged.items():
            partition_values = [
                check.hget(f"lb:{{p{p}}}:tot:alltime:all:global", player)
                for p in range(4)
            ]
            (stored,) = [v for v in partition_values if v is not None]
            assert int(stored.split("|")[0]) == total
        positions = sum(int(check.get(f"lb:{{p{p}}}:pos") or 0) for p in range(4))
        assert positions == 300
        check.close()
    finally:
        server.stop()
