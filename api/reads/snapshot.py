"""Snapshot reads: a player's standing and window in one generation's segment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serving.segments import BoardSegment


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a player stands in one generation: its display row (or, for a player
    shadowed in it, the row it would take), score, rank, and whether it is hidden."""

    row: int
    score: int
    rank: int
    hidden: bool


def standing_in(
    segment: BoardSegment | None, player_id: str, own: bool
) -> Standing | None:
    """The player's standing; a hidden (shadowed) player only on its own read."""
    if segment is None:
        return None
    row = segment.row_of(player_id)
    if row is not None:
        entry = segment.entry(row)
        return Standing(row, entry["score"], entry["rank"], False)
    if own and player_id in segment.hidden:
        score = segment.hidden[player_id]
        at = segment.first_row_at_or_after(score, player_id)
        rank = at + 1 if segment.unique_rank else segment.count_above(score) + 1
        return Standing(at, score, rank, True)
    return None


def window_entries(
    segment: BoardSegment, me: Standing, player_id: str, radius: int
) -> tuple[list[dict[str, Any]], int, int]:
    """Entries within ``radius`` of the player, and the segment rows [start, stop)
    they came from. A hidden player is put back in at its row: rows from there on
    move one position down, and one rank down when their score is below its."""
    if not me.hidden:
        start = max(0, me.row - radius)
        stop = min(segment.population, me.row + radius + 1)
        return segment.entries(start, stop), start, stop
    start = max(0, me.row - radius)
    stop = min(segment.population, me.row + radius)
    above = segment.entries(start, me.row)
    below = segment.entries(me.row, stop)
    for entry in below:
        entry["position"] += 1
        if segment.unique_rank or entry["score"] < me.score:
            entry["rank"] += 1
    mine = {
        "position": me.row + 1,
        "rank": me.rank,
        "playerId": player_id,
        "score": me.score,
    }
    return [*above, mine, *below], start, stop
