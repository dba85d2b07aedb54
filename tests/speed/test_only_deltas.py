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
from tests.api.segment_writer import write_generation
from tests.conftest import BACKENDS, SignedClient, event


def post(api: SignedClient, **fields: Any) -> dict[str, Any]:
    reply = api.post("/v1/score-events", event(**fields))
    assert reply.status_code == 200, reply.text
    return reply.json()  # type: ignore[no-any-return]


def publish_from_redis(
    api: SignedClient, client: redis.Redis, number: int, boards: list[str]
) -> None:
    """What `lb publish` + rebase do, with Redis's live state at the boundary standing
    in for Spark (every event is before the boundary): totals and versions of the
    generation come from the totals hashes, then the log is landed and trimmed."""
    partitions = api.client.app.state.settings.partitions
    boundary: dict[str, int] = {}
    totals: dict[str, dict[str, int]] = {}
    versions: dict[str, dict[str, int]] = {}
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
    registry: GenerationRegistry = api.client.app.state.generations
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
    keys = Keys(partition_of("P1", partitions))
    for board in boards:
        # Unchanged since g1: no total in Redis (the rebase dropped it).
        redis_client.hdel(keys.totals(board), "P1")
        assert not redis_client.hexists(keys.totals(board), "P1")

    third = post(api, eventId="E4", playerId="P1", matchId="M4", result={"points": 3})
    assert third["status"] == "accepted"
    assert [(i["total"], i["version"]) for i in third["boards"]] == [
        (18, 3)
    ] * len(boards)
    # A correction of a match from before the generation: total and version continue.
    fourth = post(
        api, eventId="E5", playerId="P1", matchId="M1", sourceRevision=2,
        result={"points": 4}, kind="correction", reason="recount",
    )
    assert [(i["total"], i["version"]) for i in fourth["boards"]] == [
        (12, 4)
    ] * len(boards)
