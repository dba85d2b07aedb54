"""Live reads count in the changed-sets they hold (speed/live.py ``HeldPart``) while
a partition's stamp ("g|position|flags version|epoch") holds: a partition is held
once enough reads in a row found it at the same stamp, ``live_counts.lua`` then counts
nothing there, and a write, a shadow, a restore or a publish between two reads
changes the answers exactly as the offline sort does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

import speed.live
from speed.partitions import EPOCH_KEY, partition_of
from tests.conftest import SignedClient
from tests.support.live import (
    OPTIONS_RULES,
    PLAYERS,
    Oracle,
    options_settings,
    publish_oracle,
    send,
)
from tests.support.shadow import flag

pytestmark = pytest.mark.integration

BOARD = "season:S4:global"


@pytest.fixture
def settings(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> Any:
    return options_settings(redis_url, tmp_path)


def reads(
    api: SignedClient, oracle: Oracle, hidden: frozenset[str] = frozenset()
) -> None:
    """Every visible player's live rank, dense rank and nearby, twice each (the
    second read counts in what the first left held), against the oracle."""
    expected = oracle.ordered(BOARD, hidden)
    dense = oracle.dense(BOARD, hidden)
    for _ in range(2):
        for want in expected:
            player = want["playerId"]
            path = f"/v1/boards/{BOARD}/players/{player}"
            body = api.get(path).json()
            assert body["basis"] == "live", body
            assert (body["score"], body["rank"], body["position"]) == (
                want["score"],
                want["rank"],
                want["position"],
            ), (player, body)
            assert body["population"] == len(expected)
            mine = api.get(path, params={"ranking": "dense"}).json()
            assert mine["rank"] == dense[player], (player, mine)
            near = api.get(f"{path}/nearby", params={"radius": 2}).json()
            i = want["position"] - 1
            assert near["entries"] == expected[max(0, i - 2) : i + 3], player


def test_held_changed_sets_follow_every_write_shadow_and_publish(
    api: SignedClient, redis_client: redis.Redis, settings: Any
) -> None:
    oracle = Oracle(OPTIONS_RULES)
    for player, points in (("p0", 10), ("p1", 10), ("p2", 10), ("p3", 5), ("p4", 0)):
        send(api, oracle, player, 0, points)
    publish_oracle(api, redis_client, oracle, 1, settings.partitions)
    send(api, oracle, "p3", 1, 3)
    send(api, oracle, "p5", 0, 7)
    reads(api, oracle)
    live = api.client.app.state.live  # type: ignore[attr-defined]
    held = live._held[BOARD]
    assert all(part is not None for part in held)
    before = list(held)
    # All held: a live rank counts nothing in Redis.
    redis_client.config_resetstat()
    assert api.get(f"/v1/boards/{BOARD}/players/p0").json()["basis"] == "live"
    stats = redis_client.info("commandstats")
    assert "cmdstat_evalsha" in stats
    assert not {"cmdstat_zlexcount", "cmdstat_bitcount"} & set(stats), stats
    # Nor does a live nearby read its window there.
    redis_client.config_resetstat()
    near = api.get(f"/v1/boards/{BOARD}/players/p0/nearby", params={"radius": 2})
    assert near.json()["basis"] == "live"
    stats = redis_client.info("commandstats")
    assert "cmdstat_evalsha" in stats
    read_there = {"zlexcount", "bitcount", "zrangebylex", "zrevrangebylex", "getrange"}
    assert not {f"cmdstat_{c}" for c in read_there} & set(stats), stats

    # A write between two reads: its partition's part is dropped and read again
    # at the new stamp; the answers follow it.
    send(api, oracle, "p4", 1, 10)
    reads(api, oracle)
    moved = partition_of("p4", settings.partitions)
    after = live._held[BOARD]
    for p, (old, new) in enumerate(zip(before, after, strict=True)):
        assert new is not None
        assert (old is new) == (p != moved), p
    assert after[moved].stamp != before[moved].stamp

    # A shadow moves no position, the flags version: every answer follows.
    assert flag(api, "p5", "shadow").status_code == 200
    hidden = frozenset({"p5"})
    expected = oracle.ordered(BOARD, hidden)
    for want in expected:
        body = api.get(f"/v1/boards/{BOARD}/players/{want['playerId']}").json()
        assert (body["rank"], body["position"], body["population"]) == (
            want["rank"],
            want["position"],
            len(expected),
        )
    assert flag(api, "p5", "restore").status_code == 200
    reads(api, oracle)

    # A publish (the rebase) between reads: counted against the new base.
    publish_oracle(api, redis_client, oracle, 2, settings.partitions)
    send(api, oracle, "p0", 1, 1)
    reads(api, oracle)
    assert all(
        part is not None and part.stamp.startswith(b"2|") for part in live._held[BOARD]
    )


def test_a_board_read_only_by_live_ranks_is_held(
    api: SignedClient, redis_client: redis.Redis, settings: Any
) -> None:
    """No read cache has set the dataset's epoch (stamps end "|0"): the first live
    rank sets it, and the partitions are held two reads later."""
    oracle = Oracle(OPTIONS_RULES)
    for player, points in (("p0", 10), ("p1", 5), ("p2", 10)):
        send(api, oracle, player, 0, points)
    assert redis_client.get(EPOCH_KEY) is None
    expected = oracle.ordered(BOARD)
    for _ in range(3):
        for want in expected:
            body = api.get(f"/v1/boards/{BOARD}/players/{want['playerId']}").json()
            assert (body["rank"], body["position"]) == (want["rank"], want["position"])
    assert redis_client.get(EPOCH_KEY) is not None
    held = api.client.app.state.live._held[BOARD]  # type: ignore[attr-defined]
    assert all(part is not None for part in held)


def test_a_partition_is_read_whole_only_once_reads_paid_for_it(
    api: SignedClient,
    redis_client: redis.Redis,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ski rental (speed/live.py ``HOLD_MEMBERS_PER_READ``): a partition is read
    whole only after as many reads in a row at its stamp as its changed-set has
    members per HOLD_MEMBERS_PER_READ (here 0.5: two reads per member, so that
    the test's few players count), and a write starts the count again: a
    partition written between every few reads is never read whole."""
    monkeypatch.setattr(speed.live, "HOLD_MEMBERS_PER_READ", 0.5)
    oracle = Oracle(OPTIONS_RULES)
    for i, player in enumerate(PLAYERS):
        send(api, oracle, player, 0, 10 + i)
    by_partition: dict[int, list[str]] = {}
    for player in PLAYERS:
        by_partition.setdefault(partition_of(player, settings.partitions), []).append(
            player
        )
    mates = max(by_partition.values(), key=len)
    owner = partition_of(mates[0], settings.partitions)
    needed = max(2, 2 * len(mates))
    live = api.client.app.state.live  # type: ignore[attr-defined]
    path = f"/v1/boards/{BOARD}/players/{mates[0]}"

    def held_after(reads: int) -> bool:
        for _ in range(reads):
            body = api.get(path).json()
            want = next(w for w in oracle.ordered(BOARD) if w["playerId"] == mates[0])
            assert (body["score"], body["rank"]) == (want["score"], want["rank"])
        return live._held[BOARD][owner] is not None

    # The first read sets the dataset's epoch (no stamp is kept without one),
    # the next finds a new stamp: a streak of one.
    assert not held_after(1)
    assert not held_after(needed - 1)
    assert held_after(1)
    # A write to the partition: dropped, and held again only after as many reads.
    send(api, oracle, mates[-1], 1, 1)
    assert not held_after(needed - 1)
    assert held_after(1)


def test_both_whole_reads_keep_a_board_within_the_held_members_bound(
    api: SignedClient,
    redis_client: redis.Redis,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``HELD_MEMBERS`` bounds what a board holds in all, whichever path read the
    changed-sets whole (speed/live.py ``_admit``): a dense rank (every partition
    read whole at once) and the ranks' ski rental both stop holding parts once
    the board's held parts would pass it; answers stay exact either way."""
    oracle = Oracle(OPTIONS_RULES)
    for i, player in enumerate(PLAYERS):
        send(api, oracle, player, 0, 10 + i)
    live = api.client.app.state.live  # type: ignore[attr-defined]
    limit = len(PLAYERS) // 2
    monkeypatch.setattr(speed.live, "HELD_MEMBERS", limit)
    reads(api, oracle)
    for _ in range(2):  # more reads at the same stamps: still within the bound
        reads(api, oracle)
        held = [part for part in live._held[BOARD] if part is not None]
        assert held, "a part under the bound is held"
        assert sum(speed.live.held_size(part) for part in held) <= limit
        assert len(held) < settings.partitions
