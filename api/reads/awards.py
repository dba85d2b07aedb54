"""Award pages: a closed season's award snapshot, one immutable version at a time."""

from __future__ import annotations

from typing import Any

from serving.awards import AwardVersion


def award_page(
    version: AwardVersion, board: str, start: int, stop: int
) -> tuple[list[dict[str, Any]], int]:
    table = version.board(board)
    if table is None:
        return [], 0
    population = table.num_rows
    start, stop = max(0, start), min(population, stop)
    rows = table.slice(start, stop - start).to_pylist()
    entries = [
        {
            "position": r["position"],
            "rank": r["rank"],
            "playerId": r["player_id"],
            "score": r["score"],
            "tier": r["tier"],
        }
        for r in rows
    ]
    return entries, population
