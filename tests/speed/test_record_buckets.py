"""Dedupe and contribution records as fields of bucket hashes (speed/records.py),
on a real Redis: a redelivery among many records of one bucket gets its saved
result, a reused eventId with other content is a conflict, a correction finds its
contribution record across record epochs, and a record costs under 200 bytes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from conf.boards import load_boards
from conf.rules import default_registry
from conf.settings import Settings
from speed.connection import async_client
from speed.events import NormalizedEvent, validate_event
from speed.partitions import Keys
from speed.records import (
    BUCKET_BITS,
    bucket_expire_at,
    identity_hash,
    live_epochs,
    slice_seconds,
)
from speed.store import MAX_CHUNK, EventConflict, Outcome, SpeedLayer
from tests.conftest import BACKENDS, event

pytestmark = pytest.mark.integration

PARTITIONS = 2
# Enough events that every bucket of every partition holds dozens of records.
EVENTS = 40 * PARTITIONS * 2**BUCKET_BITS
LIFETIME = 120 * 24 * 3600
NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)


def normalized(settings: Settings, raws: list[dict[str, Any]]) -> list[NormalizedEvent]:
    boards = load_boards(settings.boards_file)
    rules = default_registry()
    return [validate_event(r, settings, boards, NOW, rules) for r in raws]


def sent(i: int, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "eventId": f"e{i}",
        "playerId": f"player-{i % 700}",
        "matchId": f"m{i}",
        "occurredAt": (NOW - timedelta(minutes=i % 600)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "eu" if i % 3 else "na",
        "result": {"points": 1 + i % 97},
    }
    fields.update(overrides)
    return event(**fields)


def bytes_per_record(client: redis.Redis, pattern: str) -> tuple[float, int]:
    keys = list(client.scan_iter(match=pattern, count=1000))
    size = sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)
    records = sum(int(client.hlen(k)) for k in keys)
    return size / records, records


async def apply_all(
    url: str, settings: Settings, batches: list[list[NormalizedEvent]], clock: list
) -> list[list[Outcome]]:
    client = async_client(url)
    try:
        speed = SpeedLayer(
            client, load_boards(settings.boards_file), PARTITIONS, LIFETIME, None
        )
        speed.clock = lambda: clock[0]
        out = []
        for batch in batches:
            out.append(await speed.apply(batch))
            clock[0] += batch_step(clock)
        return out
    finally:
        await client.aclose()


def batch_step(clock: list) -> float:
    return clock[1] if len(clock) > 1 else 0.0


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_redelivery_among_many_records_and_bytes_per_record(
    settings: Settings, redis_client: redis.Redis, redis_url: str
) -> None:
    raws = [sent(i) for i in range(EVENTS)]
    events = normalized(settings, raws)
    clock = [NOW.timestamp()]
    batches = [events[i : i + 500] for i in range(0, EVENTS, 500)]
    first = [
        o
        for out in asyncio.run(apply_all(redis_url, settings, batches, clock))
        for o in out
    ]
    assert all(o.body and o.body["status"] == "accepted" for o in first)

    # The buckets are full of records: a redelivery finds its own.
    redelivered = [0, EVENTS // 2, EVENTS - 1]
    again = asyncio.run(
        apply_all(redis_url, settings, [[events[i] for i in redelivered]], clock)
    )[0]
    for i, outcome in zip(redelivered, again, strict=True):
        assert outcome.body is not None, outcome.error
        assert outcome.body["status"] == "duplicate"
        assert outcome.body["boards"] == first[i].body["boards"]  # type: ignore[index]
        assert outcome.body["position"] == first[i].body["position"]  # type: ignore[index]
        assert len(outcome.body["boards"]) >= 6

    # Same eventId, other content: a conflict, nothing applied.
    other = normalized(settings, [sent(7, result={"points": 500})])
    conflict = asyncio.run(apply_all(redis_url, settings, [other], clock))[0][0]
    assert isinstance(conflict.error, EventConflict)

    dedupe, n_dedupe = bytes_per_record(redis_client, "lb:*:rd:*")
    contribution, n_contribution = bytes_per_record(redis_client, "lb:*:rc:*")
    assert n_dedupe == EVENTS and n_contribution == EVENTS
    assert dedupe < 200, dedupe
    assert contribution < 200, contribution
    assert n_dedupe / len(list(redis_client.scan_iter(match="lb:*:rd:*"))) >= 20


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_records_across_epochs(
    settings: Settings, redis_client: redis.Redis, redis_url: str
) -> None:
    """A slice later (a new record epoch) a redelivery still gets its saved result;
    a correction finds the contribution record in the older epoch and moves it to
    the current one; a lifetime after its epoch ended a record is gone."""
    step = slice_seconds(LIFETIME)
    original = sent(1, matchId="M", occurredAt="2026-11-20T10:00:00Z")
    correction = sent(
        2,
        matchId="M",
        sourceRevision=2,
        occurredAt="2026-11-19T10:00:00Z",  # moved to another day
        kind="correction",
        reason="fix",
        result={"points": 5},
    )
    player = original["playerId"]
    correction["playerId"] = player
    events = normalized(settings, [original, correction])
    clock = [NOW.timestamp(), step]
    accepted, duplicate, corrected = (
        out[0]
        for out in asyncio.run(
            apply_all(
                redis_url, settings, [[events[0]], [events[0]], [events[1]]], clock
            )
        )
    )
    assert accepted.body and duplicate.body and corrected.body
    assert duplicate.body["status"] == "duplicate"
    assert duplicate.body["boards"] == accepted.body["boards"]
    assert corrected.body["status"] == "accepted"
    totals = {b["board"]: b["total"] for b in corrected.body["boards"]}
    # The match left 2026-11-20 for 2026-11-19: -points there, +5 here.
    points = original["result"]["points"]
    assert totals["daily:2026-11-20:global"] == 0
    assert totals["daily:2026-11-19:global"] == 5
    assert totals["alltime:all:global"] == 5 and points != 5

    keys = Keys(accepted.body["partition"])
    bucket, field = identity_hash(player, "M")
    # One epoch per slice: the first, the redelivery's, the correction's.
    epochs = live_epochs(redis_client, keys.base_generation)
    assert len(epochs) == 3
    current, first = epochs[0], epochs[-1]
    assert not redis_client.hexists(keys.contribution_bucket(first, bucket), field)
    assert redis_client.hexists(keys.contribution_bucket(current, bucket), field)
    # Every bucket expires as a whole (a backstop: epochs leave at rebases).
    ttl = redis_client.ttl(keys.contribution_bucket(current, bucket))
    assert ttl > 0

    # A lifetime after the correction's epoch ended: a new match again.
    clock[0] = NOW.timestamp() + 6 * step
    fresh = normalized(settings, [correction])
    again = asyncio.run(apply_all(redis_url, settings, [fresh], clock))[0][0]
    assert again.body is not None
    assert again.body["status"] == "accepted"


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_one_chunk_expires_each_bucket_and_numbers_positions(
    settings: Settings, redis_client: redis.Redis, redis_url: str, redis_backend: str
) -> None:
    """A chunk gives each record bucket it writes one EXPIREAT (later writes to the
    bucket keep that expiry), and reads and writes the position counter once: every
    bucket still expires when its slice says, and positions stay 1..n in order."""
    events = normalized(settings, [sent(i) for i in range(300)])
    clock = [NOW.timestamp()]
    if redis_backend == "single":
        redis_client.config_resetstat()
    out = asyncio.run(apply_all(redis_url, settings, [events], clock))[0]
    assert all(o.body and o.body["status"] == "accepted" for o in out)

    expire_at = bucket_expire_at(NOW.timestamp(), LIFETIME)
    buckets = [
        *redis_client.scan_iter(match="lb:*:rd:*"),
        *redis_client.scan_iter(match="lb:*:rc:*"),
    ]
    records = sum(int(redis_client.hlen(k)) for k in buckets)
    assert records == 2 * len(events)
    # Far fewer buckets than records: most buckets took several writes in the chunk.
    assert len(buckets) < records / 2
    assert {int(redis_client.expiretime(k)) for k in buckets} == {expire_at}
    if redis_backend == "single":
        stats = redis_client.info("commandstats")
        assert stats["cmdstat_expireat"]["calls"] == len(buckets)
        assert "cmdstat_incr" not in stats

    for p in range(PARTITIONS):
        positions = [
            o.body["position"]  # type: ignore[index]
            for o in out
            if o.body and o.body["partition"] == p
        ]
        # One chunk per partition (the EXPIREAT count above assumes it).
        assert 0 < len(positions) < MAX_CHUNK
        assert positions == list(range(1, len(positions) + 1))
        assert int(redis_client.get(Keys(p).position) or 0) == len(positions)
