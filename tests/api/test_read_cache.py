"""Caching with honest labels (issue 13): snapshot answers cached per generation, live
top lists per board with single flight; a cached live answer is either the current one
or, with LB_LIVE_CACHE_MS, carries the asOf positions it really includes. Approximate
rank takes one Redis round trip."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from redis.asyncio.connection import AbstractConnection

import speed.connection
import speed.live
from api.main import create_app
from api.reads import ReadService
from conf.settings import Settings
from tests.conftest import BACKENDS, SignedClient, event
from tests.support.segments import write_generation
from tests.support.shadow import expected_top, flag, seed

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
SEED = {"P1": 920, "P2": 900, "P3": 900, "P4": 880}


def reads_of(api: SignedClient) -> ReadService:
    return api.client.app.state.reads  # type: ignore[no-any-return]


def top(api: SignedClient) -> Any:
    reply = api.get(f"/v1/boards/{BOARD}/top")
    assert reply.status_code == 200, reply.text
    return reply


def post(api: SignedClient, player: str, points: int, n: int) -> dict[str, Any]:
    reply = api.post(
        "/v1/score-events",
        event(
            eventId=f"x{n}", playerId=player, matchId=f"x{n}", result={"points": points}
        ),
    )
    assert reply.status_code == 200, reply.text
    return reply.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_live_top_is_reused_only_while_it_is_current(api: SignedClient) -> None:
    seed(api, SEED)
    reads = reads_of(api)
    first = top(api)
    computed = reads.tops.computed
    again = top(api)
    assert again.content == first.content
    assert reads.tops.computed == computed  # served from the cache
    # A new event: the cached answer is no longer current, the next one includes it.
    result = post(api, "P9", 5000, 1)
    fresh = top(api).json()
    assert reads.tops.computed == computed + 1
    assert fresh["entries"] == expected_top({**SEED, "P9": 5000})
    assert fresh["asOf"][str(result["partition"])] >= result["position"]
    # A flag change (no log position moves) invalidates it too.
    assert flag(api, "P9", "shadow").json()["changed"] is True
    assert top(api).json()["entries"] == expected_top(SEED)


@pytest.fixture
def ttl_api(settings: Settings) -> Iterator[SignedClient]:
    with TestClient(
        create_app(settings.model_copy(update={"live_cache_ms": 60_000}))
    ) as c:
        yield SignedClient(c)


def test_a_stale_cached_answer_is_labelled_with_what_it_includes(
    ttl_api: SignedClient, redis_client: redis.Redis
) -> None:
    api = ttl_api
    seed(api, SEED)
    cached = top(api)
    body = cached.json()
    result = post(api, "P9", 5000, 1)
    served = top(api)
    # Within LB_LIVE_CACHE_MS: the same answer, not checked against Redis...
    assert served.content == cached.content
    # ...and its label is true: it predates the new event's position, and it is
    # exactly the board as of the positions it names.
    assert body["asOf"][str(result["partition"])] < result["position"]
    assert body["entries"] == expected_top(SEED)
    # Once the TTL has passed (shortened here), the next read checks and recomputes.
    reads_of(api).tops.ttl = 0
    now = top(api).json()
    assert now["entries"] == expected_top({**SEED, "P9": 5000})
    assert now["asOf"][str(result["partition"])] >= result["position"]


def test_concurrent_misses_share_one_computation(api: SignedClient) -> None:
    seed(api, SEED)
    reads = reads_of(api)

    async def many() -> list[bytes]:
        reads.tops.clear()
        answers = await asyncio.gather(
            *(reads.top(BOARD, 100, "live", None) for _ in range(25))
        )
        return [a.body for a in answers]

    before = reads.tops.computed
    bodies = api.client.portal.call(many)
    assert reads.tops.computed == before + 1
    assert len(set(bodies)) == 1


def test_snapshot_answers_are_cached_per_generation(
    api: SignedClient, settings: Settings
) -> None:
    write_generation(settings.segments_dir, 1, {BOARD: SEED})
    reads = reads_of(api)
    params = {"mode": "snapshot", "limit": 3}
    first = api.get(f"/v1/boards/{BOARD}/top", params=params)
    generation = reads.registry.get(None)
    cache = reads.answers(generation)
    hits = cache.hits
    second = api.get(f"/v1/boards/{BOARD}/top", params=params)
    assert second.content == first.content
    assert cache.hits == hits + 1
    # Another generation has its own answers.
    write_generation(settings.segments_dir, 2, {BOARD: {**SEED, "P5": 1000}})
    reads.registry.refresh(force=True)
    newer = api.get(f"/v1/boards/{BOARD}/top", params=params).json()
    assert newer["generation"]["id"] == "g2"
    assert newer["entries"][0]["playerId"] == "P5"


class RoundTrips:
    """Counts the round trips a service makes to Redis: every write of commands to
    a connection (a command, a pipeline, a batch of EVALSHAs) is one."""

    def __init__(self, reads: ReadService, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        send = AbstractConnection.send_packed_command

        async def counted_send(conn: Any, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await send(conn, *args, **kwargs)

        monkeypatch.setattr(AbstractConnection, "send_packed_command", counted_send)

        async def counted_write(conn: Any, packed: bytes) -> None:
            # speed.connection's batches write past send_packed_command (no task
            # per write): one count, the write through redis-py's own method.
            self.count += 1
            await send(conn, packed)

        monkeypatch.setattr(speed.connection, "_write", counted_write)

    def during(self, api: SignedClient, path: str, params: dict[str, str]) -> int:
        start = self.count
        reply = api.get(path, params=params)
        assert reply.status_code == 200, reply.text
        return self.count - start


def without_held_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """No partition's changed-set read whole (speed/live.py ``HeldPart``): that
    round trip, once per partition and stamp after enough reads, is
    tests/speed/test_live_held.py's; here each read's own round trips are counted."""
    monkeypatch.setattr(speed.live.LiveReader, "_stable", lambda *_: [])


def test_approximate_rank_takes_one_round_trip(
    api: SignedClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(api, SEED)
    approx = {"mode": "approx"}
    # Redis learns the scripts on first use (one extra load, once per server); the
    # first approximate read also reads the board's histogram.
    assert api.get(f"/v1/boards/{BOARD}/players/P1", params=approx).status_code == 200
    trips = RoundTrips(reads_of(api), monkeypatch)
    path = f"/v1/boards/{BOARD}/players/P3"
    exact = trips.during(api, path, {})
    # The histogram read for P1 is still the board's: stamp and total only.
    assert trips.during(api, path, approx) == 1
    assert trips.during(api, path, approx) == 1
    assert exact > 1
    # The player scores: the stamp moved, so the next read reads the histogram
    # again (one more trip), and the one after needs one trip again.
    post(api, "P3", 7, 2)
    start = trips.count
    reply = api.get(path, params=approx).json()
    assert trips.count - start == 2
    assert reply["score"] == 907
    assert trips.during(api, path, approx) == 1


def test_lb_up_defaults_to_one_worker_per_core() -> None:
    assert Settings().api_workers == len(os.sched_getaffinity(0))


def test_exact_live_rank_takes_one_round_trip_when_its_guess_holds(
    api: SignedClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(api, SEED)
    without_held_sets(monkeypatch)
    # The first live read of a dataset sets its epoch (once per dataset) and
    # opens the connections: a read of another player first.
    assert api.get(f"/v1/boards/{BOARD}/players/P1").status_code == 200
    trips = RoundTrips(reads_of(api), monkeypatch)
    path = f"/v1/boards/{BOARD}/players/P3"
    # Nothing known yet (no generation, never read): the standing, then the counts.
    assert trips.during(api, path, {}) == 2
    # Its standing as last read is the guess, verified with the counts.
    assert trips.during(api, path, {}) == 1
    # The player scores: the guess is wrong once (the answer is still exact).
    post(api, "P3", 7, 2)
    start = trips.count
    reply = api.get(path).json()
    assert trips.count - start == 2
    assert (reply["score"], reply["rank"]) == (907, 2)
    assert trips.during(api, path, {}) == 1


def test_approximate_rank_under_a_stream_of_writes(api: SignedClient) -> None:
    """Each write moves the board's stamp: a kept histogram that served no read
    before the next write is not read again on every read (the partitions' trees
    answer meanwhile), and once writes stop the reads are served from a histogram
    read again. Every answer names the live score and population either way."""
    from api.reads import APPROX_HITS, APPROX_MISSES, HISTOGRAM_BACKOFF

    seed(api, SEED)
    path = f"/v1/boards/{BOARD}/players/P4"
    approx = {"mode": "approx"}
    score = SEED["P4"]
    misses = APPROX_MISSES._value.get()
    for n in range(HISTOGRAM_BACKOFF + 4):
        post(api, "P4", 1, 100 + n)
        score += 1
        reply = api.get(path, params=approx).json()
        assert (reply["score"], reply["population"]) == (score, len(SEED))
        assert 1 <= reply["rank"] <= reply["rank"] + reply["errorBound"] <= len(SEED)
    # Read once with the histogram (the first), then a miss per write but the
    # ones that read the tables again.
    assert APPROX_MISSES._value.get() - misses >= HISTOGRAM_BACKOFF
    hits = APPROX_HITS._value.get()
    for _ in range(HISTOGRAM_BACKOFF + 2):
        reply = api.get(path, params=approx).json()
        assert reply["score"] == score
    # Writes stopped: within the back-off the tables are read again and kept.
    assert APPROX_HITS._value.get() - hits >= 2


def test_live_nearby_takes_one_round_trip_when_its_guess_holds(
    api: SignedClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window around the guessed standing is read with the rank's counts."""
    seed(api, SEED)
    without_held_sets(monkeypatch)
    params = {"radius": "1"}
    # Redis learns the scripts on first use (loads, once per server); the API
    # reads the profiles of the players it has not seen yet once (one HMGET), so
    # the warm-up sees every player.
    warm = api.get(f"/v1/boards/{BOARD}/players/P1/nearby", params={"radius": "5"})
    assert warm.status_code == 200
    trips = RoundTrips(reads_of(api), monkeypatch)
    path = f"/v1/boards/{BOARD}/players/P3/nearby"
    # Nothing known yet: the standing, then the counts with the window.
    assert trips.during(api, path, params) == 2
    assert trips.during(api, path, params) == 1
    reply = api.get(path, params=params).json()
    assert [(e["playerId"], e["rank"]) for e in reply["entries"]] == [
        ("P2", 2),
        ("P3", 2),
        ("P4", 4),
    ]
    # The player scores: the guess is wrong once, the answer still exact.
    post(api, "P3", 30, 3)
    start = trips.count
    reply = api.get(path, params=params).json()
    assert trips.count - start == 2
    assert [(e["playerId"], e["score"], e["rank"]) for e in reply["entries"]] == [
        ("P3", 930, 1),
        ("P1", 920, 2),
    ]
    assert trips.during(api, path, params) == 1


