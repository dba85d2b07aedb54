"""Why a rank changed over published generations: history and diff routes, their
answers on a small board and their errors (422, 404, 410)."""

from __future__ import annotations

from typing import Any

import pytest

from api.history_models import DiffOut, HistoryOut
from serving.registry import GenerationRegistry
from tests.conftest import SignedClient
from tests.support.segments import write_generation

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
G1 = {"P1": 920, "P2": 900, "P3": 900, "P4": 880}
G2 = {"P1": 920, "P2": 900, "P3": 950, "P4": 930, "P5": 990}
G3 = {"P2": 1000, "P3": 950, "P4": 930, "P5": 990, "P6": 10}


@pytest.fixture
def published(api: SignedClient, settings: Any) -> SignedClient:
    for number, rows in enumerate((G1, G2, G3), start=1):
        write_generation(settings.segments_dir, number, {BOARD: rows})
    registry: GenerationRegistry = api.client.app.state.generations
    registry.refresh(force=True)
    return api


def test_history_newest_first_with_rank_changes(published: SignedClient) -> None:
    body = published.get(f"/v1/boards/{BOARD}/players/P3/history").json()
    HistoryOut.model_validate(body)
    assert (body["board"], body["playerId"]) == (BOARD, "P3")
    assert (body["exactness"], body["basis"]) == ("exact", "snapshot")
    entries = body["entries"]
    assert [e["generation"]["id"] for e in entries] == ["g3", "g2", "g1"]
    assert [(e["score"], e["rank"], e["population"]) for e in entries] == [
        (950, 3, 5),
        (950, 2, 5),
        (900, 2, 4),
    ]
    assert entries[0]["topPercent"] == 60.0
    # g2 -> g3: P2 jumped above P3 (1000), P1 left: one newly above, none gone.
    assert entries[0]["rankChange"] == {
        "from": 2,
        "to": 3,
        "ownScoreChange": 0,
        "newlyAbove": 1,
        "noLongerAbove": 0,
    }
    # g1 -> g2: P5 came above, P1 fell below (950 > 920).
    assert entries[1]["rankChange"] == {
        "from": 2,
        "to": 2,
        "ownScoreChange": 50,
        "newlyAbove": 1,
        "noLongerAbove": 1,
    }
    assert entries[2]["rankChange"] is None
    # No contributions index in these generations: no contributions to list.
    assert all(e["changes"] == [] for e in entries)
    limited = published.get(
        f"/v1/boards/{BOARD}/players/P3/history", params={"limit": 1}
    ).json()
    assert limited["entries"] == entries[:1]


def test_history_errors(published: SignedClient) -> None:
    for limit in (0, 101, "x"):
        reply = published.get(
            f"/v1/boards/{BOARD}/players/P3/history", params={"limit": limit}
        )
        assert reply.status_code == 422, limit
        assert reply.json()["error"] == "invalid_request"
    reply = published.get("/v1/boards/nope/players/P3/history")
    assert (reply.status_code, reply.json()["error"]) == (404, "board_not_found")
    reply = published.get(f"/v1/boards/{BOARD}/players/P9/history")
    assert (reply.status_code, reply.json()["error"]) == (404, "player_not_found")
    # A valid board nobody is on: the player is on none of its snapshots.
    reply = published.get("/v1/boards/season:S4:eu/players/P3/history")
    assert (reply.status_code, reply.json()["error"]) == (404, "player_not_found")


def test_diff_movers_entered_left(published: SignedClient) -> None:
    body = published.get(
        f"/v1/boards/{BOARD}/diff", params={"from": "g1", "to": "g3"}
    ).json()
    DiffOut.model_validate(body)
    assert (body["from"]["id"], body["to"]["id"]) == ("g1", "g3")
    # g1 ranks P1 1, P2 2, P3 2, P4 4; g3: P2 1, P5 2, P3 3, P4 4, P6 5.
    assert body["movers"] == [
        {"playerId": "P2", "fromRank": 2, "toRank": 1, "fromScore": 900,
         "toScore": 1000},
        {"playerId": "P3", "fromRank": 2, "toRank": 3, "fromScore": 900,
         "toScore": 950},
    ]  # fmt: skip
    assert body["entered"] == [
        {"playerId": "P5", "rank": 2, "score": 990},
        {"playerId": "P6", "rank": 5, "score": 10},
    ]
    assert body["left"] == [{"playerId": "P1", "rank": 1, "score": 920}]
    assert body["counts"] == {"movers": 2, "entered": 2, "left": 1}
    cut = published.get(
        f"/v1/boards/{BOARD}/diff", params={"from": "g1", "to": "g3", "limit": 1}
    ).json()
    assert [m["playerId"] for m in cut["movers"]] == ["P2"]
    assert cut["counts"] == body["counts"]


