"""A live rank of one player under another ranking than the board's own takes one
Redis round trip while its guess holds and the board's partitions stay put (issue
27): a dense rank's distinct-score count depends on the stamp, which rides with
the rank's counts (speed/live.py ``LiveReader.rank_and_distinct``); an ordinal
rank needs nothing but the counts. A write costs the moved partition's changed-set
once; a write landing between the counts and that changed-set is caught (the
answer is counted again) and every answer is the offline one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from api.reads.labels import top_percent
from conf.boards import load_boards
from conf.rules import default_registry
from conf.settings import Settings
from speed.events import validate_event
from speed.partitions import Keys, partition_of
from tests.api.test_read_cache import RoundTrips, post, reads_of
from tests.conftest import SignedClient, event
from tests.support.shadow import seed

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
SEED = {"P1": 920, "P2": 900, "P3": 900, "P4": 880, "P5": 880, "P6": 700}


def truth(totals: dict[str, int], player: str, ranking: str) -> int:
    score = totals[player]
    if ranking == "dense":
        return 1 + len({s for s in totals.values() if s > score})
    # ordinal: the display position (ties by playerId bytes).
    order = sorted(totals, key=lambda p: (-totals[p], p.encode()))
    return 1 + order.index(player)


def read(
    api: SignedClient, trips: RoundTrips, player: str, ranking: str
) -> tuple[int, dict[str, Any]]:
    """(round trips, body) of the player's live rank under ``ranking``."""
    start = trips.count
    reply = api.get(f"/v1/boards/{BOARD}/players/{player}", params={"ranking": ranking})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert (body["basis"], body["ranking"]) == ("live", ranking), body
    return trips.count - start, body


def check(body: dict[str, Any], totals: dict[str, int], ranking: str) -> None:
    player = body["playerId"]
    assert body["score"] == totals[player], body
    assert body["rank"] == truth(totals, player, ranking), body
    # Under any ranking, the share of players at or above the player's score.
    above = sum(1 for s in totals.values() if s > totals[player])
    assert body["topPercent"] == top_percent(above + 1, len(totals)), body


def test_a_live_rank_under_another_ranking_takes_one_round_trip(
    api: SignedClient, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    seed(api, SEED)
    totals = dict(SEED)
    # Warm-up: the scripts, every player's standing and profile, the dense parts.
    for player in SEED:
        for ranking in ("dense", "ordinal", "competition"):
            assert (
                api.get(
                    f"/v1/boards/{BOARD}/players/{player}", params={"ranking": ranking}
                ).status_code
                == 200
            )
    trips = RoundTrips(reads_of(api), monkeypatch)
    for player in SEED:
        for ranking in ("dense", "ordinal"):
            n, body = read(api, trips, player, ranking)
            check(body, totals, ranking)
            assert n == 1, (player, ranking)

    # A write moves P4's partition: the next dense read reads that partition's
    # changed-set again (a second round trip), the ones after it one trip each.
    post(api, "P4", 30, 1)
    totals["P4"] += 30
    n, body = read(api, trips, "P1", "dense")
    check(body, totals, "dense")
    assert n == 2
    for player in ("P1", "P2", "P6"):
        n, body = read(api, trips, player, "dense")
        check(body, totals, "dense")
        assert n == 1, player
    # P4's own standing moved: its guess is wrong once.
    n, body = read(api, trips, "P4", "dense")
    check(body, totals, "dense")
    n, body = read(api, trips, "P4", "dense")
    check(body, totals, "dense")
    assert n == 1


def test_a_write_between_the_counts_and_the_changed_sets_is_caught(
    api: SignedClient,
    monkeypatch: pytest.MonkeyPatch,
    settings: Settings,
    redis_client: redis.Redis,
) -> None:
    """A write lands on the partition whose changed-set a dense rank reads after
    its counts, and changes the distinct scores above the player: the counts no
    longer name the positions of what was counted, so the rank is counted again,
    and the answer is the offline one as of its ``asOf``."""
    seed(api, SEED)
    totals = dict(SEED)
    for player in SEED:
        reply = api.get(
            f"/v1/boards/{BOARD}/players/{player}", params={"ranking": "dense"}
        )
        assert reply.status_code == 200, reply.text
    live = api.client.app.state.live  # type: ignore[attr-defined]
    owner = partition_of("P3", settings.partitions)
    # A new player low on P3's partition moves it: the next dense read reads its
    # changed-set again, and a write of P3 lands just before that read (900 ->
    # 910: one distinct score more above P5's 880).
    filler = next(
        f"F{i}"
        for i in range(1000)
        if partition_of(f"F{i}", settings.partitions) == owner
    )
    post(api, filler, 100, 1)
    totals[filler] = 100
    late = validate_event(
        event(eventId="late", playerId="P3", matchId="late", result={"points": 10}),
        settings,
        load_boards(settings.boards_file),
        datetime.now(UTC),
        default_registry(),
    )
    real_parts, real_rank = live._dense_parts, live.rank_and_distinct
    read_parts: list[list[int]] = []
    distinct: list[int | None] = []

    async def writing_first(board: str, base: Any, partitions: list[int]) -> Any:
        if not read_parts:
            (outcome,) = await live.speed.apply([late])
            assert outcome.error is None, outcome
        read_parts.append(list(partitions))
        return await real_parts(board, base, partitions)

    async def counted(board: str, player_id: str) -> dict[str, Any]:
        me = await real_rank(board, player_id)
        distinct.append(me["distinct"])
        return me  # type: ignore[no-any-return]

    monkeypatch.setattr(live, "_dense_parts", writing_first)
    monkeypatch.setattr(live, "rank_and_distinct", counted)
    reply = api.get(f"/v1/boards/{BOARD}/players/P5", params={"ranking": "dense"})
    assert reply.status_code == 200, reply.text
    totals["P3"] += 10
    body = reply.json()
    assert (body["basis"], body["ranking"]) == ("live", "dense"), body
    assert read_parts[0] == [owner]
    # Counted first without a distinct count (it was newer than the counts), then
    # again with the write.
    assert distinct[0] is None and distinct[-1] is not None, distinct
    assert body["asOf"][str(owner)] == int(redis_client.get(Keys(owner).position) or 0)
    check(body, totals, "dense")
    assert body["rank"] == 4
    for player in totals:
        again = api.get(
            f"/v1/boards/{BOARD}/players/{player}", params={"ranking": "dense"}
        ).json()
        check(again, totals, "dense")