def _padded(cursor: str, **extra: Any) -> str:
    import base64

    import orjson

    data = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw = orjson.dumps({**data, **extra})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_a_cursor_with_an_unknown_field_is_refused(
    api: SignedClient, settings: Settings
) -> None:
    # Issue 23 item 7: padded cursors were accepted, each a new cache key.
    write_generation(settings.segments_dir, 1, {BOARD: SEED})
    page = api.get(f"/v1/boards/{BOARD}/entries", params={"limit": 1}).json()
    cursor = page["cursors"]["after"]
    assert (
        api.get(f"/v1/boards/{BOARD}/entries", params={"cursor": cursor}).status_code
        == 200
    )
    padded = api.get(
        f"/v1/boards/{BOARD}/entries", params={"cursor": _padded(cursor, x="y" * 100)}
    )
    assert padded.status_code == 422, padded.text
    assert padded.json()["error"] == "invalid_request"
    assert padded.json()["field"] == "cursor"


def test_the_snapshot_cache_is_bounded_by_keys_and_bytes() -> None:
    from api.reads import Answer, SnapshotCache

    cache = SnapshotCache(budget=1 << 20, max_entries=100)
    for n in range(5000):
        cache.put(("entries", BOARD, ("P" * 200, n), 10), Answer(b"{}", None))
    assert len(cache) == 100
    assert cache.size <= cache.budget
    # Keys count against the byte budget too: 2 KB keys with tiny answers.
    small = SnapshotCache(budget=1 << 20, max_entries=100_000)
    for n in range(5000):
        small.put(("rank", BOARD, f"{n:0>2000}"), Answer(b"{}", None))
    assert small.size <= small.budget
    assert len(small) < 1000


