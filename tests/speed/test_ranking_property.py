"""Property test: competition, dense and ordinal ranks of every live and snapshot
answer (top, player, nearby) equal a slow offline sort, across ties, downward
corrections, publishes interleaved with writes, and shadowed players (hidden from
the counts in the generation and in the changes).

The boards include board options (issue 27): asc and best-of rolling windows
(tests/support/live.py OPTIONS_WINDOWS), ranked lower first where asc.

Publishes write the generation from the oracle, as tests/speed/test_live_property.py
does; the dense live rank is the generation's distinct scores merged with the speed
layer's changed players (speed/live.py ``above``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.conftest import SignedClient, event
from tests.support.clients import get_many
from tests.support.live import (
    ALL_BOARDS,
    OPTIONS_RULES,
    PLAYERS,
    Oracle,
    options_settings,
    positions,
    publish,
    region,
)
from tests.support.shadow import flag

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> Any:
    """The tests' settings with the board options of OPTIONS_WINDOWS."""
    return options_settings(redis_url, tmp_path)


# desc sum, asc best-of, asc sum, desc best-of.
BOARDS = [
    "season:S4:global",
    "alltime:all:eu",
    "weekly:2026-W47:na",
    "daily:2026-11-20:global",
]
ORDER = {b: OPTIONS_RULES.get(b.split(":")[0], ("sum", "desc"))[1] for b in BOARDS}
RANKINGS = ("competition", "dense", "ordinal")

operation = st.one_of(
    st.tuples(
        st.just("event"), st.sampled_from(PLAYERS), st.integers(0, 2), st.integers(1, 3)
    ),
    st.tuples(st.just("publish"), st.integers(0, 2)),
)


def expected(
    totals: dict[str, int], ranking: str, order: str = "desc"
) -> list[dict[str, Any]]:
    """The offline sort: display order (better score first: higher, lower under
    ``asc``; then id bytes) and each ranking."""
    sign = -1 if order == "asc" else 1
    rows = sorted(totals.items(), key=lambda kv: (-sign * kv[1], kv[0].encode()))
    out = []
    for i, (player, score) in enumerate(rows):
        if ranking == "competition":
            rank = 1 + sum(1 for s in totals.values() if sign * s > sign * score)
        elif ranking == "dense":
            rank = 1 + len({s for s in totals.values() if sign * s > sign * score})
        else:
            rank = i + 1
        out.append(
            {"position": i + 1, "rank": rank, "playerId": player, "score": score}
        )
    return out


def check(api: SignedClient, totals: dict[str, dict[str, int]], mode: str) -> None:
    # Every read of the check in one call into the app (get_many; nothing is
    # written during a check), then the same assertions on each reply, in order.
    cases = [
        (board, ranking, expected(totals[board], ranking, ORDER[board]))
        for board in BOARDS
        for ranking in RANKINGS
    ]
    requests: list[tuple[str, dict[str, Any]]] = []
    for board, ranking, want in cases:
        params = {"ranking": ranking, "mode": mode}
        base = f"/v1/boards/{board}"
        requests.append((f"{base}/top", {**params, "limit": 50}))
        for entry in want:
            player = entry["playerId"]
            requests.append((f"{base}/players/{player}", params))
            requests.append(
                (f"{base}/players/{player}/nearby", {**params, "radius": 1})
            )
    replies = iter(get_many(api.client, requests))
    for board, ranking, want in cases:
        top = next(replies).json()
        assert (top["basis"], top["ranking"]) == (mode, ranking)
        assert top["entries"] == want, (board, ranking, mode)
        for i, entry in enumerate(want):
            player = entry["playerId"]
            me = next(replies).json()
            assert (me["basis"], me["ranking"]) == (mode, ranking)
            assert (me["rank"], me["position"]) == (entry["rank"], i + 1), (
                board,
                ranking,
                mode,
                player,
            )
            near = next(replies).json()
            assert near["entries"] == want[max(0, i - 1) : i + 2], (
                board,
                ranking,
                mode,
                player,
            )
    assert next(replies, None) is None


def visible(oracle: Oracle, hidden: set[str]) -> dict[str, dict[str, int]]:
    return {
        b: {p: s for p, s in oracle.totals(b).items() if p not in hidden}
        for b in BOARDS
    }


@hsettings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(operation, min_size=1, max_size=20),
    points_seed=st.integers(1, 10_000),
    shadowed=st.sets(st.sampled_from(PLAYERS), max_size=3),
)
# Pinned: a score value gone from the generation (p0, its only holder, corrected
# from 1 to 2 after the publish) and one new; ties split by a correction after a
# publish, with a shadowed player in the base.
@example(
    ops=[
        ("event", "p0", 0, 1),
        ("event", "p1", 0, 1),
        ("event", "p2", 0, 1),
        ("publish", 0),
        ("event", "p0", 0, 2),
    ],
    points_seed=1,
    shadowed=set(),
)
@example(
    ops=[
        ("event", "p0", 0, 1),
        ("event", "p1", 0, 1),
        ("event", "p2", 0, 1),
        ("publish", 0),
        ("event", "p0", 0, 2),
        ("event", "p3", 1, 1),
    ],
    points_seed=5,
    shadowed={"p1"},
)
def test_rankings_equal_the_offline_sort(
    api: SignedClient,
    redis_client: redis.Redis,
    settings: Any,
    ops: list[tuple[Any, ...]],
    points_seed: int,
    shadowed: set[str],
) -> None:
    redis_client.flushall()
    shutil.rmtree(settings.segments_dir, ignore_errors=True)
    api.client.app.state.generations.refresh(force=True)
    oracle = Oracle(OPTIONS_RULES)
    history = [
        (
            positions(redis_client, settings.partitions),
            {b: oracle.totals(b) for b in ALL_BOARDS},
            oracle.versions(),
        )
    ]
    generation = published = 0
    for op in ops:
        if op[0] == "event":
            _, player, match, revision = op
            points = (
                points_seed * (PLAYERS.index(player) * 7 + match * 3 + revision)
            ) % 5
            event_id = f"{player}-{match}-{revision}"
            reply = api.post(
                "/v1/score-events",
                event(
                    eventId=event_id,
                    playerId=player,
                    matchId=f"m{match}",
                    sourceRevision=revision,
                    region=region(player),
                    result={"points": points},
                    kind="correction" if revision > 1 else "result",
                    reason="fix" if revision > 1 else None,
                ),
            )
            assert reply.status_code == 200, reply.text
            oracle.apply(player, event_id, f"m{match}", revision, points)
            history.append(
                (
                    positions(redis_client, settings.partitions),
                    {b: oracle.totals(b) for b in ALL_BOARDS},
                    oracle.versions(),
                )
            )
        else:
            generation += 1
            published = max(published, len(history) - 1 - op[1])
            publish(
                api, redis_client, history[published], generation, settings.partitions
            )
            snapshot = {b: history[published][1][b] for b in BOARDS}
            check(api, snapshot, "snapshot")
    check(api, visible(oracle, set()), "live")
    # Shadowed players leave every count (generation rows and changes alike).
    for player in sorted(shadowed):
        assert flag(api, player, "shadow").status_code == 200
    check(api, visible(oracle, shadowed), "live")
    for player in sorted(shadowed):
        assert flag(api, player, "restore").status_code == 200
    check(api, visible(oracle, set()), "live")
