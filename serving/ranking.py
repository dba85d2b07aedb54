"""Ranking per query (API.md "Ranking per query"): ranks of a run of entries in
display order under ``competition``, ``dense`` or ``ordinal``.

* competition: 1 + players with a strictly better score;
* dense: 1 + distinct scores strictly better;
* ordinal: the display position (the board's tie-break decides among equals).

Entries are a contiguous run of display positions, so every player above an entry is
either above the run's first score (counted by the caller: ``above`` players and
``distinct_above`` distinct scores, from a generation or the live merge) or listed
before it in the run.
"""

from __future__ import annotations

from typing import Any, Literal

Ranking = Literal["competition", "dense", "ordinal"]
RANKINGS: tuple[Ranking, ...] = ("competition", "dense", "ordinal")


def native_ranking(unique: bool) -> Ranking:
    """The ranking a board's answers are built with (``rank: unique``: ordinal)."""
    return "ordinal" if unique else "competition"


def rank_of(ranking: Ranking, position: int, above: int, distinct_above: int) -> int:
    """The rank of one standing, from the players and distinct scores above it."""
    if ranking == "ordinal":
        return position
    if ranking == "dense":
        return distinct_above + 1
    return above + 1


def rerank(
    entries: list[dict[str, Any]],
    ranking: Ranking,
    above: int = 0,
    distinct_above: int = 0,
) -> None:
    """Set each entry's ``rank`` under ``ranking`` in place; ``above`` and
    ``distinct_above`` count what is above the first entry's score (0 and 0 for a
    run starting at the top)."""
    previous: int | None = None
    before = distinct = 0  # entries listed before with a better score; their scores
    for i, entry in enumerate(entries):
        score = entry["score"]
        if previous is not None and score != previous:
            before, distinct = i, distinct + 1
        previous = score
        entry["rank"] = rank_of(
            ranking, entry["position"], above + before, distinct_above + distinct
        )


__all__ = ["RANKINGS", "Ranking", "native_ranking", "rank_of", "rerank"]
