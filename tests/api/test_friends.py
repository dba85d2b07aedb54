"""Friends: trusted friend-list writes, private rankings among player and friends."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from api.tokens import issue_player_token
from conf.settings import Settings
from tests.conftest import BACKENDS, SignedClient, event
from tests.support.clients import put_friends
from tests.support.segments import write_generation
from tests.support.settings import FA_BOARD, first_achieved_settings

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
SEED = {"P1": 920, "P2": 900, "P3": 900, "P4": 880, "P5": 10}


def token(settings: Settings, player: str, **claims: Any) -> dict[str, str]:
    if claims:
        payload = {"sub": player, "exp": int(time.time()) + 60, **claims}
        raw = jwt.encode(payload, settings.player_token_secret, algorithm="HS256")
    else:
        raw = issue_player_token(settings.player_token_secret, player)
    return {"Authorization": f"Bearer {raw}"}


def friends_of(
    api: SignedClient, settings: Settings, player: str, **params: Any
) -> Any:
    return api.get(
        f"/v1/boards/{BOARD}/players/{player}/friends",
        headers=token(settings, player),
        params=params,
    )


@pytest.fixture
def seeded(api: SignedClient) -> SignedClient:
    for player, points in SEED.items():
        reply = api.post(
            "/v1/score-events",
            event(
                eventId=f"s-{player}",
                playerId=player,
                matchId=f"s-{player}",
                result={"points": points},
            ),
        )
        assert reply.status_code == 200, reply.text
    return api


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_friends_ranked_among_themselves_live(
    seeded: SignedClient, settings: Settings
) -> None:
    reply = put_friends(seeded, "P2", ["P4", "P1", "P9", "P2", "P4"])
    assert reply.status_code == 200, reply.text
    # Distinct, without the player; P9 has not played yet and is listed anyway.
    assert reply.json() == {"playerId": "P2", "friends": ["P1", "P4", "P9"]}
    body = friends_of(seeded, settings, "P2").json()
    assert (body["exactness"], body["basis"], body["mode"]) == ("exact", "live", "live")
    assert body["population"] == 3
    assert set(body["asOf"]) == {"0", "1", "2", "3"}
    assert body["entries"] == [
        {"position": 1, "rank": 1, "playerId": "P1", "score": 920},
        {"position": 2, "rank": 2, "playerId": "P2", "score": 900},
        {"position": 3, "rank": 3, "playerId": "P4", "score": 880},
    ]
    # Same as filtering the exact live board to the members, then ranking.
    top = seeded.get(f"/v1/boards/{BOARD}/top").json()["entries"]
    members = [e for e in top if e["playerId"] in {"P1", "P2", "P4"}]
    assert [(e["playerId"], e["score"]) for e in body["entries"]] == [
        (e["playerId"], e["score"]) for e in members
    ]
    # A new score of a friend shows at once; the list is replaced, not merged.
    seeded.post(
        "/v1/score-events",
        event(eventId="x", playerId="P9", matchId="x", result={"points": 905}),
    )
    assert put_friends(seeded, "P2", ["P3", "P9"]).status_code == 200
    entries = friends_of(seeded, settings, "P2").json()["entries"]
    assert [(e["playerId"], e["rank"]) for e in entries] == [
        ("P9", 1),
        ("P2", 2),
        ("P3", 2),
    ]


def test_friends_snapshot_mode(api: SignedClient, settings: Settings) -> None:
    write_generation(settings.segments_dir, 1, {BOARD: SEED}, {"0": 0})
    put_friends(api, "P3", ["P5", "P2"])
    body = friends_of(api, settings, "P3", mode="snapshot").json()
    assert (body["basis"], body["generation"]["id"]) == ("snapshot", "g1")
    assert [(e["playerId"], e["rank"], e["position"]) for e in body["entries"]] == [
        ("P2", 1, 1),
        ("P3", 1, 2),
        ("P5", 3, 3),
    ]
    pinned = friends_of(api, settings, "P3", generation="g1").json()
    assert pinned["entries"] == body["entries"]


def test_friends_read_needs_the_players_token(
    seeded: SignedClient, settings: Settings
) -> None:
    put_friends(seeded, "P2", ["P1"])
    path = f"/v1/boards/{BOARD}/players/P2/friends"
    cases = {
        "none": {},
        "scheme": {"Authorization": "Basic abc"},
        "garbage": {"Authorization": "Bearer not-a-jwt"},
        "expired": token(settings, "P2", exp=int(time.time()) - 10),
        "no-exp": {
            "Authorization": "Bearer "
            + jwt.encode({"sub": "P2"}, settings.player_token_secret, algorithm="HS256")
        },
        "wrong-key": {
            "Authorization": "Bearer "
            + jwt.encode(
                {"sub": "P2", "exp": int(time.time()) + 60},
                b"another-key-of-thirty-two-bytes!!",
                algorithm="HS256",
            )
        },
    }
    for name, headers in cases.items():
        reply = seeded.get(path, headers=headers)
        assert reply.status_code == 401, name
        assert reply.json()["error"] == "unauthorized", name
    other = seeded.get(path, headers=token(settings, "P1"))
    assert other.status_code == 403
    assert other.json()["error"] == "forbidden"
    assert seeded.get(path, headers=token(settings, "P2")).status_code == 200


def test_friend_list_writes_are_trusted_and_validated(seeded: SignedClient) -> None:
    assert put_friends(seeded, "P2", ["P1"], signed=False).status_code == 401
    for bad in (["P 1"], ["x" * 65], [""], [7], "P1"):
        reply = put_friends(seeded, "P2", bad)
        assert reply.status_code == 422, bad
        assert reply.json()["error"] == "invalid_request"
    too_many = put_friends(seeded, "P2", [f"F{i}" for i in range(1001)])
    assert too_many.status_code == 422
    # Ids follow the score events' rule: letters of any script, stored in NFC.
    decomposed = put_friends(seeded, "P2", ["Jose\u0301"])
    assert decomposed.json()["friends"] == ["Jos\u00e9"]


def test_friends_of_a_player_not_on_the_board(
    seeded: SignedClient, settings: Settings
) -> None:
    reply = friends_of(seeded, settings, "P7")
    assert reply.status_code == 404
    assert reply.json()["error"] == "player_not_found"
    bad = seeded.get("/v1/boards/daily:2026-13-45:na/players/P2/friends")
    assert bad.status_code == 404


def test_friends_read_normalises_the_path_id(
    api: SignedClient, settings: Settings
) -> None:
    # Issue 23: a decomposed "José" in the path was refused (403) with José's token.
    composed, decomposed = "Jos\u00e9", "Jose\u0301"
    for n, player in enumerate((decomposed, "Ana")):
        reply = api.post(
            "/v1/score-events",
            event(
                eventId=f"j{n}", playerId=player, matchId=f"j{n}", result={"points": 5}
            ),
        )
        assert reply.status_code == 200, reply.text
    assert put_friends(api, decomposed, ["Ana"]).status_code == 200
    for path_id in (composed, decomposed):
        reply = api.get(
            f"/v1/boards/{BOARD}/players/{path_id}/friends",
            headers=token(settings, composed),
        )
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["playerId"] == composed
        assert {e["playerId"] for e in body["entries"]} == {composed, "Ana"}


def test_friends_ties_follow_the_boards_first_achieved_order(
    settings: Settings, tmp_path: Path
) -> None:
    """On a first_achieved board, equal scores among friends stand in the board's
    order (who reached the score first), as on the board itself, not by player id;
    ordinal ranks follow it, live and in a generation."""
    cfg = first_achieved_settings(settings, tmp_path)
    with TestClient(create_app(cfg)) as client:
        api = SignedClient(client)
        clock = [time.time()]
        client.app.state.speed.clock = lambda: clock[0]
        for player in ("Z-first", "M-mid", "A-last"):
            reply = api.post(
                "/v1/score-events",
                event(
                    eventId=f"{player}-m1",
                    playerId=player,
                    matchId="m1",
                    result={"points": 30},
                ),
            )
            assert reply.json()["status"] == "accepted", reply.text
            clock[0] += 1
        assert put_friends(api, "M-mid", ["A-last", "Z-first"]).status_code == 200
        url = f"/v1/boards/{FA_BOARD}/players/M-mid/friends"
        headers = token(cfg, "M-mid")
        want = [("Z-first", 1), ("M-mid", 2), ("A-last", 3)]
        top = api.get(f"/v1/boards/{FA_BOARD}/top").json()["entries"]
        assert [e["playerId"] for e in top] == [p for p, _ in want]
        live = api.get(url, headers=headers, params={"ranking": "ordinal"}).json()
        assert live["basis"] == "live"
        assert [(e["playerId"], e["rank"]) for e in live["entries"]] == want
        competition = api.get(url, headers=headers).json()["entries"]
        assert [(e["playerId"], e["rank"]) for e in competition] == [
            ("Z-first", 1),
            ("M-mid", 1),
            ("A-last", 1),
        ]
    # The same order from a generation's achieved_ms column (reversed here: the
    # generation, not the player ids, decides).
    write_generation(
        cfg.segments_dir,
        1,
        {FA_BOARD: {"A-last": 30, "M-mid": 30, "Z-first": 30}},
        {"0": 0},
        achieved={FA_BOARD: {"A-last": 1_000, "M-mid": 2_000, "Z-first": 3_000}},
    )
    with TestClient(create_app(cfg)) as client:
        params = {"mode": "snapshot", "ranking": "ordinal"}
        body = client.get(url, headers=headers, params=params).json()
        assert body["basis"] == "snapshot", body
        assert [(e["playerId"], e["rank"]) for e in body["entries"]] == [
            ("A-last", 1),
            ("M-mid", 2),
            ("Z-first", 3),
        ]