def test_diff_errors(api: SignedClient, settings: Any) -> None:
    for number in range(1, 5):
        write_generation(settings.segments_dir, number, {BOARD: {**G1, "P4": number}})
    api.client.app.state.generations.refresh(force=True)
    reply = api.get(f"/v1/boards/{BOARD}/diff", params={"from": "g1", "to": "g4"})
    assert reply.status_code == 410
    assert reply.json() == {
        "error": "generation_expired",
        "detail": "generation g1 is no longer retained",
        "latestGeneration": "g4",
    }
    reply = api.get(f"/v1/boards/{BOARD}/diff", params={"from": "g2", "to": "g9"})
    assert (reply.status_code, reply.json()["error"]) == (404, "generation_not_found")
    for params in (
        {"from": "g2"},
        {"to": "g3"},
        {"from": "g2", "to": "g3", "limit": 0},
    ):
        reply = api.get(f"/v1/boards/{BOARD}/diff", params=params)
        assert reply.status_code == 422, params
        assert reply.json()["error"] == "invalid_request"
    reply = api.get("/v1/boards/nope/diff", params={"from": "g2", "to": "g3"})
    assert (reply.status_code, reply.json()["error"]) == (404, "board_not_found")
    # History covers the retained ones only (g2..g4).
    body = api.get(f"/v1/boards/{BOARD}/players/P4/history").json()
    assert [e["generation"]["id"] for e in body["entries"]] == ["g4", "g3", "g2"]


def record(
    partition: int, position: int, event: str, match: str, kind: str, total: int
) -> Any:
    return {
        "partition": partition,
        "position": position,
        "status": "accepted",
        "event": {
            "eventId": event,
            "playerId": "P3",
            "matchId": match,
            "kind": kind,
            "occurredAt": "2026-11-20T10:00:00.000Z",
        },
        "result": {
            "status": "accepted",
            "boards": [{"board": BOARD, "total": total, "version": 1}],
        },
    }


def test_history_lists_the_contributions_of_the_index(
    api: SignedClient, settings: Any
) -> None:
    """The changes of each entry come from the newest generation's contributions
    index (serving/contributions.py), layered per generation."""
    from speed.partitions import partition_of
    from tests.support.segments import write_contributions

    k = partition_of("P3", settings.partitions)
    p = str(k)
    boundaries = [{p: 1}, {p: 3}, {p: 3}]
    landed = [
        [record(k, 1, "E1", "M1", "result", 900)],
        [
            record(k, 2, "E2", "M2", "result", 1000),
            record(k, 3, "E3", "M1", "correction", 950),
        ],
        [],
    ]
    for number, rows in enumerate((G1, G2, G3), start=1):
        write_generation(
            settings.segments_dir, number, {BOARD: rows}, boundaries[number - 1]
        )
        write_contributions(
            settings.segments_dir, number, landed[number - 1], number - 1 or None
        )
    api.client.app.state.generations.refresh(force=True)
    body = api.get(f"/v1/boards/{BOARD}/players/P3/history").json()
    HistoryOut.model_validate(body)
    changes = [
        [(c["eventId"], c["matchId"], c["kind"], c["delta"]) for c in e["changes"]]
        for e in body["entries"]
    ]
    assert changes == [
        [],
        [("E2", "M2", "result", 100), ("E3", "M1", "correction", -50)],
        [("E1", "M1", "result", 900)],
    ]
    assert body["entries"][1]["changes"][0]["occurredAt"] == "2026-11-20T10:00:00.000Z"


def test_a_shadowed_players_history_is_its_own(
    api: SignedClient, settings: Any, redis_client: Any
) -> None:
    """Hidden from everyone but itself (API.md, shadow): others get 404, its own
    read (its player token) lists it where its score puts it."""
    from api.tokens import issue_player_token
    from tests.support.shadow import publish_hidden

    publish_hidden(settings, redis_client, 1, {"P1": 920, "P2": 900, "P3": 10}, {"P1"})
    publish_hidden(settings, redis_client, 2, {"P1": 800, "P2": 900, "P3": 10}, {"P1"})
    api.client.app.state.generations.refresh(force=True)
    path = f"/v1/boards/{BOARD}/players/P1/history"
    reply = api.get(path)
    assert (reply.status_code, reply.json()["error"]) == (404, "player_not_found")
    token = issue_player_token(settings.player_token_secret, "P1")
    body = api.get(path, headers={"Authorization": f"Bearer {token}"}).json()
    HistoryOut.model_validate(body)
    assert [(e["score"], e["rank"], e["population"]) for e in body["entries"]] == [
        (800, 2, 3),
        (920, 1, 3),
    ]
    assert body["entries"][0]["rankChange"] == {
        "from": 1,
        "to": 2,
        "ownScoreChange": -120,
        "newlyAbove": 1,
        "noLongerAbove": 0,
    }
    # Another player's history never counts the hidden one.
    other = api.get(f"/v1/boards/{BOARD}/players/P3/history").json()
    assert [(e["rank"], e["population"]) for e in other["entries"]] == [(2, 2), (2, 2)]
