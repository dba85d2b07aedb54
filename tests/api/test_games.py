"""Games (API.md "Games", issue 26): two games with the same board ids and the same
player ids never see each other's data, through the game-scoped paths; the
unprefixed paths are the game ``default``; keys that name games write only those."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from api.tokens import issue_player_token
from conf.boards import BoardsFileError, load_boards
from tests.conftest import SignedClient, event
from tests.support.clients import put_friends
from tests.support.settings import OPEN_WINDOWS_BOARDS, base_settings

pytestmark = pytest.mark.integration

BOARD = "season:S4:global"
DAILY = "daily:2026-11-20:eu"


def games_yaml(*games: str) -> str:
    """A boards file listing ``games`` (each the open-windows default boards)."""
    body = "".join("    " + line + "\n" for line in OPEN_WINDOWS_BOARDS.splitlines())
    return "games:\n" + "".join(f"  - id: {g}\n{body}" for g in games)


@pytest.fixture
def settings(redis_url: str, redis_client: Any, tmp_path: Path) -> Any:
    path = tmp_path / "games.yaml"
    path.write_text(games_yaml("default", "arena"))
    return base_settings(
        redis_url,
        tmp_path,
        boards_file=path,
        hmac_keys="dev:dev-secret,ar:arena-secret@arena+duel",
    )


# Same eventIds, players and matches in both games, other points.
POINTS = {"default": {"P1": 10, "P2": 20}, "arena": {"P1": 300, "P2": 100}}


def post_games(api: SignedClient) -> None:
    for game, points in POINTS.items():
        for player, value in points.items():
            reply = api.post(
                f"/v1/games/{game}/score-events",
                event(eventId=f"E-{player}", playerId=player, result={"points": value}),
            )
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert body["status"] == "accepted", body
            boards = {b["board"]: b["total"] for b in body["boards"]}
            assert boards[BOARD] == value, body


def top(api: SignedClient, prefix: str, board: str, **params: Any) -> Any:
    reply = api.get(f"{prefix}/boards/{board}/top", params=params)
    assert reply.status_code == 200, reply.text
    return reply.json()


def scores(answer: dict[str, Any]) -> dict[str, int]:
    return {e["playerId"]: e["score"] for e in answer["entries"]}


def test_two_games_same_ids_are_isolated_live(api: SignedClient, settings: Any) -> None:
    post_games(api)
    for game, points in POINTS.items():
        prefix = f"/v1/games/{game}"
        for board in (BOARD, DAILY):
            answer = top(api, prefix, board)
            assert answer["board"] == board
            assert scores(answer) == points, (game, board)
            approx = top(api, prefix, board, mode="approx")
            assert approx["population"] == 2, (game, approx)
        rank = api.get(f"{prefix}/boards/{BOARD}/players/P2").json()
        assert rank["score"] == points["P2"], rank
        assert rank["rank"] == (1 if points["P2"] > points["P1"] else 2)
        near = api.get(f"{prefix}/boards/{BOARD}/players/P1/nearby").json()
        assert {e["playerId"]: e["score"] for e in near["entries"]} == points
    # The unprefixed paths are the game default.
    assert scores(top(api, "/v1", BOARD)) == POINTS["default"]
    # The same eventId and content again in a game: that game's duplicate.
    again = api.post(
        "/v1/games/arena/score-events",
        event(eventId="E-P1", playerId="P1", result={"points": 300}),
    ).json()
    assert again["status"] == "duplicate", again
    # A batch in arena with a new match of P2.
    batch = api.post(
        "/v1/games/arena/score-events:batch",
        {"events": [event(eventId="E-B", playerId="P2", matchId="M2")]},
    ).json()
    assert batch["results"][0]["status"] == "accepted", batch
    assert scores(top(api, "/v1/games/arena", BOARD)) == {"P1": 300, "P2": 130}
    assert scores(top(api, "/v1", BOARD)) == POINTS["default"]


def test_friends_rank_within_the_game(api: SignedClient, settings: Any) -> None:
    post_games(api)
    assert put_friends(api, "P1", ["P2"]).status_code == 200
    bearer = issue_player_token(settings.player_token_secret, "P1")
    for game, points in POINTS.items():
        reply = api.get(
            f"/v1/games/{game}/boards/{BOARD}/players/P1/friends",
            headers={"Authorization": f"Bearer {bearer}"},
        )
        assert reply.status_code == 200, reply.text
        assert {e["playerId"]: e["score"] for e in reply.json()["entries"]} == points


def test_games_listed_and_unknown_ones_refused(api: SignedClient) -> None:
    post_games(api)
    listed = api.get("/v1/games").json()
    assert [g["game"] for g in listed["games"]] == ["default", "arena"]
    boards = api.get("/v1/games/arena/boards").json()["boards"]
    assert BOARD in {b["board"] for b in boards}
    assert all("~" not in b["board"] for b in boards)
    for path in (
        f"/v1/games/nope/boards/{BOARD}/top",
        "/v1/games/nope/boards",
    ):
        reply = api.get(path)
        assert reply.status_code == 404, path
        assert reply.json()["error"] == "game_not_found"
    posted = api.post("/v1/games/nope/score-events", event())
    assert posted.status_code == 404
    assert posted.json()["error"] == "game_not_found"
    # The internal id of another game's board is no board of the game default.
    for path in (
        f"/v1/boards/arena~{BOARD}/top",
        f"/v1/games/arena/boards/arena~{BOARD}/top",
    ):
        reply = api.get(path)
        assert reply.status_code == 404, path
        assert reply.json()["error"] == "board_not_found"


def test_a_key_writes_only_the_games_it_names(api: SignedClient) -> None:
    arena_key = SignedClient(api.client, "ar", b"arena-secret")
    refused = arena_key.post("/v1/score-events", event())
    assert refused.status_code == 403
    assert refused.json()["error"] == "forbidden_game"
    refused = arena_key.post(
        "/v1/games/default/score-events:batch", {"events": [event()]}
    )
    assert refused.status_code == 403
    accepted = arena_key.post("/v1/games/arena/score-events", event())
    assert accepted.status_code == 200, accepted.text
    # The dev key names no game: it writes every game.
    assert api.post("/v1/score-events", event()).status_code == 200


def test_a_file_without_games_is_the_game_default(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    settings = base_settings(redis_url, tmp_path)
    with TestClient(create_app(settings)) as client:
        api = SignedClient(client)
        assert api.get("/v1/games").json()["games"][0]["game"] == "default"
        assert api.post("/v1/games/default/score-events", event()).status_code == 200
        assert scores(top(api, "/v1", BOARD)) == {"P2": 30}
        assert scores(top(api, "/v1/games/default", BOARD)) == {"P2": 30}
        assert api.get(f"/v1/games/arena/boards/{BOARD}/top").status_code == 404


@pytest.mark.parametrize(
    "text, field",
    [
        ("games:\n  - id: Arena\n", "games.0.id"),
        ("games:\n  - id: a\n  - id: a\n", "game ids must be distinct"),
        ("regions: [eu]\ngames:\n  - id: a\n", "every key goes under"),
        ("games:\n  - id: a\n    games: [{id: b}]\n", "cannot list games"),
    ],
)
def test_bad_games_are_refused(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(BoardsFileError, match=field):
        load_boards(path)
