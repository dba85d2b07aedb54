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

Cost: the players above a player in both of two snapshots are counted through the
pair's *overlap index* (:class:`PairIndex`): for each row of the older snapshot, the
row its player holds in the newer one. Built once per pair of snapshots (one
vectorised hash join of the two id columns, ``pyarrow.compute.index_in``: O(n_A +
n_B), kept by the caller, :class:`PairIndexes`), it makes every step one comparison
over the first ``rank_A - 1`` entries of an int32 array: O(rank_A) integer work, no
string per row (the previous design hashed both sides' ids per read, about 450 ms
for a player near rank 375,000 of a 1,000,000-player board, which no read rate
survives). A diff reads both boards whole, O(n_A + n_B) (kept per generation pair
by the caller).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
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

    @property
    def rows(self) -> object:
        """What the rows are read from (the same object for every reader of the same
        snapshot's board): the key of the pair indexes built over them."""
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
    def rows(self) -> object:
        # The public rows, the same whoever reads (``own`` adds no row).
        return self.segment

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

    @property
    def rows(self) -> object:
        return self

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


# The newer row of an older row whose player is not on the newer board: after every
# real row, so no "above" prefix of the newer board contains it.
ABSENT = np.iinfo(np.int32).max


@dataclass(eq=False)
class PairIndex:
    """Two snapshots' boards A (older) and B (newer): ``row_in_b[j]`` is the row of
    B holding the player of A's row ``j`` (:data:`ABSENT` if B has no such row)."""

    older: object
    newer: object
    row_in_b: np.ndarray
    rows_a: int
    rows_b: int

    @classmethod
    def build(cls, before: Standings, after: Standings) -> PairIndex:
        was = before.players_in(0, before.population)
        now = after.players_in(0, after.population)
        found = pc.index_in(was, value_set=now.cast(was.type))
        rows = found.fill_null(ABSENT).to_numpy(zero_copy_only=False)
        return cls(
            before.rows,
            after.rows,
            rows.astype(np.int32, copy=False),
            len(was),
            len(now),
        )

    def above_in_both(self, above_a: int, above_b: int) -> int:
        """Players in A's first ``above_a`` rows that are in B's first ``above_b``."""
        head = self.row_in_b[: max(0, min(above_a, self.rows_a))]
        return int(np.count_nonzero(head < above_b))


class PairIndexes:
    """The pair indexes a process keeps (LRU, thread-safe): each holds an int32 per
    row of its older board (4 MB at 1,000,000 players) and the two boards' row
    objects, so a kept index's key cannot be reused by another board."""

    def __init__(self, kept: int = 16) -> None:
        self.kept = kept
        self._indexes: OrderedDict[tuple[int, int], PairIndex] = OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0

    def get(self, before: Standings, after: Standings) -> PairIndex:
        key = (id(before.rows), id(after.rows))
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._indexes.move_to_end(key)
                return index
            # Built under the lock: concurrent first readers of a pair wait for one
            # build instead of each doing the O(n) join.
            index = PairIndex.build(before, after)
            self.builds += 1
            self._indexes[key] = index
            while len(self._indexes) > self.kept:
                self._indexes.popitem(last=False)
            return index


def rank_change(
    before: Standings,
    before_rank: int,
    before_score: int,
    after: Standings,
    after_rank: int,
    after_score: int,
    indexes: PairIndexes | None = None,
) -> dict[str, int]:
    """``{from, to, ownScoreChange, newlyAbove, noLongerAbove}`` between two
    snapshots the player is in. "Above" is the first ``rank - 1`` rows of each;
    ``newlyAbove = |above_B| - |both|``, ``noLongerAbove = |above_A| - |both|``."""
    index = (indexes or PairIndexes(kept=0)).get(before, after)
    above_a = min(before_rank - 1, index.rows_a)
    above_b = min(after_rank - 1, index.rows_b)
    both = index.above_in_both(above_a, above_b)
    return {
        "from": before_rank,
        "to": after_rank,
        "ownScoreChange": after_score - before_score,
        "newlyAbove": above_b - both,
        "noLongerAbove": above_a - both,
    }


def player_steps(
    snapshots: Sequence[Snapshot],
    player_id: str,
    limit: int,
    indexes: PairIndexes | None = None,
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
                indexes,
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
