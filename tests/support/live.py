"""A pure-Python oracle of the live boards (live property tests), and the publish
those tests make from it (a generation written from the oracle's state, the
rebase onto it)."""

from __future__ import annotations

from typing import Any

import redis

from api.segments import GenerationRegistry
from speed.partitions import Keys
from speed.rebase import rebase
from tests.support.clients import SignedClient
from tests.support.segments import write_generation

PLAYERS = [f"p{i}" for i in range(7)] + ["Zed", "a-long-player-id"]


ALL_BOARDS = [
    f"{window}:{scope}"
    for window in (
        "season:S4",
        "daily:2026-11-20",
        "weekly:2026-W47",
        "monthly:2026-11",
        "alltime:all",
    )
    for scope in ("global", "eu", "na")
]


def region(player: str) -> str:
    return "eu" if PLAYERS.index(player) % 2 == 0 else "na"


class Oracle:
    """Totals from first principles: first acceptance per (player, eventId); a match's
    contribution is its highest revision's points; totals sum contributions."""

    def __init__(self) -> None:
        self.events: set[tuple[str, str]] = set()
        self.revision: dict[tuple[str, str], int] = {}
        self.contribution: dict[tuple[str, str], int] = {}
        # Per (board, player): applied changes (the version the API reports).
        self.version: dict[tuple[str, str], int] = {}

    def apply(
        self, player: str, event_id: str, match: str, revision: int, points: int
    ) -> bool:
        """Whether the event changes the player's boards."""
        if (player, event_id) in self.events:
            return False
        self.events.add((player, event_id))
        if revision <= self.revision.get((player, match), 0):
            return False
        self.revision[(player, match)] = revision
        self.contribution[(player, match)] = points
        for board in ALL_BOARDS:
            if board.rsplit(":", 1)[1] in ("global", region(player)):
                key = (board, player)
                self.version[key] = self.version.get(key, 0) + 1
        return True

    def versions(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for (board, player), version in self.version.items():
            out.setdefault(board, {})[player] = version
        return out

    def totals(self, board: str) -> dict[str, int]:
        scope = board.rsplit(":", 1)[1]
        out: dict[str, int] = {}
        for (player, _), points in self.contribution.items():
            if scope in ("global", region(player)):
                out[player] = out.get(player, 0) + points
        return out

    def ordered(self, board: str) -> list[dict[str, Any]]:
        totals = self.totals(board)
        rows = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0].encode()))
        entries = []
        for i, (player, score) in enumerate(rows):
            rank = 1 + sum(1 for s in totals.values() if s > score)
            entries.append(
                {"position": i + 1, "rank": rank, "playerId": player, "score": score}
            )
        return entries


def positions(client: redis.Redis, partitions: int) -> dict[str, int]:
    return {str(p): int(client.get(Keys(p).position) or 0) for p in range(partitions)}


def publish(
    api: SignedClient,
    client: redis.Redis,
    state: tuple[dict[str, int], dict[str, dict[str, int]], dict[str, dict[str, int]]],
    number: int,
    partitions: int,
) -> None:
    """What `lb publish` does, with the oracle's state at the boundary standing in
    for Spark (versions too: the rebase then leaves the totals of players unchanged
    since the boundary out of Redis)."""
    boundary, totals, versions = state
    for p in range(partitions):
        keys = Keys(p)
        client.set(keys.landed, boundary[str(p)])
        client.xtrim(keys.log, minid=f"{boundary[str(p)] + 1}-0")
    segments_dir = api.client.app.state.settings.segments_dir
    boards = {b: t for b, t in totals.items() if t}
    write_generation(
        segments_dir, number, boards, boundary, bucket_target=2, versions=versions
    )
    registry: GenerationRegistry = api.client.app.state.generations
    registry.refresh(force=True)
    generation = registry.by_number(number)
    assert generation is not None
    report = rebase(client, generation, partitions)
    assert set(report.partitions.values()) == {"ok"}
