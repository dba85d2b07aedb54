"""tieBreak first_achieved in the speed layer and the live merge: top, rank, nearby,
and the pages of a published generation (with cursors) equal a slow oracle that
replays the events one by one, across publishes and rebases."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from api.main import create_app
from conf.boards import load_boards
from conf.settings import Settings
from speed.partitions import Keys
from speed.rebase import rebase
from tests.conftest import OPEN_LATENESS, SignedClient, event
from tests.support.clients import get_many
from tests.support.jobs import oracle_first_achieved, oracle_order
from tests.support.segments import write_generation

pytestmark = pytest.mark.integration

PLAYERS = [f"p{i}" for i in range(6)] + ["Zed"]
BOARDS = ["season:S7:global", "season:S7:eu"]


@pytest.fixture
def timed(
    settings: Settings, tmp_path: Path
) -> Iterator[tuple[SignedClient, Settings]]:
    path = tmp_path / "timed.yaml"
    path.write_text(
        """
regions: [eu, na]
seasons:
  - {id: S7, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     allowedLateness: "OPEN", tieBreak: first_achieved}
windowLateness: "OPEN"
""".replace("OPEN", OPEN_LATENESS)
    )
    cfg = settings.model_copy(update={"boards_file": path})
    with TestClient(create_app(cfg)) as client:
        yield SignedClient(client), cfg


def entries(expected: list[tuple[int, int, str, int]]) -> list[dict[str, Any]]:
    return [
        {"position": p, "rank": r, "playerId": pl, "score": s}
        for p, r, pl, s in expected
    ]


def positions(client: redis.Redis, partitions: int) -> dict[str, int]:
    return {str(p): int(client.get(Keys(p).position) or 0) for p in range(partitions)}


operation = st.one_of(
    st.tuples(
        st.just("event"),
        st.sampled_from(PLAYERS),
        st.integers(0, 2),  # match
        st.integers(1, 3),  # revision
        st.integers(0, 3),  # points: small, ties common
        st.integers(1, 20),  # day of November
    ),
    st.tuples(st.just("publish"), st.integers(0, 2)),
)


@hsettings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(operation, min_size=1, max_size=25))
@example(
    ops=[
        ("event", "p1", 0, 1, 3, 5),
        ("event", "p2", 0, 1, 3, 2),
        ("publish", 0),
        ("event", "p1", 0, 2, 1, 9),
        ("event", "p1", 0, 3, 3, 11),
        ("event", "p3", 0, 1, 3, 1),
    ]
)
def test_first_achieved_live_equals_oracle(
    timed: tuple[SignedClient, Settings],
    redis_client: redis.Redis,
    ops: list[tuple[Any, ...]],
) -> None:
    api, cfg = timed
    redis_client.flushall()
    shutil.rmtree(cfg.segments_dir, ignore_errors=True)
    registry = api.client.app.state.generations
    registry.refresh(force=True)
    config = load_boards(cfg.boards_file)
    records: list[dict[str, Any]] = []
    history = [(positions(redis_client, cfg.partitions), 0)]
    # The service's clock steps a second per event: receivedAt, not occurredAt,
    # orders ties, so an event received later never wins one by its occurredAt.
    clock = [time.time()]
    api.client.app.state.speed.clock = lambda: clock[0]
    generation = 0
    published = 0
    for i, op in enumerate(ops):
        if op[0] == "event":
            _, player, match, revision, points, day = op
            occurred = f"2026-11-{day:02d}T10:00:00Z"
            payload = event(
                eventId=f"{player}-{match}-{revision}-{i}",
                playerId=player,
                matchId=f"m{match}",
                sourceRevision=revision,
                occurredAt=occurred,
                region="eu" if PLAYERS.index(player) % 2 == 0 else "na",
                result={"points": points},
                kind="correction" if revision > 1 else "result",
                reason="fix" if revision > 1 else None,
            )
            clock[0] += 1
            reply = api.post("/v1/score-events", payload)
            assert reply.status_code == 200, reply.text
            records.append(
                {
                    "partition": 0,
                    "position": len(records) + 1,
                    "receivedAtMs": int(clock[0] * 1000),
                    "event": {**payload, "points": points},
                }
            )
            history.append((positions(redis_client, cfg.partitions), len(records)))
        else:
            # A generation whose boundary lags the newest events by 0..2 (never
            # behind the previous generation's, as publishes go).
            published = max(published, len(history) - 1 - op[1])
            boundary, count = history[published]
            state = oracle_first_achieved(config, records[:count])
            generation += 1
            for p in range(cfg.partitions):
                redis_client.set(Keys(p).landed, boundary[str(p)])
                redis_client.xtrim(Keys(p).log, minid=f"{boundary[str(p)] + 1}-0")
            boards = {
                b: {pl: t for pl, (t, _) in players.items()}
                for b, players in state.items()
                if players
            }
            times = {
                b: {pl: a for pl, (_, a) in players.items()}
                for b, players in state.items()
                if b in BOARDS
            }
            write_generation(
                cfg.segments_dir, generation, boards, boundary, 2, achieved=times
            )
            registry.refresh(force=True)
            report = rebase(
                redis_client, registry.by_number(generation), cfg.partitions
            )
            assert set(report.partitions.values()) == {"ok"}

    state = oracle_first_achieved(config, records)
    # Every board's reads in one call into the app (get_many; nothing is written
    # meanwhile), then the same assertions on each reply, in order.
    expected_of = {b: entries(oracle_order(state.get(b, {}))) for b in BOARDS}
    requests: list[tuple[str, dict[str, Any]]] = []
    for board in BOARDS:
        requests.append((f"/v1/boards/{board}/top", {"limit": 20}))
        for want in expected_of[board]:
            base = f"/v1/boards/{board}/players/{want['playerId']}"
            requests += [(base, {}), (f"{base}/nearby", {"radius": 2})]
    replies = iter(get_many(api.client, requests))
    for board in BOARDS:
        expected = expected_of[board]
        top = next(replies).json()
        assert (top["exactness"], top["basis"]) == ("exact", "live")
        assert top["entries"] == expected
        for want in expected:
            body = next(replies).json()
            assert (body["score"], body["rank"], body["position"]) == (
                want["score"],
                want["rank"],
                want["position"],
            )
            near = next(replies).json()
            i = want["position"] - 1
            assert near["entries"] == expected[max(0, i - 2) : i + 3]
    assert next(replies, None) is None
    if generation:
        # Pages of the latest generation, walked by cursor, equal its order.
        board = BOARDS[0]
        gen_state = registry.latest()
        assert gen_state is not None
        walked: list[dict[str, Any]] = []
        reply = api.get(f"/v1/boards/{board}/entries", params={"limit": 2}).json()
        while True:
            walked += reply["entries"]
            after = reply["cursors"]["after"]
            if after is None:
                break
            reply = api.get(
                f"/v1/boards/{board}/entries", params={"cursor": after, "limit": 2}
            ).json()
        segment = gen_state.board(board)
        population = segment.population if segment else 0
        assert len(walked) == population
        assert [e["position"] for e in walked] == list(range(1, population + 1))
