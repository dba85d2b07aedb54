"""`lb rebuild` invalidates the API's cached live answers (issue 23: after a rebuild
repaired damaged speed-layer keys, a cached ``top?limit=7`` still returned the
damaged answer, labelled exact, while ``limit=8`` was right). Real Redis; nothing is
landed or published, so the rebuild folds the Redis log alone and needs no Spark."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from conf.settings import Settings
from speed.partitions import Keys, partition_of
from speed.rebuild import rebuild
from tests.conftest import SignedClient, event

pytestmark = pytest.mark.integration

BOARD = "alltime:all:global"
PLAYERS = {f"q{i}": 10 * (i + 1) for i in range(10)}


def top(api: SignedClient, limit: int) -> list[tuple[str, int]]:
    reply = api.get(f"/v1/boards/{BOARD}/top", params={"limit": limit})
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    assert body["exactness"] == "exact"
    return [(e["playerId"], e["score"]) for e in body["entries"]]


def test_rebuild_invalidates_cached_live_top_and_approx(
    settings: Settings, api: SignedClient, redis_client: redis.Redis
) -> None:
    for player, points in PLAYERS.items():
        reply = api.post(
            "/v1/score-events",
            event(eventId=f"{player}-m1", playerId=player, result={"points": points}),
        )
        assert reply.status_code == 200, reply.text
    expected = sorted(PLAYERS.items(), key=lambda item: -item[1])
    assert top(api, 10) == expected

    # Damage: the leader's partition loses its changed set of the board (its
    # players vanish from live top lists) and its histogram tree (they vanish from
    # approximate counts); the log and positions are untouched.
    leader = expected[0][0]
    keys = Keys(partition_of(leader, settings.partitions))
    assert redis_client.delete(keys.changed_live(BOARD), keys.fenwick(BOARD)) == 2
    damaged = top(api, 7)  # computed now, cached under the unchanged stamp
    assert leader not in dict(damaged)
    # The approximate rank's kept histogram is read under the same stamp.
    second = expected[1][0]
    approx = api.get(f"/v1/boards/{BOARD}/players/{second}", params={"mode": "approx"})
    assert approx.status_code == 200, approx.text
    assert approx.json()["population"] < len(PLAYERS)

    # Nothing landed, no generation: the rebuild folds the Redis log alone (no
    # landed records, so no Spark: the speed layer's rebuild takes them as input).
    report = rebuild(settings, lambda partition: iter(()))
    assert set(report.partitions.values()) == {"ok"}
    assert not report.identical  # it repaired the damage

    assert top(api, 7) == expected[:7]  # not the cached damaged answer
    assert top(api, 8) == expected[:8]
    for player, score in expected:
        reply = api.get(
            f"/v1/boards/{BOARD}/players/{player}", params={"mode": "approx"}
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["score"] == score
        assert reply.json()["population"] == len(PLAYERS)
