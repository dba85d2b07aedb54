"""Shadow removal: a shadowed player vanishes from every public answer at once (live),
sees itself as if present, and comes back with the same (updated) score."""

from __future__ import annotations

import orjson
import pytest
import redis

from api.tokens import issue_player_token
from conf.settings import Settings
from speed.audit import AUDIT_STREAM
from speed.partitions import Keys
from speed.rebase import rebase
from tests.conftest import SignedClient, event
from tests.support.clients import put_friends
from tests.support.segments import write_generation
from tests.support.shadow import (
    BOARD,
    SEED,
    flag,
    public_answers,
    seed,
)

pytestmark = pytest.mark.integration


def bearer(settings: Settings, player: str) -> dict[str, str]:
    token = issue_player_token(settings.player_token_secret, player)
    return {"Authorization": f"Bearer {token}"}


def hidden_from_anonymous(api: SignedClient, player: str) -> None:
    """Without a token (or with an invalid one) a shadowed player's rank, in every
    mode, and nearby answer 404 player_not_found, as for any other reader."""
    base = f"/v1/boards/{BOARD}/players/{player}"
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        for path, params in (
            ("", {"mode": "live"}),
            ("", {"mode": "approx"}),
            ("/nearby", {"radius": 2}),
        ):
            reply = api.get(base + path, params=params, headers=headers)
            assert reply.status_code == 404, (path, params, headers, reply.text)
            assert reply.json()["error"] == "player_not_found"


def test_shadow_and_restore_live(
    api: SignedClient, settings: Settings, redis_client: redis.Redis
) -> None:
    seed(api, SEED)
    public_answers(api, SEED)
    assert flag(api, "P1", "shadow").json()["changed"] is True
    visible = {p: s for p, s in SEED.items() if p != "P1"}
    public_answers(api, visible)
    # The player's own read (its token) answers as if present; an anonymous read
    # is public: not found, rank and nearby (issue 23).
    own = api.get(f"/v1/boards/{BOARD}/players/P1", headers=bearer(settings, "P1"))
    assert (own.json()["score"], own.json()["rank"]) == (920, 1)
    assert (own.json()["population"], own.json()["topPercent"]) == (5, 20.0)
    hidden_from_anonymous(api, "P1")
    # Its scores keep counting while hidden.
    up = api.post(
        "/v1/score-events",
        event(eventId="up", playerId="P1", matchId="up", result={"points": 100}),
    )
    assert up.json()["status"] == "accepted"
    public_answers(api, visible)
    # Friends: hidden from others' lists, present in its own.
    put_friends(api, "P2", ["P1", "P3"])
    put_friends(api, "P1", ["P2"])
    secret = settings.player_token_secret
    for player, members in (("P2", ["P2", "P3"]), ("P1", ["P1", "P2"])):
        body = api.get(
            f"/v1/boards/{BOARD}/players/{player}/friends",
            headers={"Authorization": f"Bearer {issue_player_token(secret, player)}"},
        ).json()
        assert [e["playerId"] for e in body["entries"]] == members
    # Idempotent; a game-server key may not flag.
    assert flag(api, "P1", "shadow").json()["changed"] is False
    game = api.post("/v1/admin/players/P1/flags", {"action": "restore", "reason": "x"})
    assert game.status_code == 403
    bad = flag(api, "P1", "ban")
    assert bad.status_code == 422 and bad.json()["field"] == "action"

    assert flag(api, "P1", "restore", "cleared").json()["changed"] is True
    public_answers(api, {**SEED, "P1": 1020})
    audit = [orjson.loads(f[b"r"]) for _, f in redis_client.xrange(AUDIT_STREAM)]
    flags = [
        (a["action"], a["subject"], a["reason"], a["actor"], a["details"]["changed"])
        for a in audit
        if a["action"].startswith("flag.")
    ]
    assert flags == [
        ("flag.shadow", "P1", "review", "admin", True),
        ("flag.shadow", "P1", "review", "admin", False),
        ("flag.restore", "P1", "cleared", "admin", True),
    ]


def test_shadow_hides_a_player_only_in_the_base_generation(
    api: SignedClient, settings: Settings, redis_client: redis.Redis
) -> None:
    """P1 unchanged since the generation: it is counted through the base rows, and
    shadowing must take it out of those too (live at once)."""
    seed(api, SEED)
    boundary = {
        str(p): int(redis_client.get(Keys(p).position) or 0)
        for p in range(settings.partitions)
    }
    for p in range(settings.partitions):
        redis_client.set(Keys(p).landed, boundary[str(p)])
    write_generation(settings.segments_dir, 1, {BOARD: SEED}, boundary, bucket_target=2)
    registry = api.client.app.state.generations
    registry.refresh(force=True)
    report = rebase(redis_client, registry.by_number(1), settings.partitions)
    assert set(report.partitions.values()) == {"ok"}
    # The premise: nobody has changed since the base generation.
    assert all(
        redis_client.zcard(Keys(p).changed_live(BOARD)) == 0
        for p in range(settings.partitions)
    )
    public_answers(api, SEED)
    assert flag(api, "P1", "shadow").json() == {
        "playerId": "P1",
        "flag": "shadow",
        "changed": True,
        "boards": 10,
    }
    public_answers(api, {p: s for p, s in SEED.items() if p != "P1"})
    own = api.get(f"/v1/boards/{BOARD}/players/P1", headers=bearer(settings, "P1"))
    assert (own.json()["score"], own.json()["rank"]) == (920, 1)
    assert own.json()["population"] == 5
    hidden_from_anonymous(api, "P1")
    flag(api, "P1", "restore")
    public_answers(api, SEED)
