"""Friends: a player's friend list, and a board ranked among the player and friends.

Friend lists live in Redis, one set per player on the player's partition. A friends
ranking is filtered before ranking: only the player and the listed friends are read,
never a board-wide candidate list truncated afterwards.

Live mode reads the members' live totals with ``friends_scores.lua``, one atomic read
per partition; a member without a live total takes its base-generation score. Each
partition's read is its state as of its log position, and an event touches only its
own partition, so the union is the exact state as of ``asOf``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from serving.ranking import rerank
from serving.segments import BoardSegment
from speed.connection import run_transaction
from speed.live import Base, LiveReader, NotExact, parse_standing, segment_standing
from speed.partitions import Keys, partition_of
from speed.scripts import FRIENDS_SCORES, register


async def write_friends(live: LiveReader, player_id: str, friends: list[str]) -> None:
    """Replace the player's friend list (one MULTI on the player's partition)."""
    key = Keys(partition_of(player_id, live.partitions)).friends(player_id)
    commands: list[tuple[str, ...]] = [("DEL", key)]
    if friends:
        commands.append(("SADD", key, *friends))
    await run_transaction(live.speed.client, commands)


async def read_friends(live: LiveReader, player_id: str) -> list[str]:
    key = Keys(partition_of(player_id, live.partitions)).friends(player_id)
    members = await live.speed.client.smembers(key)
    return sorted(m.decode() if isinstance(m, bytes) else m for m in members)


Standing = tuple[int, int | None]
NEVER = 2**63  # later than every achievedMs


def rank_members(standings: dict[str, Standing]) -> list[dict[str, Any]]:
    """The members in the board's display order -- oriented score descending, then
    (on ``first_achieved`` boards) who reached it first, then player id in UTF-8
    bytes -- with competition ranks among the members only (serving/ranking.py).
    ``standings``: player -> (oriented score, achievedMs or None)."""
    order = sorted(
        standings.items(),
        # An unknown achievedMs (a shadowed player's own hidden row) sorts after
        # its equals: it cannot be shown to have come first.
        key=lambda kv: (
            -kv[1][0],
            NEVER if kv[1][1] is None else kv[1][1],
            kv[0].encode("utf-8"),
        ),
    )
    entries: list[dict[str, Any]] = [
        {"position": index + 1, "rank": 0, "playerId": player, "score": score}
        for index, (player, (score, _)) in enumerate(order)
    ]
    rerank(entries, "competition")
    return entries


def snapshot_standings(
    segment: BoardSegment | None, members: list[str]
) -> dict[str, Standing]:
    """The members' standings in a generation's segment (those on it)."""
    standings: dict[str, Standing] = {}
    if segment is None:
        return standings
    for member in members:
        standing = segment_standing(segment, member)
        if standing is not None:
            standings[member] = standing
    return standings


class FriendsReader:
    """Live scores of a few players on one board, exact as of a position vector."""

    def __init__(self, live: LiveReader) -> None:
        self.live = live
        self._script = register(live.speed.client, FRIENDS_SCORES)

    async def live_scores(
        self, board: str, members: list[str]
    ) -> tuple[dict[str, Standing], Base, dict[str, int]]:
        """(standings of the members on the board, base, asOf); NotExact during a
        rebase."""
        by_partition: dict[int, list[str]] = defaultdict(list)
        for member in members:
            by_partition[partition_of(member, self.live.partitions)].append(member)
        calls = []
        for p in range(self.live.partitions):
            keys = Keys(p)
            calls.append(
                (
                    [keys.base_generation, keys.position, keys.totals(board)],
                    by_partition.get(p, []),
                )
            )
        replies = await self.live.speed.run_script(self._script, calls)
        bases = [int(r[0]) for r in replies]
        # Standings only: no partition rows needed (LiveReader._base).
        base = self.live.mapped_base(bases, board)
        standings: dict[str, Standing] = {}
        for p, reply in enumerate(replies):
            for member, raw in zip(by_partition.get(p, []), reply[2], strict=True):
                standing = parse_standing(bytes(raw)) if raw else None
                if standing is not None:
                    standings[member] = standing
        missing = [m for m in members if m not in standings]
        standings.update(snapshot_standings(base.segment, missing))
        as_of = {str(p): int(r[1]) for p, r in enumerate(replies)}
        return standings, base, as_of


__all__ = [
    "FriendsReader",
    "NotExact",
    "Standing",
    "rank_members",
    "read_friends",
    "snapshot_standings",
    "write_friends",
]
