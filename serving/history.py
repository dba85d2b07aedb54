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

Cost. Everything per row is built once and kept by the caller (:class:`Kept`,
LRU, the objects read from held so a key is never reused):

* per generation's board, :class:`BoardArrays`: each row's rank (int32) and a
  sorted uint64 key of 8 bytes of each player id past the board's common prefix,
  so finding a player's row is one ``np.searchsorted`` (plus a byte comparison)
  instead of a Python bisect over the mapped ids (12 MB at 1,000,000 players);
* per pair of snapshots A (older) and B (newer), the *overlap index*
  (:class:`PairIndex`): for each row of A the row its player holds in B and the
  reverse (one vectorised hash join of the two id columns,
  ``pyarrow.compute.index_in``, O(n_A + n_B)), and a table of cumulative counts
  over blocks of S rows of both, so "players above the player in both" is one
  table cell plus two scans of at most S entries: O(sqrt n) integer work per step
  (about 9 MB at 1,000,000 players);
* per pair of generations, :class:`PairDiff`: the diff's counts and its first
  :data:`DIFF_ROWS` movers, entered and left, from array operations over the two
  boards' aligned rows (only those rows become Python objects); a read slices it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import isqrt
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


# The row of a shadowed player on its own read: not on the board, but it stands
# where its score would put it (serving/segments.py, ``hidden``).
HIDDEN_ROW = -1


@dataclass(eq=False)
class SegmentStandings:
    """A generation's board segment as :class:`Standings`: the public rows, plus
    ``own`` when that player is shadowed in the generation (its own read answers as
    if it were present; nobody else sees it). ``arrays``: the segment's kept
    :class:`BoardArrays` (rows and ranks by array look-up), else the segment's own
    O(log n) bisects."""

    segment: BoardSegment
    own: str | None = None
    arrays: BoardArrays | None = None

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
        if self.arrays is not None:
            row = self.arrays.row_of(player_id)
        else:
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
        if self.arrays is not None:
            return int(self.arrays.ranks[row])
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
# The rows of movers, entered and left a PairDiff keeps: the diff's largest limit.
DIFF_ROWS = 1000
# Bytes of each player id (past the board's common prefix) in BoardArrays' key.
KEY_BYTES = 8


class NotKept(Exception):
    """Raised instead of building (or waiting for a build) when the caller must not
    block: an event-loop reader then hands the read to a thread (api/history.py)."""


