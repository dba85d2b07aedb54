"""Profiles: a trusted write of a player's display name and country, carried by the
ranked entries of every read (absent when unset), hidden with a shadowed player."""

from __future__ import annotations

import time
import unicodedata
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from redis.cluster import RedisCluster

from api.main import create_app
from api.tokens import issue_player_token
from conf.settings import Settings
from speed.partitions import Keys
from speed.profiles import countries
from speed.rebase import rebase
from tests.conftest import BACKENDS, SignedClient
from tests.support.clients import put_friends, put_profile
from tests.support.segments import write_generation
from tests.support.shadow import BOARD, SEED, flag, seed

pytestmark = pytest.mark.integration
MARKUP = "<img src=x onerror=alert(1)>Ana"


def bearer(settings: Settings, player: str) -> dict[str, str]:
    token = issue_player_token(settings.player_token_secret, player)
    return {"Authorization": f"Bearer {token}"}


def named(entries: list[dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    return {
        e["playerId"]: (e.get("displayName"), e.get("country"))
        for e in entries
        if "displayName" in e or "country" in e
    }


def publish(api: SignedClient, settings: Settings, client: redis.Redis) -> None:
    """A generation of SEED, with the speed layer rebased onto it."""
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


@pytest.mark.parametrize(
    "body",
    [
        {"displayName": ""},
        {"displayName": "x" * 33},
        {"displayName": "bell\x07"},
        {"displayName": "two\nlines"},
        {"displayName": "sep\u2028arator"},
        {"displayName": 7},
        {"country": "se"},
        {"country": "XX"},
        {"country": "SWE"},
        {"country": 46},
        {"displayName": "Ana", "handle": "ana"},
        ["Ana"],
    ],
)
def test_invalid_profiles_are_422(api: SignedClient, body: Any) -> None:
    reply = put_profile(api, "P1", body)
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"] == "invalid_request"


def test_profile_write_is_signed_and_normalized(api: SignedClient) -> None:
    assert (
        put_profile(api, "P1", {"displayName": "Ana"}, signed=False).status_code == 401
    )
    # 32 characters after NFC (64 code points before it).
    decomposed = unicodedata.normalize("NFD", "é") * 32
    reply = put_profile(api, "P1", {"displayName": decomposed, "country": "SE"})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"playerId": "P1", "displayName": "é" * 32, "country": "SE"}
    # The list of codes is the real one: every assigned code, not a handful.
    assert {"SE", "US", "JP", "BR", "ZA", "AQ"} <= countries()
    assert len(countries()) >= 249


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_entries_carry_profiles_live_and_snapshot(
    api: SignedClient, settings: Settings, redis_client: redis.Redis
) -> None:
    seed(api, SEED)
    assert (
        put_profile(api, "P1", {"displayName": MARKUP, "country": "SE"}).status_code
        == 200
    )
    assert put_profile(api, "P3", {"displayName": "Bo"}).status_code == 200
    want = {"P1": (MARKUP, "SE"), "P3": ("Bo", None)}
    base = f"/v1/boards/{BOARD}"

    top = api.get(f"{base}/top").json()
    assert named(top["entries"]) == want
    # Unset: absent, not null.
    p2 = next(e for e in top["entries"] if e["playerId"] == "P2")
    assert set(p2) == {"position", "rank", "playerId", "score"}
    me = api.get(f"{base}/players/P1").json()
    assert (me["displayName"], me["country"], me["rank"]) == (MARKUP, "SE", 1)
    assert "displayName" not in api.get(f"{base}/players/P2").json()
    nearby = api.get(f"{base}/players/P2/nearby", params={"radius": 1}).json()
    assert named(nearby["entries"]) == want
    assert put_friends(api, "P2", ["P1", "P3"]).status_code == 200
    friends = api.get(
        f"{base}/players/P2/friends", headers=bearer(settings, "P2")
    ).json()
    assert named(friends["entries"]) == want

    publish(api, settings, redis_client)
    snapshot = api.get(f"{base}/top", params={"mode": "snapshot"}).json()
    assert snapshot["basis"] == "snapshot"
    assert named(snapshot["entries"]) == want
    assert named(api.get(f"{base}/entries").json()["entries"]) == want
    # A cached snapshot answer still shows a profile changed after it was cached;
    # a profile is replaced whole, and an empty one removes it.
    assert put_profile(api, "P3", {"country": "NO"}).status_code == 200
    assert put_profile(api, "P1", {}).status_code == 200
    again = api.get(f"{base}/top", params={"mode": "snapshot"}).json()
    assert named(again["entries"]) == {"P3": (None, "NO")}
    assert named(api.get(f"{base}/entries").json()["entries"]) == {"P3": (None, "NO")}
    assert named(api.get(f"{base}/top").json()["entries"]) == {"P3": (None, "NO")}


def test_a_shadowed_players_profile_is_hidden(
    api: SignedClient, settings: Settings
) -> None:
    seed(api, SEED)
    assert (
        put_profile(api, "P1", {"displayName": "Shadowy", "country": "SE"}).status_code
        == 200
    )
    flag(api, "P1", "shadow")
    base = f"/v1/boards/{BOARD}"
    for path, params in (
        ("/top", {}),
        ("/top", {"mode": "snapshot"}),
        ("/players/P2/nearby", {"radius": 5}),
        ("/players/P1", {}),
        ("/players/P1/nearby", {}),
    ):
        reply = api.get(base + path, params=params)
        assert b"Shadowy" not in reply.content, (path, reply.text)
    assert put_friends(api, "P2", ["P1"]).status_code == 200
    friends = api.get(f"{base}/players/P2/friends", headers=bearer(settings, "P2"))
    assert b"Shadowy" not in friends.content
    # The player itself sees itself, as if present, with its profile.
    own = api.get(f"{base}/players/P1", headers=bearer(settings, "P1")).json()
    assert own["displayName"] == "Shadowy"
    flag(api, "P1", "restore")
    assert named(api.get(f"{base}/top").json()["entries"]) == {"P1": ("Shadowy", "SE")}


def test_another_worker_sees_a_profile_change_at_once(
    api: SignedClient, settings: Settings
) -> None:
    """Each worker keeps the profiles it read with their version; a write through
    another worker changes the version, so the next read there is current."""
    seed(api, SEED)
    top = f"/v1/boards/{BOARD}/top"
    with TestClient(create_app(settings)) as other:
        assert named(other.get(top).json()["entries"]) == {}
        assert put_profile(api, "P4", {"displayName": "Dee"}).status_code == 200
        assert named(other.get(top).json()["entries"]) == {"P4": ("Dee", None)}
        me = other.get(f"/v1/boards/{BOARD}/players/P4").json()
        assert me["displayName"] == "Dee"
        assert put_profile(api, "P4", {"displayName": "Dee2"}).status_code == 200
        assert named(other.get(top).json()["entries"]) == {"P4": ("Dee2", None)}


def servers(client: redis.Redis) -> list[redis.Redis]:
    """The client of each server: the one, or every node of a cluster."""
    if isinstance(client, RedisCluster):
        return [client.get_redis_connection(node) for node in client.get_nodes()]
    return [client]


def commands_read(client: redis.Redis) -> int:
    """How many GET and HMGET calls the servers have answered (the profiles' read)."""
    total = 0
    for server in servers(client):
        stats = server.info("commandstats")
        total += sum(
            int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("get", "hmget")
        )
    return total


def wait_subscribed(app: Any) -> None:
    watch = app.state.reads.profile_cache.watch
    deadline = time.monotonic() + 30
    while not watch.subscribed:
        assert time.monotonic() < deadline, "the profiles' watch never subscribed"
        time.sleep(0.05)


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_snapshot_reads_trust_kept_profiles_until_a_write_anywhere(
    api: SignedClient, settings: Settings, redis_client: redis.Redis
) -> None:
    """A snapshot read makes no round trip for profiles it has seen while the
    watch saw no write; a write through another worker, or the watch's connection
    lost, makes the next read current at once."""
    seed(api, SEED)
    assert put_profile(api, "P1", {"displayName": "Ana"}).status_code == 200
    publish(api, settings, redis_client)
    top = f"/v1/boards/{BOARD}/top"
    with TestClient(create_app(settings)) as other:
        wait_subscribed(other.app)
        first = other.get(top, params={"mode": "snapshot"}).json()
        assert first["basis"] == "snapshot"
        assert named(first["entries"]) == {"P1": ("Ana", None)}
        before = commands_read(redis_client)
        for _ in range(20):
            again = other.get(top, params={"mode": "snapshot"}).json()
            assert named(again["entries"]) == {"P1": ("Ana", None)}
        assert commands_read(redis_client) == before
        assert put_profile(api, "P1", {"displayName": "Ana2"}).status_code == 200
        now = other.get(top, params={"mode": "snapshot"}).json()
        assert named(now["entries"]) == {"P1": ("Ana2", None)}
        # The watch's connection gone: the next reads read, whatever the timing.
        for server in servers(redis_client):
            server.client_kill_filter(_type="pubsub")
        assert put_profile(api, "P1", {"displayName": "Ana3"}).status_code == 200
        now = other.get(top, params={"mode": "snapshot"}).json()
        assert named(now["entries"]) == {"P1": ("Ana3", None)}
        wait_subscribed(other.app)
        assert put_profile(api, "P1", {"country": "SE"}).status_code == 200
        now = other.get(top, params={"mode": "snapshot"}).json()
        assert named(now["entries"]) == {"P1": (None, "SE")}
