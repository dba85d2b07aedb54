"""Ranking per query (API.md): competition, dense and ordinal ranks on every ranked
read, live and snapshot, echoed as ``ranking``; approximate answers competition."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from api.tokens import issue_player_token
from conf.settings import Settings
from serving.ranking import rerank
from speed.partitions import Keys
from speed.rebase import rebase
from tests.conftest import BACKENDS, SignedClient, event
from tests.support.clients import put_friends
from tests.support.segments import write_generation
from tests.support.shadow import BOARD, seed

pytestmark = pytest.mark.integration
# API.md's example: 920, 900, 900, 880.
SEED = {"P1": 920, "P2": 900, "P3": 900, "P4": 880}
RANKS = {
    "competition": [1, 2, 2, 4],
    "dense": [1, 2, 2, 3],
    "ordinal": [1, 2, 3, 4],
}


def ranks(body: dict[str, Any]) -> list[int]:
    return [e["rank"] for e in body["entries"]]


@pytest.mark.unit
def test_rerank_a_run_below_the_top() -> None:
    entries = [{"position": 5, "rank": 0, "score": s} for s in (70, 70, 60, 50, 50)]
    for i, e in enumerate(entries):
        e["position"] = 5 + i
    rerank(entries, "competition", above=4, distinct_above=3)
    assert [e["rank"] for e in entries] == [5, 5, 7, 8, 8]
    rerank(entries, "dense", above=4, distinct_above=3)
    assert [e["rank"] for e in entries] == [4, 4, 5, 6, 6]
    rerank(entries, "ordinal", above=4, distinct_above=3)
    assert [e["rank"] for e in entries] == [5, 6, 7, 8, 9]


def publish(api: SignedClient, settings: Settings, client: redis.Redis) -> None:
    boundary = {
        str(p): int(client.get(Keys(p).position) or 0)
        for p in range(settings.partitions)
    }
    for p in range(settings.partitions):
        client.set(Keys(p).landed, boundary[str(p)])
    write_generation(settings.segments_dir, 1, {BOARD: SEED}, boundary)
    registry = api.client.app.state.generations
    registry.refresh(force=True)
    report = rebase(client, registry.by_number(1), settings.partitions)
    assert set(report.partitions.values()) == {"ok"}


def check_all(api: SignedClient, settings: Settings, mode: str) -> None:
    base = f"/v1/boards/{BOARD}"
    token = issue_player_token(settings.player_token_secret, "P2")
    for ranking, want in RANKS.items():
        params = {"ranking": ranking, "mode": mode}
        top = api.get(f"{base}/top", params=params).json()
        assert (top["ranking"], ranks(top)) == (ranking, want), (mode, ranking)
        for i, player in enumerate(SEED):
            me = api.get(f"{base}/players/{player}", params=params).json()
            assert (me["ranking"], me["rank"]) == (ranking, want[i]), (mode, player)
            # topPercent is always the competition rank's.
            assert me["topPercent"] == 100 * RANKS["competition"][i] / len(SEED)
            near = api.get(
                f"{base}/players/{player}/nearby", params={**params, "radius": 1}
            ).json()
            lo = max(0, i - 1)
            assert near["ranking"] == ranking
            assert ranks(near) == want[lo : i + 2], (mode, ranking, player)
        friends = api.get(
            f"{base}/players/P2/friends",
            params=params,
            headers={"Authorization": f"Bearer {token}"},
        ).json()
        assert (friends["ranking"], ranks(friends)) == (ranking, want)


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_rankings_live_and_snapshot(
    api: SignedClient, settings: Settings, redis_client: redis.Redis
) -> None:
    seed(api, SEED)
    assert put_friends(api, "P2", ["P1", "P3", "P4"]).status_code == 200
    base = f"/v1/boards/{BOARD}"
    # Default: competition, echoed.
    assert api.get(f"{base}/top").json()["ranking"] == "competition"
    check_all(api, settings, "live")
    publish(api, settings, redis_client)
    check_all(api, settings, "snapshot")
    check_all(api, settings, "live")
    for ranking, want in RANKS.items():
        page = api.get(f"{base}/entries", params={"ranking": ranking, "limit": 2})
        first = page.json()
        after = api.get(
            f"{base}/entries",
            params={"ranking": ranking, "cursor": first["cursors"]["after"]},
        ).json()
        assert ranks(first) + ranks(after) == want
        assert after["ranking"] == ranking
    # Live changes after the generation: a new distinct score above (930), one
    # gone (920: P1 corrected down to 880).
    for player, match, revision, points in (
        ("P3", "m2", 1, 30),
        ("P1", "s-P1", 2, 880),
    ):
        reply = api.post(
            "/v1/score-events",
            event(
                eventId=f"c-{player}",
                playerId=player,
                matchId=match,
                sourceRevision=revision,
                result={"points": points},
                kind="correction" if revision > 1 else "result",
                reason="review" if revision > 1 else None,
            ),
        )
        assert reply.status_code == 200, reply.text
    # Now P3 930, P2 900, P1 880, P4 880: dense 1, 2, 3, 3.
    dense = api.get(f"{base}/players/P4", params={"ranking": "dense"}).json()
    assert (dense["basis"], dense["rank"], dense["score"]) == ("live", 3, 880)
    near = api.get(
        f"{base}/players/P4/nearby", params={"ranking": "dense", "radius": 1}
    ).json()
    assert [(e["playerId"], e["rank"]) for e in near["entries"]] == [
        ("P1", 3),
        ("P4", 3),
    ]


def test_approximate_answers_competition_only(api: SignedClient) -> None:
    seed(api, SEED)
    path = f"/v1/boards/{BOARD}/players/P2"
    body = api.get(path, params={"mode": "approx"}).json()
    assert body["ranking"] == "competition"
    for ranking in ("dense", "ordinal"):
        reply = api.get(path, params={"mode": "approx", "ranking": ranking})
        assert reply.status_code == 422
        assert reply.json()["error"] == "invalid_request"
    reply = api.get(f"/v1/boards/{BOARD}/top", params={"ranking": "fancy"})
    assert reply.status_code == 422
    assert reply.json()["error"] == "invalid_request"