class Kept:
    """What a process derives once from immutable rows and keeps (LRU,
    thread-safe). A key is the ids of the objects read from; each entry holds
    them, so a kept key cannot be reused. Concurrent first readers of one key
    wait for one build (each doing the O(n) work would multiply it); readers of
    other keys do not wait for it. ``block=False``: :class:`NotKept` unless kept."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._items: OrderedDict[tuple[int, ...], tuple[Any, Any]] = OrderedDict()
        self._building: dict[tuple[int, ...], threading.Lock] = {}
        self._lock = threading.Lock()
        self.builds = 0

    def _found(self, key: tuple[int, ...]) -> tuple[Any, Any] | None:
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
        return found

    def get(self, sources: tuple[object, ...], build: Any, block: bool = True) -> Any:
        key = tuple(id(s) for s in sources)
        with self._lock:
            found = self._found(key)
            if found is not None:
                return found[1]
            if not block:
                raise NotKept
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                found = self._found(key)
            if found is not None:
                return found[1]  # built by the reader this one waited for
            try:
                value = build()
                with self._lock:
                    self.builds += 1
                    if self.kept > 0:
                        self._items[key] = (sources, value)
                        while len(self._items) > self.kept:
                            self._items.popitem(last=False)
            finally:
                with self._lock:
                    self._building.pop(key, None)
        return value

    def __len__(self) -> int:
        return len(self._items)


def _id_keys(segment: BoardSegment, index: np.ndarray, skip: int) -> np.ndarray:
    """Per id in ``index`` order: its bytes ``[skip, skip + 8)`` as a big-endian
    uint64, zero padded. One gather of 8 bytes per id from an unaligned uint64
    view of the id bytes (stride 1), then the bytes past each id masked off."""
    players = segment.players
    offsets = np.asarray(players.offsets, dtype=np.int64)
    starts = offsets[index] + skip
    lengths = np.minimum(offsets[index + 1] - starts, KEY_BYTES)
    del offsets
    padded = np.zeros(len(players.data) + KEY_BYTES, dtype=np.uint8)
    padded[: len(players.data)] = np.frombuffer(players.data, dtype=np.uint8)
    words = np.ndarray(
        (len(padded) - KEY_BYTES + 1,), dtype=">u8", buffer=padded, strides=(1,)
    )
    keys = words[starts].astype(np.uint64)
    del padded, words, starts
    # Keep the first ``lengths`` bytes: a mask of that many high bytes (none: 0).
    shift = (8 * (KEY_BYTES - np.maximum(lengths, 1))).astype(np.uint64)
    keys &= np.where(lengths > 0, np.uint64(0xFFFFFFFFFFFFFFFF) << shift, 0).astype(
        np.uint64
    )
    return keys


def competition_ranks(scores: np.ndarray) -> np.ndarray:
    """Per row of a board in display order (scores descending): 1 + the rows with
    a strictly higher score, i.e. the first row of its score's run, plus one."""
    n = len(scores)
    if n == 0:
        return np.zeros(0, np.int32)
    starts = np.ones(n, dtype=bool)
    starts[1:] = scores[1:] != scores[:-1]
    first = np.where(starts, np.arange(n, dtype=np.int32), 0)
    return np.maximum.accumulate(first).astype(np.int32) + 1


@dataclass(eq=False)
class BoardArrays:
    """Per-row arrays of one generation's board, built once (O(n), vectorised):

    * ``ranks``: each row's rank (competition, or the position on unique boards);
    * ``keys``: for the rows in player-id order (``segment.index``), 8 bytes of each
      id after ``prefix`` (the bytes every id of the board starts with), zero
      padded, big-endian: non-decreasing in id byte order, so the rows of the ids
      sharing a player's key are one ``np.searchsorted`` range (one row unless ids
      agree on those 8 bytes; then the range is bisected by the ids themselves).
    """

    segment: BoardSegment
    ranks: np.ndarray
    keys: np.ndarray
    prefix: bytes

    @classmethod
    def build(cls, segment: BoardSegment) -> BoardArrays:
        n = segment.population
        scores = np.asarray(segment.scores, dtype=np.int64)
        if segment.unique_rank:
            ranks = np.arange(1, n + 1, dtype=np.int32)
        else:
            ranks = competition_ranks(scores)
        if n == 0:
            return cls(segment, ranks, np.zeros(0, np.uint64), b"")
        index = np.asarray(segment.index, dtype=np.int64)
        first = segment.players.bytes_at(int(index[0]))
        last = segment.players.bytes_at(int(index[-1]))
        common = 0
        while common < min(len(first), len(last)) and first[common] == last[common]:
            common += 1
        return cls(segment, ranks, _id_keys(segment, index, common), first[:common])

    def row_of(self, player_id: str) -> int | None:
        """The player's display row, None if absent: as ``segment.row_of``."""
        player = player_id.encode("utf-8")
        keys = self.keys
        if not player.startswith(self.prefix) or len(keys) == 0:
            return None
        tail = player[len(self.prefix) : len(self.prefix) + KEY_BYTES]
        key = np.uint64(int.from_bytes(tail.ljust(KEY_BYTES, b"\0"), "big"))
        lo = int(keys.searchsorted(key))
        if lo == len(keys) or keys[lo] != key:
            return None
        index, ids = self.segment.index, self.segment.players
        row = int(index[lo])
        if ids.bytes_at(row) == player:
            return row  # the usual case: the key names one id
        # Ids that agree on the key's bytes: bisect their range by the ids.
        hi = int(keys.searchsorted(key, side="right"))
        lo += 1
        while lo < hi:
            mid = (lo + hi) // 2
            found = ids.bytes_at(int(index[mid]))
            if found == player:
                return int(index[mid])
            if found < player:
                lo = mid + 1
            else:
                hi = mid
        return None


