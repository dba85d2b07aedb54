"""The batch-native owner transaction: a batch gives every event the result it gets
when sent alone, in order, and leaves Redis in the same state.

Run against a real redis-server: the same events once one call per event, once as
one batch split into small chunks per partition; results and every key compared.
Shadowed players, bucket boundaries (Fenwick moves across buckets), best-of and
first_achieved boards, a season closed to late events, corrections that leave a
board, redeliveries, id conflicts and the rate limit are all in play.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from conf.boards import boards_for_event, load_boards
from conf.rules import default_registry
from conf.settings import Settings
from speed import store
from speed.events import NormalizedEvent, validate_event
from speed.partitions import Keys, partition_of
from speed.store import Outcome, SpeedLayer
from tests.conftest import event

pytestmark = pytest.mark.integration

PLAYERS = ["p0", "p1", "p2", "Zed", "a-long-player-id"]
SHADOWED = "p2"
BOARDS_YAML = """
regions: [eu, na]
seasons:
  - {id: S4, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     allowedLateness: "P3650D", aggregation: sum, tieBreak: player_id}
  - {id: S5, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     allowedLateness: "P3650D", aggregation: max, tieBreak: player_id}
  - {id: S6, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     allowedLateness: "P3650D", tieBreak: first_achieved}
  - {id: S3, start: "2026-10-01T00:00:00Z", end: "2026-11-01T00:00:00Z",
     allowedLateness: "PT1H", aggregation: sum, tieBreak: player_id}
windowLateness: "P3650D"
"""
DAYS = ["2026-10-20", "2026-11-20", "2026-11-21"]
NOW_MS = int(datetime(2026, 11, 22, tzinfo=UTC).timestamp() * 1000)


def state(client: redis.Redis) -> dict[bytes, Any]:
    """Every key's content (TTLs aside), read in two pipelined round trips (the
    types, then the contents; nothing writes meanwhile) rather than two per key."""
    keys = sorted(client.keys("*"))
    types = client.pipeline(transaction=False)
    for key in keys:
        types.type(key)
    reads = client.pipeline(transaction=False)
    for key, kind in zip(keys, types.execute(), strict=True):
        if kind == b"hash":
            reads.hgetall(key)
        elif kind == b"zset":
            reads.zrange(key, 0, -1, withscores=True)
        elif kind == b"stream":
            reads.xrange(key)
        else:
            reads.get(key)
    return dict(zip(keys, reads.execute(), strict=True))


def summary(outcome: Outcome) -> Any:
    if outcome.body is not None:
        return outcome.body
    return (type(outcome.error).__name__, str(outcome.error))


def prepare(client: redis.Redis, partitions: int, boards: list[str]) -> None:
    """A shadowed player, bucket boundaries on every board (as a rebase stages them:
    members "<index>/<count>", scores the lower bounds) and players with a total
    unchanged since the base generation (in the totals, not in the changed-sets)."""
    client.flushall()
    client.hset(Keys(partition_of(SHADOWED, partitions)).flags, SHADOWED, "shadow")
    lowers = [0, 20, 40, 80, 160]
    for p in range(partitions):
        for board in boards:
            client.zadd(
                Keys(p).buckets(board),
                {f"{i + 1}/{len(lowers)}": lower for i, lower in enumerate(lowers)},
            )
    for player in ("p0", "Zed", SHADOWED):
        keys = Keys(partition_of(player, partitions))
        for board in boards:
            timed = board.startswith("season:S6")
            client.hset(keys.totals(board), player, "35|3|5" if timed else "35|3")


async def run(
    url: str, config: Any, batches: list[list[NormalizedEvent]], rate: Any
) -> list[Outcome]:
    client = aioredis.from_url(url)
    try:
        speed = SpeedLayer(client, config, 3, 3600, rate)
        speed.clock = lambda: NOW_MS / 1000
        outcomes: list[Outcome] = []
        for batch in batches:
            outcomes += await speed.apply(batch)
        return outcomes
    finally:
        await client.aclose()


operation = st.tuples(
    st.sampled_from(PLAYERS),
    st.integers(0, 2),  # match
    st.integers(1, 3),  # revision
    st.integers(0, 2),  # day
    st.integers(0, 3),  # event id (a reused id with other content is a conflict)
    st.integers(0, 100),  # points
    st.booleans(),  # correction
)


@pytest.fixture
def config(tmp_path: Path) -> Any:
    path = tmp_path / "boards.yaml"
    path.write_text(BOARDS_YAML)
    return load_boards(path)


@hsettings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(operation, min_size=1, max_size=30),
    rate_limited=st.booleans(),
)
# A correction that moves a match off a board (day change: the daily board loses
# it, the script asks for that board: "retry"), then a redelivery.
@example(
    ops=[
        ("p0", 0, 1, 1, 0, 50, False),
        ("p0", 0, 2, 2, 1, 10, True),
        ("p0", 0, 2, 2, 1, 10, True),
        ("p2", 0, 1, 1, 0, 90, False),
        ("p1", 1, 1, 0, 0, 30, False),
    ],
    rate_limited=False,
)
def test_batch_equals_one_event_at_a_time(
    redis_server: Any,
    redis_client: redis.Redis,
    config: Any,
    monkeypatch: pytest.MonkeyPatch,
    ops: list[tuple[Any, ...]],
    rate_limited: bool,
) -> None:
    monkeypatch.setattr(store, "MAX_CHUNK", 3)
    settings = Settings(
        rate_limit="off", dedupe_window="P3650D", boards_file=Path("unused")
    )
    now = datetime.fromtimestamp(NOW_MS / 1000, UTC)
    events = []
    for player, match, revision, day, eid, points, correction in ops:
        raw = event(
            eventId=f"e{eid}-{match}",
            playerId=player,
            matchId=f"m{match}",
            sourceRevision=revision,
            occurredAt=f"{DAYS[day]}T10:00:00Z",
            region="eu" if PLAYERS.index(player) % 2 else "na",
            result={"points": points},
            kind="correction" if correction else "result",
            reason="fix" if correction else None,
        )
        events.append(validate_event(raw, settings, config, now, default_registry()))
    boards = sorted(
        {
            spec.board
            for e in events
            for spec in boards_for_event(config, e.occurred_at, e.event.region)
        }
    )
    rate = (2, 60.0) if rate_limited else None

    prepare(redis_client, 3, boards)
    alone = asyncio.run(run(redis_server.url, config, [[e] for e in events], rate))
    state_alone = state(redis_client)

    prepare(redis_client, 3, boards)
    batched = asyncio.run(run(redis_server.url, config, [events], rate))
    state_batched = state(redis_client)

    assert [summary(o) for o in batched] == [summary(o) for o in alone]
    assert state_batched == state_alone
