"""Migration to games (issue 26, item 4): the speed layer's data of a deployment
without ``games:`` (Redis keys, dedupe and match records, a held event's
quarantine field) keeps working as the game ``default`` once the boards file lists
games: same answers on the unprefixed and the ``/v1/games/default`` paths,
redeliveries still duplicates, the held event released, the other game empty."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from api.main import create_app
from api.security import sign
from speed.partitions import Keys, partition_of
from speed.rebase import rebase
from tests.support.clients import SignedClient, event
from tests.support.live import games_settings, options_settings
from tests.support.segments import write_generation
from tests.support.shadow import admin

pytestmark = pytest.mark.integration

BOARD = "season:S4:global"
HOLD_ABOVE = 4


def top(client: TestClient, path: str) -> list[tuple[str, int]]:
    reply = client.get(path)
    assert reply.status_code == 200, reply.text
    return [(e["playerId"], e["score"]) for e in reply.json()["entries"]]


def held(api: SignedClient, game: str) -> list[tuple[str, str]]:
    signed = admin(api)
    headers = {"X-Key-Id": "admin", "X-Signature": sign(signed.secret, b"")}
    reply = api.client.get(
        "/v1/admin/quarantine", params={"game": game}, headers=headers
    )
    assert reply.status_code == 200, reply.text
    return [(e["playerId"], e["eventId"]) for e in reply.json()["events"]]


def test_pre_games_speed_data_keeps_working_as_default(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    redis_client.flushall()
    single = options_settings(redis_url, tmp_path)
    games = single.model_copy(
        update={"boards_file": games_settings(redis_url, tmp_path).boards_file}
    )
    write_generation(
        single.segments_dir,
        1,
        {},
        {str(p): 0 for p in range(single.partitions)},
        quarantine={BOARD: {"eu": HOLD_ABOVE, "na": HOLD_ABOVE}},
    )
    kept = event(eventId="E1", playerId="P1", matchId="M1", result={"points": 3})
    big = event(eventId="E2", playerId="P2", matchId="M2", result={"points": 9})

    # Before games: one accepted event, one held.
    app = create_app(single)
    with TestClient(app) as client:
        api = SignedClient(client)
        # The generation the thresholds are in becomes the partitions' base.
        registry = app.state.generations
        registry.refresh(force=True)
        generation = registry.by_number(1)
        assert generation is not None
        report = rebase(redis_client, generation, single.partitions)
        assert set(report.partitions.values()) == {"ok"}
        assert api.post("/v1/score-events", kept).json()["status"] == "accepted"
        assert api.post("/v1/score-events", big).json()["status"] == "quarantined"
        assert top(client, f"/v1/boards/{BOARD}/top") == [("P1", 3)]
    # The quarantine field as before games: "<len(playerId)>:<playerId><eventId>".
    keys = Keys(partition_of("P2", single.partitions))
    assert redis_client.hkeys(keys.quarantine) == [b"2:P2E2"]

    # The same data dir and Redis, the boards file now listing games.
    with TestClient(create_app(games)) as client:
        api = SignedClient(client)
        for path in (
            f"/v1/boards/{BOARD}/top",
            f"/v1/games/default/boards/{BOARD}/top",
        ):
            assert top(client, path) == [("P1", 3)], path
        assert top(client, f"/v1/games/arena/boards/{BOARD}/top") == []
        # A redelivery, on either path, is the duplicate it was.
        for path in ("/v1/score-events", "/v1/games/default/score-events"):
            reply = api.post(path, kept)
            assert reply.json()["status"] == "duplicate", (path, reply.text)
        # The same ids in the other game are another player's first event.
        assert api.post("/v1/games/arena/score-events", kept).json()["status"] == (
            "accepted"
        )
        # The event held before games is the game default's, and is released.
        assert held(api, "default") == [("P2", "E2")]
        assert held(api, "arena") == []
        decided = admin(api).post(
            "/v1/admin/quarantine/E2",
            {"action": "release", "reason": "checked", "playerId": "P2"},
        )
        assert decided.status_code == 200, decided.text
        assert decided.json()["result"]["status"] == "accepted"
        assert top(client, f"/v1/boards/{BOARD}/top") == [("P2", 9), ("P1", 3)]
        assert top(client, f"/v1/games/arena/boards/{BOARD}/top") == [("P1", 3)]
    assert redis_client.hkeys(keys.quarantine) == []
