"""Issue 10, read path: a shadowed player sees itself in its own reads (its player
token) in every mode (live, snapshot, approximate, the degraded fallback, friends), as
if it were present; a read carrying another player's token, an invalid token or none
does not see it (issue 23: an anonymous read is public, not the player's own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from api.main import create_app
from api.tokens import issue_player_token
from conf.settings import Settings
from speed.server import RedisServer
from tests.conftest import OPEN_WINDOWS_BOARDS, SignedClient
from tests.support.clients import put_friends
from tests.support.redis_servers import own_server
from tests.support.shadow import admin, expected_top, flag, publish_hidden, seed

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
SEED = {"P1": 920, "P2": 900, "P3": 900, "P4": 880, "P5": 10}
AS_IF_PRESENT = expected_top(SEED)


def publish(settings: Settings, client: redis.Redis, number: int) -> None:
    """A generation as the batch layer writes it with P1 shadowed: P1 off the public
    rows, in the hidden side file (serving's writer)."""
    publish_hidden(settings, client, number, SEED, {"P1"})


def bearer(settings: Settings, player: str) -> dict[str, str]:
    token = issue_player_token(settings.player_token_secret, player)
    return {"Authorization": f"Bearer {token}"}


def own_rank_ok(body: dict[str, Any]) -> None:
    assert (body["playerId"], body["score"], body["population"]) == ("P1", 920, 5)
    assert body["rank"] == 1 and body["topPercent"] == 20.0


@pytest.fixture
def shadowed(
    api: SignedClient, settings: Settings, redis_client: redis.Redis
) -> SignedClient:
    seed(api, SEED)
    assert flag(api, "P1", "shadow").json()["changed"] is True
    publish(settings, redis_client, 1)
    api.client.app.state.generations.refresh(force=True)
    return api


@pytest.mark.parametrize("mode", ["live", "snapshot"])
def test_own_rank_and_nearby(
    shadowed: SignedClient, settings: Settings, mode: str
) -> None:
    api = shadowed
    headers = bearer(settings, "P1")
    rank = api.get(
        f"/v1/boards/{BOARD}/players/P1", params={"mode": mode}, headers=headers
    )
    assert rank.status_code == 200, rank.text
    own_rank_ok(rank.json())
    assert rank.json()["position"] == 1
    near = api.get(
        f"/v1/boards/{BOARD}/players/P1/nearby",
        params={"mode": mode, "radius": 2},
        headers=headers,
    )
    assert near.status_code == 200, near.text
    body = near.json()
    assert body["basis"] == mode and body["population"] == 5
    assert body["entries"] == AS_IF_PRESENT[:3]
    # Someone else's view, or no token at all: P1 is not on the board.
    for view in (bearer(settings, "P2"), {}):
        for path in ("", "/nearby"):
            other = api.get(
                f"/v1/boards/{BOARD}/players/P1{path}",
                params={"mode": mode},
                headers=view,
            )
            assert other.status_code == 404, (path, view, other.text)
            assert other.json()["error"] == "player_not_found"
    # Public answers stay without P1.
    top = api.get(f"/v1/boards/{BOARD}/top", params={"mode": mode}).json()
    assert "P1" not in [e["playerId"] for e in top["entries"]]
    assert top["population"] == 4


def test_snapshot_nearby_puts_the_hidden_player_back_in_place(
    shadowed: SignedClient, settings: Settings
) -> None:
    """Below the hidden player, positions move one down and a lower score's rank
    one down; cursors still point into the public rows."""
    body = shadowed.get(
        f"/v1/boards/{BOARD}/players/P1/nearby",
        params={"mode": "snapshot", "radius": 5},
        headers=bearer(settings, "P1"),
    ).json()
    assert body["entries"] == AS_IF_PRESENT
    assert body["cursors"] == {"before": None, "after": None}
    page = shadowed.get(
        f"/v1/boards/{BOARD}/players/P1/nearby",
        params={"mode": "snapshot", "radius": 1},
        headers=bearer(settings, "P1"),
    ).json()
    assert page["entries"] == AS_IF_PRESENT[:2]
    assert page["cursors"]["after"] is not None
    after = shadowed.get(
        f"/v1/boards/{BOARD}/entries",
        params={"cursor": page["cursors"]["after"], "limit": 10},
    ).json()
    # The public page after P2: P1 is hidden there.
    assert [e["playerId"] for e in after["entries"]] == ["P3", "P4", "P5"]


def test_own_approximate_rank(shadowed: SignedClient, settings: Settings) -> None:
    api = shadowed
    reply = api.get(
        f"/v1/boards/{BOARD}/players/P1",
        params={"mode": "approx"},
        headers=bearer(settings, "P1"),
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert (body["basis"], body["exactness"]) == ("histogram", "approximate")
    assert (body["score"], body["population"]) == (920, 5)
    # The true rank as if present (1) is within the stated bound.
    assert body["rank"] <= 1 <= body["rank"] + body["errorBound"]
    for view in (bearer(settings, "P2"), {}):
        other = api.get(
            f"/v1/boards/{BOARD}/players/P1", params={"mode": "approx"}, headers=view
        )
        assert other.status_code == 404, (view, other.text)
    # Others' approximate answers do not count P1.
    p5 = api.get(f"/v1/boards/{BOARD}/players/P5", params={"mode": "approx"}).json()
    assert p5["population"] == 4


def test_own_friends_snapshot(shadowed: SignedClient, settings: Settings) -> None:
    put_friends(shadowed, "P1", ["P2"])
    for mode in ("live", "snapshot"):
        body = shadowed.get(
            f"/v1/boards/{BOARD}/players/P1/friends",
            params={"mode": mode},
            headers=bearer(settings, "P1"),
        )
        assert body.status_code == 200, body.text
        assert [e["playerId"] for e in body.json()["entries"]] == ["P1", "P2"]


def test_a_bad_token_on_a_public_read_reads_as_none(
    shadowed: SignedClient, settings: Settings
) -> None:
    """Public reads need no token: an invalid one is ignored, not a 401, and reads
    as none: a public read, which cannot unmask a shadowed player."""
    reply = shadowed.get(
        f"/v1/boards/{BOARD}/players/P2", headers={"Authorization": "Bearer nope"}
    )
    assert reply.status_code == 200, reply.text
    hidden = shadowed.get(
        f"/v1/boards/{BOARD}/players/P1", headers={"Authorization": "Bearer nope"}
    )
    assert hidden.status_code == 404, hidden.text
    assert hidden.json()["error"] == "player_not_found"
    # Another player's valid token still hides P1.
    other = shadowed.get(
        f"/v1/boards/{BOARD}/players/P1", headers=bearer(settings, "P3")
    )
    assert other.status_code == 404


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = own_server(tmp_path / "redis")
    yield server
    server.stop()


def test_own_reads_while_redis_is_down(own_redis: RedisServer, tmp_path: Path) -> None:
    boards_file = tmp_path / "boards.yaml"
    boards_file.write_text(OPEN_WINDOWS_BOARDS)
    settings = Settings(
        redis_url=own_redis.url,
        data_dir=tmp_path / "lb",
        partitions=4,
        rate_limit="off",
        boards_file=boards_file,
    )
    client = redis.Redis.from_url(own_redis.url)
    with TestClient(create_app(settings)) as test_client:
        api = SignedClient(test_client)
        seed(api, SEED)
        assert (
            admin(api)
            .post("/v1/admin/players/P1/flags", {"action": "shadow", "reason": "r"})
            .json()["changed"]
        )
        publish(settings, client, 1)
        test_client.app.state.generations.refresh(force=True)
        client.close()
        own_redis.stop()
        own = bearer(settings, "P1")
        for mode in ("live", "approx"):
            rank = api.get(
                f"/v1/boards/{BOARD}/players/P1", params={"mode": mode}, headers=own
            )
            assert rank.status_code == 200, rank.text
            body = rank.json()
            assert body["liveLayer"] == "unavailable"
            assert rank.headers["X-Live-Layer"] == "unavailable"
            own_rank_ok(body)
        near = api.get(
            f"/v1/boards/{BOARD}/players/P1/nearby",
            params={"radius": 2},
            headers=own,
        )
        assert near.status_code == 200, near.text
        assert near.json()["entries"] == AS_IF_PRESENT[:3]
        assert near.json()["liveLayer"] == "unavailable"
        # Not the player's own read (another's token, or none): not answered from
        # the hidden side file.
        for view in (bearer(settings, "P2"), {}):
            other = api.get(f"/v1/boards/{BOARD}/players/P1", headers=view)
            assert other.status_code == 503, (view, other.text)
            other = api.get(f"/v1/boards/{BOARD}/players/P1/nearby", headers=view)
            assert other.status_code == 503, (view, other.text)
