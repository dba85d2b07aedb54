"""Only deltas in Redis (issue 11 item 1): a player unchanged since its partition's
base generation has no per-board total in Redis; its next event starts from the
generation's score and version. Real redis-server, the API in-process."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from serving.registry import GenerationRegistry
from speed.partitions import Keys, partition_of
from speed.rebase import rebase
from tests.conftest import BACKENDS, SignedClient, event
from tests.support.segments import write_generation

pytestmark = pytest.mark.integration


def post(api: SignedClient, **fields: Any) -> dict[str, Any]:
    reply = api.post("/v1/score-events", event(**fields))
    assert reply.status_code == 200, reply.text
    return reply.json()  # type: ignore[no-any-return]


def publish_from_redis(
    api: SignedClient, client: redis.Redis, number: int, boards: list[str]
) -> None:
    """What `lb publish` + rebase do, with Redis's live state at the boundary standing
    in for Spark (every event is before the boundary): totals and versions of the
    generation are the previous generation's, overlaid with the totals hashes (what
    changed since), then the log is landed and trimmed."""
    partitions = api.client.app.state.settings.partitions
    registry: GenerationRegistry = api.client.app.state.generations
    boundary: dict[str, int] = {}
    totals: dict[str, dict[str, int]] = {}
    versions: dict[str, dict[str, int]] = {}
    previous = registry.by_number(number - 1) if number > 1 else None
    for board in boards if previous is not None else []:
        segment = previous.board(board)  # type: ignore[union-attr]
        assert segment is not None and segment.versions is not None
        for row in range(segment.population):
            player = segment.players.str_at(row)
            totals.setdefault(board, {})[player] = int(segment.scores[row])
            versions.setdefault(board, {})[player] = int(segment.versions[row])
    for p in range(partitions):
        keys = Keys(p)
        position = int(client.get(keys.position) or 0)
        boundary[str(p)] = position
        for board in boards:
            for player, value in client.hgetall(keys.totals(board)).items():
                total, version = value.decode().split("|")[:2]
                totals.setdefault(board, {})[player.decode()] = int(total)
                versions.setdefault(board, {})[player.decode()] = int(version)
        client.set(keys.landed, position)
        client.xtrim(keys.log, minid=f"{position + 1}-0")
    segments_dir = api.client.app.state.settings.segments_dir
    write_generation(
        segments_dir, number, totals, boundary, bucket_target=2, versions=versions
    )
    registry.refresh(force=True)
    generation = registry.by_number(number)
    assert generation is not None
    report = rebase(client, generation, partitions)
    assert set(report.partitions.values()) == {"ok"}


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_event_without_state_starts_from_the_generation(
    redis_backend: Any, api: SignedClient, redis_client: redis.Redis
) -> None:
    first = post(api, eventId="E1", playerId="P1", matchId="M1", result={"points": 10})
    second = post(api, eventId="E2", playerId="P1", matchId="M2", result={"points": 5})
    post(api, eventId="E3", playerId="P2", matchId="M3", result={"points": 7})
    boards = [item["board"] for item in first["boards"]]
    assert [item["version"] for item in second["boards"]] == [2] * len(boards)
    publish_from_redis(api, redis_client, 1, boards)

    partitions = api.client.app.state.settings.partitions
    for player in ("P1", "P2"):
        keys = Keys(partition_of(player, partitions))
        for board in boards:
            # Unchanged since g1: no total in Redis, the rebase dropped it.
            assert not redis_client.hexists(keys.totals(board), player)
    # Nothing per player is left in any totals hash (0 bytes per unchanged player).
    for p in range(partitions):
        for board in boards:
            assert redis_client.memory_usage(Keys(p).totals(board)) is None

    # Live reads of an unchanged player come from the generation.
    for board in boards:
        body = api.get(f"/v1/boards/{board}/players/P2").json()
        assert (body["score"], body["rank"], body["basis"], body["exactness"]) == (
            7,
            2,
            "live",
            "exact",
        )
        approx = api.get(
            f"/v1/boards/{board}/players/P2", params={"mode": "approx"}
        ).json()
        assert approx["exactness"] == "approximate" and approx["population"] == 2

    third = post(api, eventId="E4", playerId="P1", matchId="M4", result={"points": 3})
    assert third["status"] == "accepted"
    # Total and version continue from the generation's (15, 2).
    assert [(i["total"], i["version"]) for i in third["boards"]] == [(18, 3)] * len(
        boards
    )
    # A correction of a match from before the generation.
    fourth = post(
        api,
        eventId="E5",
        playerId="P1",
        matchId="M1",
        sourceRevision=2,
        result={"points": 4},
        kind="correction",
        reason="recount",
    )
    assert [(i["total"], i["version"]) for i in fourth["boards"]] == [(12, 4)] * len(
        boards
    )
    for board in boards:
        top = api.get(f"/v1/boards/{board}/top", params={"limit": 5}).json()
        assert [(e["playerId"], e["score"], e["rank"]) for e in top["entries"]] == [
            ("P1", 12, 1),
            ("P2", 7, 2),
        ]
        body = api.get(f"/v1/boards/{board}/players/P2").json()
        assert (body["score"], body["rank"]) == (7, 2)

    # The next generation: P1 changed after g1's boundary and is in g2 now, so it
    # leaves Redis as well; its next event still counts on.
    publish_from_redis(api, redis_client, 2, boards)
    keys = Keys(partition_of("P1", partitions))
    assert not any(redis_client.hexists(keys.totals(b), "P1") for b in boards)
    fifth = post(api, eventId="E6", playerId="P1", matchId="M5", result={"points": 1})
    assert [(i["total"], i["version"]) for i in fifth["boards"]] == [(13, 5)] * len(
        boards
    )


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_shadowing_a_player_without_state_keeps_its_total(
    redis_backend: Any, api: SignedClient, redis_client: redis.Redis
) -> None:
    first = post(api, eventId="E1", playerId="P1", matchId="M1", result={"points": 10})
    post(api, eventId="E2", playerId="P2", matchId="M2", result={"points": 7})
    boards = [item["board"] for item in first["boards"]]
    publish_from_redis(api, redis_client, 1, boards)
    keys = Keys(partition_of("P1", api.client.app.state.settings.partitions))
    assert not redis_client.hexists(keys.totals(boards[0]), "P1")

    admin = SignedClient(api.client, "admin", b"dev-admin-secret")
    reply = admin.post(
        "/v1/admin/players/P1/flags", {"action": "shadow", "reason": "review"}
    )
    assert reply.json()["changed"] is True
    # The next generation leaves a shadowed player out: its total stays in Redis.
    for board in boards:
        assert redis_client.hget(keys.totals(board), "P1") == b"10|1"
    reply = admin.post(
        "/v1/admin/players/P1/flags", {"action": "restore", "reason": "cleared"}
    )
    assert reply.json()["changed"] is True
    third = post(api, eventId="E3", playerId="P1", matchId="M3", result={"points": 1})
    assert [(i["total"], i["version"]) for i in third["boards"]] == [(11, 2)] * len(
        boards
    )
    body = api.get(f"/v1/boards/{boards[0]}/players/P1").json()
    assert (body["score"], body["rank"]) == (11, 1)
