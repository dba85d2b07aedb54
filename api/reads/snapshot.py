"""Snapshot reads: top, rank, nearby and entries over one generation's segment.

A generation never changes, so each answer is encoded once and kept with the
generation's mapping (:class:`api.reads.caches.SnapshotCache`). The bodies are
built here once, for the snapshot read, its fallback (a live read that cannot be
exact) and the degraded read (Redis unreachable: :mod:`api.reads.policy`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from api.errors import InvalidRequest, PlayerNotFound
from api.reads.answers import Answer, encode
from api.reads.caches import SnapshotCache
from api.reads.cursors import decode_cursor, segment_cursors
from api.reads.labels import Mode, pin, snapshot_header, top_percent
from serving.registry import Generation, GenerationRegistry
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


def located(
    segment: BoardSegment | None,
    player_id: str,
    own: bool,
    missing: Callable[[], Exception],
) -> tuple[BoardSegment, Standing]:
    """The segment and the player's standing in it; ``missing()`` is raised when
    the player is not there (or hidden from this reader)."""
    me = standing_in(segment, player_id, own)
    if segment is None or me is None:
        raise missing()
    return segment, me


def top_body(
    board: str,
    mode: Mode,
    gen: Generation,
    segment: BoardSegment | None,
    limit: int,
) -> dict[str, Any]:
    population = segment.population if segment else 0
    entries = segment.entries(0, limit) if segment else []
    return {**snapshot_header(board, mode, gen, population), "entries": entries}


def rank_body(
    board: str,
    mode: Mode,
    gen: Generation,
    segment: BoardSegment,
    player_id: str,
    me: Standing,
) -> dict[str, Any]:
    population = segment.population + (1 if me.hidden else 0)
    return {
        **snapshot_header(board, mode, gen, population),
        "playerId": player_id,
        "score": me.score,
        "rank": me.rank,
        "position": me.row + 1,
        "topPercent": top_percent(me.rank, population),
    }


def nearby_body(
    board: str,
    mode: Mode,
    gen: Generation,
    segment: BoardSegment,
    player_id: str,
    me: Standing,
    radius: int,
) -> dict[str, Any]:
    entries, start, stop = window_entries(segment, me, player_id, radius)
    population = segment.population + (1 if me.hidden else 0)
    return {
        **snapshot_header(board, mode, gen, population),
        "playerId": player_id,
        "entries": entries,
        "cursors": segment_cursors(gen, board, segment, start, stop),
    }


class SnapshotReads:
    """The reads of one generation, cached per generation."""

    def __init__(self, registry: GenerationRegistry) -> None:
        self.registry = registry

    @staticmethod
    def answers(generation: Generation) -> SnapshotCache:
        """The generation's cache of encoded answers (it lives with the mapping)."""
        cache = generation.memo.get("answers")
        if cache is None:
            cache = generation.memo.setdefault("answers", SnapshotCache())
        return cache  # type: ignore[no-any-return]

    def cached(
        self,
        generation: Generation,
        key: tuple[Any, ...],
        build: Callable[[], dict[str, Any]],
    ) -> Answer:
        cache = self.answers(generation)
        answer = cache.get(key)
        if answer is None:
            answer = cache.put(key, encode(build()))
        return answer

    def top(self, board: str, mode: Mode, gen: Generation, limit: int) -> Answer:
        return self.cached(
            gen,
            ("top", board, mode, limit),
            lambda: top_body(board, mode, gen, gen.board(board), limit),
        )

    def rank(
        self, board: str, player_id: str, mode: Mode, gen: Generation, own: bool
    ) -> Answer:
        def build() -> dict[str, Any]:
            segment, me = located(
                gen.board(board),
                player_id,
                own,
                lambda: _missing(board, player_id, gen),
            )
            return rank_body(board, mode, gen, segment, player_id, me)

        return self.cached(gen, ("rank", board, mode, player_id, own), build)

    def nearby(
        self,
        board: str,
        player_id: str,
        radius: int,
        mode: Mode,
        gen: Generation,
        own: bool,
    ) -> Answer:
        def build() -> dict[str, Any]:
            segment, me = located(
                gen.board(board),
                player_id,
                own,
                lambda: _missing(board, player_id, gen),
            )
            return nearby_body(board, mode, gen, segment, player_id, me, radius)

        return self.cached(gen, ("nearby", board, mode, player_id, radius, own), build)

    def entries(
        self, board: str, cursor: str | None, limit: int, generation: str | None
    ) -> Answer:
        """One page of a generation in display order; a cursor pins its generation."""
        data: dict[str, Any] | None = None
        if cursor is not None:
            data = decode_cursor(cursor, board)
            if generation is not None and generation != data["g"]:
                raise InvalidRequest(
                    "cursor belongs to another generation", field="cursor"
                )
            gen = pin(self.registry, data["g"])
        else:
            gen = pin(self.registry, generation)

        def build() -> dict[str, Any]:
            segment = gen.board(board)
            population = segment.population if segment else 0
            if segment is None:
                start = stop = 0
            elif data is None:
                start, stop = 0, min(limit, population)
            elif data["d"] == "after":
                start = segment.first_row_after(data["s"], data["p"], data.get("t"))
                stop = min(population, start + limit)
            else:
                stop = segment.first_row_at_or_after(
                    data["s"], data["p"], data.get("t")
                )
                start = max(0, stop - limit)
            return {
                **snapshot_header(board, "snapshot", gen, population),
                "entries": segment.entries(start, stop) if segment else [],
                "cursors": segment_cursors(gen, board, segment, start, stop),
            }

        # Keyed by the position, not the cursor's text: equal positions (however
        # the cursor's JSON was spaced) share one entry.
        position = None
        if data is not None:
            position = (data["s"], data["p"], data["d"], data.get("t"))
        return self.cached(gen, ("entries", board, position, limit), build)


def _missing(board: str, player_id: str, gen: Generation) -> PlayerNotFound:
    return PlayerNotFound(f"player {player_id!r} is not on {board} in {gen.id}")
