"""Issue 26 item 3, authenticated readers (API.md "Readers"): with LB_READ_AUTH=token
every read under /v1/boards and /v1/games needs a player or a reader token (401
``unauthorized`` otherwise, as the friends read answers), on every read path -- the
direct routes, FastAPI's own and unmatched paths alike; LB_READ_RATE_LIMIT spends a
token of the subject's bucket per read (429 with Retry-After); health, metrics and
the page stay open; and a cached answer never crosses a permission boundary."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
import redis
import redis.asyncio as aioredis
from fastapi.testclient import TestClient

from api.errors import Unauthorized
from api.main import create_app
from api.tokens import TokenVerifier, issue_player_token, issue_reader_token
from conf.settings import Settings, SettingsError, load_settings
from speed.readers import ReadLimiter, read_rate_key
from speed.server import free_port
from tests.support.clients import SignedClient, put_friends
from tests.support.settings import BACKENDS, base_settings
from tests.support.shadow import BOARD, flag, publish_hidden, seed

pytestmark = pytest.mark.integration
SEED = {"P1": 920, "P2": 900, "P3": 900, "P4": 880, "P5": 10}
# Every read path: the direct routes (top, rank, nearby, entries) and FastAPI's
# (the boards list, histogram, awards, friends), a path no route matches, games.
READS = [
    "/v1/boards",
    f"/v1/boards/{BOARD}/top",
    f"/v1/boards/{BOARD}/top?mode=snapshot",
    f"/v1/boards/{BOARD}/players/P2",
    f"/v1/boards/{BOARD}/players/P2?mode=approx",
    f"/v1/boards/{BOARD}/players/P2/nearby",
    f"/v1/boards/{BOARD}/entries",
    f"/v1/boards/{BOARD}/histogram",
    f"/v1/boards/{BOARD}/awards",
    f"/v1/boards/{BOARD}/players/P2/friends",
    "/v1/boards/no-such-board/anything",
    "/v1/games",
    "/v1/games/default/boards",
]


def token_settings(settings: Settings, tmp_path: Path, **overrides: Any) -> Settings:
    assert settings.redis_url is not None
    return base_settings(settings.redis_url, tmp_path, read_auth="token", **overrides)


def bearer(raw: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {raw}"}


def player(settings: Settings, player_id: str) -> dict[str, str]:
    return bearer(issue_player_token(settings.player_token_secret, player_id))


def reader(settings: Settings, name: str = "web") -> dict[str, str]:
    return bearer(issue_reader_token(settings.player_token_secret, name))


@pytest.fixture
def guarded(settings: Settings, tmp_path: Path) -> Iterator[SignedClient]:
    """An API with LB_READ_AUTH=token, the season board seeded through it."""
    with TestClient(create_app(token_settings(settings, tmp_path))) as client:
        api = SignedClient(client)
        seed(api, SEED)
        yield api


def refused(reply: Any, detail: str = "") -> None:
    assert reply.status_code == 401, reply.text
    body = reply.json()
    assert body["error"] == "unauthorized" and set(body) == {"error", "detail"}
    assert detail in body["detail"]
    assert reply.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.unit
def test_settings_are_validated_and_named() -> None:
    assert Settings().read_auth == "open"
    assert Settings().read_rate_limit_bucket is None
    with pytest.raises(SettingsError, match="LB_READ_AUTH must be open or token"):
        load_settings(read_auth="tokens")
    with pytest.raises(SettingsError, match="LB_READ_RATE_LIMIT must be"):
        load_settings(read_auth="token", read_rate_limit="lots")
    with pytest.raises(SettingsError, match="needs LB_READ_AUTH=token"):
        load_settings(read_rate_limit="10/1")
    limited = load_settings(read_auth="token", read_rate_limit="100/0.5")
    assert limited.read_rate_limit_bucket == (100, 0.5)


def test_open_reads_need_no_token(api: SignedClient, settings: Settings) -> None:
    seed(api, SEED)
    assert api.get(f"/v1/boards/{BOARD}/top").status_code == 200
    # An invalid token on an open read reads as none (as before).
    junk = api.get(f"/v1/boards/{BOARD}/players/P2", headers=bearer("not.a.jwt"))
    assert junk.status_code == 200


def test_every_read_path_needs_a_token(guarded: SignedClient) -> None:
    for path in READS:
        refused(guarded.get(path), "token is required")
        # HEAD is a read too.
        assert guarded.client.head(path).status_code == 401, path


def test_bad_tokens_are_refused(guarded: SignedClient, settings: Settings) -> None:
    secret = settings.player_token_secret
    now = int(time.time())
    other_key = b"another-key-of-at-least-32-bytes-length"
    good = issue_reader_token(secret, "web")
    header, payload, signature = good.split(".")
    flipped = signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")

    def signed(claims: dict[str, Any]) -> str:
        return "Bearer " + jwt.encode(claims, secret, algorithm="HS256")

    unsigned = jwt.encode({"sub": "P2", "exp": now + 60}, None, algorithm="none")

    cases = {
        "Basic dXNlcjpwdw==": "Bearer <JWT>",
        "Bearer ": "Bearer <JWT>",
        "Bearer not.a.jwt": "invalid token",
        f"Bearer {header}.{payload}.{flipped}": "invalid token",
        f"Bearer {issue_reader_token(other_key, 'web')}": "invalid token",
        signed({"sub": "P2", "exp": now - 5}): "expired",
        signed({"sub": "P2"}): "exp",
        signed({"exp": now + 60}): "sub",
        f"Bearer {unsigned}": "invalid token",
    }
    for authorization, detail in cases.items():
        for path in (f"/v1/boards/{BOARD}/top", f"/v1/boards/{BOARD}/histogram"):
            reply = guarded.get(path, headers={"Authorization": authorization})
            refused(reply, detail)


def test_a_remembered_token_still_expires(
    guarded: SignedClient, settings: Settings
) -> None:
    raw = issue_reader_token(settings.player_token_secret, "web", ttl_seconds=60)
    path = f"/v1/boards/{BOARD}/top"
    assert guarded.get(path, headers=bearer(raw)).status_code == 200
    # Its signature is not checked again, its exp is (the clock stepped past it).
    verifier = guarded.client.app.state.token_verifier  # type: ignore[attr-defined]
    verifier.clock = lambda: time.time() + 120
    refused(guarded.get(path, headers=bearer(raw)), "expired")


def test_player_and_reader_tokens_read(
    guarded: SignedClient, settings: Settings
) -> None:
    for headers in (player(settings, "P4"), reader(settings, "web")):
        top = guarded.get(f"/v1/boards/{BOARD}/top", headers=headers)
        assert top.status_code == 200, top.text
        assert [e["playerId"] for e in top.json()["entries"]][:2] == ["P1", "P2"]
        rank = guarded.get(f"/v1/boards/{BOARD}/players/P2", headers=headers)
        assert rank.status_code == 200 and rank.json()["score"] == 900
        near = guarded.get(f"/v1/boards/{BOARD}/players/P2/nearby", headers=headers)
        assert near.status_code == 200
        assert guarded.get("/v1/boards", headers=headers).status_code == 200
        # Past the gate, a route answers as without it.
        missing = guarded.get("/v1/boards/nope/top", headers=headers)
        assert missing.status_code == 404
        assert missing.json()["error"] == "board_not_found"


def test_friends_need_the_players_own_token(
    guarded: SignedClient, settings: Settings
) -> None:
    assert put_friends(guarded, "P2", ["P1", "P3"]).status_code == 200
    path = f"/v1/boards/{BOARD}/players/P2/friends"
    own = guarded.get(path, headers=player(settings, "P2"))
    assert own.status_code == 200, own.text
    assert [e["playerId"] for e in own.json()["entries"]] == ["P1", "P2", "P3"]
    for headers in (reader(settings, "web"), player(settings, "P3")):
        reply = guarded.get(path, headers=headers)
        assert reply.status_code == 403 and reply.json()["error"] == "forbidden"


def test_health_metrics_page_and_writes_stay_open(guarded: SignedClient) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/", "/web/app.js", "/docs"):
        assert guarded.get(path).status_code == 200, path
    # Writes are signed, not bearer-authenticated.
    seed(guarded, {"P9": 5})


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_the_rate_limit_counts_every_read_path_per_subject(
    settings: Settings, tmp_path: Path, redis_client: redis.Redis
) -> None:
    limited = token_settings(settings, tmp_path, read_rate_limit="4/600")
    with TestClient(create_app(limited)) as client:
        api = SignedClient(client)
        seed(api, SEED)
        web = reader(limited, "web")
        # Direct routes and FastAPI's spend from the one bucket of the subject.
        paths = [
            f"/v1/boards/{BOARD}/top",
            "/v1/boards",
            f"/v1/boards/{BOARD}/players/P2",
            f"/v1/boards/{BOARD}/histogram",
        ]
        for path in paths:
            assert api.get(path, headers=web).status_code != 429, path
        for path in paths:
            over = api.get(path, headers=web)
            assert over.status_code == 429, path
            assert over.json()["error"] == "rate_limited"
            assert set(over.json()) == {"error", "detail"}
            assert 1 <= int(over.headers["Retry-After"]) <= 600
        # Another subject has its own bucket, a player token too; the bucket is in
        # Redis, shared by every worker.
        assert api.get(paths[0], headers=reader(limited, "tv")).status_code == 200
        assert api.get(paths[0], headers=player(limited, "P2")).status_code == 200
        assert redis_client.exists(read_rate_key("reader:web")) == 1
        # No token: 401 before any bucket is spent; health stays unlimited.
        refused(api.get(paths[0]))
        assert all(api.get("/healthz").status_code == 200 for _ in range(10))
        # A bucket refills: one token every refillSeconds (the clock stepped).
        limiter = client.app.state.read_limiter  # type: ignore[attr-defined]
        limiter.clock = lambda: time.time() + 601
        assert api.get(paths[0], headers=web).status_code == 200
        assert api.get(paths[0], headers=web).status_code == 429


def test_cached_answers_keep_to_their_reader(
    settings: Settings, tmp_path: Path, redis_client: redis.Redis
) -> None:
    """A shadowed player's own view (cached per generation for the snapshot) is
    served to its own token only; a reader token is never a player's own read, even
    when a player bears its name (``reader:web`` is a valid player id)."""
    totals = {**SEED, "reader:web": 950}
    guarded = token_settings(settings, tmp_path)
    with TestClient(create_app(guarded)) as client:
        api = SignedClient(client)
        seed(api, totals)
        for shadowed in ("P1", "reader:web"):
            assert flag(api, shadowed, "shadow").json()["changed"] is True
        publish_hidden(guarded, redis_client, 1, totals, {"P1", "reader:web"})
        client.app.state.generations.refresh(force=True)  # type: ignore[attr-defined]
        others = [reader(guarded, "web"), reader(guarded, "tv"), player(guarded, "P2")]
        for mode in ("snapshot", "live"):
            for path in (
                f"/v1/boards/{BOARD}/players/P1?mode={mode}",
                f"/v1/boards/{BOARD}/players/P1/nearby?mode={mode}",
            ):
                # Twice each way round: the second read may come from the cache.
                for _ in range(2):
                    own = api.get(path, headers=player(guarded, "P1"))
                    assert own.status_code == 200, own.text
                    for headers in others:
                        reply = api.get(path, headers=headers)
                        assert reply.status_code == 404, (path, reply.text)
            web = api.get(
                f"/v1/boards/{BOARD}/players/reader:web?mode={mode}",
                headers=reader(guarded, "web"),
            )
            assert web.status_code == 404, web.text
        # Public answers are shared: the top list is the same for every reader.
        tops = {
            api.get(f"/v1/boards/{BOARD}/top", headers=h).content
            for h in [player(guarded, "P1"), *others]
        }
        assert len(tops) == 1


def test_reads_outlive_redis_under_the_rate_limit(tmp_path: Path) -> None:
    """The buckets are in Redis; while it is unreachable reads are not limited
    (they answer from what the API holds), not refused or 5xx."""
    down = base_settings(
        f"redis://127.0.0.1:{free_port()}",
        tmp_path,
        read_auth="token",
        read_rate_limit="1/600",
    )
    with TestClient(create_app(down)) as client:
        headers = reader(down, "web")
        for _ in range(3):
            assert client.get("/v1/boards", headers=headers).status_code == 200
        assert client.get("/v1/boards").status_code == 401


# ---------------------------------------------- what the gate costs (issue 26)


def test_remembered_tokens_are_the_most_recently_used_and_still_expire() -> None:
    """The verifier checks a token's signature once and remembers the LIMIT most
    recently used ones; a remembered token is refused from its exp on (at exp
    itself, as PyJWT), and one not yet valid (nbf) is not served from memory."""
    secret = b"k" * 32
    verifier = TokenVerifier(secret, limit=2)
    decoded: list[str] = []
    real = verifier._decode

    def counting(token: str) -> Any:
        decoded.append(token)
        return real(token)

    verifier._decode = counting  # type: ignore[method-assign]
    now = time.time()
    a, b, c = (issue_reader_token(secret, name) for name in "abc")
    for raw in (a, b, a, c, a, b):
        verifier.verify(f"Bearer {raw}")
    # a stayed in use (checked once); b was the least recently used when c came.
    assert decoded == [a, b, c, b] and len(verifier) == 2
    short = jwt.encode({"sub": "P1", "exp": int(now) + 30}, secret, "HS256")
    assert verifier.verify(f"Bearer {short}").subject == "P1"
    verifier.clock = lambda: int(now) + 29.999
    assert verifier.verify(f"Bearer {short}").player == "P1"
    for late in (int(now) + 30, int(now) + 31):
        verifier.clock = lambda late=late: late
        with pytest.raises(Unauthorized, match="expired"):
            verifier.verify(f"Bearer {short}")
    verifier.clock = time.time
    later = jwt.encode(
        {"sub": "P2", "exp": int(now) + 600, "nbf": int(now) + 300}, secret, "HS256"
    )
    with pytest.raises(Unauthorized):
        verifier.verify(f"Bearer {later}")
    with pytest.raises(Unauthorized):
        verifier.verify(f"Bearer {later}")  # never remembered as valid


def bucket_tokens(client: redis.Redis, subject: str) -> float:
    return float(client.hget(read_rate_key(subject), "t") or 0)


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_a_read_spends_its_token_in_its_own_round_trip(
    settings: Settings, tmp_path: Path, redis_client: redis.Redis
) -> None:
    """With LB_READ_RATE_LIMIT a read that goes to Redis takes its bucket's token
    in the same round trip (no round trip of the limiter's own); one that does not
    (the boards list) takes it with one of its own; each read spends exactly one."""
    limited = token_settings(settings, tmp_path, read_rate_limit="1000/86400")
    with TestClient(create_app(limited)) as client:
        api = SignedClient(client)
        seed(api, SEED)
        web = reader(limited, "web")
        limiter = client.app.state.read_limiter  # type: ignore[attr-defined]
        live = [
            f"/v1/boards/{BOARD}/players/P2",
            f"/v1/boards/{BOARD}/players/P3/nearby",
            f"/v1/boards/{BOARD}/players/P4?mode=approx",
        ]
        for path in live:  # warm: the scripts loaded (a NOSCRIPT goes alone)
            assert api.get(path, headers=web).status_code == 200
        before, trips = bucket_tokens(redis_client, "reader:web"), limiter.round_trips
        for path in live * 3:
            reply = api.get(path, headers=web)
            assert reply.status_code == 200, reply.text
        assert limiter.round_trips == trips
        spent = before - bucket_tokens(redis_client, "reader:web")
        assert 8.99 < spent <= 9  # nine tokens, less a few ms of refill
        before = bucket_tokens(redis_client, "reader:web")
        for _ in range(3):
            assert api.get("/v1/boards", headers=web).status_code == 200
        assert limiter.round_trips == trips + 3
        assert 2.99 < before - bucket_tokens(redis_client, "reader:web") <= 3


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_a_refused_subject_is_refused_without_redis_until_it_refills(
    settings: Settings, tmp_path: Path, redis_client: redis.Redis
) -> None:
    """Past its limit a subject gets 429 from its read's own round trip (the read's
    answer dropped), then from memory with the Retry-After Redis answers at the
    same moment, until the bucket holds a token again; other subjects are not
    affected."""
    limited = token_settings(settings, tmp_path, read_rate_limit="2/100")
    with TestClient(create_app(limited)) as client:
        api = SignedClient(client)
        seed(api, SEED)
        limiter = client.app.state.read_limiter  # type: ignore[attr-defined]
        t0 = time.time()
        limiter.clock = lambda: t0
        web = reader(limited, "web")
        path = f"/v1/boards/{BOARD}/players/P2"
        assert [api.get(path, headers=web).status_code for _ in range(2)] == [200] * 2
        trips = limiter.round_trips
        over = api.get(path, headers=web)
        assert over.status_code == 429 and over.json()["error"] == "rate_limited"
        assert over.headers["Retry-After"] == "100"
        # Asked in its round trip (the read's own), then not again.
        assert limiter.round_trips == trips
        assert "reader:web" in limiter._refused
        # Redis as a fresh limiter (no memory) sees it, against the memory's answer.
        fresh = ReadLimiter(client.app.state.speed.client, (2, 100))  # type: ignore[attr-defined]
        for offset in (0.0, 1.0, 40.2, 99.9):
            limiter.clock = fresh.clock = lambda offset=offset: t0 + offset
            local = api.get(path, headers=web)
            assert local.status_code == 429 and limiter.round_trips == trips
            wanted = client.portal.call(fresh.take, "reader:web")  # type: ignore[attr-defined]
            assert int(local.headers["Retry-After"]) == wanted > 0
        assert api.get(path, headers=reader(limited, "tv")).status_code == 200
        # Refilled: Redis is asked again, and the read answers.
        limiter.clock = lambda: t0 + 100.001
        assert api.get(path, headers=web).status_code == 200
        assert "reader:web" not in limiter._refused


def test_read_buckets_stay_off_the_aof(redis_client: redis.Redis) -> None:
    """A take changes the bucket in memory but writes nothing to the AOF (so with
    appendfsync always a read waits for no fsync): the buckets are soft state."""
    assert redis_client.config_get("appendonly")["appendonly"] == "yes"
    url = redis_client.connection_pool.connection_kwargs
    client = aioredis.Redis(host=url["host"], port=url["port"])
    limiter = ReadLimiter(client, (5, 100))

    async def takes() -> list[int]:
        try:
            return [await limiter.take("reader:web") for _ in range(6)]
        finally:
            await client.aclose()

    before = redis_client.info("persistence")["aof_current_size"]
    assert asyncio.run(takes()) == [0] * 5 + [100]
    assert redis_client.exists(read_rate_key("reader:web"))
    assert bucket_tokens(redis_client, "reader:web") < 1
    assert redis_client.info("persistence")["aof_current_size"] == before