def test_distinct_page_reads_keep_the_generation_cache_bounded(
    api: SignedClient, settings: Settings
) -> None:
    write_generation(settings.segments_dir, 1, {BOARD: SEED})
    reads = reads_of(api)
    cache = reads.answers(reads.registry.get(None))
    cache.max_entries = 50
    for n in range(200):
        reply = api.get(f"/v1/boards/{BOARD}/entries", params={"limit": 1 + n})
        assert reply.status_code == 200, reply.text
    assert len(cache) == 50


def test_an_award_cursor_with_an_unknown_field_is_refused() -> None:
    from api.errors import InvalidRequest
    from api.reads import award_cursor, decode_award_cursor

    cursor = award_cursor(BOARD, 1, 2, "after")
    assert decode_award_cursor(cursor, BOARD)["o"] == 2
    with pytest.raises(InvalidRequest):
        decode_award_cursor(_padded(cursor, pad="x" * 50), BOARD)


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_a_flag_moves_the_stamp_in_its_own_script(
    api: SignedClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flags version moves inside flag_player.lua, not in a command after it:
    no read in between (nor a connection lost in between) can keep an answer
    computed before the flag current. Here every command the flag request sends
    after its script fails, as if the API had lost Redis right after the script:
    the shadow is committed, so the cached top list must not be served again."""
    seed(api, SEED)
    reads = reads_of(api)
    assert top(api).json()["entries"] == expected_top(SEED)  # cached now
    client_type = type(api.client.app.state.speed.client)

    async def lost(*_: Any, **__: Any) -> Any:
        raise redis.exceptions.ConnectionError("lost after the script")

    with monkeypatch.context() as patched:
        # Every write the flag route could send after its script (the old version
        # bump, the audit record).
        for name in ("incr", "xadd"):
            patched.setattr(client_type, name, lost)
        reply = flag(api, "P4", "shadow")
        assert reply.status_code in (200, 503), reply.text
    computed = reads.tops.computed
    assert top(api).json()["entries"] == expected_top(
        {p: s for p, s in SEED.items() if p != "P4"}
    )
    assert reads.tops.computed == computed + 1
    # A retried flag is a no-op, and the answer stays the one without P4.
    assert flag(api, "P4", "shadow").json()["changed"] is False
    assert top(api).json()["entries"] == expected_top(
        {p: s for p, s in SEED.items() if p != "P4"}
    )
