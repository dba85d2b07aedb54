"""Ingest -> land -> publish (real Redis, Spark, Delta) -> reads, then fresh events:
every answer labelled exact equals the offline sort, snapshot and live alike."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from jobs.publish import run_publish
from speed.rebase import rebase_published
from tests.conftest import BACKENDS, SignedClient, event
from tests.support.live import Oracle, region

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
BOARD = "season:S4:global"


def send(
    api: SignedClient,
    oracle: Oracle,
    player: str,
    match: str,
    revision: int,
    points: int,
) -> dict[str, Any]:
    event_id = f"{player}-{match}-{revision}"
    reply = api.post(
        "/v1/score-events",
        event(
            eventId=event_id,
            playerId=player,
            matchId=match,
            sourceRevision=revision,
            region=region(player),
            result={"points": points},
            kind="correction" if revision > 1 else "result",
            reason="review" if revision > 1 else None,
        ),
    )
    assert reply.status_code == 200, reply.text
    oracle.apply(player, event_id, match, revision, points)
    return reply.json()  # type: ignore[no-any-return]


def assert_board(api: SignedClient, oracle: Oracle, basis: str, **params: Any) -> None:
    expected = oracle.ordered(BOARD)
    top = api.get(f"/v1/boards/{BOARD}/top", params={"limit": 50, **params}).json()
    assert (top["exactness"], top["basis"]) == ("exact", basis)
    assert top["entries"] == expected
    for want in expected:
        body = api.get(
            f"/v1/boards/{BOARD}/players/{want['playerId']}", params=params
        ).json()
        assert (body["score"], body["rank"], body["position"]) == (
            want["score"],
            want["rank"],
            want["position"],
        )


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_publish_then_fresh_events_stay_exact(
    api: SignedClient, settings: Any, spark: Any, redis_client: redis.Redis
) -> None:
    players = ["p0", "p1", "p2", "p3", "p4", "p5"]
    oracle = Oracle()
    for i, player in enumerate(players):
        send(api, oracle, player, "m1", 1, 10 * (i % 3))  # ties: 0, 10, 20 twice each
    send(api, oracle, "p1", "m1", 1, 10)  # a redelivery
    send(api, oracle, "p2", "m1", 2, 5)  # a downward correction

    generation = run_publish(settings, spark=spark)
    assert generation == "g1"
    report = rebase_published(settings, generation)
    assert set(report.partitions.values()) == {"ok"}
    api.client.app.state.generations.refresh(force=True)
    assert_board(api, oracle, "snapshot", mode="snapshot")
    assert_board(api, oracle, "live")

    # Fresh events after the generation: the next live read has them, exactly.
    send(api, oracle, "p0", "m2", 1, 25)
    send(api, oracle, "p5", "m1", 2, 0)
    send(api, oracle, "Zed", "m1", 1, 20)
    assert_board(api, oracle, "live")
    fresh = api.get(f"/v1/boards/{BOARD}/players/p0").json()
    assert fresh["basis"] == "live" and fresh["generation"]["id"] == "g1"
    assert fresh["rank"] == 1

    # A second generation absorbs them; the changed-sets shrink to nothing.
    assert run_publish(settings, spark=spark) == "g2"
    rebase_published(settings, "g2")
    assert_board(api, oracle, "live")
    assert_board(api, oracle, "snapshot", mode="snapshot")
    leftover = [
        k
        for k in redis_client.scan_iter(match="lb:*:ch[zs]:*")
        if redis_client.zcard(k)
    ]
    assert leftover == []
