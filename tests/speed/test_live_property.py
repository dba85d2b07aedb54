"""Property test: every live answer labelled exact equals a slow offline sort of the
accepted events, across redeliveries, downward corrections, ties and publishes
interleaved with writes; approximate answers stay within their error bound.

Publishes here write the generation from the oracle (the Spark publisher is checked
against the same kind of oracle in tests/jobs); what this test pins down is the speed
layer and the live merge, including the rebase onto each new generation.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from speed.rebase import rebase
from tests.conftest import BACKENDS, SignedClient, event
from tests.support.live import ALL_BOARDS, PLAYERS, Oracle, positions, publish, region

pytestmark = pytest.mark.integration

BOARDS = ["season:S4:global", "season:S4:na", "alltime:all:eu"]


operation = st.one_of(
    st.tuples(
        st.just("event"), st.sampled_from(PLAYERS), st.integers(0, 3), st.integers(1, 3)
    ),
    # A publish whose boundary lags the newest events by 0..3: those arrive between
    # landing and the rebase, as they do in production.
    st.tuples(st.just("publish"), st.integers(0, 3)),
    st.tuples(st.just("check"), st.integers(1, 12), st.integers(0, 3)),
)




def check(
    api: SignedClient,
    client: redis.Redis,
    oracle: Oracle,
    limit: int,
    radius: int,
    partitions: int,
) -> None:
    now = positions(client, partitions)
    for board in BOARDS:
        expected = oracle.ordered(board)
        top = api.get(f"/v1/boards/{board}/top", params={"limit": limit}).json()
        assert (top["exactness"], top["basis"], top["errorBound"]) == (
            "exact",
            "live",
            0,
        )
        assert top["asOf"] == now
        assert top["population"] == len(expected)
        assert top["entries"] == expected[:limit]
        by_player = {e["playerId"]: e for e in expected}
        for player in PLAYERS:
            reply = api.get(f"/v1/boards/{board}/players/{player}")
            if player not in by_player:
                assert reply.status_code == 404
                continue
            body = reply.json()
            want = by_player[player]
            assert body["basis"] == "live" and body["exactness"] == "exact"
            assert (body["score"], body["rank"], body["position"]) == (
                want["score"],
                want["rank"],
                want["position"],
            ), (board, player)
            assert body["population"] == len(expected)
            near = api.get(
                f"/v1/boards/{board}/players/{player}/nearby", params={"radius": radius}
            ).json()
            i = want["position"] - 1
            assert near["entries"] == expected[max(0, i - radius) : i + radius + 1]
            approx = api.get(
                f"/v1/boards/{board}/players/{player}", params={"mode": "approx"}
            ).json()
            assert approx["exactness"] == "approximate"
            assert approx["basis"] == "histogram"
            assert approx["population"] == len(expected)
            assert abs(approx["rank"] - want["rank"]) <= approx["errorBound"]
            assert approx["rank"] <= want["rank"]


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
@hsettings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(operation, min_size=1, max_size=40), points_seed=st.integers(1, 10_000)
)
# Pinned paths: a change after a publish (chs), events between landing and rebase
# (the rebase's tail adjustment), a downward correction across two publishes.
@example(
    ops=[("event", "p3", 0, 1), ("publish", 0), ("event", "p3", 0, 3)], points_seed=1
)
@example(
    ops=[
        ("event", "p3", 0, 1),
        ("event", "p3", 1, 1),
        ("event", "p2", 1, 1),
        ("publish", 2),
    ],
    points_seed=7,
)
@example(
    ops=[
        ("event", "p0", 0, 1),
        ("event", "p1", 0, 1),
        ("publish", 0),
        ("event", "p1", 0, 2),
        ("publish", 1),
        ("event", "p0", 1, 1),
    ],
    points_seed=5,
)
def test_live_answers_equal_the_offline_sort(
    api: SignedClient,
    redis_client: redis.Redis,
    settings: Any,
    ops: list[tuple[Any, ...]],
    points_seed: int,
) -> None:
    redis_client.flushall()
    api.client.app.state.generations.refresh(force=True)
    import shutil

    shutil.rmtree(settings.segments_dir, ignore_errors=True)
    api.client.app.state.generations.refresh(force=True)
    oracle = Oracle()
    generation = 0
    # The oracle's state after each event, with the log positions it corresponds to.
    history = [
        (
            positions(redis_client, settings.partitions),
            {b: oracle.totals(b) for b in ALL_BOARDS},
            oracle.versions(),
        )
    ]
    published = 0
    for op in [*ops, ("check", 5, 2)]:
        if op[0] == "event":
            _, player, match, revision = op
            # Content is a function of (player, match, revision): resending one is a
            # redelivery, a higher revision a correction (often downward), and small
            # point values make ties common.
            points = (
                points_seed * (PLAYERS.index(player) * 7 + match * 3 + revision)
            ) % 6
            event_id = f"{player}-{match}-{revision}"
            payload = event(
                eventId=event_id,
                playerId=player,
                matchId=f"m{match}",
                sourceRevision=revision,
                region=region(player),
                result={"points": points},
                kind="correction" if revision > 1 else "result",
                reason="fix" if revision > 1 else None,
            )
            reply = api.post("/v1/score-events", payload)
            assert reply.status_code == 200, reply.text
            if oracle.apply(player, event_id, f"m{match}", revision, points):
                # Versions count on across generations, with or without state.
                assert {
                    (item["board"], item["version"]) for item in reply.json()["boards"]
                } == {(b, v) for (b, p), v in oracle.version.items() if p == player}
            history.append(
                (
                    positions(redis_client, settings.partitions),
                    {b: oracle.totals(b) for b in ALL_BOARDS},
                    oracle.versions(),
                )
            )
        elif op[0] == "publish":
            generation += 1
            published = max(published, len(history) - 1 - op[1])
            publish(
                api, redis_client, history[published], generation, settings.partitions
            )
        else:
            check(api, redis_client, oracle, op[1], op[2], settings.partitions)


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_rebasing_twice_is_stale_and_leaves_no_staged_keys(
    api: SignedClient, redis_client: redis.Redis, settings: Any
) -> None:
    oracle = Oracle()
    api.post("/v1/score-events", event(playerId="p0", region=region("p0")))
    oracle.apply("p0", "E77", "M91", 1, 30)
    state = (
        positions(redis_client, settings.partitions),
        {b: oracle.totals(b) for b in ALL_BOARDS},
        oracle.versions(),
    )
    publish(api, redis_client, state, 1, settings.partitions)
    generation = api.client.app.state.generations.by_number(1)
    report = rebase(redis_client, generation, settings.partitions)
    assert all(o.startswith("stale") for o in report.partitions.values())
    assert list(redis_client.scan_iter(match="lb:*:bk-next:*")) == []
    assert list(redis_client.scan_iter(match="lb:*:cnt-next:*")) == []