@dataclass(eq=False)
class PairIndex:
    """Two snapshots' boards A (older) and B (newer): ``row_in_b[j]`` is the row of
    B holding the player of A's row ``j`` (:data:`ABSENT` if B has no such row) and
    ``row_in_a`` the reverse. ``blocks[x, y]`` counts the rows ``j < x * block`` of
    A whose player is in B's first ``y * block`` rows."""

    older: object
    newer: object
    row_in_b: np.ndarray
    rows_a: int
    rows_b: int
    row_in_a: np.ndarray
    block: int
    blocks: np.ndarray

    @classmethod
    def build(
        cls, before: Standings, after: Standings, block: int | None = None
    ) -> PairIndex:
        was = before.players_in(0, before.population)
        now = after.players_in(0, after.population)
        found = pc.index_in(was, value_set=now.cast(was.type))
        row_in_b = found.fill_null(ABSENT).to_numpy(zero_copy_only=False)
        return cls.of_rows(
            before.rows,
            after.rows,
            row_in_b.astype(np.int32, copy=False),
            len(now),
            block,
        )

    @classmethod
    def of_rows(
        cls,
        older: object,
        newer: object,
        row_in_b: np.ndarray,
        rows_b: int,
        block: int | None = None,
    ) -> PairIndex:
        rows_a = len(row_in_b)
        present = np.flatnonzero(row_in_b != ABSENT)
        row_in_a = np.full(rows_b, ABSENT, dtype=np.int32)
        row_in_a[row_in_b[present]] = present.astype(np.int32)
        # Blocks of about 2 sqrt(n) rows by default: a table of about n / 4 cells,
        # and two scans of at most a block per count.
        block = block or max(64, 2 * isqrt(max(rows_a, rows_b, 1)))
        across, down = rows_a // block + 1, rows_b // block + 1
        cells = np.bincount(
            (present // block) * down + row_in_b[present] // block,
            minlength=across * down,
        ).reshape(across, down)
        blocks = np.zeros((across + 1, down + 1), dtype=np.int64)
        blocks[1:, 1:] = cells.cumsum(axis=0).cumsum(axis=1)
        return cls(older, newer, row_in_b, rows_a, rows_b, row_in_a, block, blocks)

    def above_in_both(self, above_a: int, above_b: int) -> int:
        """Players in A's first ``above_a`` rows that are in B's first ``above_b``:
        the table's count of whole blocks of both, plus A's rows past the last
        whole block of A, plus B's rows past the last whole block of B whose
        player is in A's whole blocks."""
        x = max(0, min(above_a, self.rows_a))
        y = max(0, min(above_b, self.rows_b))
        bx, by = x // self.block, y // self.block
        count = int(self.blocks[bx, by])
        count += int(np.count_nonzero(self.row_in_b[bx * self.block : x] < y))
        count += int(
            np.count_nonzero(self.row_in_a[by * self.block : y] < bx * self.block)
        )
        return count


class PairIndexes:
    """The arrays a process keeps for history and diff reads: per board segment
    its :class:`BoardArrays` (12 MB at 1,000,000 players), per pair of snapshots
    its :class:`PairIndex` (about 9 MB), per pair of generations its
    :class:`PairDiff` (its first rows only)."""

    def __init__(self, kept: int = 16, block: int | None = None) -> None:
        self.kept = kept
        self.block = block  # PairIndex's block of rows (None: its default)
        self._indexes = Kept(kept)
        self._boards = Kept(kept)
        self._diffs = Kept(max(1, kept // 2) if kept else 0)

    @property
    def builds(self) -> int:
        """Pair indexes built."""
        return self._indexes.builds

    def get(self, before: Standings, after: Standings, block: bool = True) -> PairIndex:
        index: PairIndex = self._indexes.get(
            (before.rows, after.rows),
            lambda: PairIndex.build(before, after, self.block),
            block,
        )
        return index

    def board(self, segment: BoardSegment, block: bool = True) -> BoardArrays:
        arrays: BoardArrays = self._boards.get(
            (segment,), lambda: BoardArrays.build(segment), block
        )
        return arrays

    def diff(self, before: BoardSegment | None, after: BoardSegment | None) -> PairDiff:
        found: PairDiff = self._diffs.get(
            (before, after), lambda: PairDiff.build(before, after, self)
        )
        return found


def rank_change(
    before: Standings,
    before_rank: int,
    before_score: int,
    after: Standings,
    after_rank: int,
    after_score: int,
    indexes: PairIndexes | None = None,
    block: bool = True,
) -> dict[str, int]:
    """``{from, to, ownScoreChange, newlyAbove, noLongerAbove}`` between two
    snapshots the player is in. "Above" is the first ``rank - 1`` rows of each;
    ``newlyAbove = |above_B| - |both|``, ``noLongerAbove = |above_A| - |both|``.
    ``block=False``: :class:`NotKept` when the pair's index is not built yet."""
    index = (indexes or PairIndexes(kept=0)).get(before, after, block)
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
    block: bool = True,
    ordered: bool = False,
) -> list[Step]:
    """The player's steps, newest first, at most ``limit``: one per snapshot the
    player is on; each compared with the previous (older) snapshot the player is on.
    The previous step of the oldest listed one is looked up even beyond ``limit``.
    ``ordered``: ``snapshots`` are already oldest first; ``block``: as
    :func:`rank_change`.
    """
    if not ordered:
        snapshots = sorted(snapshots, key=lambda s: s.order)
    found: list[tuple[Snapshot, int, int]] = []  # (snapshot, row, rank), oldest first
    for snapshot in snapshots:
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
                block,
            )
        steps.append(
            Step(snapshot, score, rank, standings.population, previous, change)
        )
    return steps


def _first_by_rank(
    rows: np.ndarray, ranks: np.ndarray, id_order: np.ndarray, first: int
) -> np.ndarray:
    """The first ``first`` of ``rows`` (display rows, ascending, so their
    ranks never decrease) by (rank, player id)."""
    if len(rows) > first:
        # Rows of a rank tied with the last one kept may sort before it by id.
        last = ranks[rows[first - 1]]
        rows = rows[: int(np.searchsorted(ranks[rows], last, side="right"))]
    order = np.lexsort((id_order[rows], ranks[rows]))[:first]
    return rows[order]


def _id_order(segment: BoardSegment | None) -> np.ndarray:
    """Per display row, its place in player-id (UTF-8 byte) order."""
    if segment is None or segment.population == 0:
        return np.zeros(0, np.int64)
    index = np.asarray(segment.index, dtype=np.int64)
    order = np.empty(len(index), dtype=np.int64)
    order[index] = np.arange(len(index), dtype=np.int64)
    return order


@dataclass(frozen=True, slots=True)
class PairDiff:
    """The diff of two generations' boards (public rows; a diff is never anyone's
    own read): the counts, and the first ``rows`` (:data:`DIFF_ROWS`) movers
    (largest rank change first, then player id), entered and left (by rank in the
    generation they are on, then player id) as answer rows. O(n_A + n_B) array
    operations plus a sort of the rows that can be among the first."""

    movers: list[dict[str, Any]]
    entered: list[dict[str, Any]]
    left: list[dict[str, Any]]
    counts: dict[str, int]

    @classmethod
    def build(
        cls,
        before: BoardSegment | None,
        after: BoardSegment | None,
        indexes: PairIndexes,
        rows: int = DIFF_ROWS,
    ) -> PairDiff:
        empty = np.zeros(0, np.int64)
        a = indexes.board(before) if before is not None else None
        b = indexes.board(after) if after is not None else None
        ranks_a = a.ranks if a is not None else empty
        ranks_b = b.ranks if b is not None else empty
        if before is not None and after is not None:
            pair = indexes.get(SegmentStandings(before), SegmentStandings(after))
            row_in_b = pair.row_in_b.astype(np.int64)
            row_in_a = pair.row_in_a.astype(np.int64)
        else:
            row_in_b = np.full(len(ranks_a), ABSENT, dtype=np.int64)
            row_in_a = np.full(len(ranks_b), ABSENT, dtype=np.int64)
        order_a, order_b = _id_order(before), _id_order(after)
        # Movers: rows of A whose player is on B at another rank.
        on_both = np.flatnonzero(row_in_b != ABSENT)
        change = np.abs(
            ranks_a[on_both].astype(np.int64)
            - ranks_b[row_in_b[on_both]].astype(np.int64)
        )
        moved, change = on_both[change != 0], change[change != 0]
        if len(moved) > rows:
            # The rows-th largest change: every mover kept changes at least
            # as much (the ties of it are cut by player id below).
            least = np.partition(change, len(change) - rows)[len(change) - rows]
            keep = change >= least
            first_moved, first_change = moved[keep], change[keep]
        else:
            first_moved, first_change = moved, change
        top = first_moved[np.lexsort((order_a[first_moved], -first_change))]
        top = top[:rows]
        entered = np.flatnonzero(row_in_a == ABSENT)
        left = np.flatnonzero(row_in_b == ABSENT)
        first_entered = _first_by_rank(entered, ranks_b, order_b, rows)
        first_left = _first_by_rank(left, ranks_a, order_a, rows)
        movers = []
        if before is not None and after is not None:
            scores_a, scores_b = before.scores, after.scores
            for row in top.tolist():
                other = int(row_in_b[row])
                movers.append(
                    {
                        "playerId": before.players.str_at(row),
                        "fromRank": int(ranks_a[row]),
                        "toRank": int(ranks_b[other]),
                        "fromScore": int(scores_a[row]),
                        "toScore": int(scores_b[other]),
                    }
                )
        return cls(
            movers,
            _rows(after, ranks_b, first_entered),
            _rows(before, ranks_a, first_left),
            {"movers": len(moved), "entered": len(entered), "left": len(left)},
        )

    def page(self, limit: int) -> dict[str, Any]:
        """The diff's answer fields for ``limit`` (at most :data:`DIFF_ROWS`)."""
        return {
            "movers": self.movers[:limit],
            "entered": self.entered[:limit],
            "left": self.left[:limit],
            "counts": dict(self.counts),
        }


def _rows(
    segment: BoardSegment | None, ranks: np.ndarray, rows: np.ndarray
) -> list[dict[str, Any]]:
    if segment is None:
        return []
    return [
        {
            "playerId": segment.players.str_at(row),
            "rank": int(ranks[row]),
            "score": int(segment.scores[row]),
        }
        for row in rows.tolist()
    ]


def diff(
    before: BoardSegment | None,
    after: BoardSegment | None,
    limit: int,
    indexes: PairIndexes | None = None,
) -> dict[str, Any]:
    """Movers (largest rank changes first, then playerId), entered and left (by
    rank in the snapshot they are on, then playerId), each cut to ``limit`` (at
    most :data:`DIFF_ROWS`), and the full counts; the pair's :class:`PairDiff` is
    kept by ``indexes``."""
    if limit > DIFF_ROWS:
        raise ValueError(f"a diff lists at most {DIFF_ROWS} rows of each kind")
    return (indexes or PairIndexes(kept=0)).diff(before, after).page(limit)
