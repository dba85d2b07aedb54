"""Why a rank changed: a player's history over the snapshots a process can see
(retained generations and award snapshots) and the diff of two generations.

Pure computations over immutable rows (no Redis, no Spark): the API (api/history.py,
its route api/routes/history.py) picks the snapshots and adds the contributions.

A snapshot's *standings* are its rows in display order with their ranks
(competition, or the position on ``rank: unique`` boards). "Above the player" means
the first ``rank - 1`` rows: exactly the players with a strictly higher score
(competition) or an earlier position (unique), so ``rank - 1 == |above|`` and, for
two snapshots A and B, ``rank_B - rank_A == |above_B - above_A| - |above_A -
above_B|`` (``newlyAbove - noLongerAbove``).

Cost: a history step takes the rows above the player in both snapshots (zero-copy
Arrow slices of the mapped column) and counts each side's ids missing from the
other with one vectorised hash lookup per id (``pyarrow.compute.is_in``):
O(rank_A + rank_B) time and memory per step, bounded by rank, not by the board
(measured: about 450 ms for a player near rank 375,000 of a 1,000,000-player
board, microseconds near the top; the API keeps the encoded answer while the
snapshots stay the same). A diff reads both boards whole, O(n_A + n_B) (kept per
generation pair by the caller).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from serving.segments import BoardSegment


class Standings(Protocol):
    """Rows of one board of one snapshot, in display order."""

    @property
    def population(self) -> int: ...

    def row_of(self, player_id: str) -> int | None: ...

    def score_at(self, row: int) -> int: ...

    def rank_at(self, row: int) -> int: ...

    def players_in(self, start: int, stop: int) -> pa.Array:
        """Player ids of rows [start, stop) as an Arrow string array."""
        ...

    def all_rows(self) -> dict[str, tuple[int, int]]:
        """playerId -> (rank, score) of every row."""
        ...


# The row of a shadowed player on its own read: not on the board, but it stands
# where its score would put it (serving/segments.py, ``hidden``).
HIDDEN_ROW = -1


@dataclass(eq=False)
class SegmentStandings:
    """A generation's board segment as :class:`Standings`: the public rows, plus
    ``own`` when that player is shadowed in the generation (its own read answers as
    if it were present; nobody else sees it)."""

    segment: BoardSegment
    own: str | None = None

    def _own_hidden(self) -> bool:
        return self.own is not None and self.own in self.segment.hidden

    @property
    def population(self) -> int:
        return self.segment.population + (1 if self._own_hidden() else 0)

    def row_of(self, player_id: str) -> int | None:
        row = self.segment.row_of(player_id)
        if row is None and player_id == self.own and self._own_hidden():
            return HIDDEN_ROW
        return row

    def score_at(self, row: int) -> int:
        if row == HIDDEN_ROW:
            assert self.own is not None
            return int(self.segment.hidden[self.own])
        return int(self.segment.scores[row])

    def rank_at(self, row: int) -> int:
        if row == HIDDEN_ROW:
            assert self.own is not None
            score = self.score_at(row)
            if self.segment.unique_rank:
                return self.segment.first_row_at_or_after(score, self.own) + 1
            return self.segment.count_above(score) + 1
        if self.segment.unique_rank:
            return row + 1
        return self.segment.rank_of_score(self.score_at(row))

    def players_in(self, start: int, stop: int) -> pa.Array:
        """Zero-copy over the mapped column (no per-row Python string)."""
        players = self.segment.players
        start, stop = max(0, start), min(stop, self.segment.population)
        stop = max(start, stop)
        offsets = np.ascontiguousarray(players.offsets[start : stop + 1])
        return pa.Array.from_buffers(
            pa.string() if offsets.dtype == np.int32 else pa.large_string(),
            stop - start,
            [None, pa.py_buffer(offsets), pa.py_buffer(players.data)],
        )

    def all_rows(self) -> dict[str, tuple[int, int]]:
        """Public rows only (a diff is never anyone's own read)."""
        return {
            e["playerId"]: (e["rank"], e["score"])
            for e in self.segment.entries(0, self.segment.population)
        }


@dataclass(eq=False)
class AwardStandings:
    """One board of an award snapshot (serving/awards.py) as :class:`Standings`;
    its ranks are the ones the snapshot stored."""

    table: pa.Table
    _players: list[str] = field(default_factory=list)
    _scores: list[int] = field(default_factory=list)
    _ranks: list[int] = field(default_factory=list)
    _rows: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._players = self.table.column("player_id").to_pylist()
        self._scores = self.table.column("score").to_pylist()
        self._ranks = self.table.column("rank").to_pylist()
        self._rows = {p: i for i, p in enumerate(self._players)}

    @property
    def population(self) -> int:
        return len(self._players)

    def row_of(self, player_id: str) -> int | None:
        return self._rows.get(player_id)

    def score_at(self, row: int) -> int:
        return int(self._scores[row])

    def rank_at(self, row: int) -> int:
        return int(self._ranks[row])

    def players_in(self, start: int, stop: int) -> pa.Array:
        start = max(0, start)
        stop = max(start, min(stop, len(self._players)))
        return (
            self.table.column("player_id").slice(start, stop - start).combine_chunks()
        )

    def all_rows(self) -> dict[str, tuple[int, int]]:
        return {
            p: (int(r), int(s))
            for p, r, s in zip(self._players, self._ranks, self._scores, strict=True)
        }


@dataclass(eq=False)
class Snapshot:
    """One point of a board's history: a generation or an award snapshot.

    ``order`` sorts snapshots oldest first: (generation number, 0) for a
    generation, (its generation's number, version) for an award version."""

    header: dict[str, Any]
    boundary: dict[str, int]
    order: tuple[int, int]
    standings: Standings | None


@dataclass(frozen=True, slots=True)
class Step:
    """The player in one snapshot, and against the previous one it is in."""

    snapshot: Snapshot
    score: int
    rank: int
    population: int
    previous: Snapshot | None
    rank_change: dict[str, int] | None


def above(standings: Standings, rank: int) -> pa.Array:
    """Players above a player of rank ``rank``: the first ``rank - 1`` rows."""
    return standings.players_in(0, rank - 1)


def newly_above(now: pa.Array, was: pa.Array) -> int:
    """How many ids of ``now`` are not in ``was`` (ids are unique per snapshot):
    one vectorised hash lookup per id, no Python string per row."""
    if len(now) == 0:
        return 0
    if len(was) == 0:
        return len(now)
    found = pc.sum(pc.is_in(now, value_set=was.cast(now.type))).as_py() or 0
    return len(now) - int(found)


def rank_change(
    before: Standings,
    before_rank: int,
    before_score: int,
    after: Standings,
    after_rank: int,
    after_score: int,
) -> dict[str, int]:
    """``{from, to, ownScoreChange, newlyAbove, noLongerAbove}`` between two
    snapshots the player is in (O(before_rank + after_rank))."""
    was, now = above(before, before_rank), above(after, after_rank)
    return {
        "from": before_rank,
        "to": after_rank,
        "ownScoreChange": after_score - before_score,
        "newlyAbove": newly_above(now, was),
        "noLongerAbove": newly_above(was, now),
    }


def player_steps(
    snapshots: Sequence[Snapshot], player_id: str, limit: int
) -> list[Step]:
    """The player's steps, newest first, at most ``limit``: one per snapshot the
    player is on; each compared with the previous (older) snapshot the player is on.
    The previous step of the oldest listed one is looked up even beyond ``limit``.
    """
    ordered = sorted(snapshots, key=lambda s: s.order)
    found: list[tuple[Snapshot, int, int]] = []  # (snapshot, row, rank), oldest first
    for snapshot in ordered:
        standings = snapshot.standings
        if standings is None:
            continue
        row = standings.row_of(player_id)
        if row is not None:
            found.append((snapshot, row, standings.rank_at(row)))
    steps: list[Step] = []
    for index in range(len(found) - 1, max(-1, len(found) - 1 - limit), -1):
        snapshot, row, rank = found[index]
        standings = snapshot.standings
        assert standings is not None
        score = standings.score_at(row)
        change: dict[str, int] | None = None
        previous: Snapshot | None = None
        if index > 0:
            previous, prev_row, prev_rank = found[index - 1]
            prev_standings = previous.standings
            assert prev_standings is not None
            change = rank_change(
                prev_standings,
                prev_rank,
                prev_standings.score_at(prev_row),
                standings,
                rank,
                score,
            )
        steps.append(
            Step(snapshot, score, rank, standings.population, previous, change)
        )
    return steps


def diff(
    before: Standings | None, after: Standings | None, limit: int
) -> dict[str, Any]:
    """Movers (largest rank changes first, then playerId), entered and left (by
    rank in the snapshot they are on, then playerId), each cut to ``limit``, and
    the full counts. O(n_before + n_after)."""
    was = before.all_rows() if before is not None else {}
    now = after.all_rows() if after is not None else {}
    moved = [
        (p, was[p], now[p]) for p in was.keys() & now.keys() if was[p][0] != now[p][0]
    ]
    moved.sort(key=lambda m: (-abs(m[1][0] - m[2][0]), m[0].encode("utf-8")))
    entered = sorted(
        now.keys() - was.keys(), key=lambda p: (now[p][0], p.encode("utf-8"))
    )
    left = sorted(was.keys() - now.keys(), key=lambda p: (was[p][0], p.encode("utf-8")))
    return {
        "movers": [
            {
                "playerId": p,
                "fromRank": a[0],
                "toRank": b[0],
                "fromScore": a[1],
                "toScore": b[1],
            }
            for p, a, b in moved[:limit]
        ],
        "entered": [
            {"playerId": p, "rank": now[p][0], "score": now[p][1]}
            for p in entered[:limit]
        ],
        "left": [
            {"playerId": p, "rank": was[p][0], "score": was[p][1]} for p in left[:limit]
        ],
        "counts": {"movers": len(moved), "entered": len(entered), "left": len(left)},
    }
